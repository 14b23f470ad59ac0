#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# demo-parts: where the VM demo's ResNet-50 time goes (doc/experiment.md,
# "The two datapaths"). Not a test: it reports numbers (RESULT lines), it
# asserts nothing. `scripts/vm/run.sh demo-parts build/initramfs.cpio.gz`.
#
# Two rounds of ResNet-50 on the demo's cluster (4 + 4, 50 Mbit/s, bytes
# /200, frames' tags on headers only as in the demo), each of: fifo; Mercury
# with its connections pinned to cubic (its mode without its datapath);
# Mercury; Mercury with the module's delay yields off (delay_thresh_us=0,
# the module reloaded). Each RESULT line carries the guest's CPU use over the
# run and the replayer's forward-pass waits.
. ./lib.sh
SCRIPTS=/mercury/scripts PROFILES=/mercury/profiles
KO=/lib/modules/$(uname -r)/extra/tcp_mercury.ko
export IP TC PS_PAYLOAD_TAGS=off
RATE=50 DIV=200 ITER=8

cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $5 + $6 }' /proc/stat; }

load() {	# load MODULE_ARGS...: the module, loaded afresh with these parameters
	[ -d /sys/module/tcp_mercury ] && rmmod tcp_mercury
	insmod "$KO" "$@"
}

part() {	# part LABEL MODE [CC]
	local before after out
	sh "$SCRIPTS/cluster.sh" up 4 4 "$RATE"
	before=$(cpu_ticks)
	out=$(REPLAY_ARGS="${3:+--cc $3}" sh "$SCRIPTS/train.sh" "$PROFILES/resnet50.graph.txt" "$2" 4 4 "$DIV" "$ITER")
	after=$(cpu_ticks)
	sh "$SCRIPTS/cluster.sh" down
	echo "RESULT part=$1 model=resnet50 mean_s=$(echo "$out" | awk -F'"mean_s":' '/"role":"worker"/ {
		split($2, a, ","); s += a[1]; n++ } END { if (n) printf "%.4f", s / n; else print "nan" }')" \
		"cpu_busy=$(echo "$before $after" | awk '{ b = $3 - $1; i = $4 - $2; printf "%.2f", b / (b + i) }')" \
		"$(echo "$out" | grep '"role":"worker"' | head -1 | grep -o '"forward_wait_s":[0-9.]*,"waits":[^"]*' | tr -d '"' | sed 's/,$//')"
}

for round in 1 2; do
	load
	part fifo fifo
	part mercury:cubic mercury cubic
	part mercury mercury
	load delay_thresh_us=0
	part mercury-no-yields mercury
done
kernel_clean demo-parts && echo "INFO kernel log clean"
exit 0
