# python3: a few modules of CPython's own test suite. Their output has timings, so
# only the exit status and a fixed summary go to stdout.
set -e
py=/usr/bin/python3
if ! $py -c 'import test.test_dict, test.test_set, test.test_json' 2>/dev/null; then
  echo "missing: $($py -c 'import sys; print("libpython%d.%d-testsuite" % sys.version_info[:2])')" >&2
  exit 77
fi
export TMPDIR=$PWD
status=0
$RUN $py -m test test_dict test_set test_json >regrtest.log 2>&1 || status=$?
cat regrtest.log >&2
echo "status $status"
grep -E '^(All [0-9]+ tests OK|Tests result:)' regrtest.log
