#!/usr/bin/env bash
# run.sh — runs the bench programs under each allocator (LD_PRELOAD), interleaved,
# and writes results/<timestamp>/: results.csv, medians.csv, summary.md, machine.md,
# raw.log (every command and its full output), series/*.dat and charts/*.png.
#
# Usage: run.sh [--mode full|quick|smoke] [--workloads "churn floor ..."]
#               [--allocators "glibc ebb ..."] [--runs N] [--floor-runs N]
#               [--callgrind 0|1] [--out DIR]
#   full   the standard set, ~12 minutes on 2 cores (make bench)
#   quick  a reduced set, ~1.5 minutes (make bench-quick)
#   smoke  every program once with tiny parameters under ebb only, < 30 s; exits
#          non-zero if any program fails or is not served by the allocator asked for
#          (make test)
# Workloads: churn render floor prover growth larson loop (loop includes the
# callgrind instruction count) bigbuf reqarena vecgrow. Allocators: glibc glibc-notrim
# glibc-mmap8m jemalloc jemalloc-bg mimalloc tcmalloc ebb ebb-bg. One that is not
# installed is skipped with a message.
#
# Method: every cell (workload, case, allocator) runs --runs times (default 5); the
# outer loop is the repetition, and the allocator order rotates each repetition, so
# slow drift of a noisy machine spreads over all allocators. The floor workload
# samples RSS for 15 s and dominates the wall time, so it runs --floor-runs times
# (default 1): RSS after a fixed sequence of frees varies far less than timings do.
# Callgrind counts are deterministic and run once.
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$HERE/build
EBB_LIB=$HERE/../build/libebb.so

MODE=full
WORKLOADS="churn render floor prover growth larson loop bigbuf reqarena vecgrow"
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
    quick) : "${RUNS:=1}" "${FLOOR_RUNS:=1}" "${CALLGRIND:=0}" ;;
    smoke) : "${RUNS:=1}" "${FLOOR_RUNS:=1}" "${CALLGRIND:=1}" ;;
    *) die "--mode is full, quick or smoke" ;;
  esac
  # Smoke runs under ebb unless told otherwise: it exists to keep the programs working with it.
  [ "$MODE" = smoke ] && [ "$ALLOCATORS_SET" = 0 ] && ALLOCATORS=ebb
  return 0
}

# ------------------------------------------------------------------ allocators

# Path of a shared library known to the dynamic linker, or empty.
find_lib() {
  local path
  path=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n { print $NF; exit }')
  [ -z "$path" ] && for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib; do
    [ -e "$d/$1" ] && { path=$d/$1; break; }
  done
  echo "$path"
}

# The environment (VAR=value words) that makes a process use allocator $1.
# The two tuned glibc settings are the usual embedder fixes: never trim the heap
# top and keep 64 MiB of pad, or keep 16 MiB of pad and serve up to 8 MiB from the heap.
alloc_env() {
  local lib=""
  case "$1" in
    glibc) echo "" ;;
    glibc-notrim) echo "GLIBC_TUNABLES=glibc.malloc.trim_threshold=18446744073709551615:glibc.malloc.top_pad=67108864" ;;
    glibc-mmap8m) echo "GLIBC_TUNABLES=glibc.malloc.top_pad=16777216:glibc.malloc.mmap_threshold=8388608" ;;
    jemalloc | jemalloc-bg) lib=$(find_lib libjemalloc.so.2) ;;
    mimalloc) lib=$(find_lib libmimalloc.so.2) ;;
    tcmalloc) lib=$(find_lib libtcmalloc_minimal.so.4) ;;
    ebb | ebb-bg) [ -e "$EBB_LIB" ] && lib=$(cd "$(dirname "$EBB_LIB")" && pwd)/libebb.so ;;
    *) echo "?"; return ;;
  esac
  case "$1" in glibc*) return ;; esac
  [ -z "$lib" ] && { echo "-"; return; }
  case "$1" in
    jemalloc-bg) echo "LD_PRELOAD=$lib MALLOC_CONF=background_thread:true" ;;
    ebb-bg) echo "LD_PRELOAD=$lib EBB_BACKGROUND=1" ;;
    *) echo "LD_PRELOAD=$lib" ;;
  esac
}

