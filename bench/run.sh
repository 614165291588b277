#!/usr/bin/env bash
# run.sh — runs the bench programs under each allocator (LD_PRELOAD), interleaved,
# and writes results/<timestamp>/: results.csv, medians.csv, summary.md, machine.md,
# cases.tsv (every case run: workload, case, runs, arguments, description),
# timings.tsv (the wall time of every run, which later runs use for their ETA),
# raw.log (every command and its full output), series/*.dat and charts/*.png.
#
# Usage: run.sh [--mode full|quick|smoke] [--workloads "churn floor ..."]
#               [--allocators "glibc ebb ..."] [--runs N] [--floor-runs N]
#               [--callgrind 0|1] [--out DIR]
#   full   the standard set, ~12 minutes on 2 cores (make bench)
#   quick  a reduced set with shorter cases, 3 runs per cell, ~2 minutes (make bench-quick)
#   smoke  every program once with tiny parameters under ebb only, < 30 s; exits
#          non-zero if any program fails or is not served by the allocator asked for
#          (make test)
# Workloads: churn render floor prover growth larson prodcons loop (loop includes the
# callgrind instruction count, larson the cachegrind cache-miss count) bigbuf reqarena heap turns. Allocators: glibc glibc-notrim
# glibc-mmap8m jemalloc jemalloc-bg mimalloc tcmalloc ebb ebb-bg. One that is not
# installed is skipped with a message.
#
# Method: every cell (workload, case, allocator) runs --runs times (default 5; quick
# 3); the outer loop is the repetition, and the allocator order rotates each
# repetition, so slow drift of a noisy machine spreads over all allocators. The floor
# workload samples RSS for 15 s and dominates the wall time, so it runs --floor-runs
# times (default 1; quick 3 of 2 s): RSS after a fixed sequence of frees varies far
# less than timings do. Valgrind's counts (callgrind, cachegrind) are deterministic and
# run once; --callgrind 0 skips both.
#
# Output: a line before the start with the number of runs and the estimated time, a
# progress line per run with the time so far and the ETA (estimated from the runs of
# the same case done so far, else from earlier results folders' timings.tsv, else
# from the case's arguments), and at the end the headline table of summary.md.
# Every label (summary, charts) is made from the arguments, runs and allocators of
# this run (cases.tsv) and the machine it ran on (machine.md).
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$HERE/build
EBB_LIB=$HERE/../build/libebb.so
# The cases counted under valgrind, once each (run_counts): workload -> case.
declare -A COUNTED=([loop]=callgrind [larson]=cachegrind)
is_counted() { [ "${COUNTED[$1]:-}" = "$2" ]; }
# The caches cachegrind simulates for larson/cachegrind, all three fixed so that
# the counts do not depend on the host (nor on valgrind's reading of its cache
# sizes, which some CPUs leave it to guess); only L1d's (size, ways, line) are reported.
CACHEGRIND_D1=32768,8,64
CACHEGRIND_SIM=$(IFS=, read -r d1_bytes d1_ways d1_line <<<"$CACHEGRIND_D1"
  echo "a $((d1_bytes / 1024)) KiB $d1_ways-way L1 data cache, $d1_line B lines")

MODE=full
WORKLOADS="churn render floor prover growth larson prodcons loop bigbuf reqarena heap turns"
ALLOCATORS="glibc glibc-notrim glibc-mmap8m jemalloc jemalloc-bg mimalloc tcmalloc ebb ebb-bg"
RUNS=""
FLOOR_RUNS=""
CALLGRIND=""
OUT=""

die() { echo "run.sh: $*" >&2; exit 2; }

parse_args() {
  while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die "option $1 needs a value"
    case "$1" in
      --mode) MODE=$2 ;;
      --workloads) WORKLOADS=$2 ;;
      --allocators) ALLOCATORS=$2 ;;
      --runs) RUNS=$2 ;;
      --floor-runs) FLOOR_RUNS=$2 ;;
      --callgrind) CALLGRIND=$2 ;;
      --out) OUT=$2 ;;
      *) die "unknown option $1 (see the header of $0)" ;;
    esac
    shift 2
  done
  case "$MODE" in
    full) : "${RUNS:=5}" "${FLOOR_RUNS:=1}" "${CALLGRIND:=1}" ;;
    quick) : "${RUNS:=3}" "${FLOOR_RUNS:=3}" "${CALLGRIND:=1}" ;;
    smoke) : "${RUNS:=1}" "${FLOOR_RUNS:=1}" "${CALLGRIND:=1}" ;;
    *) die "--mode is full, quick or smoke" ;;
  esac
  # Smoke runs under ebb unless told otherwise: it exists to keep the programs working with it.
  [ "$MODE" = smoke ] && [ "$ALLOCATORS_SET" = 0 ] && ALLOCATORS=ebb
  return 0
}

# ------------------------------------------------------------------ allocators

. "$HERE/allocs.sh" # find_lib, alloc_env, select_allocators (ENV_OF)

