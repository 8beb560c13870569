"""
The training corpus: this machine's CPython standard library (PSF License), read the same way
by the trainer and the evaluator.

- Files: every `*.py` under the running interpreter's stdlib, sorted, without test suites
  (`test/`, `tests/`, `idle_test/`), installed packages (`site-packages`, `dist-packages`) or
  files over MAX_FILE_BYTES (generated tables).
- Held out: a file whose path (relative to the stdlib) hashes to 0 mod HELD_OUT_MOD (crc32), so
  the split never depends on what else is installed.
- Chunks: a file cut at top-level statements into pieces of at most CHUNK_CHARS (a longer
  statement is one chunk), so a fill-in-the-middle sample or a chat answer fits the context.
- Chat pairs: each function with a docstring, as a request ("Write a Python function `sig` …:
  docstring") and the answer (the function in a fenced block).

  /usr/bin/python3 stdlib_corpus.py OUT.json   writes {"train": [...], "val": [...], "chat": [...], "files": {...}}
"""
import ast
import json
import os
import sys
import sysconfig
import zlib

HELD_OUT_MOD = 20
MAX_FILE_BYTES = 300_000
CHUNK_CHARS = 3000
SKIP_DIRS = {'test', 'tests', 'idle_test', 'site-packages', 'dist-packages', '__pycache__'}


def stdlib_dir():
    return sysconfig.get_paths()['stdlib']


def source_files():
    """(relative path, text) of every corpus file, sorted by path."""
    root = stdlib_dir()
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
        for f in sorted(files):
            if not f.endswith('.py'):
                continue
            p = os.path.join(d, f)
            if os.path.getsize(p) > MAX_FILE_BYTES:
                continue
            try:
                with open(p, encoding='utf-8') as fh:
                    text = fh.read()
            except (UnicodeDecodeError, OSError):
                continue
            out.append((os.path.relpath(p, root), text))
    out.sort()
    return out


def held_out(rel):
    return zlib.crc32(rel.encode()) % HELD_OUT_MOD == 0


def chunks(text):
    """The file cut at top-level statements, pieces of at most CHUNK_CHARS."""
    lines = text.splitlines(keepends=True)
    try:
        starts = sorted({node.lineno - 1 if not getattr(node, 'decorator_list', None) else node.decorator_list[0].lineno - 1 for node in ast.parse(text).body})
    except SyntaxError:
        starts = [0]
    if not starts or starts[0] != 0:
        starts = [0] + starts
    pieces = [''.join(lines[a:b]) for a, b in zip(starts, starts[1:] + [len(lines)])]
    out, cur = [], ''
    for p in pieces:
        if cur and len(cur) + len(p) > CHUNK_CHARS:
            out.append(cur)
            cur = ''
        cur += p
    if cur.strip():
        out.append(cur)
    return out


def functions(text):
    """(signature line, docstring, source) of every function with a docstring."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    lines = text.splitlines(keepends=True)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if not doc or node.end_lineno is None:
                continue
            src = ''.join(lines[node.lineno - 1:node.end_lineno])
            indent = len(src) - len(src.lstrip(' '))
            src = ''.join(l[indent:] if l.startswith(' ' * indent) else l for l in src.splitlines(keepends=True))
            out.append((src.splitlines()[0], doc, src, node))
    return out


def chat_pair(sig, doc, src):
    return {'user': f'Write a Python function `{sig.strip().rstrip(":")}`: {doc.strip().splitlines()[0]}', 'assistant': f'```python\n{src.rstrip()}\n```'}


def main(out_path):
    train, val, chat, files = [], [], [], {'train': 0, 'held_out': 0}
    for rel, text in source_files():
        if held_out(rel):
            files['held_out'] += 1
            val.extend(chunks(text))
            continue
        files['train'] += 1
        train.extend(chunks(text))
        for sig, doc, src, _ in functions(text):
            if len(src) <= CHUNK_CHARS:
                chat.append(chat_pair(sig, doc, src))
    with open(out_path, 'w') as fh:
        json.dump({'stdlib': stdlib_dir(), 'train': train, 'val': val, 'chat': chat, 'files': files}, fh)


if __name__ == '__main__':
    main(sys.argv[1])
