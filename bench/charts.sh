#!/usr/bin/env bash
# charts.sh — PNG charts of a results folder with gnuplot (pngcairo; gnuplot-nox has it):
#   rss-floor-<case>.png, rss-prover-<case>.png   RSS over time, one line per allocator
#                                                  (the first run of each cell), for
#                                                  every floor and prover case run
#   bars-churn-us.png, bars-churn-faults.png,     medians per case with min–max error bars
#   bars-larson-mops.png, bars-bigbuf-us.png,
#   bars-bigbuf-faults.png (log scale), bars-reqarena-us.png,
#   bars-reqarena-faults.png
# Usage: charts.sh RESULTS_DIR "allocator list"
# Titles: what the chart shows, then what the case did (cases.tsv, made by run.sh
# from the arguments it ran), the runs behind each bar (medians.csv) and the machine
# (machine.md): nothing in a title is fixed here.
set -u -o pipefail
OUT=$1
ALLOCS=$2
mkdir -p "$OUT/charts"

# Column $2 of cases.tsv for workload $1 case $3 (3: runs, 4: args, 5: label).
case_field() { awk -F'\t' -v wl="$1" -v cs="$3" -v f="$2" 'NR > 1 && $1 == wl && $2 == cs { print $f; exit }' "$OUT/cases.tsv" 2>/dev/null; }
# "2-core AMD EPYC, run 2026-11-30 14:59", from machine.md and the folder's name.
MACHINE=$(awk -F' *[|] *' '$2 == "CPU" { cpu = $3 } $2 == "cores" { split($3, c, " "); n = c[1] }
  END { if (cpu != "") printf "%s%s", (n != "" ? n "-core " : ""), cpu }' "$OUT/machine.md" 2>/dev/null)
STAMP=$(basename "$(cd "$OUT" && pwd -P)" | sed -n 's/^\([0-9]\{4\}\)\([0-9][0-9]\)\([0-9][0-9]\)-\([0-9][0-9]\)\([0-9][0-9]\).*/\1-\2-\3 \4:\5/p')
FOOT="$MACHINE${STAMP:+${MACHINE:+, }run $STAMP}"
# Words of $1 wrapped into lines of at most 110 characters, joined by a gnuplot "\n".
wrap() { echo "$1" | fold -s -w 110 | sed 's/ *$//' | awk '{ printf "%s%s", (NR > 1 ? "\\n" : ""), $0 }'; }
# A gnuplot double-quoted string of its arguments, one line each.
gp_title() {
  local s="" l
  for l in "$@"; do [ -n "$l" ] && s="$s${s:+\\n}$(wrap "$l")"; done
  printf '"%s"' "$(printf '%s' "$s" | sed 's/"/\\"/g')"
}
# "median of 3 runs" for workload $1 metric $2 from medians.csv (a range if cells differ).
runs_of() {
  awk -F, -v wl="$1" -v m="$2" '$1 == wl && $4 == m { if (lo == "" || $8 < lo) lo = $8; if ($8 > hi) hi = $8 }
    END { if (lo == "") exit; r = (lo == hi ? lo : lo "–" hi); printf "median of %s run%s", r, (hi == 1 ? "" : "s") }' "$OUT/medians.csv"
}

# A fixed look per allocator, so every chart reads the same: families share a hue,
# variants are lighter and dashed.
style() {
  case "$1" in
    glibc) echo "lc rgb '#222222' dt 1" ;;
    glibc-notrim) echo "lc rgb '#777777' dt 2" ;;
    glibc-mmap8m) echo "lc rgb '#aaaaaa' dt 3" ;;
    jemalloc) echo "lc rgb '#1f77b4' dt 1" ;;
    jemalloc-bg) echo "lc rgb '#7fb8e0' dt 2" ;;
    mimalloc) echo "lc rgb '#2ca02c' dt 1" ;;
    tcmalloc) echo "lc rgb '#ff7f0e' dt 1" ;;
    ebb) echo "lc rgb '#d62728' dt 1" ;;
    ebb-bg) echo "lc rgb '#f08080' dt 2" ;;
    *) echo "lc rgb '#9467bd' dt 4" ;;
  esac
}

common_settings() {
  cat <<'GP'
set terminal pngcairo size 900,480 font "DejaVu Sans,10" noenhanced
set grid ytics lc rgb '#dddddd'
set border 3
set tics nomirror
GP
}

