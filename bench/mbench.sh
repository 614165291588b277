#!/usr/bin/env bash
# mbench.sh — runs the programs of mimalloc-bench (github.com/daanx/mimalloc-bench,
# not part of ebb) under each allocator, interleaved, and reports per program the
# median time and peak RSS and, over all programs, their geometric means as ratios
# to glibc's: the figures issue 9's third target is stated in.
#
# Usage: mbench.sh --mb DIR [--runs N] [--allocators "glibc ebb ..."]
#                  [--tests "cfrac espresso ..."] [--procs N] [--build DIR] [--out DIR]
#   --mb DIR     a checkout of mimalloc-bench; its bench/ programs are built with
#                cmake into --build (default ${TMPDIR:-/tmp}/ebb-mbench), outside ebb's tree
#   --runs N     runs of every (program, allocator) cell, default 5
#   --procs N    the thread count of the N programs, default 2 (mimalloc-bench's procs)
#   --out DIR    default bench/results/mbench-<timestamp>: results.csv (every run),
#                summary.md (the table), raw/ (each run's output)
# Allocators as run.sh's (allocs.sh); default glibc jemalloc mimalloc tcmalloc ebb.
# Needs cmake, g++ and GNU time (/usr/bin/time): Debian packages cmake, g++, time.
#
# Command lines are mimalloc-bench's bench.sh's for these programs. The time of a
# program is its wall time, except for those that run for a fixed time and report
# their rate (larson, xmalloc-test, rptest, glibc-thread), whose time is the
# "relative time" bench.sh derives from their output. Wall time is read from bash's
# EPOCHREALTIME (microseconds) around the run: GNU time's %e has 10 ms steps, and
# mstressN runs for about 50 ms here, so its ratios moved by 20 % a step. The outer
# loop is the run, the allocator order rotates each run. sh6bench, sh8bench and the others that bench.sh
# downloads separately are not built.
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
EBB_LIB=$HERE/../build/libebb.so
MB="" RUNS=5 PROCS=2 BUILD=${TMPDIR:-/tmp}/ebb-mbench OUT=""
ALLOCATORS="glibc jemalloc mimalloc tcmalloc ebb"
TESTS="cfrac espresso barnes larsonN larsonN-sized mstressN rptestN alloc-test1 alloc-testN \
xmalloc-testN cache-scratch1 cache-scratchN cache-thrash1 cache-thrashN glibc-simple glibc-thread \
malloc-large mleak10 mleak100"

die() { echo "mbench.sh: $*" >&2; exit 1; }
. "$HERE/allocs.sh" # find_lib, alloc_env, select_allocators (ENV_OF), parse_options
parse_options "mb=MB runs=RUNS allocators=ALLOCATORS tests=TESTS procs=PROCS build=BUILD out=OUT" "$@"
[ -n "$MB" ] || die "--mb DIR (a mimalloc-bench checkout) is required"
[ -f "$MB/bench/CMakeLists.txt" ] || die "$MB/bench/CMakeLists.txt not found: is $MB a mimalloc-bench checkout?"
case "$RUNS$PROCS" in *[!0-9]* | "") die "--runs and --procs take a number" ;; esac
for t in cmake g++ /usr/bin/time; do
  command -v "$t" >/dev/null || die "$t not found (Debian: apt-get install cmake g++ time)"
done
select_allocators mbench.sh
case " $ALLOCATORS " in *" glibc "*) ;; *) die "glibc must be among the allocators: the ratios are to it" ;; esac

# ------------------------------------------------------------------ build

# test -> its program
prog_of() {
  case "$1" in
    larsonN) echo larson ;; larsonN-sized) echo larson-sized ;; mstressN) echo mstress ;;
    rptestN) echo rptest ;; alloc-test*) echo alloc-test ;; xmalloc-testN) echo xmalloc-test ;;
    cache-scratch*) echo cache-scratch ;; cache-thrash*) echo cache-thrash ;; mleak*) echo mleak ;;
    *) echo "$1" ;;
  esac
}
progs=$(for t in $TESTS; do prog_of "$t"; done | sort -u)
# A copy of mimalloc-bench's bench/ under $BUILD/src, without the programs whose
# sources bench.sh downloads separately (sh6bench, sh8bench) when they are absent:
# their targets stop cmake's configure step for all the others.
rm -rf "$BUILD/src" && mkdir -p "$BUILD" && cp -r "$MB/bench" "$BUILD/src" || die "cannot copy $MB/bench into $BUILD"
if [ ! -f "$BUILD/src/shbench/sh6bench-new.c" ] || [ ! -f "$BUILD/src/shbench/sh8bench-new.c" ]; then
  awk '/^if\(NOT APPLE\)/ { held = $0 "\n"; hold = 1; next }
       hold { held = held $0 "\n"; if ($0 ~ /sh[68]bench/) sh = 1; if ($0 ~ /^endif/) { if (!sh) printf "%s", held; hold = sh = 0 }; next }
       { print }' "$MB/bench/CMakeLists.txt" >"$BUILD/src/CMakeLists.txt"
