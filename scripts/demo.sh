#!/usr/bin/env bash
# quantir's main job on the bundled example (examples/digits_cnn.mlir, a TF-dialect CNN):
# calibrate on sample data, quantize to int8, evaluate against the float model.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
Q=target/release/quantir
out=target/demo
mkdir -p "$out"
echo "== 1. inspect"
$Q inspect examples/digits_cnn.mlir | head -20
echo
echo "== 2. calibrate (min/max, the default) on examples/digits_calib.npz"
$Q calibrate examples/digits_cnn.mlir --data examples/digits_calib.npz -o "$out/stats.json"
echo
echo "== 3. quantize: int8 per-channel weights, int32 biases, int8 activations"
$Q quantize examples/digits_cnn.mlir --stats "$out/stats.json" -o "$out/digits_cnn.int8.mlir"
mlir-opt-22 --allow-unregistered-dialect "$out/digits_cnn.int8.mlir" -o /dev/null && echo "mlir-opt-22 accepts $out/digits_cnn.int8.mlir"
echo
echo "== 4. evaluate on held-out data (report: $out/report.html)"
$Q evaluate examples/digits_cnn.mlir "$out/digits_cnn.int8.mlir" --data examples/digits_test.npz --labels y --per-layer --report "$out/report.html"
