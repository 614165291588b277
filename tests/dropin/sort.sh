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
