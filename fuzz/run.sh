#!/usr/bin/env bash
# Runs every fuzz target under libFuzzer for SECONDS each (at most RUNS executions), from the
# seed corpora of fuzz/seed.sh, and prints one line per target: executions, time, coverage.
# A crash, a leak past -rss_limit_mb or a timeout fails the script (the input is saved under
# fuzz/artifacts/TARGET/). CI runs it for 30 s a target (.ci/run); fuzz/README.md has the
# long runs. Needs the nightly toolchain and cargo-fuzz; without them it says so and exits 0
# (tests/fuzz_seeds.rs still runs the targets over their seeds on stable).
#   usage: bash fuzz/run.sh [SECONDS] [RUNS] [TARGET...]   (all targets but mlir_bytecode by default)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
secs="${1:-30}"; runs="${2:--1}"; shift $(( $# > 2 ? 2 : $# ))
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: skipped, no nightly toolchain (the seed test covers the targets on stable)"; exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install --locked --quiet cargo-fuzz
fi
[ -x "$root/target/debug/quantir" ] || cargo build --quiet --manifest-path "$root/Cargo.toml" --bin quantir
QUANTIR="$root/target/debug/quantir" bash "$root/fuzz/seed.sh" >/dev/null
cd "$root/fuzz"
cargo +nightly fuzz build -O --sanitizer none 2>&1 | tail -1
bin="target/$(rustc -vV | sed -n 's/^host: //p')/release"
targets=("$@")
# mlir_bytecode only when named: it finds MLIR's own bytecode-reader bugs (src/fuzzing.rs)
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo +nightly fuzz list | grep -vx mlir_bytecode)
# the file-reading targets write each input to a folder: a RAM disk keeps that cheap
export TMPDIR=/dev/shm
# A report_fatal_error inside MLIR itself ("LLVM ERROR: …", e.g. its bytecode reader on a
# list longer than memory) is MLIR refusing a damaged input the only way it can: it is not a
# quantir bug and cannot be caught in-process (the CLI turns it into a one-line error, see
# src/ir/fatal.rs). Such an input is kept under artifacts/TARGET/mlir_aborts/ and the target
# restarts from its corpus, its executions added up; any other crash, leak or hang fails.
status=0
for t in "${targets[@]}"; do
  log="$(mktemp)"
  max_len=$((1 << 20)); [ "$t" = recipe_toml ] && max_len=4096
  mkdir -p "artifacts/$t" "corpus/$t"
  execs=0; aborts=0; start=$SECONDS; failed=""; line=""
  while :; do
    left=$(( secs - (SECONDS - start) )); [ "$left" -gt 0 ] || break
    left_runs=-1; [ "$runs" -lt 0 ] || left_runs=$(( runs - execs ))
    [ "$left_runs" != 0 ] || break
    # the binary itself, not `cargo fuzz run`, which would rebuild after any edit of the sources
    # `timeout`: libFuzzer's own alarm can deadlock in malloc on a hang (no sanitizer hooks)
    timeout -s KILL $(( left + 120 )) "$bin/$t" "corpus/$t" -artifact_prefix="artifacts/$t/" -rss_limit_mb=2048 -max_len="$max_len" -timeout=20 \
      -max_total_time="$left" -runs="$left_runs" -print_final_stats=1 >"$log" 2>&1 && rc=0 || rc=$?
    # (a process killed by a signal libFuzzer could not catch prints no stats: `|| true`)
    n=$(grep -E "^stat::number_of_executed_units" "$log" | awk '{print $2}' || true)
    execs=$(( execs + ${n:-0} ))
    line=$(grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE)" "$log" | tail -1 || true)
    [ "$rc" -ne 0 ] || break
    unit=$(grep -oE "Test unit written to [^ ]+" "$log" | awk '{print $5}' || true)
    if grep -q "^LLVM ERROR:" "$log" && [ -n "$unit" ]; then
      aborts=$(( aborts + 1 )); mkdir -p "artifacts/$t/mlir_aborts"; mv "$unit" "artifacts/$t/mlir_aborts/"
      continue
    fi
    failed=1; break
  done
  if [ -z "$failed" ]; then
    echo "fuzz $t: $execs executions in $(( SECONDS - start )) s, $(echo "$line" | grep -oE 'cov: [0-9]+ ft: [0-9]+'), 0 crashes, $aborts inputs MLIR's report_fatal_error refused (artifacts/$t/mlir_aborts/)"
  else
    echo "fuzz $t: FAILED after $execs executions (exit status $rc)"
    grep -E "ERROR|panicked|overflow|==[0-9]+==|artifact" "$log" | head -20 || true; status=1
    if [ "$rc" -ge 128 ]; then
      # killed by a signal libFuzzer's handler never saw, so no input was saved: the seed and
      # the last progress line are what replays the run (`-seed=N -runs=EXECUTIONS`)
      grep -E "^INFO: Seed:" "$log" | head -1 || true
      grep -E "^#[0-9]+" "$log" | tail -1 || true
    fi
  fi
  rm -f "$log"
done
exit $status
