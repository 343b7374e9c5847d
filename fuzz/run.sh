#!/usr/bin/env bash
# Runs every fuzz target under libFuzzer for SECONDS each (at most RUNS executions), from the
# seed corpora of fuzz/seed.sh, and prints one line per target: executions, time, coverage.
# A crash, a leak past -rss_limit_mb or a timeout fails the script (the input is saved under
# fuzz/artifacts/TARGET/). CI runs it for 30 s a target (.ci/run); fuzz/README.md has the
# long runs. Needs the nightly toolchain and cargo-fuzz; without them it says so and exits 0
# (tests/fuzz_seeds.rs still runs the targets over their seeds on stable).
#   usage: bash fuzz/run.sh [SECONDS] [RUNS] [TARGET...]
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
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo +nightly fuzz list)
# the file-reading targets write each input to a folder: a RAM disk keeps that cheap
export TMPDIR=/dev/shm
status=0
for t in "${targets[@]}"; do
  log="$(mktemp)"
  max_len=$((1 << 20)); [ "$t" = recipe_toml ] && max_len=4096
  mkdir -p "artifacts/$t"
  # the binary itself, not `cargo fuzz run`, which would rebuild after any edit of the sources
  if "$bin/$t" -artifact_prefix="artifacts/$t/" -rss_limit_mb=2048 -max_len="$max_len" -timeout=20 -max_total_time="$secs" -runs="$runs" \
       -print_final_stats=1 >"$log" 2>&1; then
    done_line=$(grep -E "^#[0-9]+.*DONE" "$log" | tail -1)
    execs=$(grep -E "^stat::number_of_executed_units" "$log" | awk '{print $2}')
    took=$(grep -E "^Done [0-9]+ runs in" "$log" | awk '{print $5}')
    echo "fuzz $t: ${execs:-?} executions in ${took:-?} s, $(echo "$done_line" | grep -oE 'cov: [0-9]+ ft: [0-9]+'), 0 crashes"
  else
    echo "fuzz $t: FAILED"; grep -E "ERROR|panicked|==[0-9]+==|artifact" "$log" | head -20; status=1
  fi
  rm -f "$log"
done
exit $status
