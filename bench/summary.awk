# summary.awk — medians.csv to summary.md: a headline table of the key metric
# medians, the cases of the run (what each did, from its arguments, and its runs),
# then per workload and case a table with one column per allocator and,
# for each metric, the median, the min–max range (only for cells whose runs
# differ), the ratio to glibc's median and
# the ratio to the best median among the *other* allocator families (glibc-notrim
# is not "other" than glibc, ebb-bg not other than ebb). Ratios are computed from
# the medians of this run only. Plain POSIX awk (Debian's mawk).
#
# The workloads bigbuf and reqarena also get an overview table first: one
# row per case and key metric (µs and faults), each cell the median and its ratio to
# glibc's — for reqarena's arena cases to the same allocator's malloc case instead,
# since glibc has no arenas.
#
# Variables: allocs (column order), mode, wall, machine (a file
# inserted as is), cases (run.sh's cases.tsv: workload, case, runs, args, label), cmd.
# Every number in the text comes from these and from medians.csv, none is fixed here.
BEGIN {
  FS = ","
  # valgrind's counts, run once (run.sh's COUNTED): workload -> case
  counted["loop"] = "callgrind"; counted["larson"] = "cachegrind"
  nalloc = split(allocs, A, " ")
  # The cases of the run, with their planned runs and what they did.
  while ((getline line < cases) > 0) {
    if (++cl == 1) continue
    split(line, c, "\t")
    cwc = c[1] SUBSEP c[2]; clabel[cwc] = c[5]; cruns[cwc] = c[3]; corder[++ncases] = cwc
    if (k_counted(cwc)) has_counted_case = 1
    if (c[1] in counted) has_counted_wl = 1
  }
  split("churn:us_per_cycle churn:faults_per_cycle churn:rss_kb render:us_per_cycle floor:end_kb " \
        "prover:floor_kb prover:peak_kb prover:rounds_per_s growth:ms_per_cycle growth:faults_per_cycle growth:first_faults " \
        "larson:mops_per_s larson:ir_per_pair larson:d1_read_misses_per_pair larson:d1_write_misses_per_pair " \
        "prodcons:mops_per_s loop:ns_per_pair loop:ir_per_pair loop:vsz_kb bigbuf:us_per_op bigbuf:faults_per_op " \
        "reqarena:us_per_req reqarena:faults_per_req heap:ns_per_malloc heap:faults_per_mb heap:peak_rss_kb " \
        "turns:faults_per_job turns:us_per_job turns:peak_rss_kb", H, " ")
  # Titles say what a workload is; the sizes, counts and times of each case are in
  # its label (cases.tsv), which run.sh makes from the arguments it ran it with.
  title["churn"] = "Instance churn (WebAssembly-runtime-like requests)"
  title["render"] = "Render churn (build and serialise a JSON-like tree)"
  title["floor"] = "RSS floor (a burst of small objects, a few kept, the rest freed cross-thread, threads exit)"
  title["prover"] = "Prover scratch (a worker pool allocates and frees a scratch set per round, then idles)"
  title["growth"] = "Large growth (a buffer grown by realloc, then freed)"
  title["larson"] = "Larson server simulation (cross-thread frees)"
  title["prodcons"] = "Producer/consumer (every block freed by the other thread of its pair)"
  title["loop"] = "Single-thread alloc/free loop"
  title["bigbuf"] = "Big-buffer churn (a few multi-MiB buffers freed and reallocated, a write per page)"
  title["reqarena"] = "Per-request arenas (a context block and many small blocks per request)"
  title["heap"] = "Heap growth (an object graph of small blocks built up to hundreds of MiB, then torn down)"
  title["turns"] = "Threads taking turns (a pool where each job, a structure built and torn down, goes to the next thread)"
  # Workloads with an overview table, and the case their other cases are compared with.
  overview_wl["bigbuf"] = 1; overview_wl["reqarena"] = 1
  ref_case["reqarena"] = "malloc"
}
NR == 1 { next }
{
  wc = $1 SUBSEP $2
  if (!(wc in seen_wc)) { seen_wc[wc] = 1; wcs[++nwc] = wc }
  if (!(wc SUBSEP $4 in seen_m)) { seen_m[wc, $4] = 1; metrics[wc, ++nm[wc]] = $4 }
  med[wc, $4, $3] = $5; lo[wc, $4, $3] = $6; hi[wc, $4, $3] = $7; cnt[wc, $4, $3] = $8
  served[wc, $3] = $9
}