# Allocator order for repetition $1: rotated by one each time.
rotated() {
  local n=$1 arr i out=""
  read -r -a arr <<<"$ALLOCATORS"
  for ((i = 0; i < ${#arr[@]}; i++)); do out="$out ${arr[(i + n) % ${#arr[@]}]}"; done
  echo "$out"
}

# ------------------------------------------------------------------ workloads

# "case|arguments" lines for workload $1 in the current mode.
cases() {
  case "$MODE:$1" in
    full:churn) printf '%s\n' "gap0|--gap-ms 0 --cycles 200" "gap2|--gap-ms 2 --cycles 100" "gap20|--gap-ms 20 --cycles 20" ;;
    quick:churn) printf '%s\n' "gap0|--gap-ms 0 --cycles 50" "gap20|--gap-ms 20 --cycles 10" ;;
    smoke:churn) printf '%s\n' "gap2|--gap-ms 2 --cycles 3 --warmup 1" ;;
    full:render) echo "tree|--cycles 60" ;;
    quick:render) echo "tree|--cycles 20" ;;
    smoke:render) echo "tree|--cycles 2 --records 20" ;;
    full:floor) printf '%s\n' "idle|--activity 0 --mib 256 --ms 15000" "active|--activity 1 --mib 256 --ms 15000" "alive|--activity 0 --mib 256 --ms 5000 --stay 1" \
                   "alive-own|--activity 0 --mib 256 --ms 5000 --stay 1 --own 1" ;;
    quick:floor) echo "idle|--activity 0 --mib 64 --ms 2000" ;;
    smoke:floor) echo "active|--activity 1 --mib 4 --ms 300" ;;
    full:prover) printf '%s\n' "idle20|--idle-ms 20 --rounds 10" "idle500|--idle-ms 500 --rounds 3" ;;
    quick:prover) echo "idle20|--idle-ms 20 --rounds 4" ;;
    smoke:prover) echo "idle20|--idle-ms 20 --rounds 2 --mib 2" ;;
    full:growth) echo "realloc|--cycles 4" ;;
    quick:growth) echo "realloc|--cycles 3" ;;
    smoke:growth) echo "realloc|--cycles 1 --max-mb 4" ;;
    full:larson) printf '%s\n' "t1|--threads 1 --ms 200" "t2|--threads 2 --ms 200" "t4|--threads 4 --ms 200" \
                   "cachegrind|100000 300000" ;;
    quick:larson) printf '%s\n' "t2|--threads 2 --ms 200" "cachegrind|50000 150000" ;;
    smoke:larson) printf '%s\n' "t2|--threads 2 --ms 50" "cachegrind|2000 4000" ;;
    full:prodcons) printf '%s\n' "p1|--pairs 1 --ms 300" "p2|--pairs 2 --ms 300" ;;
    quick:prodcons) echo "p1|--pairs 1 --ms 200" ;;
    smoke:prodcons) echo "p1|--pairs 1 --ms 30" ;;
    # medium: a heap of 4000 live blocks of 64–224 KiB (about 570 MiB, 150 chunks
    # under ebb) replaced one at a time, each a span of its own: the span search
    # over many chunks, which a walk of chunk headers made grow with the heap.
    # 4000, not 4096 (loop's table of sizes): with 4096 every slot got the same
    # size each time, which a freed span's class took straight back.
    # aligned: the same kind of heap, 64–330 KiB, every block from posix_memalign
    # at 128, 256 or 512 KiB: whether aligned blocks find the holes among the
    # others (vsz_kb, the address space mapped) or map more (ebb searched only
    # its newest 256 chunks for them until session 38: 3.7 GB where glibc maps 1.5).
    full:loop) printf '%s\n' "small|--iters 2000000" "medium|--iters 300000 --slots 4000 --min 65536 --max 229376" \
                 "aligned|--iters 300000 --slots 4000 --min 65536 --max 337920 --aligned 100" \
                 "callgrind|100000 300000" ;;
    quick:loop) printf '%s\n' "small|--iters 3000000" "medium|--iters 100000 --slots 4000 --min 65536 --max 229376" \
                  "aligned|--iters 100000 --slots 4000 --min 65536 --max 337920 --aligned 100" \
                  "callgrind|20000 60000" ;;
    smoke:loop) printf '%s\n' "small|--iters 10000" "callgrind|2000 4000" ;;
    # Big-buffer churn: ops sized so the slowest allocator takes 1–2 s per case (a
    # fault per 4 KiB page costs ~1.4 ms per op at 3 MiB, ~3.5 at 8, 8–16 at 20; glibc
    # default takes 0.1–0.25 ms per op at 1.5 MiB).
    full:bigbuf) printf '%s\n' "1.5M|--size-kb 1536 --ops 8000 --warmup 40" "3M|--size-kb 3072 --ops 1500 --warmup 40" \
                   "8M|--size-kb 8192 --ops 300 --warmup 20" "20M|--size-kb 20480 --ops 80 --warmup 16" ;;
    quick:bigbuf) printf '%s\n' "3M|--size-kb 3072 --ops 300 --warmup 20" "20M|--size-kb 20480 --ops 30 --warmup 12" ;;
    smoke:bigbuf) echo "3M|--size-kb 3072 --ops 20 --warmup 8" ;;
    # Per-request arenas: 300 unmeasured warm-up requests (the program's default) in
    # full and quick mode. Without an arena API the arena cases print a note and no result.
    full:reqarena) printf '%s\n' "malloc|--arena 0 --requests 300" "arena-destroy|--arena 1 --requests 300" \
                     "arena-reset|--arena 2 --requests 300" ;;
    quick:reqarena) printf '%s\n' "malloc|--arena 0 --requests 100" "arena-destroy|--arena 1 --requests 100" \
                      "arena-reset|--arena 2 --requests 100" ;;
    smoke:reqarena) printf '%s\n' "malloc|--arena 0 --requests 5 --warmup 5 --small 300" \
                      "arena-destroy|--arena 1 --requests 5 --warmup 5 --small 300" \
                      "arena-reset|--arena 2 --requests 5 --warmup 5 --small 300" ;;
    # Heap growth: 1 GiB takes ~2.2 s a run (3 cycles) under glibc and ebb. Three, so
    # that the median cycle is a rebuild: the steady state of a service that builds
    # and tears down its structure over and over.
    full:heap) echo "1G|--mib 1024 --cycles 3" ;;
    quick:heap) echo "256M|--mib 256 --cycles 3" ;;
    smoke:heap) echo "8M|--mib 8 --cycles 1" ;;
    # Turns: jobs back to back, and with the pool idle 100 ms after each (each
    # thread's memory then waits 3 jobs, past the default 250 ms decay time).
    full:turns) printf '%s\n' "idle0|--idle-ms 0" "idle100|--idle-ms 100" ;;
    quick:turns) echo "idle100|--idle-ms 100 --jobs 8" ;;
    smoke:turns) echo "idle0|--idle-ms 0 --jobs 3 --threads 2 --mib 2" ;;
    *) die "unknown workload '$1' (churn render floor prover growth larson prodcons loop bigbuf reqarena heap turns)" ;;
  esac
}

