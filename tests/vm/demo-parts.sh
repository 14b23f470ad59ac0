#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# demo-parts: where the VM demo's ResNet-50 time goes (doc/experiment.md,
# "The two datapaths"). Not a test: it reports numbers (the demo's RESULT
# and INFO lines), it asserts nothing.
# `scripts/vm/run.sh demo-parts build/initramfs.cpio.gz`.
#
# Two rounds of the demo's ResNet-50 runs (./demo.sh, its cluster and its
# per-run CPU use and forward-pass waits), each of: fifo; Mercury with its
# connections pinned to cubic (its mode without its datapath); Mercury;
# then, with the module reloaded with its delay yields off
# (delay_thresh_us=0), Mercury again.
. ./lib.sh
KO=/lib/modules/$(uname -r)/extra/tcp_mercury.ko

load() {	# load MODULE_ARGS...: the module, loaded afresh with these parameters
	[ -d /sys/module/tcp_mercury ] && rmmod tcp_mercury
	insmod "$KO" "$@"
}

for round in 1 2; do
	load
	echo "INFO demo-parts: round $round, the module's defaults"
	DEMO_MODELS=resnet50 DEMO_MODES="fifo mercury:cubic mercury" sh ./demo.sh
	load delay_thresh_us=0
	echo "INFO demo-parts: round $round, the module's delay yields off (delay_thresh_us=0)"
	DEMO_MODELS=resnet50 DEMO_MODES=mercury sh ./demo.sh
done
exit 0
