#!/usr/bin/env bash
# tuning.sh — the sweeps behind ebb's defaults (docs/tuning.md quotes its output).
# Runs the bench programs under build/libebb.so with one EBB_* setting varied at a
# time and prints markdown tables with medians of RUNS runs (default 3).
#   bench/tuning.sh [decay] [dirty] [background]   (after `make -C bench all` and `make all`;
#                                                 no argument: all three sweeps)
# Columns:
#   decay sweep: churn with 20 ms gaps (faults per cycle after 300 warm-up requests),
#     prover with 500 ms idle gaps (RSS floor, rounds/s), floor (RSS 1 s after the
#     peak, idle process, background thread on) — the three things the decay trades.
#   dirty-max sweep: prover with 20 ms gaps (rounds/s, faults per round, floor); heap,
#     1 GiB of small blocks built and torn down 3 times (the median cycle is a rebuild).
#   background: floor with no activity, RSS 2 s after the peak and CPU seconds used.
set -euo pipefail
cd "$(dirname "$0")"
LIB=$(cd .. && pwd)/build/libebb.so
RUNS=${RUNS:-3}
[ -f "$LIB" ] || { echo "tuning.sh: build $LIB first (make)" >&2; exit 1; }

# field NAME: the value of NAME= in the result line on stdin
field() { sed -n "s/.*[ ]$1=\([-0-9.]*\).*/\1/p" | head -n 1; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
# cpu_of CMD...: user+sys CPU seconds of the command (bash's own timer)
cpu_of() {
  local TIMEFORMAT='%U %S' t
  t=$( { time "$@" >/dev/null 2>&1; } 2>&1)
  awk -v t="$t" 'BEGIN {split(t, a, " "); printf "%.2f\n", a[1] + a[2]}'
}
# run ENV... -- PROG ARGS...: result line of one run under ebb
run() {
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" LD_PRELOAD="$LIB" "$@" | grep '^result'
}
# med FIELD ENV... -- PROG ARGS...: median of FIELD over RUNS runs
med() {
  local f=$1; shift
  for _ in $(seq "$RUNS"); do run "$@" | field "$f"; done | median
}

SWEEPS=" ${*:-decay dirty background} "
want() { [[ "$SWEEPS" == *" $1 "* ]]; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(uname -r); runs per cell: $RUNS"
if want decay; then
echo
echo "| EBB_DECAY_MS | churn 20 ms gaps: faults/cycle | prover 500 ms idle: floor MiB | prover 500 ms idle: rounds/s | floor, idle: MiB 1 s after peak |"
echo "|---:|---:|---:|---:|---:|"
for d in 50 100 250 500 1000 2000; do
  churn=$(med faults_per_cycle EBB_DECAY_MS=$d -- ./build/churn --gap-ms 20 --cycles 50)
  pfloor=$(med floor_kb EBB_DECAY_MS=$d -- ./build/prover --idle-ms 500 --rounds 3)
  prate=$(med rounds_per_s EBB_DECAY_MS=$d -- ./build/prover --idle-ms 500 --rounds 3)
  ffloor=$(med end_kb EBB_DECAY_MS=$d EBB_BACKGROUND=1 -- ./build/floor --activity 0 --mib 256 --ms 1000)
  printf '| %s | %s | %s | %s | %s |\n' "$d" "$churn" "$(mib "$pfloor")" "$prate" "$(mib "$ffloor")"
done
fi
if want dirty; then
echo
echo "| EBB_DIRTY_MAX | prover 20 ms idle: rounds/s | faults/round | floor MiB |"
echo "|---:|---:|---:|---:|"
for m in 16M 64M 256M 1G auto; do
  rate=$(med rounds_per_s EBB_DIRTY_MAX=$m -- ./build/prover --idle-ms 20 --rounds 10)
  flt=$(med faults_per_round EBB_DIRTY_MAX=$m -- ./build/prover --idle-ms 20 --rounds 10)
  fl=$(med floor_kb EBB_DIRTY_MAX=$m -- ./build/prover --idle-ms 20 --rounds 10)
  printf '| %s | %s | %s | %s |\n' "$m" "$rate" "$flt" "$(mib "$fl")"
done
echo
echo "| EBB_DIRTY_MAX | heap 1 GiB x3: rebuild ns/malloc | ns/free | faults/MiB (all builds) |" \
  "RSS after the last teardown MiB | peak RSS MiB |"
echo "|---:|---:|---:|---:|---:|---:|"
for m in 256M 1G 2G auto+64M auto; do
  line=$( (for _ in $(seq "$RUNS"); do run EBB_DIRTY_MAX=$m -- ./build/heap --mib 1024 --cycles 3; done) )
  col() { echo "$line" | field "$1" | median; }
  printf '| %s | %s | %s | %s | %s | %s |\n' "$m" "$(col ns_per_malloc)" "$(col ns_per_free)" \
    "$(col faults_per_mb)" "$(mib "$(col rss_kb)")" "$(mib "$(col peak_rss_kb)")"
done
fi
if want background; then
echo
echo "| EBB_BACKGROUND | floor, no activity: MiB 2 s after peak | CPU s (user+sys) of the whole run |"
echo "|---|---:|---:|"
for b in 0 auto; do
  end=$( (for _ in $(seq "$RUNS"); do run EBB_BACKGROUND=$b -- ./build/floor --activity 0 --mib 256 --ms 2000 | field end_kb; done) | median)
  cpu=$( (for _ in $(seq "$RUNS"); do cpu_of env EBB_BACKGROUND=$b LD_PRELOAD="$LIB" ./build/floor --activity 0 --mib 256 --ms 2000; done) | median)
  printf '| %s | %s | %s |\n' "$b" "$(mib "$end")" "$cpu"
done
fi
