"""
Independent reference models for the node's loader: HF-faithful GPT-2 and Llama decoders written
in PyTorch (no transformers here: Debian has no package for it), exported with PyTorch's own
exporter (torch.onnx.export) under Optimum's input/output names, plus PyTorch's own greedy
generation for a fixed set of prompts. Nothing here comes from zerolayer's generator.

  /usr/bin/python3 test/torch/export_reference.py OUT_DIR TOKENIZER_DIR

writes OUT_DIR/<variant>/{model.onnx, config.json, generation_config.json, tokenizer.json,
tokenizer_config.json} and OUT_DIR/reference.json: per variant, per prompt, the greedy tokens
and, at each step, the margin between PyTorch's top two logits (for the tie rule).
Variants: gpt2 (with position_ids), gpt2-derived-positions (no position_ids input, positions
from the past length as older Optimum GPT-2 exports), llama (RoPE, RMSNorm, SwiGLU, GQA);
gpt2-fp16 and llama-fp16 (converted to float16 as onnx-community's model_fp16.onnx); llama-q4
(4-bit MatMulNBits, float32 KV, as model_q4.onnx) and llama-q4f16 (the same, float16); and
gpt2-int8-dynamic: the gpt2 export with every weight MatMul rewritten the way ONNX Runtime's
quantize_dynamic writes it (onnx-community's model_quantized.onnx): int8 weights,
DynamicQuantizeLinear on the activations, MatMulInteger. It has no PyTorch tokens (PyTorch does
not run that graph); the test checks it loads, generates, and batches exactly.
"""
import copy
import json
import math
import os
import shutil
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

VOCAB = 512
D = 128
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTER = 256
MAX_POS = 256
NEW_TOKENS = 12
PROMPTS = [[5], [17, 300, 42], [100, 101, 102, 103, 104, 105, 106], [7, 8], [260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270], [400, 33, 12, 9], [90] * 5, [3, 250, 499, 18, 77, 140]]
# HF initialises at std 0.02, which leaves random models' logits nearly flat (greedy would be
# decided by float noise); a larger std gives decisive logits, as a trained model has.
INIT_STD = 0.25


def init_weights(model):
    # Norm scales near 1, as HF initialises them (near 0 they would erase the signal); every
    # other vector (biases) and matrix random.
    scales = {id(m.weight) for m in model.modules() if isinstance(m, (nn.LayerNorm, RmsNorm))}
    for p in model.parameters():
        if id(p) in scales:
            nn.init.normal_(p, 1.0, 0.05)
        elif p.dim() >= 2:
            nn.init.normal_(p, 0.0, INIT_STD)
        else:
            nn.init.normal_(p, 0.0, 0.1)


class Gpt2Attention(nn.Module):
    def __init__(self):
        super().__init__()
        # HF's Conv1D: weight [in, out], y = x @ W + b.
        self.c_attn_w = nn.Parameter(torch.empty(D, 3 * D))
        self.c_attn_b = nn.Parameter(torch.empty(3 * D))
        self.c_proj_w = nn.Parameter(torch.empty(D, D))
        self.c_proj_b = nn.Parameter(torch.empty(D))

    def forward(self, x, bias_mask, past_k, past_v):
        b, s, _ = x.shape
        q, k, v = (x @ self.c_attn_w + self.c_attn_b).split(D, dim=2)
        heads = lambda t: t.view(b, s, HEADS, D // HEADS).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        w = (q @ k.transpose(-1, -2)) / math.sqrt(D // HEADS) + bias_mask
        out = F.softmax(w, dim=-1) @ v
        out = out.transpose(1, 2).reshape(b, s, D)
        return out @ self.c_proj_w + self.c_proj_b, k, v


class Gpt2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D, eps=1e-5)
        self.attn = Gpt2Attention()
        self.ln_2 = nn.LayerNorm(D, eps=1e-5)
        self.fc_w = nn.Parameter(torch.empty(D, 4 * D))
        self.fc_b = nn.Parameter(torch.empty(4 * D))
        self.proj_w = nn.Parameter(torch.empty(4 * D, D))
        self.proj_b = nn.Parameter(torch.empty(D))

    def forward(self, h, bias_mask, past_k, past_v):
        a, k, v = self.attn(self.ln_1(h), bias_mask, past_k, past_v)
        h = h + a
        m = F.gelu(self.ln_2(h) @ self.fc_w + self.fc_b, approximate='tanh')  # GPT-2's gelu_new
        return h + (m @ self.proj_w + self.proj_b), k, v


