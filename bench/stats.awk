# stats.awk — results.csv (one row per run and metric) to medians.csv (one row per
# workload, case, allocator and metric: median, min, max, number of runs, and the
# library that served the runs). Plain POSIX awk (Debian's mawk), no asort.
BEGIN { FS = ","; OFS = ","; OFMT = "%.10g" }
NR == 1 { next }
{
  key = $1 SUBSEP $2 SUBSEP $3 SUBSEP $6
  if (!(key in n)) { order[++nkeys] = key; served[key] = $5 }
  else if (served[key] != $5) served[key] = served[key] "|" $5 # never expected; visible if it happens
  vals[key, ++n[key]] = $7 + 0
}
# Insertion sort of vals[key, 1..m]; m is small (the runs of one cell).
function sort_cell(key, m,    i, j, v) {
  for (i = 2; i <= m; i++) {
    v = vals[key, i]
    for (j = i - 1; j >= 1 && vals[key, j] > v; j--) vals[key, j + 1] = vals[key, j]
    vals[key, j + 1] = v
  }
}
END {
  print "workload", "case", "allocator", "metric", "median", "min", "max", "n", "served"
  for (k = 1; k <= nkeys; k++) {
    key = order[k]; m = n[key]
    sort_cell(key, m)
    med = m % 2 ? vals[key, (m + 1) / 2] : (vals[key, m / 2] + vals[key, m / 2 + 1]) / 2
    split(key, f, SUBSEP)
    print f[1], f[2], f[3], f[4], med, vals[key, 1], vals[key, m], m, served[key]
  }
}