case_runs() {
  case "$1:$2" in
    floor:*) echo "$FLOOR_RUNS" ;;
    *) if is_counted "$1" "$2"; then [ "$CALLGRIND" = 1 ] && echo 1 || echo 0; else echo "$RUNS"; fi ;;
  esac
}

# ------------------------------------------------------------------ labels

# P[name] = the value program $1 uses for each of its options with arguments $2:
# the defaults are read from the program's source (its bench_opt calls), so a
# label can never disagree with what the program did.
declare -A P
load_params() {
  local k v
  P=()
  while read -r k v; do P[$k]=$v; done < <(sed -n 's/.*bench_opt(argc, argv, "\([a-z-]*\)", \(-\{0,1\}[0-9]*\)).*/\1 \2/p' "$HERE/$1.c")
  # shellcheck disable=SC2086  # the arguments are meant to split
  set -- $2
  while [ $# -ge 2 ]; do P[${1#--}]=$2; shift 2; done
}

fmt_ms() { # 2000 -> "2 s", 1500 -> "1.5 s", 20 -> "20 ms"
  if [ "$1" -ge 1000 ] && [ $(($1 % 1000)) = 0 ]; then echo "$(($1 / 1000)) s"
  elif [ "$1" -ge 1000 ]; then awk -v m="$1" 'BEGIN { printf "%.1f s", m / 1000 }'
  else echo "$1 ms"; fi
}
pl() { [ "$1" = 1 ] && echo "$1 $2" || echo "$1 ${2}s"; } # 1 cycle, 2 cycles
fmt_kib() { # 3072 -> "3 MiB", 1536 -> "1.5 MiB", 450 -> "450 KiB"
  if [ "$1" -ge 1024 ]; then awk -v k="$1" 'BEGIN { printf "%g MiB", k / 1024 }'; else echo "$1 KiB"; fi
}

# One line saying what workload $1 case $2 does with arguments $3, every number
# taken from those arguments (or the program's defaults).
case_label() {
  local wl=$1 cs=$2 args=$3
  if [ "$wl:$cs" = loop:callgrind ]; then
    # shellcheck disable=SC2086
    set -- $args
    echo "instructions per malloc/free pair: callgrind counts of loop with $1 and $2 pairs, (Ir($2) − Ir($1)) / $(($2 - $1))"
    return
  fi
  if [ "$wl:$cs" = larson:cachegrind ]; then
    load_params larson ""
    # shellcheck disable=SC2086
    set -- $args
    echo "instructions and L1 data-cache misses (reads, writes) per malloc/free pair of larson, 1 thread, ${P[slots]} slots of ${P[min]}–${P[max]} B: cachegrind ($CACHEGRIND_SIM) counts with $1 and $2 pairs, (n($2) − n($1)) / $(($2 - $1))"
    return
  fi
  load_params "$wl" "$args"
  case $wl in
    churn) echo "${P[gap-ms]} ms between requests, $(pl "${P[cycles]}" request) measured after ${P[warmup]} warm-up; each a ${P[ctx-kb]} KiB context + ${P[small]} blocks of 16–512 B + ${P[medium]} of 4–64 KiB" ;;
    render) echo "a tree of ${P[records]} records × ${P[fields]} fields built, serialised and freed; $(pl "${P[cycles]}" cycle) measured after ${P[warmup]} warm-up" ;;
    floor) echo "2 threads build $(fmt_kib "$((P[mib] * 1024))") of 16–256 B objects, keep 1 in ${P[keep-every]}, free the rest $([ "${P[own]:-0}" = 1 ] && echo "each its own" || echo cross-thread) and $([ "${P[stay]}" = 1 ] && echo "stay alive, blocked" || echo exit); RSS every ${P[interval-ms]} ms for $(fmt_ms "${P[ms]}")$([ "${P[activity]}" = 0 ] && echo ", idle" || echo ", with 16 malloc/free of 16–1024 B every 10 ms")" ;;
    prover) echo "$(pl "${P[threads]}" thread) × ${P[mib]} MiB of 64 B–1 MiB scratch per round, $(pl "${P[rounds]}" round), $(fmt_ms "${P[idle-ms]}") idle after each" ;;
    growth) echo "a buffer grown by realloc 1.5× at a time from $(fmt_kib "${P[start-kb]}") to ${P[max-mb]} MiB, then freed; $(pl "${P[cycles]}" cycle) measured after ${P[warmup]} warm-up" ;;
    larson) echo "$(pl "${P[threads]}" thread), ${P[slots]} shared slots each, blocks of ${P[min]}–${P[max]} B, $(fmt_ms "${P[ms]}")" ;;
    prodcons) echo "$(pl "${P[pairs]}" "producer/consumer pair"), messages of ${P[min]}–${P[max]} B through rings of ${P[ring]}, every free by the other thread, $(fmt_ms "${P[ms]}")" ;;
    loop) if [ "${P[min]}" -gt 0 ]; then
            echo "${P[iters]} malloc/free pairs of $(fmt_kib $((P[min] / 1024)))–$(fmt_kib $((P[max] / 1024))) (uniform) in a window of ${P[slots]} slots$([ "${P[aligned]}" -gt 0 ] && echo ", ${P[aligned]} % of them posix_memalign at 128, 256 or 512 KiB")"
          else
            echo "${P[iters]} malloc/free pairs of 8–512 B in a window of ${P[slots]} slots"
          fi ;;
    bigbuf) echo "4 slots; each op frees one and mallocs $(fmt_kib "${P[size-kb]}") + 0–${P[extra-kb]} KiB, a write per page; $(pl "${P[ops]}" op) measured after ${P[warmup]} warm-up" ;;
    reqarena)
      case ${P[arena]} in
        0) printf 'malloc and free every block' ;;
        1) printf 'an arena per request, destroyed after it' ;;
        *) printf 'one arena, reset after each request' ;;
      esac
      echo "; $(pl "${P[requests]}" request) measured after ${P[warmup]} warm-up, each a ${P[ctx-kb]} KiB context + ${P[small]} blocks of 16–512 B" ;;
    heap) echo "blocks of ${P[min]}–${P[max]} B malloc'ed, first and last byte written, until $(fmt_kib "$((P[mib] * 1024))") is requested, then freed in allocation order; $(pl "${P[cycles]}" cycle)" ;;
    turns) echo "$(pl "${P[threads]}" thread) take turns at jobs: each builds $(fmt_kib "$((P[mib] * 1024))") of 16–1016 B blocks, written, and frees them; $(pl "${P[jobs]}" job), the first ${P[threads]} warm-up, $(fmt_ms "${P[idle-ms]}") idle after each" ;;
    *) echo "$args" ;;
  esac
}

