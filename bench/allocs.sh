# allocs.sh — sourced by run.sh, mbench.sh and misuse.sh: where each allocator's
# library is and the environment that makes a process use it, and the option
# parsing the two mimalloc-bench scripts share. The caller sets EBB_LIB (the path
# of build/libebb.so) and defines die.

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

# What every run drops from the caller's environment before alloc_env's words:
# other allocators' settings, and every EBB_* setting (ebb-bg sets its own), so
# that the tables compare the allocators as installed, with their defaults.
# Before, only EBB_BACKGROUND went, and a run made with EBB_DECAY_MS exported
# measured (and published) a tuned ebb.
CLEAN_ENV=(-u LD_PRELOAD -u GLIBC_TUNABLES -u MALLOC_CONF -u EBB_BACKGROUND)
for v in $(compgen -e); do
  case $v in EBB_*) CLEAN_ENV+=(-u "$v") ;; esac
done

# Keeps the allocators of $ALLOCATORS that exist, saying why for the others
# (as "$1: skipping ..."), and sets ENV_OF[a] to allocator a's environment,
# looked up once (ldconfig is slow enough to matter). Calls the caller's die
# for an unknown name or when none is left.
declare -A ENV_OF
select_allocators() {
  local a env kept=""
  for a in $ALLOCATORS; do
    env=$(alloc_env "$a")
    case "$env" in
      "?") die "unknown allocator '$a'" ;;
      "-") echo "$1: skipping $a: its library is not installed (make bench installs it; for ebb: make all)" >&2 ;;
      *) kept="$kept $a"; ENV_OF[$a]=$env ;;
    esac
  done
  ALLOCATORS=${kept# }
  [ -n "$ALLOCATORS" ] || die "no allocator left to run"
}

# Sets, for each "--option value" pair among the arguments after the first,
# the variable that the first argument's "option=VARIABLE ..." words name for
# it; any other option, or one without its value, is an error (die).
parse_options() {
  local spec=" $1 " opt var
  shift
  while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die "$1 needs a value"
    opt=${1#--}
    case "$1:$spec" in
      --*:*" $opt="*) var=${spec#* "$opt"=}; printf -v "${var%% *}" '%s' "$2" ;;
      *) die "unknown option $1 (see the head of $0)" ;;
    esac
    shift 2
  done
}