def additive_mask(attention_mask, s, total, dtype):
    """HF's 4D mask: causal over the last s positions, padding from attention_mask; 0 or min."""
    past = total - s
    causal = torch.ones(s, total, dtype=torch.bool).tril(diagonal=past)
    keep = causal[None, None, :, :] & attention_mask[:, None, None, :].bool()
    return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)


class Gpt2(nn.Module):
    def __init__(self, derived_positions):
        super().__init__()
        self.derived_positions = derived_positions
        self.wte = nn.Embedding(VOCAB, D)
        self.wpe = nn.Embedding(MAX_POS, D)
        self.blocks = nn.ModuleList([Gpt2Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(D, eps=1e-5)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, input_ids, attention_mask, position_ids, past):
        s = input_ids.shape[1]
        past_len = past[0].shape[2]
        if self.derived_positions:
            # transformers' GPT-2 without position_ids: arange over the past length, every row alike.
            position_ids = torch.arange(past_len, past_len + s, dtype=torch.long).unsqueeze(0)
        h = self.wte(input_ids) + self.wpe(position_ids)
        mask = additive_mask(attention_mask, s, past_len + s, h.dtype)
        presents = []
        for i, block in enumerate(self.blocks):
            h, k, v = block(h, mask, past[2 * i], past[2 * i + 1])
            presents += [k, v]
        return self.lm_head(self.ln_f(h)), presents


class RmsNorm(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def repeat_kv(x):
    """transformers' repeat_kv: each KV head serves HEADS / KV_HEADS query heads."""
    b, kv, slen, hd = x.shape
    rep = HEADS // KV_HEADS
    return x[:, :, None, :, :].expand(b, kv, rep, slen, hd).reshape(b, kv * rep, slen, hd)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        hd = D // HEADS
        self.input_layernorm = RmsNorm()
        self.q_proj = nn.Linear(D, HEADS * hd, bias=False)
        self.k_proj = nn.Linear(D, KV_HEADS * hd, bias=False)
        self.v_proj = nn.Linear(D, KV_HEADS * hd, bias=False)
        self.o_proj = nn.Linear(HEADS * hd, D, bias=False)
        self.post_attention_layernorm = RmsNorm()
        self.gate_proj = nn.Linear(D, INTER, bias=False)
        self.up_proj = nn.Linear(D, INTER, bias=False)
        self.down_proj = nn.Linear(INTER, D, bias=False)

    def forward(self, h, mask, cos, sin, past_k, past_v):
        b, s, _ = h.shape
        hd = D // HEADS
        x = self.input_layernorm(h)
        q = self.q_proj(x).view(b, s, HEADS, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, KV_HEADS, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, KV_HEADS, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        kk, vv = repeat_kv(k), repeat_kv(v)
        w = (q @ kk.transpose(-1, -2)) / math.sqrt(hd) + mask
        out = (F.softmax(w, dim=-1) @ vv).transpose(1, 2).reshape(b, s, D)
        h = h + self.o_proj(out)
        y = self.post_attention_layernorm(h)
        return h + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y)), k, v


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList([LlamaBlock() for _ in range(LAYERS)])
        self.norm = RmsNorm()
        self.lm_head = nn.Linear(D, VOCAB, bias=False)
        hd = D // HEADS
        self.register_buffer('inv_freq', 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd)), persistent=False)

    def forward(self, input_ids, attention_mask, position_ids, past):
        s = input_ids.shape[1]
        past_len = past[0].shape[2]
        h = self.embed_tokens(input_ids)
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None, :, :], emb.sin()[:, None, :, :]
        mask = additive_mask(attention_mask, s, past_len + s, h.dtype)
        presents = []
        for i, layer in enumerate(self.layers):
            h, k, v = layer(h, mask, cos, sin, past[2 * i], past[2 * i + 1])
            presents += [k, v]
        return self.lm_head(self.norm(h)), presents


class OptimumInterface(nn.Module):
    """forward(input_ids, attention_mask, [position_ids,] past_key_values.*) → logits, present.*"""

    def __init__(self, model, with_positions):
        super().__init__()
        self.model = model
        self.with_positions = with_positions

    def forward(self, input_ids, attention_mask, *rest):
        if self.with_positions:
            position_ids, past = rest[0], list(rest[1:])
        else:
            position_ids, past = None, list(rest)
        logits, presents = self.model(input_ids, attention_mask, position_ids, past)
        return (logits, *presents)


def kv_heads(variant):
    return KV_HEADS if variant == 'llama' else HEADS