fi
rm -rf "$BUILD/obj"
cmake -S "$BUILD/src" -B "$BUILD/obj" -DCMAKE_BUILD_TYPE=Release >"$BUILD/cmake.log" 2>&1 ||
  die "cmake failed (see $BUILD/cmake.log)"
for p in $progs; do
  cmake --build "$BUILD/obj" --target "$p" -j 2 >"$BUILD/$p.buildlog" 2>&1 ||
    echo "mbench.sh: $p did not build (see $BUILD/$p.buildlog); its tests are skipped" >&2
done

# ------------------------------------------------------------------ run

# test -> command line (run in $WORK, which holds the input files)
cmd_of() {
  local b=$BUILD/obj
  case "$1" in
    cfrac) echo "$b/cfrac 17545186520507317056371138836327483792789528" ;;
    espresso) echo "$b/espresso ./largest.espresso" ;;
    barnes) echo "$b/barnes" ;; # stdin: barnes.input
    larsonN) echo "$b/larson 5 8 1000 5000 100 4141 $PROCS" ;;
    larsonN-sized) echo "$b/larson-sized 5 8 1000 5000 100 4141 $PROCS" ;;
    mstressN) echo "$b/mstress $PROCS 50 25" ;;
    rptestN) echo "$b/rptest $PROCS 0 1 2 500 1000 100 8 16000" ;;
    alloc-test1) echo "$b/alloc-test 1" ;;
    alloc-testN) echo "$b/alloc-test $PROCS" ;;
    xmalloc-testN) echo "$b/xmalloc-test -w $PROCS -t 5 -s 64" ;;
    cache-scratch1) echo "$b/cache-scratch 1 1000 1 2000000 $PROCS" ;;
    cache-scratchN) echo "$b/cache-scratch $PROCS 1000 1 2000000 $PROCS" ;;
    cache-thrash1) echo "$b/cache-thrash 1 1000 1 2000000 $PROCS" ;;
    cache-thrashN) echo "$b/cache-thrash $PROCS 1000 1 2000000 $PROCS" ;;
    glibc-simple) echo "$b/glibc-simple" ;;
    glibc-thread) echo "$b/glibc-thread $PROCS" ;;
    malloc-large) echo "$b/malloc-large" ;;
    mleak10) echo "$b/mleak 5" ;;
    mleak100) echo "$b/mleak 50" ;;
    *) return 1 ;;
  esac
}

# The relative time bench.sh derives from output $2 of test $1; empty for the others.
reltime_of() {
  case "$1" in
    larson*) sed -n 's/.* time: \([0-9.]*\).*/\1/p' "$2" | tail -1 ;;
    xmalloc*) sed -n 's/rtime: \([0-9.]*\).*/\1/p' "$2" | tail -1 ;;
    rptest*) sed -n 's/.*\.\.\.\([0-9]*\) memory ops.*/\1/p' "$2" | tail -1 | awk '$1 > 0 { printf "%.4f\n", 2000000 / $1 }' ;;
    glibc-thread) sed -n 's/^\([0-9.]*\) iterations.*/\1/p' "$2" | tail -1 | awk '$1 > 0 { printf "%.4f\n", 1000000000 / $1 }' ;;
  esac
}

[ -n "$OUT" ] || OUT=$HERE/results/mbench-$(date +%Y%m%d-%H%M%S)
WORK=$OUT/work
mkdir -p "$OUT/raw" "$WORK" || die "cannot create $OUT"
cp "$MB/bench/espresso/largest.espresso" "$WORK/" && cp "$MB/bench/barnes/input" "$WORK/barnes.input" ||
  die "input files not found in $MB/bench"
runnable=""
for t in $TESTS; do
  cmd=$(cmd_of "$t") || die "unknown test $t"
  [ -x "${cmd%% *}" ] && runnable="$runnable $t"