function higher_better(m) { return m == "mops_per_s" || m == "rounds_per_s" }
function informational(m) { return m == "out_bytes" || m == "allocs_per_cycle" || m == "live_kb" || m == "fall_ms" || m == "exit_ms" || m == "reset_emulated" }
function family(a) { sub(/-.*/, "", a); return a }
function label(m) {
  if (m ~ /_kb$/) { sub(/_kb$/, "", m); m = m " MiB" }
  if (informational(m)) return m
  return m (higher_better(m) ? " ↑" : " ↓")
}
function scale(m, v) { return m ~ /_kb$/ ? v / 1024 : v }
function fmt(m, v,    a) {
  if (m == "fall_ms" && v < 0) return "never"
  v = scale(m, v); a = v < 0 ? -v : v
  if (a >= 1000) return sprintf("%.0f", v)
  if (a >= 100) return sprintf("%.1f", v)
  if (a >= 10) return sprintf("%.2f", v)
  return sprintf("%.3g", v)
}
function ratio(x, y) { return (y == 0 || x == "" || y == "") ? "–" : sprintf("%.2f", x / y) }
function better(m, x, y) { return higher_better(m) ? x > y : x < y }
# The best allocator of another family than a, for metric m of case wc, or "".
function best_other(wc, m, a,    i, b, best) {
  best = ""
  for (i = 1; i <= nalloc; i++) {
    b = A[i]
    if (family(b) == family(a) || !((wc, m, b) in med)) continue
    if (best == "" || better(m, med[wc, m, b], med[wc, m, best])) best = b
  }
  return best
}
# "ratio name" against the best other family, or "–" when there is none or it is 0.
function best_cell(wc, m, a, v,    b, r) {
  b = best_other(wc, m, a)
  if (b == "") return "–"
  r = ratio(v, med[wc, m, b])
  return r == "–" ? r : r " " b
}
function header_row(first, lead,    i, s, d) {
  s = "| " first; d = "|---"
  for (i = 2; i <= lead; i++) d = d "|---"
  for (i = 1; i <= nalloc; i++) { s = s " | " A[i]; d = d "|---:" }
  print s " |"; print d "|"
}
# One table row: a cell per allocator, what() choosing the content.
function row(name, wc, m, what,    i, a, s, v, b) {
  s = "| " name
  for (i = 1; i <= nalloc; i++) {
    a = A[i]
    if (what == "served") { s = s " | " ((wc, a) in served ? served[wc, a] : "–"); continue }
    if (!((wc, m, a) in med)) { s = s " | –"; continue }
    v = med[wc, m, a]
    if (what == "median") s = s " | " fmt(m, v)
    else if (what == "range") s = s " | " (has_range(wc, m, a) ? fmt(m, lo[wc, m, a]) "–" fmt(m, hi[wc, m, a]) : "")
    else if (what == "glibc") s = s " | " (((wc, m, "glibc") in med) ? ratio(v, med[wc, m, "glibc"]) : "–")
    else if (what == "best") s = s " | " best_cell(wc, m, a, v)
  }
  print s " |"
}
# Whether cell (wc, m, a) has runs that differ, as printed.
function has_range(wc, m, a) {
  return cnt[wc, m, a] > 1 && fmt(m, lo[wc, m, a]) != fmt(m, hi[wc, m, a])
}
function any_range(wc, m,    i) {
  for (i = 1; i <= nalloc; i++) if ((wc, m, A[i]) in med && has_range(wc, m, A[i])) return 1
  return 0
}
function headline(    h, i, j, wl, m, wc, s, a, best, v, nv, nbest) {
  print "## Headline (medians; best of each row in bold, none where all are equal)\n"
  header_row("workload / case | metric", 2)
  for (h = 1; H[h] != ""; h++) {
    split(H[h], p, ":"); wl = p[1]; m = p[2]
    for (i = 1; i <= nwc; i++) {
      split(wcs[i], k, SUBSEP)
      if (k[1] != wl || !((wcs[i], m) in seen_m)) continue
      wc = wcs[i]; best = ""
      for (j = 1; j <= nalloc; j++)
        if ((wc, m, A[j]) in med && (best == "" || better(m, med[wc, m, A[j]], med[wc, m, best]))) best = A[j]
      # Every allocator whose median prints as the best one's is best too.
      nv = nbest = 0
      for (j = 1; j <= nalloc; j++)
        if ((wc, m, A[j]) in med) { nv++; if (fmt(m, med[wc, m, A[j]]) == fmt(m, med[wc, m, best])) nbest++ }
      s = "| " wl " " k[2] " | " label(m)
      for (j = 1; j <= nalloc; j++) {
        a = A[j]; v = ((wc, m, a) in med) ? fmt(m, med[wc, m, a]) : "–"
        s = s " | " ((wc, m, a) in med && nbest < nv && v == fmt(m, med[wc, m, best]) ? "**" v "**" : v)
      }
      print s " |"
    }
  }
  print ""
}
# Overview of workload wl: a row per case and key metric, "median (ratio)" per allocator.
function overview(wl,    i, j, n, k, wc, m, a, s, rc, rwc, r, note) {
  rc = (wl in ref_case) ? ref_case[wl] : ""
  note = "Median per allocator, in brackets × glibc's median"
  if (rc != "") note = note " (" rc " case) or, for the times of the other cases, × the same allocator's " rc " case"
  print note " (no bracket where there is nothing to compare with); – where the allocator has no such case.\n"
  header_row("case | metric", 2)
  for (i = 1; i <= nwc; i++) {
    wc = wcs[i]; split(wc, k, SUBSEP)
    if (k[1] != wl) continue
    rwc = wl SUBSEP rc
    for (j = 1; j <= nm[wc]; j++) {
      m = metrics[wc, j]
      if (m !~ /^(us_per|faults_per|first_faults)/) continue
      s = "| " k[2] " | " label(m)
      for (n = 1; n <= nalloc; n++) {
        a = A[n]
        if (!((wc, m, a) in med)) { s = s " | –"; continue }
        if (rc != "" && k[2] != rc) {
          # Times only: a fault count against the malloc case's near-0 one means nothing.
          r = (m ~ /^us_/ && (rwc, m, a) in med) ? ratio(med[wc, m, a], med[rwc, m, a]) : "–"
          if (r != "–") r = r " ×" rc
        }
        else r = ((wc, m, "glibc") in med) ? ratio(med[wc, m, a], med[wc, m, "glibc"]) : "–"
        s = s " | " fmt(m, med[wc, m, a]) (r == "–" ? "" : " (" r ")")
      }
      print s " |"
    }
  }
  print ""
}
function details(    i, j, wc, k, m, last) {
  for (i = 1; i <= nwc; i++) {
    wc = wcs[i]; split(wc, k, SUBSEP)
    if (k[1] != last) {
      print "## " k[1] ": " (k[1] in title ? title[k[1]] : "") "\n"; last = k[1]
      if (k[1] in overview_wl) overview(k[1])
    }
    print "### " k[1] " / " k[2] "\n"
    if (wc in clabel) print clabel[wc] " — " runs_text(cruns[wc], wc) ".\n"
    header_row("metric", 1)
    row("served by", wc, "", "served")
    for (j = 1; j <= nm[wc]; j++) {
      m = metrics[wc, j]
      row("**" label(m) "** median", wc, m, "median")
      if (any_range(wc, m)) row("min–max", wc, m, "range")
      if (informational(m)) continue
      row("× glibc", wc, m, "glibc")
      row("× best other", wc, m, "best")
    }
    print ""
  }
}
# "3 runs", "1 run"; with the runs that gave results when fewer (failed runs).
function runs_text(n, wc,    i, j, m, a, got, fewer) {
  fewer = 0
  for (j = 1; j <= nm[wc]; j++) {
    m = metrics[wc, j]
    for (i = 1; i <= nalloc; i++) { a = A[i]; if ((wc, m, a) in cnt && cnt[wc, m, a] < n + 0) fewer = 1 }
  }
  if (k_counted(wc)) return "one count per allocator (deterministic)"
  return n " run" (n == 1 ? "" : "s") " per allocator" (fewer ? ", fewer with results in some cells (see raw.log)" : "")
}
function k_counted(wc,    k) { split(wc, k, SUBSEP); return (k[1] in counted) && counted[k[1]] == k[2] }
# "Runs per cell: 3 (floor: 1); valgrind counts: ..." from the planned runs of the cases.
function runs_line(    i, wc, k, n, cntv, best, s, wl, ex, seenwl) {
  for (i = 1; i <= ncases; i++) { wc = corder[i]; if (!k_counted(wc)) cntv[cruns[wc]]++ }
  best = ""
  for (n in cntv) if (best == "" || cntv[n] > cntv[best]) best = n
  s = "Runs per cell: " (best == "" ? "none" : best)
  ex = ""
  for (i = 1; i <= ncases; i++) {
    wc = corder[i]; split(wc, k, SUBSEP)
    if (k_counted(wc) || cruns[wc] == best || (k[1] in seenwl)) continue
    seenwl[k[1]] = 1; ex = ex (ex == "" ? "" : ", ") k[1] ": " cruns[wc]
  }
  if (ex != "") s = s " (" ex ")"
  if (has_counted_wl) s = s "; valgrind counts (callgrind, cachegrind): " (has_counted_case ? "one per allocator" : "off")
  if (nalloc > 1 && best + 0 > 1) s = s "; allocators interleaved, their order rotated each repetition"
  return s "."
}
function cases_table(    i, wc, k) {
  print "## Cases\n"
  print "| workload / case | runs per allocator | what it did |"
  print "|---|---:|---|"
  for (i = 1; i <= ncases; i++) {
    wc = corder[i]; split(wc, k, SUBSEP)
    print "| " k[1] " " k[2] " | " cruns[wc] " | " clabel[wc] " |"
  }
  print ""
}
END {
  print "# ebb benchmark summary\n"
  print "Command: `" cmd "` (mode " mode "), wall time " wall ".  "
  print runs_line() "  "
  print "Cells: median over the runs, min–max their range where the runs differ; × glibc = median / glibc's median; " \
        "× best other = median / the best median of another allocator family (named). " \
        "↓ lower is better, ↑ higher is better. *_kb metrics are shown in MiB.\n"
  print "## Machine\n"
  while ((getline line < machine) > 0) print line
  print ""
  headline()
  if (ncases) cases_table()
  details()
}