def export(variant, model, out_dir):
    with_positions = variant != 'gpt2-derived-positions'
    wrapper = OptimumInterface(model, with_positions).eval()
    hd = D // HEADS
    ids = torch.tensor([[1, 2, 3]], dtype=torch.long)
    mask = torch.ones(1, 5, dtype=torch.long)
    pos = torch.tensor([[2, 3, 4]], dtype=torch.long)
    past = [torch.zeros(1, kv_heads(variant), 2, hd) for _ in range(2 * LAYERS)]
    names = ['input_ids', 'attention_mask'] + (['position_ids'] if with_positions else [])
    past_names = [f'past_key_values.{i}.{kind}' for i in range(LAYERS) for kind in ('key', 'value')]
    out_names = ['logits'] + [f'present.{i}.{kind}' for i in range(LAYERS) for kind in ('key', 'value')]
    axes = {'input_ids': {0: 'batch_size', 1: 'sequence_length'}, 'attention_mask': {0: 'batch_size', 1: 'total_sequence_length'}, 'logits': {0: 'batch_size', 1: 'sequence_length'}}
    if with_positions:
        axes['position_ids'] = {0: 'batch_size', 1: 'sequence_length'}
    for n in past_names:
        axes[n] = {0: 'batch_size', 2: 'past_sequence_length'}
    for n in out_names[1:]:
        axes[n] = {0: 'batch_size', 2: 'total_sequence_length'}
    args = (ids, mask) + ((pos,) if with_positions else ()) + tuple(past)
    os.makedirs(out_dir, exist_ok=True)
    torch.onnx.export(wrapper, args, os.path.join(out_dir, 'model.onnx'), input_names=names + past_names, output_names=out_names, dynamic_axes=axes, opset_version=14, do_constant_folding=True)


def rewrite_weight_matmuls(src, dst, rewrite, accepts=lambda w: True, opsets=()):
    """Replaces every MatMul by a 2-D weight initializer with what `rewrite(node, weight, graph)`
    returns (nodes; it may add initializers), drops the initializers left unused, and saves."""
    model = onnx.load(src)
    g = model.graph
    weights = {t.name: t for t in g.initializer}
    nodes = []
    for n in g.node:
        w = numpy_helper.to_array(weights[n.input[1]]) if n.op_type == 'MatMul' and n.input[1] in weights else None
        if w is None or w.ndim != 2 or not accepts(w):
            nodes.append(n)
            continue
        nodes += rewrite(n, w, g)
    del g.node[:]
    g.node.extend(nodes)
    used = {i for n in g.node for i in n.input}
    kept = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(kept)
    model.opset_import.extend(opsets)
    onnx.save(model, dst)


def quantize_dynamic(src, dst):
    """Every MatMul by a 2-D weight becomes quantize_dynamic's pattern: per-tensor symmetric int8
    weights; DynamicQuantizeLinear(A) → MatMulInteger → Cast → × (scale_A · scale_W)."""

    def rewrite(n, w, g):
        p = f'{n.output[0]}_q'
        scale = float(np.abs(w).max() / 127.0)
        g.initializer.extend([
            numpy_helper.from_array(np.clip(np.round(w / scale), -127, 127).astype(np.int8), f'{p}.weight'),
            numpy_helper.from_array(np.array(scale, dtype=np.float32), f'{p}.weight_scale'),
            numpy_helper.from_array(np.array(0, dtype=np.int8), f'{p}.weight_zero_point'),
        ])
        return [
            helper.make_node('DynamicQuantizeLinear', [n.input[0]], [f'{p}.a', f'{p}.a_scale', f'{p}.a_zero_point']),
            helper.make_node('MatMulInteger', [f'{p}.a', f'{p}.weight', f'{p}.a_zero_point', f'{p}.weight_zero_point'], [f'{p}.int32']),
            helper.make_node('Cast', [f'{p}.int32'], [f'{p}.float'], to=TensorProto.FLOAT),
            helper.make_node('Mul', [f'{p}.a_scale', f'{p}.weight_scale'], [f'{p}.scale']),
            helper.make_node('Mul', [f'{p}.float', f'{p}.scale'], [n.output[0]]),
        ]

    rewrite_weight_matmuls(src, dst, rewrite)


Q4_BLOCK = 32


