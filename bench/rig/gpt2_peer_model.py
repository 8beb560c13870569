"""
The graph the engine is measured on beside transformers.js (bench/scenarios/engine-peer.ts): a
58.5 M-parameter GPT-2 (vocabulary 32000, width 512, 8 layers, 8 heads, 2048 positions), written
by test/torch's PyTorch classes and exported by them under Optimum's names (concat KV), float32,
seeded, into OUT/onnx/model.onnx, onnx-community's layout, which both sides load.

  /usr/bin/python3 bench/rig/gpt2_peer_model.py OUT
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'test', 'torch'))
import export_reference as R  # noqa: E402

R.VOCAB, R.D, R.LAYERS, R.HEADS, R.MAX_POS = 32000, 512, 8, 8, 2048
R.INIT_STD = 0.02
torch.manual_seed(1)
model = R.Gpt2(False)
R.init_weights(model)
model.eval()
R.export('gpt2', model, os.path.join(sys.argv[1], 'onnx'))
print(sum(p.numel() for p in model.parameters()))
