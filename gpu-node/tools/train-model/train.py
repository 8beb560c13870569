"""
Trains the default model from scratch on CPU: a Llama-style decoder (RoPE, RMSNorm, SwiGLU,
grouped KV heads, untied LM head) on the token ids dataset.ts wrote, then exports it with
torch.onnx under Optimum's names (input_ids, attention_mask, position_ids,
past_key_values.N.key/value → logits, present.N.key/value), the interface the node loads.

  /usr/bin/python3 train.py WORK_DIR OUT_DIR CONFIG_JSON

WORK_DIR holds train.bin / val.bin (uint16); CONFIG_JSON is the shape and schedule (cli.ts).
Deterministic for a seed on one machine: a fixed number of steps, batches drawn from a seeded
generator. Matrix products run in bfloat16 (autocast; weights, optimizer and loss in float32):
on a CPU with AVX-512 BF16 that is ~10× float32's matmul speed through oneDNN. Most steps see
SHORT_CONTEXT-token windows; the last LONG_SHARE of them the full context, so every position the
config promises was trained.
"""
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RmsNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, h, kv, hd = c['hidden_size'], c['num_attention_heads'], c['num_key_value_heads'], c['hidden_size'] // c['num_attention_heads']
        self.h, self.kv, self.hd = h, kv, hd
        self.input_layernorm = RmsNorm(d, c['rms_norm_eps'])
        self.q_proj = nn.Linear(d, h * hd, bias=False)
        self.k_proj = nn.Linear(d, kv * hd, bias=False)
        self.v_proj = nn.Linear(d, kv * hd, bias=False)
        self.o_proj = nn.Linear(h * hd, d, bias=False)
        self.post_attention_layernorm = RmsNorm(d, c['rms_norm_eps'])
        self.gate_proj = nn.Linear(d, c['intermediate_size'], bias=False)
        self.up_proj = nn.Linear(d, c['intermediate_size'], bias=False)
        self.down_proj = nn.Linear(c['intermediate_size'], d, bias=False)

    def qkv(self, x, cos, sin):
        """Queries, keys and values [b, heads, s, head_dim] of the normed `x`, RoPE applied to q and k."""
        b, s, _ = x.shape
        y = self.input_layernorm(x)
        q = self.q_proj(y).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v

    def forward(self, x, mask, cos, sin, past_k=None, past_v=None):
        b, s, d = x.shape
        q, k, v = self.qkv(x, cos, sin)
        if past_k is not None:
            k = torch.cat([past_k, k], dim=2)
            v = torch.cat([past_v, v], dim=2)
        rep = self.h // self.kv
        kk = k[:, :, None].expand(b, self.kv, rep, k.shape[2], self.hd).reshape(b, self.h, k.shape[2], self.hd)
        vv = v[:, :, None].expand(b, self.kv, rep, v.shape[2], self.hd).reshape(b, self.h, v.shape[2], self.hd)
        w = (q @ kk.transpose(-1, -2)) / math.sqrt(self.hd) + mask
        out = (F.softmax(w.float(), dim=-1).to(vv.dtype) @ vv).transpose(1, 2).reshape(b, s, d)
        x = x + self.o_proj(out)
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y)), k, v

    def forward_train(self, x, causal, cos, sin):
        """
        The same block as `forward`, written for training under bfloat16 autocast on a CPU: RoPE
        in the matmuls' dtype, the scale folded into q, query heads grouped by the KV head they
        share (no expanded K/V copy), an additive causal mask and a softmax in that dtype (float
        accumulation inside; flash attention too feeds P to its second matmul in bfloat16), SiLU
        as g·σ(g). Each cuts an elementwise pass or a dtype round trip: ~20 % of a step's time.
        """
        b, s, d = x.shape
        rep = self.h // self.kv
        q, k, v = self.qkv(x, cos, sin)
        q = q * (1 / math.sqrt(self.hd))
        w = (q.reshape(b, self.kv, rep * s, self.hd) @ k.transpose(-1, -2)).view(b, self.kv, rep, s, s) + causal
        p = F.softmax(w, dim=-1).view(b, self.kv, rep * s, s)
        x = x + self.o_proj((p @ v).view(b, self.h, s, self.hd).transpose(1, 2).reshape(b, s, d))
        y = self.post_attention_layernorm(x)
        g = self.gate_proj(y)
        return x + self.down_proj(g * torch.sigmoid(g) * self.up_proj(y))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c['vocab_size'], c['hidden_size'])
        self.layers = nn.ModuleList([Block(c) for _ in range(c['num_hidden_layers'])])
        self.norm = RmsNorm(c['hidden_size'], c['rms_norm_eps'])
        self.lm_head = nn.Linear(c['hidden_size'], c['vocab_size'], bias=False)
        hd = c['hidden_size'] // c['num_attention_heads']
        self.register_buffer('inv_freq', 1.0 / (c['rope_theta'] ** (torch.arange(0, hd, 2).float() / hd)), persistent=False)

    def rope(self, position_ids):
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None], emb.sin()[:, None]

    def forward(self, input_ids):
        """Training: causal attention over the window, no cache, in autocast's dtype when it is on."""
        s = input_ids.shape[1]
        dtype = torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else torch.float32
        cos, sin = (t.to(dtype) for t in self.rope(torch.arange(s)[None]))
        causal = torch.full((s, s), float('-inf')).triu(1).to(dtype)
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer.forward_train(h, causal, cos, sin)
        return self.lm_head(self.norm(h))

    def forward_cached(self, input_ids, attention_mask, position_ids, past):
        """Optimum's decoder interface: HF's additive 4-D mask (causal over the new positions, padding from attention_mask)."""
        s = input_ids.shape[1]
        total = past[0].shape[2] + s
        causal = torch.ones(s, total, dtype=torch.bool).tril(diagonal=total - s)
        keep = causal[None, None] & attention_mask[:, None, None, :].bool()
        mask = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
        cos, sin = self.rope(position_ids)
        h = self.embed_tokens(input_ids)
        presents = []
        for i, layer in enumerate(self.layers):
            h, k, v = layer(h, mask, cos, sin, past[2 * i], past[2 * i + 1])
            presents += [k, v]
        return self.lm_head(self.norm(h)), presents


