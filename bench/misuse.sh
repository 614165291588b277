#!/usr/bin/env bash
# misuse.sh — runs the double-free and invalid-free programs of mimalloc-bench's
# security suite (github.com/daanx/mimalloc-bench, bench/security; not part of
# ebb) under each allocator and reports what each did with the misuse: named it
# (stopped the program with a message), crashed without one, or let the program
# run on. ebb promises the first for every double free of a block on a free list
# and every pointer it did not hand out (docs/api.md, "Misuse"); this checks the
# promise against programs ebb's own tests did not write.
#
# Usage: misuse.sh --mb DIR [--allocators "glibc ebb ..."] [--build DIR] [--out DIR]
#   --mb DIR     a checkout of mimalloc-bench
#   --build DIR  where the programs are compiled, default ${TMPDIR:-/tmp}/ebb-misuse
#   --out DIR    default bench/results/misuse-<timestamp>: results.csv (one row a
#                program and allocator), summary.md (the table), raw/ (each run's output)
# Allocators as run.sh's (allocs.sh); default glibc jemalloc mimalloc tcmalloc ebb.
# Needs gcc and g++.
#
# The programs: every bench/security/double_free*.c and invalid_free*.c, each
# built for the suite's three sizes (8 B, 4 KiB, 256 KiB, as its CMakeLists.txt
# does, with its flags and -O2), and its four invalid_*delete*.cc (new[] freed by
# delete and the reverse, of char and of std::string). Each runs once under each
# allocator, with 20 s to finish. Outcomes:
#   named        killed by a signal, with a message on stderr
#   crashed      killed by a signal, nothing on stderr (most often SIGSEGV)
#   not caught   ran to its end (the suite prints NOT_CAUGHT there) or exited 0
#   timeout      still running after 20 s
#   exit N       any other exit status
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck disable=SC2034  # read by allocs.sh
EBB_LIB=$HERE/../build/libebb.so
MB="" BUILD=${TMPDIR:-/tmp}/ebb-misuse OUT=""
ALLOCATORS="glibc jemalloc mimalloc tcmalloc ebb"

die() { echo "misuse.sh: $*" >&2; exit 1; }
. "$HERE/allocs.sh" # find_lib, alloc_env, select_allocators (ENV_OF), parse_options
parse_options "mb=MB allocators=ALLOCATORS build=BUILD out=OUT" "$@"
[ -n "$MB" ] || die "--mb DIR (a mimalloc-bench checkout) is required"
SEC=$MB/bench/security
[ -f "$SEC/common.h" ] || die "$SEC/common.h not found: is $MB a mimalloc-bench checkout?"
for t in gcc g++ timeout; do
  command -v "$t" >/dev/null || die "$t not found (Debian: apt-get install gcc g++ coreutils)"
done
select_allocators misuse.sh

# ------------------------------------------------------------------ build

mkdir -p "$BUILD" || die "cannot create $BUILD"
# bench/security/CMakeLists.txt's flags for its C programs
CFLAGS=(-O2 -w -Wno-free-nonheap-object -fno-inline -fno-builtin-inline -fno-inline-small-functions -fno-ipa-pure-const)
progs=()
for src in "$SEC"/double_free*.c "$SEC"/invalid_free*.c; do
  [ -f "$src" ] || continue
  name=$(basename "$src" .c)
  for sz in small:8 medium:4096 large:262144; do
    p=${name}_${sz%%:*}
    gcc "${CFLAGS[@]}" -DALLOCATION_SIZE="${sz#*:}" "$src" -o "$BUILD/$p" 2>"$BUILD/$p.buildlog" &&
      progs+=("$p") || echo "misuse.sh: $p did not build (see $BUILD/$p.buildlog)" >&2
  done
done
for src in "$SEC"/invalid_*delete*.cc; do
  [ -f "$src" ] || continue
  p=$(basename "$src" .cc)
  g++ -O2 -w -std=c++17 -fsized-deallocation -DALLOCATION_SIZE=4096 "$src" -o "$BUILD/$p" 2>"$BUILD/$p.buildlog" &&
    progs+=("$p") || echo "misuse.sh: $p did not build (see $BUILD/$p.buildlog)" >&2
done
[ ${#progs[@]} -gt 0 ] || die "no program built (see $BUILD/*.buildlog)"

# ------------------------------------------------------------------ run

[ -n "$OUT" ] || OUT=$HERE/results/misuse-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT/raw" || die "cannot create $OUT"
echo "program,allocator,outcome,rc,message" >"$OUT/results.csv"
read -r -a allocs <<<"$ALLOCATORS"
echo "misuse.sh: ${#progs[@]} programs x ${#allocs[@]} allocators into $OUT"
for p in "${progs[@]}"; do
  for a in "${allocs[@]}"; do
    log=$OUT/raw/$p.$a
    # The braces' 2>/dev/null takes bash's own "Aborted" report, so the program's
    # stderr log holds only what the program (or its allocator) wrote.
    # shellcheck disable=SC2086  # the env words are meant to split
    { (cd "$BUILD" && env "${CLEAN_ENV[@]}" ${ENV_OF[$a]} timeout -s KILL 20 "./$p" >"$log.out" 2>"$log.err" </dev/null); } 2>/dev/null
    rc=$?
    msg=$(head -1 "$log.err" | tr -d '\r' | tr ',"' ';'"'" | cut -c1-120)
    if [ "$rc" = 0 ] || grep -q NOT_CAUGHT "$log.out"; then
      out="not caught"
    elif [ "$rc" = 137 ]; then
      out=timeout
    elif [ "$rc" -gt 128 ]; then
      if [ -n "$msg" ]; then out=named; else out=crashed; fi
    else
      out="exit $rc"
    fi
    echo "$p,$a,$out,$rc,\"$msg\"" >>"$OUT/results.csv"
  done
done

# ------------------------------------------------------------------ summary

awk -F, -v allocs="$ALLOCATORS" -v host="$(uname -n)" -v kernel="$(uname -r)" '
NR == 1 { next }
{
  if (!($1 in seen)) { seen[$1] = 1; order[++np] = $1 }
  o[$1 SUBSEP $2] = $3; n[$2 SUBSEP $3]++
}
END {
  na = split(allocs, A, " ")
  printf "mimalloc-bench security programs (double and invalid frees), one run each; machine %s, Linux %s.\n", host, kernel
  printf "named: stopped with a message; crashed: killed by a signal with no message; not caught: ran on to the end.\n\n"
  printf "| allocator | named | crashed | not caught | other |\n|---|---:|---:|---:|---:|\n"
  for (a = 1; a <= na; a++) {
    other = np - n[A[a] SUBSEP "named"] - n[A[a] SUBSEP "crashed"] - n[A[a] SUBSEP "not caught"]
    printf "| %s | %d | %d | %d | %d |\n", A[a], n[A[a] SUBSEP "named"], n[A[a] SUBSEP "crashed"], n[A[a] SUBSEP "not caught"], other
  }
  printf "\n| program |"; for (a = 1; a <= na; a++) printf " %s |", A[a]
  printf "\n|---|"; for (a = 1; a <= na; a++) printf "---|"; printf "\n"
  for (p = 1; p <= np; p++) {
    printf "| %s |", order[p]
    for (a = 1; a <= na; a++) printf " %s |", o[order[p] SUBSEP A[a]]
    printf "\n"
  }
}' "$OUT/results.csv" >"$OUT/summary.md"
cat "$OUT/summary.md"
