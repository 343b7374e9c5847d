#!/usr/bin/env bash
# A/B throughput of two quantir builds, run at the same time, one on each of the two cores
# (swapped every repetition), so that both see the same phase of a shared, noisy machine.
#
# usage: benches/ab_side_by_side.sh MODEL DATA SAMPLES REPS BUILD_A BUILD_B
#   e.g. benches/ab_side_by_side.sh tests/data/mobilenet_v2_035.onnx /tmp/m512.npz 256 6 /tmp/old target/release/quantir
#
# Prints each repetition's samples/s (A, B) and B/A, then the median ratio and the ratio with
# the two cores' own difference taken out: the geometric mean of the medians of the repetitions
# with A on core 0 and those with A on core 1 (a faster core favours one side in half of them).
set -euo pipefail
[ $# -eq 6 ] || { sed -n '4,5p' "$0" >&2; exit 2; }
model=$1 data=$2 n=$3 reps=$4 a=$5 b=$6
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rate() { grep -o '([0-9.]* samples/s)' "$1" | grep -o '[0-9.]*' | head -1; }
ratios=()
for r in $(seq "$reps"); do
  ca=$(( r % 2 )); cb=$(( 1 - ca ))
  taskset -c "$ca" "$a" run "$model" --data "$data" --threads 1 --limit "$n" -o "$tmp/a.npz" 2>"$tmp/a.txt" &
  taskset -c "$cb" "$b" run "$model" --data "$data" --threads 1 --limit "$n" -o "$tmp/b.npz" 2>"$tmp/b.txt" &
  wait
  ra=$(rate "$tmp/a.txt"); rb=$(rate "$tmp/b.txt")
  q=$(python3 -c "print(f'{$rb / $ra:.3f}')")
  ratios+=("$ca:$q")
  echo "rep $r (A on core $ca): A $ra/s, B $rb/s, B/A $q"
done
python3 - "${ratios[@]}" <<'PY'
import statistics, sys
by = {"0": [], "1": []}
for item in sys.argv[1:]:
    core, q = item.split(":")
    by[core].append(float(q))
every = by["0"] + by["1"]
print(f"median B/A {statistics.median(every):.3f}", end="")
if by["0"] and by["1"]:
    both = (statistics.median(by["0"]) * statistics.median(by["1"])) ** 0.5
    print(f"; cores' difference taken out {both:.3f}")
else:
    print()
PY