class OptimumInterface(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, *past):
        logits, presents = self.model.forward_cached(input_ids, attention_mask, position_ids, list(past))
        return (logits, *presents)


def export(model, c, path):
    layers, kv, hd = c['num_hidden_layers'], c['num_key_value_heads'], c['hidden_size'] // c['num_attention_heads']
    wrapper = OptimumInterface(model).eval()
    args = (torch.tensor([[1, 2, 3]]), torch.ones(1, 5, dtype=torch.long), torch.tensor([[2, 3, 4]])) + tuple(torch.zeros(1, kv, 2, hd) for _ in range(2 * layers))
    past = [f'past_key_values.{i}.{kind}' for i in range(layers) for kind in ('key', 'value')]
    present = [f'present.{i}.{kind}' for i in range(layers) for kind in ('key', 'value')]
    axes = {'input_ids': {0: 'batch_size', 1: 'sequence_length'}, 'attention_mask': {0: 'batch_size', 1: 'total_sequence_length'}, 'position_ids': {0: 'batch_size', 1: 'sequence_length'}, 'logits': {0: 'batch_size', 1: 'sequence_length'}}
    axes.update({n: {0: 'batch_size', 2: 'past_sequence_length'} for n in past})
    axes.update({n: {0: 'batch_size', 2: 'total_sequence_length'} for n in present})
    with torch.no_grad():
        torch.onnx.export(wrapper, args, path, input_names=['input_ids', 'attention_mask', 'position_ids'] + past, output_names=['logits'] + present, dynamic_axes=axes, opset_version=14, do_constant_folding=True)


