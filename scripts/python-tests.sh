#!/usr/bin/env bash
# Builds quantir's Python wheel (python/, PyO3 + maturin), installs it into the test venv and
# runs its pytest suite against the installed wheel. The wheel is built in the dev profile,
# which shares most of `cargo test`'s compiled dependencies (maturin builds quantir-py alone,
# whose dependency features differ from the whole workspace's with its dev-dependencies, so
# melior, mlir-sys and quantir compile once more); BENCHMARKS.md measures the release wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
wheels=target/wheels-test
rm -rf "$wheels"
(cd python && VIRTUAL_ENV="$PWD/../.venv" PATH="$PWD/../.venv/bin:$PATH" \
  maturin build --quiet --profile dev --strip -o "../$wheels")
"$PY" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheels"/quantir-*.whl
# the command line the tests compare with, as `cargo test` built it (a no-op after it): a plain
# `cargo build --bin quantir` resolves other dependency features and compiles it all again
cargo test --workspace --no-run --quiet
# from outside the source tree, so that `import quantir` is the installed wheel
cd target && "../$PY" -m pytest -q -p no:cacheprovider ../python/tests