done
read -r -a allocs <<<"$ALLOCATORS"
echo "test,allocator,run,seconds,maxrss_kb,reltime,rc" >"$OUT/results.csv"
ncells=$(($(echo $runnable | wc -w) * ${#allocs[@]}))
echo "mbench.sh: $RUNS runs of $ncells cells ($(echo $runnable | wc -w) programs x ${#allocs[@]} allocators) into $OUT"
for ((r = 1; r <= RUNS; r++)); do
  for t in $runnable; do
    cmd=$(cmd_of "$t")
    in=/dev/null
    [ "$t" = barnes ] && in=$WORK/barnes.input
    for ((i = 0; i < ${#allocs[@]}; i++)); do
      a=${allocs[(i + r) % ${#allocs[@]}]}
      log=$OUT/raw/$t.$a.$r.txt
      t0=${EPOCHREALTIME/[.,]/} # microseconds, whatever the locale's decimal point
      (cd "$WORK" && env "${CLEAN_ENV[@]}" ${ENV_OF[$a]} \
        /usr/bin/time -o "$log.time" -f '%M' $cmd <"$in" >"$log" 2>&1)
      rc=$?
      t1=${EPOCHREALTIME/[.,]/}
      sec=$(awk -v us=$((t1 - t0)) 'BEGIN { printf "%.4f", us / 1e6 }')
      rss=$(tail -1 "$log.time")
      echo "$t,$a,$r,${sec:-},${rss:-},$(reltime_of "$t" "$log"),$rc" >>"$OUT/results.csv"
      [ "$rc" = 0 ] || echo "mbench.sh: $t under $a exited with $rc (see $log)" >&2
    done
  done
  echo "mbench.sh: run $r of $RUNS done"
done

# ------------------------------------------------------------------ summary

awk -F, -v allocs="$ALLOCATORS" -v runs="$RUNS" -v procs="$PROCS" -v host="$(uname -n)" \
    -v cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" -v ncpu="$(nproc)" '
function median(s,   v, n, i, j, t) {
  n = split(s, v, " ")
  for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
  return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
NR == 1 { next }
{
  key = $1 SUBSEP $2
  if (!($1 in seen)) { seen[$1] = 1; order[++nt] = $1 }
  if ($7 != 0) { bad[key] = 1; next }
  tm[key] = tm[key] " " ($6 != "" ? $6 : $4); rs[key] = rs[key] " " $5
}
END {
  na = split(allocs, A, " ")
  printf "mimalloc-bench programs, %d thread(s) for the N ones; %d interleaved runs a cell; medians.\n", procs, runs
  printf "Machine: %s, %s, %d CPUs. Time: wall seconds, or the relative time of the fixed-time programs (larson, xmalloc-test, rptest, glibc-thread); lower is better. RSS: peak, MB. Each cell: time / RSS, then (time ratio to glibc, RSS ratio to glibc).\n\n", host, cpu, ncpu
  printf "| program |"; for (a = 1; a <= na; a++) printf " %s |", A[a]; printf "\n|---|"; for (a = 1; a <= na; a++) printf "---|"; printf "\n"
  for (t = 1; t <= nt; t++) {
    g = order[t] SUBSEP "glibc"; ok = (g in tm) && !(g in bad)
    if (ok) { gt = median(tm[g]); gr = median(rs[g]) }
    printf "| %s |", order[t]
    for (a = 1; a <= na; a++) {
      k = order[t] SUBSEP A[a]
      if (!(k in tm) || (k in bad)) { printf " failed |"; ok = 0; continue }
      mt = median(tm[k]); mr = median(rs[k])
      if (ok && gt > 0 && gr > 0) { rt[t, a] = mt / gt; rr[t, a] = mr / gr; printf " %.3g / %.1f (%.2f, %.2f) |", mt, mr / 1024, mt / gt, mr / gr }
      else printf " %.3g / %.1f |", mt, mr / 1024
    }
    printf "\n"; if (ok) use[t] = 1
  }
  n = 0; for (t = 1; t <= nt; t++) if (t in use) n++
  printf "| **geomean over %d programs** |", n
  for (a = 1; a <= na; a++) {
    lt = lr = 0; for (t = 1; t <= nt; t++) if (t in use) { lt += log(rt[t, a]); lr += log(rr[t, a]) }
    if (n) printf " **time %.3f, RSS %.3f** |", exp(lt / n), exp(lr / n); else printf " - |"
  }
  printf "\n\nA program that failed under any allocator is left out of the geometric means.\n"
}' "$OUT/results.csv" >"$OUT/summary.md"
cat "$OUT/summary.md"