def windows(data, rng, batch, length, sample_starts, aligned_share):
    """
    `batch` windows of length + 1 ids: a share `aligned_share` of them start where a sample starts (after an
    end-of-text), so a fill-in-the-middle sample is seen whole, its middle after its prefix and
    suffix; the rest start anywhere, so every position of a long chunk is trained on.
    """
    aligned = sample_starts[sample_starts < len(data) - length - 1]
    starts = rng.integers(0, len(data) - length - 1, size=batch)
    take = rng.random(size=batch) < aligned_share
    starts[take] = aligned[rng.integers(0, len(aligned), size=int(take.sum()))]
    x = np.stack([data[s:s + length + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(x)


@torch.no_grad()
def held_out_loss(model, val, length):
    """Mean next-token loss (nats) over the held-out ids in non-overlapping full-context windows."""
    total, n = 0.0, 0
    model.eval()
    for s in range(0, len(val) - 1, length):
        x = torch.from_numpy(val[s:s + length + 1].astype(np.int64))[None]
        if x.shape[1] < 2:
            break
        with torch.autocast('cpu', dtype=torch.bfloat16):
            logits = model(x[:, :-1])
        total += F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction='sum').item()
        n += x.shape[1] - 1
    model.train()
    return total / n


def cpu_name():
    """The CPU the run's time was measured on, with the bfloat16 units oneDNN's matmuls use."""
    with open('/proc/cpuinfo') as fh:
        info = fh.read()
    name = next((line.split(':', 1)[1].strip() for line in info.splitlines() if line.startswith('model name')), 'unknown CPU')
    units = [u for u, flag in (('AMX', 'amx_bf16'), ('AVX-512 BF16', 'avx512_bf16')) if f' {flag}' in info]
    return f"{name} ({', '.join(units)})" if units else name


def main(work, out, config_path):
    with open(config_path) as fh:
        spec = json.load(fh)
    c, t = spec['model'], spec['train']
    torch.manual_seed(t['seed'])
    torch.set_num_threads(t['threads'])
    rng = np.random.default_rng(t['seed'])
    train = np.fromfile(os.path.join(work, 'train.bin'), dtype=np.uint16)
    val = np.fromfile(os.path.join(work, 'val.bin'), dtype=np.uint16)
    sample_starts = np.concatenate([[0], np.flatnonzero(train == t['end_of_text']) + 1])
    model = Llama(c)
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            # GPT-2's scheme: residual-writing projections scaled down by depth.
            std = 0.02 / math.sqrt(2 * c['num_hidden_layers']) if name.endswith(('o_proj.weight', 'down_proj.weight')) else 0.02
            nn.init.normal_(p, 0.0, std)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{'params': decay, 'weight_decay': t['weight_decay']}, {'params': rest, 'weight_decay': 0.0}], lr=t['lr'], betas=(0.9, 0.95))
    steps, warmup, long_from = t['steps'], t['warmup'], int(t['steps'] * (1 - t['long_share']))
    started = time.time()
    seen = 0
    print(json.dumps({'params': params, 'train_tokens': int(len(train)), 'val_tokens': int(len(val)), 'steps': steps}), flush=True)
    for step in range(steps):
        lr = t['lr'] * (step + 1) / warmup if step < warmup else t['lr'] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup))))
        for g in opt.param_groups:
            g['lr'] = lr
        long = step >= long_from
        length, batch = (c['max_position_embeddings'], t['batch_tokens'] // c['max_position_embeddings']) if long else (t['short_context'], t['batch_tokens'] // t['short_context'])
        x = windows(train, rng, batch, length, sample_starts, t['aligned_share'])
        with torch.autocast('cpu', dtype=torch.bfloat16):
            logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        seen += batch * length
        if step % 25 == 0 or step == steps - 1:
            print(json.dumps({'step': step, 'loss': round(loss.item(), 4), 'lr': round(lr, 6), 'tokens': seen, 'seconds': round(time.time() - started, 1)}), flush=True)
    train_seconds = time.time() - started
    loss = held_out_loss(model, val, c['max_position_embeddings'])
    os.makedirs(out, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(work, 'model.pt'))
    export(model, c, os.path.join(out, 'model.onnx'))
    result = {'params': params, 'steps': steps, 'train_tokens_seen': seen, 'train_seconds': round(train_seconds, 1), 'held_out_loss': round(loss, 4), 'held_out_perplexity': round(math.exp(loss), 3), 'threads': t['threads'], 'cpu': cpu_name()}
    with open(os.path.join(work, 'result.json'), 'w') as fh:
        json.dump(result, fh)
    print(json.dumps(result), flush=True)


if __name__ == '__main__':
    main(*sys.argv[1:4])