# A first guess of the milliseconds one run of workload $1 case $2 (arguments $3)
# takes, from its arguments, for the ETA until a run of it (or an earlier results
# folder) says better.
guess_ms() {
  [ "$1:$2" = loop:callgrind ] && { echo 6000; return; }
  [ "$1:$2" = larson:cachegrind ] && { echo 3000; return; }
  load_params "$1" "$3"
  local t=${P[ms]:-0} gap=${P[gap-ms]:-0} cycles=${P[cycles]:-0} idle=${P[idle-ms]:-0} rounds=${P[rounds]:-0}
  case $1 in
    floor) echo $((t + 300)) ;;
    larson | prodcons) echo $((t + 100)) ;;
    churn) echo $((gap * cycles + 300)) ;;
    prover) echo $((idle * rounds + 300)) ;;
    heap) echo $((P[mib] * cycles * 3 / 4 + 100)) ;;
    turns) echo $(((P[idle-ms] + P[mib]) * P[jobs] + 100)) ;;
    *) echo 500 ;;
  esac
}

# ------------------------------------------------------------------ the plan and its ETA

# The cases of this run, in order: C_WL[i], C_CS[i], C_ARGS[i], C_RUNS[i] (cases with 0
# runs, the callgrind pair when it is off, are left out), and for the ETA the runs
# of each done so far, their milliseconds in all, and a guess for those not yet seen.
C_WL=() C_CS=() C_ARGS=() C_RUNS=() C_DONE=() C_MS=() C_GUESS=()
NTOTAL=0
GUESS_FROM=""

