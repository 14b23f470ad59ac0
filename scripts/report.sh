#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Turns an experiment log's RESULT lines into a table (stdout), JSON and a
# PNG plot. usage: report.sh LOG OUT_PREFIX
set -euo pipefail
log=$1 out=$2
results=$(grep '^RESULT ' "$log" || true)
[ -n "$results" ] || { echo "report: no RESULT lines in $log" >&2; exit 1; }

# RESULT model=M mode=X mean_s=T ideal_s=I bytes_accounted=yes
awk '
function field(k,   i) { for (i = 2; i <= NF; i++) if (index($i, k "=") == 1) return substr($i, length(k) + 2) }
/^RESULT / { m = field("model"); x = field("mode"); t[m, x] = field("mean_s"); ideal[m] = field("ideal_s")
             sf[m] = field("sim_fifo_s"); if (!(m in seen)) { seen[m] = 1; models[++n] = m } }
END {
	# speedup: measured fifo / measured mercury. ideal speedup: the simulator
	# fifo / ideal (same model of the links). The target is mercury >= 90%.
	printf "%-9s %9s %11s %8s | %9s %9s %8s | %s\n", "model", "fifo s", "mercury s", "speedup", "sim fifo", "ideal s", "ideal x", "speedup / ideal speedup"
	for (i = 1; i <= n; i++) {
		m = models[i]; f = t[m, "fifo"]; g = t[m, "mercury"]; id = ideal[m]; s = sf[m]
		printf "%-9s %9.3f %11.3f %7.2fx | %9.3f %9.3f %7.2fx | %5.0f%%\n", m, f, g, f / g, s, id, s / id, 100 * (f / g) / (s / id)
	}
}' <<<"$results"

awk '
function field(k,   i) { for (i = 2; i <= NF; i++) if (index($i, k "=") == 1) return substr($i, length(k) + 2) }
BEGIN { printf "[" }
/^RESULT / { printf "%s{\"model\":\"%s\",\"mode\":\"%s\",\"mean_s\":%s,\"ideal_s\":%s,\"sim_fifo_s\":%s,\"bytes_accounted\":%s}", sep, field("model"), field("mode"), field("mean_s"), field("ideal_s"), field("sim_fifo_s"), field("bytes_accounted") == "yes" ? "true" : "false"; sep = "," }
END { print "]" }' <<<"$results" >"$out.json"

awk '
function field(k,   i) { for (i = 2; i <= NF; i++) if (index($i, k "=") == 1) return substr($i, length(k) + 2) }
/^RESULT / { m = field("model"); t[m, field("mode")] = field("mean_s"); ideal[m] = field("ideal_s"); if (!(m in seen)) { seen[m] = 1; models[++n] = m } }
END { for (i = 1; i <= n; i++) print models[i], t[models[i], "fifo"], t[models[i], "mercury"], ideal[models[i]] }' <<<"$results" >"$out.dat"

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
plot "$out.dat" using 2:xtic(1) title "fifo (vanilla PS)", "" using 3 title "mercury", "" using 4 title "ideal bound"
GP
	echo "plot: $out.png"
fi
echo "json: $out.json"