def quantize_nbits(src, dst):
    """Every MatMul by a 2-D weight [K, N] becomes com.microsoft MatMulNBits, as ONNX Runtime's
    MatMul4BitsQuantizer writes onnx-community's model_q4.onnx: 4-bit, block 32 along K,
    asymmetric (a uint8 zero point per block, packed two per byte). B is [N, K/32, 16] uint8, two
    4-bit values per byte, low nibble first; scales [N · K/32]. Returns, per original weight's
    bytes, the dequantized weight (q − zp) · scale the graph computes with."""
    dequantized = {}

    def rewrite(n, w, g):
        k, nn_ = w.shape
        blocks = w.T.reshape(nn_, k // Q4_BLOCK, Q4_BLOCK).astype(np.float32)
        lo = np.minimum(blocks.min(axis=2), 0)
        hi = np.maximum(blocks.max(axis=2), 0)
        scale = ((hi - lo) / 15).astype(np.float32)
        scale[scale == 0] = 1
        zp = np.clip(np.round(-lo / scale), 0, 15).astype(np.uint8)
        q = np.clip(np.round(blocks / scale[:, :, None]) + zp[:, :, None], 0, 15).astype(np.uint8)
        dequantized[w.astype(np.float32).tobytes()] = ((q.astype(np.float32) - zp[:, :, None]) * scale[:, :, None]).reshape(nn_, k).T.copy()
        packed = (q[:, :, 0::2] | (q[:, :, 1::2] << 4)).astype(np.uint8)
        zpad = np.concatenate([zp, np.zeros((nn_, zp.shape[1] % 2), np.uint8)], axis=1)
        zpacked = (zpad[:, 0::2] | (zpad[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
        p = f'{n.output[0]}_q4'
        g.initializer.extend([
            numpy_helper.from_array(packed, f'{p}.weight'),
            numpy_helper.from_array(scale.reshape(-1), f'{p}.scales'),
            numpy_helper.from_array(zpacked, f'{p}.zero_points'),
        ])
        return [helper.make_node('MatMulNBits', [n.input[0], f'{p}.weight', f'{p}.scales', f'{p}.zero_points'], [n.output[0]], domain='com.microsoft', K=k, N=nn_, bits=4, block_size=Q4_BLOCK)]

    rewrite_weight_matmuls(src, dst, rewrite, accepts=lambda w: w.shape[0] % Q4_BLOCK == 0, opsets=[helper.make_opsetid('com.microsoft', 1)])
    return dequantized


def to_float16(src, dst):
    """The fp32 graph as an fp16 export (onnx-community's model_fp16.onnx, onnxconverter-common's
    convert_float_to_float16 without keep_io_types): every float tensor becomes float16 —
    weights, constants, casts, the graph's inputs and outputs (so past/present KV and logits are
    float16). Values beyond float16's range clip to ±65504, as HF's fp16 masks use finfo(fp16).min."""
    model = onnx.load(src)
    g = model.graph
    f16 = lambda a: np.clip(a, -65504, 65504).astype(np.float16)

    def convert_tensor(t):
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(f16(numpy_helper.to_array(t)), t.name))

    for t in g.initializer:
        convert_tensor(t)
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                convert_tensor(a.t)
            if n.op_type == 'Cast' and a.name == 'to' and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    onnx.save(model, dst)


def config_json(variant):
    if variant == 'llama':
        return {'architectures': ['LlamaForCausalLM'], 'model_type': 'llama', 'vocab_size': VOCAB, 'hidden_size': D, 'intermediate_size': INTER, 'num_hidden_layers': LAYERS, 'num_attention_heads': HEADS, 'num_key_value_heads': KV_HEADS, 'max_position_embeddings': MAX_POS, 'rms_norm_eps': 1e-6, 'rope_theta': 10000.0, 'hidden_act': 'silu', 'tie_word_embeddings': False, 'torch_dtype': 'float32'}
    return {'architectures': ['GPT2LMHeadModel'], 'model_type': 'gpt2', 'vocab_size': VOCAB, 'n_embd': D, 'n_layer': LAYERS, 'n_head': HEADS, 'n_positions': MAX_POS, 'n_ctx': MAX_POS, 'activation_function': 'gelu_new', 'layer_norm_epsilon': 1e-5, 'tie_word_embeddings': False, 'torch_dtype': 'float32'}


@torch.no_grad()
def greedy(model, variant, prompt):
    """PyTorch's own greedy generation with its KV cache, one sequence: tokens and top-2 margins."""
    hd = D // HEADS
    past = [torch.zeros(1, kv_heads(variant), 0, hd) for _ in range(2 * LAYERS)]
    ids = torch.tensor([prompt], dtype=torch.long)
    total = 0
    tokens, margins, tops = [], [], []
    for _ in range(NEW_TOKENS):
        s = ids.shape[1]
        pos = torch.arange(total, total + s, dtype=torch.long).unsqueeze(0)
        mask = torch.ones(1, total + s, dtype=torch.long)
        logits, past = model(ids, mask, pos, past)
        last = logits[0, -1]
        top = torch.topk(last, 2)
        tokens.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        tops.append(float(top.values[0]))
        total += s
        ids = torch.tensor([[tokens[-1]]], dtype=torch.long)
    return tokens, margins, tops


def round_to_float16(model):
    """The fp16 variants' PyTorch side: the same weights rounded to float16, computed in float32
    (PyTorch 1.13 has no float16 CPU kernels). The graph computes in float16, so their tokens
    agree up to float16 noise (the tie rule in torch-export.test.ts)."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())


def load_dequantized(model, dequantized):
    """Gives the PyTorch module the weights a q4 graph computes with: each matrix whose exported
    initializer (as is, or transposed: nn.Linear exports W^T) was quantized takes its dequantized
    value. Matched by value: the random weights are unique."""
    by_bytes = {k: v for k, v in dequantized.items()}
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() != 2:
                continue
            w = p.detach().numpy().astype(np.float32)
            if w.tobytes() in by_bytes:
                p.copy_(torch.from_numpy(by_bytes[w.tobytes()]))
            elif np.ascontiguousarray(w.T).tobytes() in by_bytes:
                p.copy_(torch.from_numpy(np.ascontiguousarray(by_bytes[np.ascontiguousarray(w.T).tobytes()].T)))


def write_variant(out, tokenizer_dir, variant, family, model):
    d = os.path.join(out, variant)
    export(family, model, d)
    with open(os.path.join(d, 'config.json'), 'w') as f:
        json.dump(config_json(family), f)
    with open(os.path.join(d, 'generation_config.json'), 'w') as f:
        json.dump({'eos_token_id': []}, f)
    for name in ('tokenizer.json', 'tokenizer_config.json'):
        shutil.copy(os.path.join(tokenizer_dir, name), os.path.join(d, name))
    return d


def greedy_reference(model, family):
    return [{'tokens': t, 'margins': m, 'tops': top} for t, m, top in (greedy(model, family, p) for p in PROMPTS)]


def main():
    out, tokenizer_dir = sys.argv[1], sys.argv[2]
    torch.manual_seed(1234)
    gpt2, llama = Gpt2(False), Llama()
    for m in (gpt2, llama):
        init_weights(m)
        m.eval()
    # The derived-positions export carries gpt2's very weights: only the position input differs.
    derived = Gpt2(True).eval()
    derived.load_state_dict(gpt2.state_dict())
    reference = {'new_tokens': NEW_TOKENS, 'prompts': PROMPTS, 'variants': {}}
    for variant, family, model in (('gpt2', 'gpt2', gpt2), ('gpt2-derived-positions', 'gpt2-derived-positions', derived), ('llama', 'llama', llama)):
        write_variant(out, tokenizer_dir, variant, family, model)
        reference['variants'][variant] = greedy_reference(model, family)
    # float16 exports: the fp32 export of fp16-rounded weights, converted as onnx-community's are.
    for variant, family, source in (('gpt2-fp16', 'gpt2', gpt2), ('llama-fp16', 'llama', llama)):
        model = copy.deepcopy(source)
        round_to_float16(model)
        d = write_variant(out, tokenizer_dir, variant, family, model)
        to_float16(os.path.join(d, 'model.onnx'), os.path.join(d, 'model.onnx'))
        reference['variants'][variant] = greedy_reference(model, family)
    # q4: MatMulNBits over the llama export (fp32 KV), and the same graph converted to fp16 (q4f16).
    q4 = copy.deepcopy(llama)
    d = write_variant(out, tokenizer_dir, 'llama-q4', 'llama', q4)
    load_dequantized(q4, quantize_nbits(os.path.join(d, 'model.onnx'), os.path.join(d, 'model.onnx')))
    reference['variants']['llama-q4'] = greedy_reference(q4, 'llama')
    shutil.copytree(d, os.path.join(out, 'llama-q4f16'))
    to_float16(os.path.join(d, 'model.onnx'), os.path.join(out, 'llama-q4f16', 'model.onnx'))
    q4f16 = copy.deepcopy(q4)
    round_to_float16(q4f16)
    reference['variants']['llama-q4f16'] = greedy_reference(q4f16, 'llama')
    quantized = os.path.join(out, 'gpt2-int8-dynamic')
    shutil.copytree(os.path.join(out, 'gpt2'), quantized)
    quantize_dynamic(os.path.join(out, 'gpt2', 'model.onnx'), os.path.join(quantized, 'model.onnx'))
    with open(os.path.join(out, 'reference.json'), 'w') as f:
        json.dump(reference, f)


if __name__ == '__main__':
    main()