# Keeps the allocators that exist; says why for the others.
select_allocators() {
  local a env kept=""
  for a in $ALLOCATORS; do
    env=$(alloc_env "$a")
    case "$env" in
      "?") die "unknown allocator '$a'" ;;
      "-") echo "run.sh: skipping $a: its library is not installed (make bench installs it; for ebb: make all)" >&2 ;;
      *) kept="$kept $a" ;;
    esac
  done
  ALLOCATORS=${kept# }
  [ -n "$ALLOCATORS" ] || die "no allocator left to run"
}

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
    full:floor) printf '%s\n' "idle|--activity 0 --mib 256 --ms 15000" "active|--activity 1 --mib 256 --ms 15000" ;;
    quick:floor) echo "idle|--activity 0 --mib 64 --ms 3000" ;;
    smoke:floor) echo "active|--activity 1 --mib 4 --ms 300" ;;
    full:prover) printf '%s\n' "idle20|--idle-ms 20 --rounds 10" "idle500|--idle-ms 500 --rounds 3" ;;
    quick:prover) echo "idle20|--idle-ms 20 --rounds 4" ;;
    smoke:prover) echo "idle20|--idle-ms 20 --rounds 2 --mib 2" ;;
    full:growth) echo "realloc|--cycles 4" ;;
    quick:growth) echo "realloc|--cycles 3" ;;
    smoke:growth) echo "realloc|--cycles 1 --max-mb 4" ;;
    full:larson) printf '%s\n' "t1|--threads 1 --ms 200" "t2|--threads 2 --ms 200" "t4|--threads 4 --ms 200" ;;
    quick:larson) echo "t2|--threads 2 --ms 200" ;;
    smoke:larson) echo "t2|--threads 2 --ms 50" ;;
    full:loop) printf '%s\n' "small|--iters 2000000" "callgrind|100000 300000" ;;
    quick:loop) printf '%s\n' "small|--iters 1000000" "callgrind|50000 150000" ;;
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
    full:vecgrow) echo "realloc|--cycles 8" ;;
    quick:vecgrow) echo "realloc|--cycles 3" ;;
    smoke:vecgrow) echo "realloc|--cycles 2 --max-mb 4" ;;
    *) die "unknown workload '$1' (churn render floor prover growth larson loop bigbuf reqarena vecgrow)" ;;
  esac
}

case_runs() {
  case "$1:$2" in
    floor:*) echo "$FLOOR_RUNS" ;;
    loop:callgrind) [ "$CALLGRIND" = 1 ] && echo 1 || echo 0 ;;
    *) echo "$RUNS" ;;
  esac
}

# ------------------------------------------------------------------ running

T_START=$(date +%s)
NDONE=0
NTOTAL=0
FAILED=0

