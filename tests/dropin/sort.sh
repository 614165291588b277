# sort: 300000 generated lines sorted four ways, one of them with a 1 MiB buffer so
# sort spills to temporary files and merges them.
set -e
command -v sort >/dev/null || { echo "missing: coreutils" >&2; exit 77; }
export LC_ALL=C
awk 'BEGIN { for (i = 1; i <= 300000; i++)
  printf "%08x %d word-%d %s\n", (i * 2654435761) % 4294967296, i % 977, (i * 7919) % 100003, substr("abcdefghijklmnopqrstuvwxyz", 1 + i % 26) }' > input
$RUN sort input
$RUN sort -k2,2n -k3,3 -S 1M -T . --parallel=2 input | md5sum
$RUN sort -u -k2,2n input | md5sum
$RUN sort -r -k4 -s input | md5sum
# sort closes stderr at exit (coreutils' close_stdout), before ebb's EBB_STATS
# line can be written, so the proof that it ran on ebb is its /proc/PID/maps,
# read while it waits for the end of its input on a fifo.
if [ -n "$RUN" ]; then
  mkfifo fifo
  $RUN sort fifo >/dev/null &
  pid=$!
  exec 3>fifo
  head -n 1000 input >&3
  grep -q '/libebb\.so' /proc/$pid/maps && echo "ebb maps: sort (pid $pid) has libebb.so mapped" >&2
  exec 3>&-
  wait $pid
fi
