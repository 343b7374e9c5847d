#!/usr/bin/env bash
# Fills fuzz/corpus/TARGET/ with seeds from the bundled models and data (the same kinds of
# file tests/fuzz_seeds.rs starts from). Run from anywhere; needs a built quantir for the
# stats and bytecode seeds.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
c="$root/fuzz/corpus"
q="${QUANTIR:-$root/target/debug/quantir}"
mkdir -p "$c"/{image,mlir,mlir_bytecode,npy,npz,onnx_model,recipe_toml,saved_model_pb,stats_json,variables_bundle,variables_index}
cp "$root"/tests/data/digits_mlp.onnx "$root"/tests/data/digits_cnn.onnx "$c/onnx_model/"
cp "$root"/tests/data/digits_mlp.mlir "$c/mlir/"
"$q" opt "$root/tests/data/digits_mlp.mlir" -o "$c/mlir_bytecode/digits_mlp.mlirbc"
cp "$root"/tests/data/digits_mlp_savedmodel/saved_model.pb "$c/saved_model_pb/"
cp "$root"/tests/data/digits_mlp_savedmodel/variables/variables.index "$c/variables_index/"
v="$root"/tests/data/digits_mlp_savedmodel/variables
"$root/.venv/bin/python" -c "
import struct, sys
i = open('$v/variables.index', 'rb').read(); d = open('$v/variables.data-00000-of-00001', 'rb').read()
open('$c/variables_bundle/digits_mlp', 'wb').write(struct.pack('<I', len(i)) + i + d)
"
cp "$root"/examples/digits_test.npz "$c/npz/"
"$root/.venv/bin/python" - "$c" <<'PY'
import sys, numpy as np
c = sys.argv[1]
np.save(f"{c}/npy/a.npy", np.arange(12, dtype=np.float32).reshape(3, 2, 2))
np.savez(f"{c}/npz/small.npz", x=np.arange(6).reshape(2, 3), y=np.ones((2, 2), np.float16))
PY
"$q" calibrate "$root/examples/digits_cnn.mlir" --data "$root/examples/digits_calib.npz" --limit 4 -o "$c/stats_json/s.json" 2>/dev/null
printf 'weights = "int8"\nscheme = "onnx"\nexclude = ["*Softmax*"]\n\n[[override]]\nmatch = "tf.MatMul"\nactivations = "int16"\n' > "$c/recipe_toml/r.toml"
"$root/.venv/bin/python" -c "
import zlib, struct, sys
def png(w, h):
    rows = b''.join(b'\x00' + b''.join(bytes(((x * 30) % 256, (y * 30) % 256, 128)) for x in range(w)) for y in range(h))
    chunk = lambda t, d: struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
    return b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b'')
open('$c/image/a.png', 'wb').write(png(8, 8))
"
echo "seeded $c"
