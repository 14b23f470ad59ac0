# SPDX-License-Identifier: GPL-2.0
# Sourced by the benchmark scripts after they set $top and $out: the built
# binaries first on PATH (BIN overrides), iproute2 by full path, the
# profiles, the emulated cluster's shape and link rate (W, S, RATE), the
# BPF loader's functions, and helpers they share.
bin=${BIN:-$top/build/user/bin:$top/build/user/tests/bin}
export PATH=$bin:$PATH IP=${IP:-/usr/sbin/ip} TC=${TC:-/usr/sbin/tc}
profiles=$top/experiment/profiles
W=${W:-4} S=${S:-4}
RATE=${RATE:-50}
mkdir -p "$(dirname "$out")"
. "$top/scripts/bpf-loader.sh"

# divisor_of GBPS: the byte divisor that makes RATE links a GBPS cluster.
divisor_of() { awk -v g="$1" -v r="$RATE" 'BEGIN { printf "%g", g * 1000 / r }'; }

# bench_log_start: an empty OUT.log (say() appends to it and prints) and
# OUT.runs.jsonl; failed=0.
bench_log_start() {
	log=$out.log
	: >"$log"
	: >"$out.runs.jsonl"
	failed=0
}
say() { echo "$*" | tee -a "$log"; }
