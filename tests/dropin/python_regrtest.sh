# python3: a few modules of CPython's own test suite. Their output has timings, so
# only the exit status and a fixed summary go to stdout.
set -e
py=/usr/bin/python3
if ! $py -c 'import test.test_dict, test.test_set, test.test_json' 2>/dev/null; then
  echo "missing: $($py -c 'import sys; print("libpython%d.%d-testsuite" % sys.version_info[:2])')" >&2
  exit 77
fi
export TMPDIR=$PWD
# Some tests (json.tool's) run child pythons and demand an empty stderr; the
# children must not print the EBB_STATS line. ebb has read EBB_STATS by the time
# python runs its first line, so dropping it from the environment then keeps the
# line for this process only.
status=0
$RUN $py -c '
import os, runpy
os.environ.pop("EBB_STATS", None)
runpy.run_module("test", run_name="__main__", alter_sys=True)
' test_dict test_set test_json >regrtest.log 2>&1 || status=$?
cat regrtest.log >&2
echo "status $status"
grep -E '^(All [0-9]+ tests OK|Tests result:)' regrtest.log
