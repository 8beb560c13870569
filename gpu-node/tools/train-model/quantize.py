"""
The float32 export as a 4-bit graph, the way ONNX Runtime's MatMul4BitsQuantizer writes
onnx-community's model_q4.onnx: every MatMul by a 2-D weight [K, N] (K a multiple of 32) becomes
com.microsoft MatMulNBits — 4-bit, blocks of 32 along K, asymmetric (a uint8 zero point per
block, packed two per byte), float32 scales. Embeddings, norms and the KV cache stay float32.

  /usr/bin/python3 quantize.py SRC.onnx DST.onnx
"""
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

BLOCK = 32


def quantize(src, dst):
    model = onnx.load(src)
    g = model.graph
    weights = {t.name: t for t in g.initializer}
    nodes = []
    for n in g.node:
        w = numpy_helper.to_array(weights[n.input[1]]) if n.op_type == 'MatMul' and n.input[1] in weights else None
        if w is None or w.ndim != 2 or w.shape[0] % BLOCK != 0:
            nodes.append(n)
            continue
        k, cols = w.shape
        blocks = w.T.reshape(cols, k // BLOCK, BLOCK).astype(np.float32)
        lo = np.minimum(blocks.min(axis=2), 0)
        hi = np.maximum(blocks.max(axis=2), 0)
        scale = ((hi - lo) / 15).astype(np.float32)
        scale[scale == 0] = 1
        zp = np.clip(np.round(-lo / scale), 0, 15).astype(np.uint8)
        q = np.clip(np.round(blocks / scale[:, :, None]) + zp[:, :, None], 0, 15).astype(np.uint8)
        packed = (q[:, :, 0::2] | (q[:, :, 1::2] << 4)).astype(np.uint8)
        zpad = np.concatenate([zp, np.zeros((cols, zp.shape[1] % 2), np.uint8)], axis=1)
        zpacked = (zpad[:, 0::2] | (zpad[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
        p = f'{n.output[0]}_q4'
        g.initializer.extend([numpy_helper.from_array(packed, f'{p}.weight'), numpy_helper.from_array(scale.reshape(-1), f'{p}.scales'), numpy_helper.from_array(zpacked, f'{p}.zero_points')])
        nodes.append(helper.make_node('MatMulNBits', [n.input[0], f'{p}.weight', f'{p}.scales', f'{p}.zero_points'], [n.output[0]], domain='com.microsoft', K=k, N=cols, bits=4, block_size=BLOCK))
    del g.node[:]
    g.node.extend(nodes)
    used = {i for n in g.node for i in n.input}
    kept = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(kept)
    model.opset_import.append(helper.make_opsetid('com.microsoft', 1))
    onnx.save(model, dst)


if __name__ == '__main__':
    quantize(sys.argv[1], sys.argv[2])
