"""Writes a digits-sized transformer encoder as ONNX, with its calibration and test samples:
the model quantir's attention tests quantize (issue #17, activation × activation matmuls).

    .venv/bin/python tests/python/make_attention_model.py OUT_DIR

The 8×8 digit images are read as 8 tokens of 8 features. One encoder layer with 4 heads:
embedding MatMul + position, Q/K/V projections, scores Q·Kᵀ as an Einsum (as Keras'
MultiHeadAttention writes it), Softmax, P·V as a MatMul (as PyTorch exports it), output
projection, residual + LayerNormalization, a ReLU feed-forward, a second LayerNormalization, a
mean over the tokens and a classifier: 10 compute ops, two of them activation × activation.
The weights are random (seeded) and scaled so that attention is peaked, not uniform; the
batch dimension is dynamic. Deterministic: the same files every run.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

D, H, T, F, CLASSES = 32, 4, 8, 64, 10
DH = D // H


def model(rng):
    inits = []

    def w(name, shape, scale):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def c(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    n = []

    def node(op, ins, outs, **attrs):
        n.append(helper.make_node(op, ins, outs, name=outs[0], **attrs))
        return outs[0]

    def dense(x, name, din, dout, scale):
        y = node("MatMul", [x, w(name + ".w", (din, dout), scale / np.sqrt(din))], [name + ".mm"])
        return node("Add", [y, w(name + ".b", (dout,), 0.1)], [name])

    # digits pixels are 0..16: the embedding brings them to unit scale
    emb = dense("x", "embed", T, D, 1.0 / 8.0)
    emb = node("Add", [emb, w("pos", (T, D), 0.5)], ["embed_pos"])
    heads = c("heads_shape", [0, T, H, DH], np.int64)
    merged = c("merged_shape", [0, T, D], np.int64)
    # larger Q/K weights: scores with a std of ~3, so softmax rows are peaked
    q = node("Reshape", [dense(emb, "q", D, D, 3.0), heads], ["q_heads"])
    k = node("Reshape", [dense(emb, "k", D, D, 3.0), heads], ["k_heads"])
    v = node("Reshape", [dense(emb, "v", D, D, 1.0), heads], ["v_heads"])
    scores = node("Einsum", [q, k], ["scores"], equation="bqhd,bkhd->bhqk")
    scaled = node("Mul", [scores, c("inv_sqrt_dh", 1.0 / np.sqrt(DH))], ["scores_scaled"])
    probs = node("Softmax", [scaled], ["probs"], axis=-1)
    vt = node("Transpose", [v], ["v_t"], perm=[0, 2, 1, 3])
    ctx = node("MatMul", [probs, vt], ["context"])
    ctx = node("Transpose", [ctx], ["context_t"], perm=[0, 2, 1, 3])
    ctx = node("Reshape", [ctx, merged], ["context_merged"])
    attn = dense(ctx, "attn_out", D, D, 1.0)
    h = node("Add", [emb, attn], ["residual1"])
    h = node("LayerNormalization", [h, c("ln1.g", np.ones(D)), c("ln1.b", np.zeros(D))], ["ln1"], axis=-1)
    f = node("Relu", [dense(h, "ffn1", D, F, 2.0)], ["ffn1_relu"])
    f = dense(f, "ffn2", F, D, 1.0)
    h = node("Add", [h, f], ["residual2"])
    h = node("LayerNormalization", [h, c("ln2.g", np.ones(D)), c("ln2.b", np.zeros(D))], ["ln2"], axis=-1)
    pooled = node("ReduceMean", [h], ["pooled"], axes=[1], keepdims=0)
    dense(pooled, "logits", D, CLASSES, 1.0)
    graph = helper.make_graph(
        n,
        "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", T, T])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="quantir-tests")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def main():
    out = sys.argv[1]
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    os.makedirs(out, exist_ok=True)
    onnx.save(model(np.random.default_rng(17)), os.path.join(out, "attention.onnx"))
    for split, count in [("calib", 64), ("test", 32)]:
        images = np.load(os.path.join(root, "examples", f"digits_{split}.npz"))
        x = next(iter(images.values()))[:count].reshape(-1, T, T).astype(np.float32)
        np.savez(os.path.join(out, f"attention_{split}.npz"), x=x)


if __name__ == "__main__":
    main()
