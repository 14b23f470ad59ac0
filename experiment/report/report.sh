#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Turns an experiment log's RESULT lines into a table (stdout), JSON and a
# PNG plot. usage: report.sh LOG OUT_PREFIX
set -euo pipefail
log=$1 out=$2
results=$(grep '^RESULT ' "$log" || true)
[ -n "$results" ] || { echo "report: no RESULT lines in $log" >&2; exit 1; }

# RESULT model=M mode=X cc=C mean_s=T bound_s=B bytes_accounted=yes
awk '
function field(k,   i) { for (i = 2; i <= NF; i++) if (index($i, k "=") == 1) return substr($i, length(k) + 2) }
/^RESULT / { m = field("model"); x = field("mode"); t[m, x] = field("mean_s"); cc[m, x] = field("cc"); bound[m] = field("bound_s")
             if (!(m in seen)) { seen[m] = 1; models[++n] = m } }
END {
	# speedup: measured fifo / measured mercury; bound: mercury-replay bound
	# (compute, or the busiest link at its rate); 1.00 is the physical limit.
	printf "%-9s %15s %17s %8s | %8s %14s %12s\n", "model", "fifo s", "mercury s", "speedup", "bound s", "fifo / bound", "mercury / bound"
	for (i = 1; i <= n; i++) {
		m = models[i]; f = t[m, "fifo"]; g = t[m, "mercury"]; b = bound[m]
		printf "%-9s %7.3f (%5s) %7.3f (%7s) %7.2fx | %8.3f %14.2f %12.2f\n", m, f, cc[m, "fifo"], g, cc[m, "mercury"], f / g, b, f / b, g / b
	}
}' <<<"$results"

awk '
function field(k,   i) { for (i = 2; i <= NF; i++) if (index($i, k "=") == 1) return substr($i, length(k) + 2) }
BEGIN { printf "[" }
/^RESULT / { printf "%s{\"model\":\"%s\",\"mode\":\"%s\",\"cc\":\"%s\",\"mean_s\":%s,\"bound_s\":%s,\"bytes_accounted\":%s}", sep, field("model"), field("mode"), field("cc"), field("mean_s"), field("bound_s"), field("bytes_accounted") == "yes" ? "true" : "false"; sep = "," }
END { print "]" }' <<<"$results" >"$out.json"

awk '
function field(k,   i) { for (i = 2; i <= NF; i++) if (index($i, k "=") == 1) return substr($i, length(k) + 2) }
/^RESULT / { m = field("model"); t[m, field("mode")] = field("mean_s"); bound[m] = field("bound_s"); if (!(m in seen)) { seen[m] = 1; models[++n] = m } }
END { for (i = 1; i <= n; i++) print models[i], t[models[i], "fifo"], t[models[i], "mercury"], bound[models[i]] }' <<<"$results" >"$out.dat"

if command -v gnuplot >/dev/null; then
	gnuplot <<GP
set terminal pngcairo size 900,500 font ",11"
set output "$out.png"
set title "Mean iteration time, emulated 10 Gbit/s parameter-server cluster (lower is better)"
set ylabel "seconds per iteration"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set yrange [0:*]
set key top right
plot "$out.dat" using 2:xtic(1) title "fifo (vanilla PS, cubic)", "" using 3 title "mercury", "" using 4 title "lower bound"
GP
	echo "plot: $out.png"
fi
echo "json: $out.json"
