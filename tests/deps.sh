#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages that `make test` or `make bench` needs.
# Usage: tests/deps.sh test|bench
# Does nothing when everything is present; otherwise runs apt-get (directly as root,
# through sudo otherwise) and says clearly what it could not do.
set -u
what=${1:-test}
case "$what" in
  test)  pkgs="gcc g++ make pkg-config libcriterion-dev valgrind python3 git sqlite3 perl coreutils binutils libc6-dev clang man-db gnuplot-nox time" ;;
  bench) pkgs="gcc make valgrind libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4 gnuplot-nox" ;;
  *) echo "usage: $0 test|bench" >&2; exit 2 ;;
esac
sudo=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo=none; fi
fi

# Installs whichever of the named packages are missing; says clearly what it cannot do.
install_missing() {
  local missing="" p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "ebb: missing packages:$missing — this is not a Debian/Ubuntu system (no apt-get); install them by hand" >&2
    return 1
  fi
  if [ "$sudo" = none ]; then
    echo "ebb: missing packages:$missing — run as root or with password-less sudo, or: sudo apt-get install$missing" >&2
    return 1
  fi
  echo "ebb: installing$missing (make $what needs them)"
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo apt-get install -y -qq $missing >/tmp/ebb-apt.log 2>&1; then
    $sudo apt-get update -qq >>/tmp/ebb-apt.log 2>&1
    if ! $sudo apt-get install -y -qq $missing >>/tmp/ebb-apt.log 2>&1; then
      echo "ebb: apt-get install$missing failed; see /tmp/ebb-apt.log" >&2
      tail -n 5 /tmp/ebb-apt.log >&2
      return 1
    fi
  fi
}

install_missing $pkgs || exit 1
# The drop-in tests run Debian's python3 test suite, packaged per Python version.
if [ "$what" = test ]; then
  pyver=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || pyver=""
  [ -n "$pyver" ] && { install_missing "libpython$pyver-testsuite" || exit 1; }
fi
exit 0
