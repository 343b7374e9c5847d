#!/usr/bin/env bash
# Installs what quantir needs to build and test on Debian 12; does nothing when all is present.
#  - Debian's LLVM/MLIR 22 (melior 0.27 links it statically), mlir-opt-22 for the tests and
#    GNU time (/usr/bin/time) for the peak-memory test and the comparison scripts, and QEMU's
#    user-mode emulator (qemu-user), which runs onnxruntime on an emulated x86 CPU without
#    VNNI in tests/ort_no_vnni.rs and benches/ort_no_vnni.py (issue #18), whatever the host;
#  - a Python venv under .venv/ with numpy, onnx and onnxruntime for the real-runtime tests
#    and the comparison scripts, and maturin and pytest to build and test the Python package
#    (Python is never needed to run the quantir command line itself).
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(llvm-22-dev libmlir-22-dev libpolly-22-dev libzstd-dev libclang1-22 libclang-common-22-dev
      zlib1g-dev libz3-dev libxml2-dev mlir-22-tools time qemu-user)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

PY_PKGS=(numpy onnx onnxruntime maturin pytest)
if ! .venv/bin/python -c "import numpy, onnx, onnxruntime, maturin, pytest" >/dev/null 2>&1; then
  echo "install-deps: creating .venv with ${PY_PKGS[*]}"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check "${PY_PKGS[@]}"
fi

command -v cargo >/dev/null || { echo "install-deps: cargo not found; install Rust (rustup) first" >&2; exit 1; }