plan() {
  local wl lines line cs n i
  for wl in $WORKLOADS; do
    lines=$(cases "$wl") || exit 2
    while IFS= read -r line; do
      cs=${line%%|*}
      n=$(case_runs "$wl" "$cs")
      [ "$n" -gt 0 ] || continue
      i=${#C_WL[@]}
      C_WL[i]=$wl C_CS[i]=$cs C_ARGS[i]=${line#*|} C_RUNS[i]=$n C_DONE[i]=0 C_MS[i]=0
      NTOTAL=$((NTOTAL + n * NALLOC))
    done <<<"$lines"
  done
  guess_times
}

# C_GUESS[i]: the mean time of the same program with the same arguments in the
# newest earlier results folders (their timings.tsv), else guess_ms.
guess_times() {
  local i key ms hist=() d dirs=("$HERE"/results/*/)
  declare -A seen=()
  for ((i = ${#dirs[@]} - 1; i >= 0; i--)); do
    d=${dirs[i]%/}
    [ "$(basename "$d")" = latest ] && continue
    [ -s "$d/timings.tsv" ] && [ "$(cd "$d" && pwd -P)" != "$(cd "$OUT" && pwd -P)" ] && hist+=("$d/timings.tsv")
    [ ${#hist[@]} -ge 5 ] && break
  done
  if [ ${#hist[@]} -gt 0 ]; then
    while IFS=$'\t' read -r key ms; do seen[$key]=$ms; done < <(
      awk -F'\t' 'FNR > 1 { k = $1 "|" $3; s[k] += $5; n[k]++ } END { for (k in s) printf "%s\t%d\n", k, s[k] / n[k] }' "${hist[@]}")
  fi
  local known=0
  for i in "${!C_WL[@]}"; do
    key="${C_WL[i]}|${C_ARGS[i]}"
    if [ -n "${seen[$key]:-}" ]; then C_GUESS[i]=${seen[$key]}; known=$((known + 1))
    else C_GUESS[i]=$(guess_ms "${C_WL[i]}" "${C_CS[i]}" "${C_ARGS[i]}"); fi
  done
  if [ "$known" = "${#C_WL[@]}" ]; then GUESS_FROM="from the timings of earlier runs of these cases"
  elif [ "$known" -gt 0 ]; then GUESS_FROM="$known of ${#C_WL[@]} cases from earlier runs' timings, the others guessed from their arguments"
  else GUESS_FROM="guessed from the cases' arguments: no earlier run of them to learn from"; fi
}

# Milliseconds left: for each case, the runs left times the mean of its runs so far
# (or its guess).
eta_ms() {
  local i left per total=0
  for i in "${!C_WL[@]}"; do
    left=$((C_RUNS[i] * NALLOC - C_DONE[i]))
    [ "$left" -gt 0 ] || continue
    if [ "${C_DONE[i]}" -gt 0 ]; then per=$((C_MS[i] / C_DONE[i])); else per=${C_GUESS[i]}; fi
    total=$((total + left * per))
  done
  echo "$total"
}

fmt_eta() { # milliseconds -> "7 min", "40 s"
  local s=$((($1 + 999) / 1000))
  if [ "$s" -ge 90 ]; then echo "$(((s + 30) / 60)) min"; else echo "$s s"; fi
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# ------------------------------------------------------------------ running

T_START=$(date +%s)
NDONE=0
FAILED=0

progress() {
  local el=$(($(date +%s) - T_START))
  printf '[%3d/%d %2d:%02d, ETA %s] %s\n' "$NDONE" "$NTOTAL" $((el / 60)) $((el % 60)) "$(fmt_eta "$(eta_ms)")" "$*" |
    tee -a "$OUT/progress.log"
}

# Counts a finished run of case $1 that started at $2 (ms) under allocator $3.
done_run() {
  local i=$1 ms=$(($(now_ms) - $2))
  NDONE=$((NDONE + 1))
  C_DONE[i]=$((C_DONE[i] + 1)) C_MS[i]=$((C_MS[i] + ms))
  printf '%s\t%s\t%s\t%s\t%d\n' "${C_WL[i]}" "${C_CS[i]}" "${C_ARGS[i]}" "$3" "$ms" >>"$OUT/timings.tsv"
}

# Turns one program's output ($5) into CSV rows and series files, and checks that
# the allocator asked for served it. Prints the served name.
collect() {
  local wl=$1 cs=$2 alloc=$3 rep=$4 outf=$5
  awk -v wl="$wl" -v cs="$cs" -v alloc="$alloc" -v rep="$rep" -v series="$OUT/series/$wl-$cs-$alloc-r$rep.dat" \
    -v csv="$OUT/results.csv" '
    /^bench=/ { for (i = 1; i <= NF; i++) if ($i ~ /^served=/) served = substr($i, 8) }
    /^result / { for (i = 2; i <= NF; i++) { split($i, kv, "="); rows[++n] = kv[1] "," kv[2] } }
    /^series / { split($2, t, "="); split($3, r, "="); print t[2] / 1000, r[2] / 1024 > series }
    END {
      for (i = 1; i <= n; i++) print wl "," cs "," alloc "," rep "," served "," rows[i] >> csv
      print served
    }' "$outf"
}

# The family an allocator name belongs to, which is what /proc/self/maps can tell.
family() { echo "${1%%-*}"; }

# Runs case $1 under allocator $2, repetition $3.
run_one() {
  local i=$1 alloc=$2 rep=$3 wl=${C_WL[$1]} cs=${C_CS[$1]} args=${C_ARGS[$1]} tmp t0 rc served summary
  tmp=$OUT/.out
  t0=$(now_ms)
  # shellcheck disable=SC2046,SC2086  # the env words and the arguments are meant to split
  env "${CLEAN_ENV[@]}" ${ENV_OF[$alloc]} \
    timeout -s KILL 300 "$BIN/$wl" $args >"$tmp" 2>"$tmp.err"
  rc=$?
  { echo "### $wl/$cs $alloc rep $rep rc=$rc"; cat "$tmp" "$tmp.err"; } >>"$OUT/raw.log"
  served=$(collect "$wl" "$cs" "$alloc" "$rep" "$tmp")
  # The first result line, or else the program's note (a case it skipped).
  summary=$(awk '/^result / { s = $2; for (i = 3; i <= NF && length(s) + length($i) < 100; i++) s = s " " $i; print s; r = 1; exit }
                 /^note: skipped/ && n == "" { n = $0 }
                 END { if (!r && n != "") print n }' "$tmp")
  done_run "$i" "$t0" "$alloc"
  progress "$wl/$cs $alloc #$rep $summary ($(awk -v ms=$(($(now_ms) - t0)) 'BEGIN { printf "%.1f s", ms / 1000 }'))"
  check_run "$wl/$cs $alloc" "$rc" "$served" "$alloc" "$tmp.err"
}

# Counts a failed run (crash, timeout, wrong allocator) and says what happened.
check_run() {
  local what=$1 rc=$2 served=$3 alloc=$4 err=$5
  if [ "$rc" != 0 ]; then
    FAILED=$((FAILED + 1))
    echo "run.sh: FAILED: $what exited with status $rc; stderr:" >&2
    tail -n 5 "$err" >&2
  elif [ "$served" != "$(family "$alloc")" ]; then
    FAILED=$((FAILED + 1))
    echo "run.sh: FAILED: $what was served by '$served', not $(family "$alloc")" >&2
  fi
}

# Valgrind's counts per malloc/free pair (case $1, allocator $2), each the
# difference between two runs with N1 and N2 pairs (the case's arguments), so
# start-up and tear-down cancel out: loop/callgrind counts instructions,
# larson/cachegrind instructions and L1 data-cache read and write misses of larson
# with one thread (cachegrind simulates one cache, so only a single thread means
# anything), in the fixed simulated caches above.
run_counts() {
  local i=$1 alloc=$2 wl=${C_WL[$1]} cs=${C_CS[$1]} n1 n2 served rc=0 n t0 out1="" out2="" m per
  local tool=(--tool=callgrind --callgrind-out-file=/dev/null) prog=("$BIN/loop" --iters)
  if [ "$cs" = cachegrind ]; then
    # shellcheck disable=SC2054  # the commas are valgrind's, inside one argument
    tool=(--tool=cachegrind --cache-sim=yes --D1="$CACHEGRIND_D1" --I1=32768,8,64 --LL=8388608,16,64
          --cachegrind-out-file=/dev/null)
    prog=("$BIN/larson" --threads 1 --pairs)
  fi
  read -r n1 n2 <<<"${C_ARGS[i]}"
  t0=$(now_ms)
  for n in "$n1" "$n2"; do
    # shellcheck disable=SC2086  # the env words are meant to split
    env "${CLEAN_ENV[@]}" ${ENV_OF[$alloc]} \
      timeout -s KILL 300 valgrind "${tool[@]}" "${prog[@]}" "$n" >"$OUT/.out" 2>"$OUT/.out.err" || rc=$?
    { echo "### $wl/$cs $alloc pairs $n rc=$rc"; cat "$OUT/.out" "$OUT/.out.err"; } >>"$OUT/raw.log"
    # "ir_per_pair=<count>" and so on, one word per metric (commas out of the numbers)
    # (callgrind prints its count twice, as "Collected :" and "I refs:")
    m=$(awk '/I +refs:/ { gsub(/,/, "", $NF); ir = $NF }
             /D1 +misses:/ { gsub(/[,()]/, ""); for (k = 1; k <= NF; k++) { if ($k == "rd") r = $(k - 1); if ($k == "wr") w = $(k - 1) } }
             END { if (ir != "") printf "ir_per_pair=%s ", ir
                   if (r != "") printf "d1_read_misses_per_pair=%s d1_write_misses_per_pair=%s ", r, w }' "$OUT/.out.err")
    if [ "$n" = "$n1" ]; then out1=$m; else out2=$m; fi
  done
  done_run "$i" "$t0" "$alloc"
  served=$(awk '/^bench=/ { for (i = 1; i <= NF; i++) if ($i ~ /^served=/) print substr($i, 8) }' "$OUT/.out")
  per=$(awk -v a="$out1" -v b="$out2" -v n1="$n1" -v n2="$n2" 'BEGIN {
          na = split(a, x, " "); nb = split(b, y, " ")
          if (na == 0 || na != nb) exit
          for (k = 1; k <= na; k++) { split(x[k], p, "="); split(y[k], q, "=")
            printf "%s=%.*f ", p[1], (p[1] == "ir_per_pair" ? 1 : 3), (q[2] - p[2]) / (n2 - n1) } }')
  if [ "$rc" = 0 ] && [ -n "$per" ]; then
    for m in $per; do echo "$wl,$cs,$alloc,1,$served,${m%%=*},${m#*=}" >>"$OUT/results.csv"; done
    progress "$wl/$cs $alloc ${per% }"
  else
    [ "$rc" = 0 ] && rc=1
    progress "$wl/$cs $alloc failed"
  fi
  check_run "$wl/$cs $alloc" "$rc" "$served" "$alloc" "$OUT/.out.err"
}

run_all() {
  local rep i alloc maxruns=0
  for i in "${!C_WL[@]}"; do [ "${C_RUNS[i]}" -gt "$maxruns" ] && maxruns=${C_RUNS[i]}; done
  for ((rep = 1; rep <= maxruns; rep++)); do
    for i in "${!C_WL[@]}"; do
      [ "$rep" -le "${C_RUNS[i]}" ] || continue
      for alloc in $(rotated $((rep - 1))); do
        if is_counted "${C_WL[i]}" "${C_CS[i]}"; then run_counts "$i" "$alloc"
        else run_one "$i" "$alloc" "$rep"; fi
      done
    done
  done
}

# ------------------------------------------------------------------ machine and output

pkg_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "not installed"; }

# The machine, and the version of each allocator family this run used.
describe_machine() {
  local cpu fams=" "
  for a in $ALLOCATORS; do fams="$fams$(family "$a") "; done
  cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  cat <<EOT
| | |
|---|---|
| CPU | ${cpu:-unknown} |
| cores | $(nproc) online, $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) memory |
| load | $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min averages at the start) |
| kernel | $(uname -sr) |
| glibc | $(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2) (libc6 $(pkg_version libc6)) |
EOT
  case $fams in *" jemalloc "*) echo "| jemalloc | libjemalloc2 $(pkg_version libjemalloc2) |" ;; esac
  case $fams in *" mimalloc "*) echo "| mimalloc | libmimalloc2.0 $(pkg_version libmimalloc2.0) |" ;; esac
  case $fams in *" tcmalloc "*) echo "| tcmalloc | libtcmalloc-minimal4 $(pkg_version libtcmalloc-minimal4) |" ;; esac
  case $fams in *" ebb "*) echo "| ebb | $(git -C "$HERE/.." describe --always --dirty 2>/dev/null || echo "no commit yet") (build/libebb.so $( [ -e "$EBB_LIB" ] && date -r "$EBB_LIB" '+%Y-%m-%d %H:%M' || echo missing)) |" ;; esac
  echo "| compiler | $(${CC:-cc} --version | head -n1) |"
}

# The cases of this run, what summary.awk and charts.sh label their tables and charts with.
write_cases() {
  local i
  printf 'workload\tcase\truns\targs\tlabel\n'
  for i in "${!C_WL[@]}"; do
    printf '%s\t%s\t%s\t%s\t%s\n' "${C_WL[i]}" "${C_CS[i]}" "${C_RUNS[i]}" "${C_ARGS[i]}" \
      "$(case_label "${C_WL[i]}" "${C_CS[i]}" "${C_ARGS[i]}")"
  done
}

# The headline section of summary.md, as an aligned plain-text table.
print_headline() {
  # LC_ALL=C: gawk in a UTF-8 locale rejects the byte range below (Invalid
  # collation character) and printed no table; in C every awk counts bytes.
  awk '/^## Headline/ { p = 1; next } p && /^## / { exit } p' "$OUT/summary.md" | LC_ALL=C awk '
    # Display width: UTF-8 continuation bytes take no column (awk counts bytes here).
    function width(s) { gsub(/[\200-\277]/, "", s); return length(s) }
    /^\|/ {
      if ($0 ~ /^\|---/) { sep = NR; next }
      n = split($0, f, "|"); rows++
      for (i = 2; i < n; i++) {
        c = f[i]; gsub(/^ +| +$/, "", c)
        # The best of a row (bold in markdown) gets a star; the other numbers a space
        # in its place, so the digits stay aligned.
        if (c ~ /^\*\*.*\*\*$/) { c = substr(c, 3, length(c) - 4) "*"; star = 1 }
        else if (i > 3) c = c " "
        cell[rows, i] = c; if (width(c) > w[i]) w[i] = width(c)
      }
      nf = n - 1; next
    }
    END {
      for (r = 1; r <= rows; r++) {
        s = ""
        for (i = 2; i <= nf; i++) {
          c = cell[r, i]; pad = w[i] - width(c)
          # Text columns (the first two) to the left, numbers to the right.
          if (i <= 3) s = s c sprintf("%" pad "s", "") "  "
          else s = s sprintf("%" pad "s", "") c "  "
        }
        sub(/ +$/, "", s); print s
        if (r == 1) {
          s = ""
          for (i = 2; i <= nf; i++) { d = sprintf("%" w[i] "s", ""); gsub(/ /, "-", d); s = s d "  " }
          sub(/ +$/, "", s); print s
        }
      }
      if (star) print "(* the best of the row; medians)"
    }'
}

finish() {
  local el=$(($(date +%s) - T_START))
  write_cases >"$OUT/cases.tsv"
  awk -f "$HERE/stats.awk" "$OUT/results.csv" >"$OUT/medians.csv"
  awk -f "$HERE/summary.awk" -v allocs="$ALLOCATORS" -v mode="$MODE" \
    -v wall="$((el / 60)) min $((el % 60)) s" -v machine="$OUT/machine.md" -v cases="$OUT/cases.tsv" \
    -v cmd="$CMDLINE" "$OUT/medians.csv" >"$OUT/summary.md"
  if command -v gnuplot >/dev/null 2>&1; then
    "$HERE/charts.sh" "$OUT" "$ALLOCATORS" || { echo "run.sh: charts failed" >&2; FAILED=$((FAILED + 1)); }
  else
    echo "run.sh: gnuplot not found, no charts (make bench installs gnuplot-nox)" >&2
  fi
  rm -f "$OUT/.out" "$OUT/.out.err"
  if [ "$MODE" != smoke ]; then
    echo
    sed -n 's/  $//; /^Runs per cell:/p' "$OUT/summary.md"
    print_headline
    echo
  fi
  echo "run.sh: $NDONE runs in $((el / 60)) min $((el % 60)) s, $FAILED failed; results in $OUT (summary.md, charts/)"
  [ "$FAILED" = 0 ]
}

main() {
  local a
  CMDLINE=$0
  for a in "$@"; do case $a in *[[:space:]]*|"") CMDLINE="$CMDLINE \"$a\"" ;; *) CMDLINE="$CMDLINE $a" ;; esac; done
  ALLOCATORS_SET=0
  case " $* " in *" --allocators "*) ALLOCATORS_SET=1 ;; esac
  parse_args "$@"
  for wl in $WORKLOADS; do [ -x "$BIN/$wl" ] || die "$BIN/$wl is missing: run make -C $HERE first"; done
  if [ "$MODE" = smoke ] && [ ! -e "$EBB_LIB" ] && [ "$ALLOCATORS_SET" = 0 ]; then
    die "smoke runs under $EBB_LIB, which is missing (make all builds it)"
  fi
  select_allocators run.sh
  NALLOC=$(echo "$ALLOCATORS" | wc -w)
  if [ "$CALLGRIND" = 1 ] && ! command -v valgrind >/dev/null 2>&1; then
    echo "run.sh: valgrind not found, skipping the callgrind and cachegrind counts" >&2
    CALLGRIND=0
  fi
  local link=""
  if [ -z "$OUT" ]; then
    if [ "$MODE" = smoke ]; then OUT=$BIN/smoke-results; rm -rf "$OUT"
    else OUT=$HERE/results/$(date +%Y%m%d-%H%M%S) link=$HERE/results/latest; fi
  fi
  mkdir -p "$OUT/series" || die "cannot create $OUT"
  echo "workload,case,allocator,rep,served,metric,value" >"$OUT/results.csv"
  printf 'workload\tcase\targs\tallocator\tms\n' >"$OUT/timings.tsv"
  describe_machine >"$OUT/machine.md"
  plan
  local runs="$RUNS runs per cell"
  [ "$FLOOR_RUNS" != "$RUNS" ] && case " $WORKLOADS " in *" floor "*) runs="$runs (floor $FLOOR_RUNS)" ;; esac
  local wl counted=""
  for wl in $WORKLOADS; do [ -n "${COUNTED[$wl]:-}" ] && counted=1; done
  echo "run.sh: $MODE: $NTOTAL runs: ${#C_WL[@]} cases × $NALLOC allocators, $runs$(
    [ -n "$counted" ] && { [ "$CALLGRIND" = 1 ] && echo ", valgrind counts once" || echo ", valgrind counts off"; })"
  echo "run.sh: workloads: $WORKLOADS; allocators: $ALLOCATORS"
  echo "run.sh: estimated time $(fmt_eta "$(eta_ms)"), $GUESS_FROM; results in $OUT"
  run_all
  [ -n "$link" ] && ln -sfn "$(basename "$OUT")" "$link"
  finish || exit 1
}

main "$@"