progress() {
  local el=$(($(date +%s) - T_START))
  printf '[%3d/%d %2d:%02d] %s\n' "$NDONE" "$NTOTAL" $((el / 60)) $((el % 60)) "$*" | tee -a "$OUT/progress.log"
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

# Runs workload $1 case $2 (arguments $3) under allocator $4, repetition $5.
run_one() {
  local wl=$1 cs=$2 args=$3 alloc=$4 rep=$5 tmp t0 rc served summary
  tmp=$OUT/.out
  t0=$(date +%s.%N)
  # shellcheck disable=SC2046,SC2086  # the env words and the arguments are meant to split
  env -u LD_PRELOAD -u GLIBC_TUNABLES -u MALLOC_CONF -u EBB_BACKGROUND $(alloc_env "$alloc") \
    timeout -s KILL 300 "$BIN/$wl" $args >"$tmp" 2>"$tmp.err"
  rc=$?
  NDONE=$((NDONE + 1))
  { echo "### $wl/$cs $alloc rep $rep rc=$rc"; cat "$tmp" "$tmp.err"; } >>"$OUT/raw.log"
  served=$(collect "$wl" "$cs" "$alloc" "$rep" "$tmp")
  # The first result line, or else the program's note (a case it skipped).
  summary=$(awk '/^result / { s = $2; for (i = 3; i <= NF && length(s) + length($i) < 100; i++) s = s " " $i; print s; r = 1; exit }
                 /^note: skipped/ && n == "" { n = $0 }
                 END { if (!r && n != "") print n }' "$tmp")
  progress "$wl/$cs $alloc #$rep $summary ($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }'))"
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

# Instructions per malloc/free pair of loop under callgrind: the difference between
# two iteration counts ($3, $4), so start-up and tear-down cancel out.
run_callgrind() {
  local alloc=$1 n1=$2 n2=$3 ir1="" ir2="" ir served rc=0 n
  for n in "$n1" "$n2"; do
    # shellcheck disable=SC2046  # the env words are meant to split
    env -u LD_PRELOAD -u GLIBC_TUNABLES -u MALLOC_CONF -u EBB_BACKGROUND $(alloc_env "$alloc") \
      timeout -s KILL 300 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$BIN/loop" --iters "$n" \
      >"$OUT/.out" 2>"$OUT/.out.err" || rc=$?
    { echo "### loop/callgrind $alloc iters $n rc=$rc"; cat "$OUT/.out" "$OUT/.out.err"; } >>"$OUT/raw.log"
    ir=$(awk '/Collected :/ { print $NF }' "$OUT/.out.err")
    if [ "$n" = "$n1" ]; then ir1=$ir; else ir2=$ir; fi
  done
  NDONE=$((NDONE + 1))
  served=$(awk '/^bench=/ { for (i = 1; i <= NF; i++) if ($i ~ /^served=/) print substr($i, 8) }' "$OUT/.out")
  if [ "$rc" = 0 ] && [ -n "$ir1" ] && [ -n "$ir2" ]; then
    local per
    per=$(awk -v a="$ir1" -v b="$ir2" -v n1="$n1" -v n2="$n2" 'BEGIN { printf "%.1f", (b - a) / (n2 - n1) }')
    echo "loop,callgrind,$alloc,1,$served,ir_per_pair,$per" >>"$OUT/results.csv"
    progress "loop/callgrind $alloc ir_per_pair=$per"
  else
    [ "$rc" = 0 ] && rc=1
    progress "loop/callgrind $alloc failed"
  fi
  check_run "loop/callgrind $alloc" "$rc" "$served" "$alloc" "$OUT/.out.err"
}

count_runs() {
  local wl line
  for wl in $WORKLOADS; do
    while IFS= read -r line; do
      NTOTAL=$((NTOTAL + $(case_runs "$wl" "${line%%|*}") * $(echo "$ALLOCATORS" | wc -w)))
    done < <(cases "$wl")
  done
}

run_all() {
  local rep wl line cs args alloc
  for ((rep = 1; rep <= RUNS || rep <= FLOOR_RUNS; rep++)); do
    for wl in $WORKLOADS; do
      while IFS= read -r line; do
        cs=${line%%|*} args=${line#*|}
        [ "$rep" -le "$(case_runs "$wl" "$cs")" ] || continue
        for alloc in $(rotated $((rep - 1))); do
          # shellcheck disable=SC2086  # "N1 N2"
          if [ "$cs" = callgrind ]; then run_callgrind "$alloc" $args
          else run_one "$wl" "$cs" "$args" "$alloc" "$rep"; fi
        done
      done < <(cases "$wl")
    done
  done
}

# ------------------------------------------------------------------ machine and output

pkg_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "not installed"; }

describe_machine() {
  local cpu
  cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  cat <<EOF
| | |
|---|---|
| CPU | ${cpu:-unknown} |
| cores | $(nproc) online, $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) memory |
| kernel | $(uname -sr) |
| glibc | $(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2) (libc6 $(pkg_version libc6)) |
| jemalloc | libjemalloc2 $(pkg_version libjemalloc2) |
| mimalloc | libmimalloc2.0 $(pkg_version libmimalloc2.0) |
| tcmalloc | libtcmalloc-minimal4 $(pkg_version libtcmalloc-minimal4) |
| ebb | $(git -C "$HERE/.." describe --always --dirty 2>/dev/null || echo "no commit yet") (build/libebb.so $( [ -e "$EBB_LIB" ] && date -r "$EBB_LIB" '+%Y-%m-%d %H:%M' || echo missing)) |
| compiler | $(${CC:-cc} --version | head -n1) |
EOF
}

finish() {
  local el=$(($(date +%s) - T_START))
  awk -f "$HERE/stats.awk" "$OUT/results.csv" >"$OUT/medians.csv"
  awk -f "$HERE/summary.awk" -v allocs="$ALLOCATORS" -v mode="$MODE" -v runs="$RUNS" -v floor_runs="$FLOOR_RUNS" \
    -v wall="$((el / 60)) min $((el % 60)) s" -v machine="$OUT/machine.md" -v cmd="$CMDLINE" \
    "$OUT/medians.csv" >"$OUT/summary.md"
  if command -v gnuplot >/dev/null 2>&1; then
    "$HERE/charts.sh" "$OUT" "$ALLOCATORS" || { echo "run.sh: charts failed" >&2; FAILED=$((FAILED + 1)); }
  else
    echo "run.sh: gnuplot not found, no charts (make bench installs gnuplot-nox)" >&2
  fi
  rm -f "$OUT/.out" "$OUT/.out.err"
  echo "run.sh: $NDONE runs in $((el / 60)) min $((el % 60)) s, $FAILED failed; results in $OUT"
  [ "$FAILED" = 0 ]
}

main() {
  CMDLINE="$0 $*"
  ALLOCATORS_SET=0
  case " $* " in *" --allocators "*) ALLOCATORS_SET=1 ;; esac
  parse_args "$@"
  for wl in $WORKLOADS; do [ -x "$BIN/$wl" ] || die "$BIN/$wl is missing: run make -C $HERE first"; done
  if [ "$MODE" = smoke ] && [ ! -e "$EBB_LIB" ] && [ "$ALLOCATORS_SET" = 0 ]; then
    die "smoke runs under $EBB_LIB, which is missing (make all builds it)"
  fi
  select_allocators
  if [ "$CALLGRIND" = 1 ] && ! command -v valgrind >/dev/null 2>&1; then
    echo "run.sh: valgrind not found, skipping the callgrind counts" >&2
    CALLGRIND=0
  fi
  local link=""
  if [ -z "$OUT" ]; then
    if [ "$MODE" = smoke ]; then OUT=$BIN/smoke-results; rm -rf "$OUT"
    else OUT=$HERE/results/$(date +%Y%m%d-%H%M%S) link=$HERE/results/latest; fi
  fi
  mkdir -p "$OUT/series" || die "cannot create $OUT"
  echo "workload,case,allocator,rep,served,metric,value" >"$OUT/results.csv"
  describe_machine >"$OUT/machine.md"
  count_runs
  echo "run.sh: $MODE: $NTOTAL runs; workloads: $WORKLOADS; allocators: $ALLOCATORS; runs $RUNS (floor $FLOOR_RUNS)"
  run_all
  [ -n "$link" ] && ln -sfn "$(basename "$OUT")" "$link"
  finish || exit 1
}

main "$@"
