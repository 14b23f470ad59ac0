#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# bench-cc: how tcp_mercury hands a bottleneck from a bulk flow to an urgent
# one and back, measured side by side with cubic in one VM run. Not a test:
# it reports numbers (BENCH lines), it asserts nothing.
#
# Per scenario: urgent:bulk share while both run, time until the urgent flow
# carries 90% of the link and until the bulk flow has it back (ms, and RTTs
# of the urgent flow's smoothed RTT), total utilisation, retransmits.
. ./lib.sh

insmod "/lib/modules/$(uname -r)/extra/tcp_mercury.ko"
# Payload bytes per ms the link can carry at $RATE (50 Mbit/s), before headers.
LINK=6250

# reach FILE T0 TARGET: ms from T0 until the rate over the last 3 samples
# (60 ms) first reaches TARGET bytes/ms; -1 if it never does.
reach() {
	samples "$1" | awk -v t0="$2" -v target="$3" '
	{
		n++; T[n] = $1 + 0; A[n] = $2 + 0
		if (n > 3 && T[n] >= t0 + 0 && !done && (A[n] - A[n - 3]) / (T[n] - T[n - 3]) >= target) {
			print T[n] - t0; done = 1
		}
	}
	END { if (!done) print -1 }'
}

rtts() { awk -v ms="$1" -v us="$2" 'BEGIN { if (ms < 0 || us <= 0) print "-"; else printf "%.1f", ms * 1000 / us }'; }

# handover CC TOPOLOGY: run_handover (lib.sh), measured at 20 ms samples.
handover() {
	local cc=$1 topo=$2
	run_handover "$topo" "$cc" 20

	local u0 u1 ur br share up back rtt util rx
	u0=$(first_t /tmp/flow-urgent)
	u1=$(last_t /tmp/flow-urgent)
	ur=$(rate /tmp/flow-urgent $((u0 + 500)) "$u1")
	br=$(rate /tmp/flow-bulk $((u0 + 500)) "$u1")
	share=$(ratio "$ur" "$br")
	up=$(reach /tmp/flow-urgent "$u0" "$(mul $LINK 0.9)")
	back=$(reach /tmp/flow-bulk "$u1" "$(mul $LINK 0.9)")
	rtt=$(result_field /tmp/flow-urgent rtt_us)
	util=$(awk -v a="$ur" -v b="$br" -v l=$LINK 'BEGIN { printf "%.2f", (a + b) / l }')
	rx=$(($(result_field /tmp/flow-urgent retrans) + $(result_field /tmp/flow-bulk retrans)))
	printf 'BENCH handover %-9s %-7s share=%-7s up_ms=%-5s up_rtts=%-6s back_ms=%-5s back_rtts=%-6s util=%s retrans=%s srtt_us=%s\n' \
		"$topo" "$cc" "$share" "$up" "$(rtts "$up" "$rtt")" "$back" "$(rtts "$back" "$rtt")" "$util" "$rx" "$rtt"
	topo_clear
}

# pair CC TOPOLOGY: two untagged flows from one host; larger:smaller split.
pair() {
	local cc=$1 topo=$2 ns x y t
	if [ "$topo" = same_host ]; then ns=h1; else ns=a; fi
	"topo_$topo"
	local q0
	q0=$(bottleneck_bytes)
	flow $ns p1 --cc "$cc" --seconds 5
	flow $ns p2 --cc "$cc" --seconds 5
	wait_flows
	x=$(result_field /tmp/flow-p1 acked)
	y=$(result_field /tmp/flow-p2 acked)
	[ "$x" -lt "$y" ] && { t=$x; x=$y; y=$t; }
	# Utilisation two ways: payload acked, and wire bytes through the limiter.
	printf 'BENCH fairness %-9s %-7s split=%-6s util=%s wire_util=%s retrans=%s\n' "$topo" "$cc" "$(ratio "$x" "$y")" \
		"$(awk -v a="$x" -v b="$y" -v l=$LINK 'BEGIN { printf "%.2f", (a + b) / 5000 / l }')" \
		"$(awk -v q="$(bottleneck_bytes)" -v q0="$q0" -v l=$LINK 'BEGIN { printf "%.2f", (q - q0) / 5000 / l }')" \
		$(($(result_field /tmp/flow-p1 retrans) + $(result_field /tmp/flow-p2 retrans)))
	topo_clear
}

weights() {
	run_weights 5
	printf 'BENCH weights  incast    mercury split=%s (weights 64:4, one rank)\n' \
		"$(ratio "$(result_field /tmp/flow-heavy acked)" "$(result_field /tmp/flow-light acked)")"
	topo_clear
}

echo "INFO bench-cc: bottleneck $RATE; same_host = limit on the sender's egress, incast = router queue"
for topo in same_host incast; do
	for cc in mercury cubic; do handover $cc $topo; done
done
for topo in same_host incast; do
	for cc in mercury cubic; do pair $cc $topo; done
done
weights
kernel_clean bench && echo "INFO kernel log clean"
