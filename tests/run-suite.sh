#!/usr/bin/env bash
# run-suite.sh — runs one test suite with its whole output in a log file, and shows
# on the terminal only what matters: a line saying what the suite does, a progress
# line every 15 s while it runs, its result, and, only when it fails, the failing
# tests' part of the log. Expected messages of passing tests (the `ebb: free():
# double free` of a test that checks an abort, warnings a test provokes on purpose)
# stay in the log.
#
# Usage: tests/run-suite.sh NAME LOG DESCRIPTION -- COMMAND [ARG...]
#   NAME         the suite's name, the prefix of every line printed
#   LOG          the file the command's stdout and stderr go to (overwritten); the
#                Makefile's `make test` total reads the Criterion "Synthesis:" lines
#                of build/tests/*.log
#   DESCRIPTION  what the suite does; "{n}" in it becomes the number of tests (from
#                `--list` of the Criterion program in COMMAND: its first word that
#                contains a / and is an executable linked with Criterion; left out
#                when COMMAND has a --filter)
#   COMMAND      run as is; for a count of finished tests as it runs, give the
#                Criterion program --verbose (it then logs a [PASS]/[FAIL] line per test)
# Exit status: the command's (2 for a usage error).
#
# Environment: RUN_SUITE_INTERVAL  seconds between progress lines (default 15)
#              RUN_SUITE_LIMIT     seconds the command may run before it is ended and
#                                  the suite fails (default 600: the longest suite
#                                  takes about a minute; a test that hangs, such as
#                                  a corrupt list walked forever, must fail the run
#                                  rather than hold it until CI gives up, and
#                                  Criterion's --timeout does not end a worker
#                                  stuck in a loop of system calls)
#              TEST_VERBOSE=1      also copy the output to the terminal as it comes
#
# Example:
#   tests/run-suite.sh unit build/tests/unit.log "{n} tests of allocator internals over a fake OS" \
#     -- build/tests/unit --jobs=2 --verbose
set -u -o pipefail

usage() { echo "usage: $0 NAME LOG DESCRIPTION -- COMMAND [ARG...]" >&2; exit 2; }
if [ $# -lt 5 ] || [ "$4" != -- ]; then usage; fi
NAME=$1 LOG=$2 DESC=$3
shift 4
INTERVAL=${RUN_SUITE_INTERVAL:-15}
LIMIT=${RUN_SUITE_LIMIT:-600}
mkdir -p "$(dirname "$LOG")" || exit 2

# The number of tests, from the Criterion program's --list ("suite: 6 tests" lines);
# unknown with --filter, which --list ignores.
TOTAL=""
case " $* " in *" --filter"*) set -- --filter-given "$@" ;; esac
for w in "$@"; do
  [ "$w" = --filter-given ] && break
  case $w in */*) ;; *) continue ;; esac
  if ! { [ -f "$w" ] && [ -x "$w" ] && grep -qa criterion_ "$w"; }; then continue; fi
  TOTAL=$("$w" --list 2>/dev/null </dev/null | awk '/: [0-9]+ tests?$/ { n += $(NF - 1) } END { if (n) print n }')
  break
done
[ "$1" = --filter-given ] && shift
if [ -n "$TOTAL" ]; then DESC=${DESC//\{n\}/$TOTAL}; else DESC=${DESC//\{n\} /}; DESC=${DESC//\{n\}/}; fi
echo "$NAME: $DESC (log: $LOG)"

now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
# "0.4 s", "12 s", "1:05"
elapsed() {
  local ms=$(($(now_ms) - START))
  if [ "$ms" -lt 10000 ]; then printf '%d.%d s' $((ms / 1000)) $((ms % 1000 / 100))
  elif [ "$ms" -lt 60000 ]; then printf '%d s' $((ms / 1000))
  else printf '%d:%02d' $((ms / 60000)) $((ms / 1000 % 60)); fi
}

# "12/27 tests finished (1 failed); running: page::purge..." from Criterion's lines so
# far, or the last progress counter of bench/run.sh ("[ 5/13 ...") for the bench smoke.
status() {
  awk -v total="$TOTAL" '
    /^\[RUN \] / { run[$3] = 1; order[++n] = $3 }
    /^\[(PASS|FAIL|SKIP)\] / { t = $2; sub(/:$/, "", t); delete run[t]; done++; if ($1 == "[FAIL]") failed++ }
    /^\[ *[0-9]+\/[0-9]+[ \]]/ { c = $0; sub(/^\[ */, "", c); sub(/[ \]].*/, "", c); counter = c }
    END {
      if (n) {
        s = (done + 0) (total != "" ? "/" total : "") " tests finished"
        if (failed) s = s " (" failed " failed)"
        r = ""
        for (i = 1; i <= n; i++) if (order[i] in run) { r = r (r == "" ? "" : ", ") order[i]; delete run[order[i]] }
        if (r != "") s = s "; running " r
        print s
      } else if (failed) print failed " tests failed so far"
      else if (counter != "") print counter " runs done"
      else print NR " lines of output so far"
    }' "$LOG" 2>/dev/null
}

