#!/usr/bin/env bash
# quantir on the bundled example model (examples/digits_cnn.mlir, a TF-dialect CNN).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
Q=target/release/quantir
out=target/demo
mkdir -p "$out"
echo "== quantir inspect examples/digits_cnn.mlir"
$Q inspect examples/digits_cnn.mlir
echo
echo "== quantir opt --pass strip-identity (text and bytecode)"
$Q opt examples/digits_cnn.mlir --pass strip-identity -o "$out/digits_cnn.stripped.mlir"
$Q opt "$out/digits_cnn.stripped.mlir" -o "$out/digits_cnn.stripped.mlirbc"
mlir-opt-22 --allow-unregistered-dialect "$out/digits_cnn.stripped.mlirbc" -o /dev/null && echo "mlir-opt-22 accepts $out/digits_cnn.stripped.mlirbc"
echo
echo "== quantir params: int8 parameters for the range [-0.5, 2.0] in each scheme"
for s in mlir onnx torch; do $Q params --min -0.5 --max 2.0 --dtype int8 --scheme "$s" --json; done
