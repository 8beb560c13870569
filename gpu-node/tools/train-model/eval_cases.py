"""
The evaluation's Python side (eval.ts drives it): held-out functions as completion and infill
cases, and whether completed code parses.

  /usr/bin/python3 eval_cases.py cases OUT.json [N]
      Up to N (default 150) functions with a docstring from the held-out files (stdlib_corpus.py's
      split), each dedented: `prompt` is the source through the docstring, `body` the rest; and
      an infill case per function with a body of 3+ lines: its middle body line removed
      (`prefix`, `suffix`, `line`).
  /usr/bin/python3 eval_cases.py parse IN.json
      IN: [{prompt, completion}]. Each completion is cut at the end of the function body (the
      first non-empty line back at the function's own indentation) and prompt + cut is parsed
      with `ast`; a completion that adds no body line counts as not parsing (the prompt alone,
      a docstring, would). Prints {"parsed": k, "total": n}.
"""
import ast
import json
import sys

from stdlib_corpus import functions, held_out, source_files

MAX_FUNCTION_CHARS = 2000


def cases(out_path, limit):
    completion, infill = [], []
    for rel, text in source_files():
        if not held_out(rel):
            continue
        for sig, doc, src, node in functions(text):
            if len(src) > MAX_FUNCTION_CHARS or not node.body or len(node.body) < 2:
                continue
            lines = src.splitlines(keepends=True)
            # The docstring is the first statement: the prompt runs through its last line.
            doc_end = node.body[0].end_lineno - node.lineno + 1
            prompt, body = ''.join(lines[:doc_end]), ''.join(lines[doc_end:])
            if not body.strip():
                continue
            completion.append({'file': rel, 'name': node.name, 'prompt': prompt, 'body': body})
            body_lines = [i for i in range(doc_end, len(lines)) if lines[i].strip()]
            if len(body_lines) >= 3:
                i = body_lines[len(body_lines) // 2]
                infill.append({'file': rel, 'name': node.name, 'prefix': ''.join(lines[:i]), 'suffix': ''.join(lines[i + 1:]), 'line': lines[i]})
    with open(out_path, 'w') as fh:
        json.dump({'completion': completion[:limit], 'infill': infill[:limit]}, fh)


def cut(completion):
    """The completion up to the end of the function body: the first non-empty line at column 0 ends it."""
    kept = []
    for line in completion.splitlines(keepends=True):
        if line.strip() and not line[0].isspace():
            break
        kept.append(line)
    return ''.join(kept)


def parses(code):
    try:
        ast.parse(code)
        return True
    except (SyntaxError, ValueError):
        return False


def parse(in_path):
    with open(in_path) as fh:
        items = json.load(fh)
    ok = 0
    for it in items:
        body = cut(it['completion'])
        ok += bool(body.strip()) and parses(it['prompt'] + body)
    print(json.dumps({'parsed': ok, 'total': len(items)}))


if __name__ == '__main__':
    if sys.argv[1] == 'cases':
        cases(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 150)
    else:
        parse(sys.argv[2])