# The log's lines of each failing test: from its [RUN ] line (or, without --verbose,
# from just after the previous test's last line) to its [FAIL] line. With --jobs=2
# the lines of a test running alongside can be among them.
failing_sections() {
  awk '
    { line[NR] = $0 }
    /^\[RUN \] / { start[$3] = NR }
    /^\[(RUN |PASS|FAIL|SKIP|====)\]/ { boundary[NR] = 1 }
    /^\[FAIL\] / { t = $2; sub(/:$/, "", t); name[++nf] = t; end[nf] = NR }
    END {
      for (f = 1; f <= nf; f++) {
        if (name[f] in start) s = start[name[f]]
        else { for (s = end[f] - 1; s >= 1 && !(s in boundary); s--); s++ }
        print "---- " name[f] " (log lines " s "-" end[f] ")"
        for (i = s; i <= end[f]; i++) print line[i]
      }
      exit (nf == 0)
    }' "$LOG"
}

# Runs the command in a process group of its own, so that an interrupt can end it
# and everything it started (Criterion's workers, valgrind's children).
set -m
START=$(now_ms)
if [ "${TEST_VERBOSE:-0}" = 1 ]; then
  ( "$@" </dev/null 2>&1 | tee "$LOG" ) &
else
  "$@" </dev/null >"$LOG" 2>&1 &
fi
PID=$!
trap 'kill -TERM -- -"$PID" 2>/dev/null; kill -TERM -- -"${TICK:-0}" -"${DOG:-0}" 2>/dev/null; echo "$NAME: interrupted after $(elapsed); output so far in $LOG" >&2; exit 130' INT TERM HUP
TIMEDOUT=$(mktemp "${TMPDIR:-/tmp}/run-suite.XXXXXX") || exit 2
rm -f "$TIMEDOUT"
# The watchdog: TERM to the command's group at the limit, KILL 5 s later.
( sleep "$LIMIT" >/dev/null 2>&1 && { echo "$(status)" >"$TIMEDOUT"; kill -TERM -- -"$PID" 2>/dev/null
  sleep 5 >/dev/null 2>&1; kill -KILL -- -"$PID" 2>/dev/null; } ) &
DOG=$!
TICK=""
if [ "${TEST_VERBOSE:-0}" != 1 ]; then
  # (sleep gets no terminal output: a sleep left over would hold a pipe open)
  ( while sleep "$INTERVAL" >/dev/null 2>&1; do echo "$NAME: $(elapsed) elapsed, $(status)"; done ) &
  TICK=$!
fi
wait "$PID"
RC=$?
[ -n "$TICK" ] && { kill -TERM -- -"$TICK" 2>/dev/null; wait "$TICK" 2>/dev/null; }
kill -TERM -- -"$DOG" 2>/dev/null
wait "$DOG" 2>/dev/null
trap - INT TERM HUP
if [ -f "$TIMEDOUT" ]; then
  echo "$NAME: TIMED OUT: ended after $(elapsed), at the limit of $LIMIT s (RUN_SUITE_LIMIT); $(cat "$TIMEDOUT")"
  rm -f "$TIMEDOUT"
  [ "$RC" = 0 ] && RC=124
fi

SYN=$(sed -n 's/^\[====\] \(Synthesis: .*[^ ]\) *$/\1/p' "$LOG" | paste -sd ';' - | sed 's/;/; /g')
if [ "$RC" = 0 ]; then
  # Not a Criterion program (the bench smoke): its last line is its summary.
  [ -n "$SYN" ] || SYN=$(grep -Ev '^[[:space:]]*$|^make(\[[0-9]+\])?: (Entering|Leaving) directory' "$LOG" | tail -n 1)
  echo "$NAME: passed in $(elapsed)${SYN:+ — $SYN}"
else
  echo "$NAME: FAILED (exit status $RC) after $(elapsed)${SYN:+ — $SYN}"
  if ! failing_sections; then
    # No test failed by Criterion's account (the program could not start, a
    # sanitizer or valgrind report outside a test, a non-Criterion command): the end
    # of the log says why.
    echo "---- the last 40 lines of $LOG"
    tail -n 40 "$LOG"
  fi
  echo "$NAME: the whole output is in $LOG"
fi
exit "$RC"