# RSS over time for workload $1 case $2, one line per allocator; $3 starts the title.
rss_chart() {
  local wl=$1 cs=$2 title=$3 plot="" a f runs
  for a in $ALLOCS; do
    f=$OUT/series/$wl-$cs-$a-r1.dat
    [ -s "$f" ] || continue
    plot="$plot${plot:+, }'$f' using 1:2 with lines lw $([ "${a%%-*}" = ebb ] && echo 2.5 || echo 1.5) $(style "$a") title '$a'"
  done
  [ -n "$plot" ] || return 0
  runs=$(case_field "$wl" 3 "$cs")
  { common_settings
    echo "set output '$OUT/charts/rss-$wl-$cs.png'"
    echo "set title $(gp_title "$title ($wl/$cs): RSS over time" "$(case_field "$wl" 5 "$cs")" \
      "first run of ${runs:-?} per allocator${FOOT:+; $FOOT}")"
    echo "set xlabel 'seconds'; set ylabel 'RSS (MiB)'; set yrange [0:*]"
    echo "set key outside right top"
    echo "plot $plot"; } | gnuplot
}

# Medians of workload $1 metric $2 per case (x) and allocator (bars), with min–max;
# $6 = log for a logarithmic y axis (values of 0 are then left out).
bars_chart() {
  local wl=$1 metric=$2 ylabel=$3 name=$4 title=$5 scale=${6:-linear} dat plot="" i=0 a ymin=0
  dat=$OUT/charts/.bars-$wl-$metric.dat
  awk -F, -v wl="$wl" -v m="$metric" -v allocs="$ALLOCS" '
    BEGIN { n = split(allocs, A, " ") }
    $1 == wl && $4 == m { if (!($2 in seen)) { seen[$2] = 1; cases[++nc] = $2 }
                          v[$2, $3] = $5 " " $6 " " $7 }
    END { for (c = 1; c <= nc; c++) { s = cases[c]
            for (i = 1; i <= n; i++) s = s " " ((cases[c], A[i]) in v ? v[cases[c], A[i]] : "NaN NaN NaN")
            print s } }' "$OUT/medians.csv" >"$dat"
  [ -s "$dat" ] || { rm -f "$dat"; return 0; }
  # A log axis starts at the power of ten below the smallest value above 0, and
  # needs one (gnuplot fails on "all points undefined").
  if [ "$scale" = log ]; then
    ymin=$(awk '{ for (i = 2; i <= NF; i++) if ($i != "NaN" && $i + 0 > 0 && (m == "" || $i + 0 < m)) m = $i + 0 }
                END { if (m == "") exit 1; for (p = 1; p >= m; p /= 10); while (p * 10 < m) p *= 10; print p }' "$dat") ||
      { rm -f "$dat"; return 0; }
  fi
  for a in $ALLOCS; do
    plot="$plot${plot:+, }'$dat' using $((2 + 3 * i)):$((3 + 3 * i)):$((4 + 3 * i))$([ $i = 0 ] && echo ':xtic(1)') $(style "$a" | sed 's/ dt [0-9]//') title '$a'"
    i=$((i + 1))
  done
  { common_settings
    echo "set output '$OUT/charts/$name.png'"
    echo "set title $(gp_title "$title" "$(runs_of "$wl" "$metric"), bars min–max${FOOT:+; $FOOT}")"
    if [ "$scale" = log ]; then echo "set ylabel '$ylabel (log scale, 0 not drawn)'; set logscale y; set yrange [$ymin:*]"
    else echo "set ylabel '$ylabel'; set yrange [0:*]"; fi
    echo "set style data histograms; set style histogram errorbars gap 2 lw 1"
    echo "set style fill solid 0.85 border -1; set boxwidth 0.9"
    echo "set key outside right top"
    echo "plot $plot"; } | gnuplot
  rm -f "$dat"
}

# Every floor and prover case of the run (the chart is named after the case).
for wl in floor prover; do
  case $wl in floor) t="RSS floor" ;; prover) t="Prover scratch" ;; esac
  while IFS= read -r cs; do
    rss_chart "$wl" "$cs" "$t"
  done < <(awk -F'\t' -v wl="$wl" 'NR > 1 && $1 == wl { print $2 }' "$OUT/cases.tsv" 2>/dev/null)
done
bars_chart churn us_per_cycle "µs per cycle (median)" bars-churn-us "Instance churn: time per request by gap between requests (lower is better)"
bars_chart churn faults_per_cycle "page faults per cycle" bars-churn-faults "Instance churn: minor faults per request by gap between requests (lower is better)"
bars_chart larson mops_per_s "million malloc/free pairs per s" bars-larson-mops "Larson server simulation by thread count (higher is better)"
bars_chart bigbuf us_per_op "µs per operation" bars-bigbuf-us "Big-buffer churn: time per free + malloc + page writes, by base size (lower is better)" log
bars_chart bigbuf faults_per_op "page faults per operation" bars-bigbuf-faults "Big-buffer churn: minor faults per operation, by base size (lower is better)" log
bars_chart reqarena us_per_req "µs per request" bars-reqarena-us "Per-request arenas: time per request (lower is better)"
bars_chart reqarena faults_per_req "page faults per request" bars-reqarena-faults "Per-request arenas: minor faults per request (lower is better)"
exit 0
