"""
Checks train.py's training forward (the one the optimizer sees) against its export forward (the
graph that ships), in float32 on a small random model: the same logits. A control swaps two query
heads that share different KV heads (q_proj rows and o_proj columns together): the export path
then differs, so a grouping of query heads onto KV heads that the two paths disagree on is caught.

  /usr/bin/python3 train_forward_check.py    prints {"diff": …, "control_diff": …}
"""
import copy
import json

import torch

from train import Llama

CONFIG = {'vocab_size': 64, 'hidden_size': 48, 'intermediate_size': 96, 'num_hidden_layers': 2,
          'num_attention_heads': 6, 'num_key_value_heads': 2, 'max_position_embeddings': 64,
          'rms_norm_eps': 1e-6, 'rope_theta': 10000.0}


def export_logits(model, ids):
    c = model.c
    b, s = ids.shape
    hd = c['hidden_size'] // c['num_attention_heads']
    past = [torch.zeros(b, c['num_key_value_heads'], 0, hd) for _ in range(2 * c['num_hidden_layers'])]
    logits, _ = model.forward_cached(ids, torch.ones(b, s, dtype=torch.long), torch.arange(s)[None].expand(b, s), past)
    return logits


def swap_heads(model, a, b):
    """Query heads a and b trade places (their q_proj rows and o_proj columns): same function only if they share a KV head."""
    swapped = copy.deepcopy(model)
    hd = model.c['hidden_size'] // model.c['num_attention_heads']
    ia, ib = slice(a * hd, (a + 1) * hd), slice(b * hd, (b + 1) * hd)
    for layer in swapped.layers:
        q, o = layer.q_proj.weight.data, layer.o_proj.weight.data
        q[ia], q[ib] = q[ib].clone(), q[ia].clone()
        o[:, ia], o[:, ib] = o[:, ib].clone(), o[:, ia].clone()
    return swapped


def main():
    torch.manual_seed(0)
    model = Llama(CONFIG).eval()
    for p in model.parameters():
        torch.nn.init.normal_(p, 0.0, 0.3 if p.dim() >= 2 else 1.0)
    ids = torch.randint(0, CONFIG['vocab_size'], (2, 40))
    with torch.no_grad():
        reference = export_logits(model, ids)
        diff = (model(ids) - reference).abs().max().item()
        # Heads 0 and 5 read KV heads 0 and 1 (3 query heads per KV head).
        control = (export_logits(swap_heads(model, 0, 5), ids) - reference).abs().max().item()
    print(json.dumps({'diff': diff, 'control_diff': control, 'scale': reference.abs().max().item()}))


if __name__ == '__main__':
    main()
