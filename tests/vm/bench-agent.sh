#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# bench-agent: timing report -> kernel entry latency, netlink set rate and
# mercuryd CPU per iteration for a ResNet-50-sized (160 tensors) and a
# BERT-sized (400 tensors) model. Numbers only (BENCH lines); under TCG
# emulation absolute times are several times those of real hardware.
. ./lib.sh
insmod "/lib/modules/$(uname -r)/extra/tcp_mercury.ko"
$IP netns add w
$IP -n w link set lo up
in_ns w mercury-flow server --port $PORT --bind 127.0.0.1 >/dev/null 2>&1 &
sleep 0.5
for layers in 160 400; do
	$IP netns exec w mercuryd --socket /run/mercury/mercuryd.sock --log-level warn &
	agent=$!
	sleep 0.5
	in_ns w mercury-bench-agent --layers $layers --connect 127.0.0.1:$PORT --agent-pid $agent --iterations 30 ||
		echo "INFO bench-agent: not every rank switch reached the kernel within 5 s"
	kill $agent
	wait $agent 2>/dev/null
done
kernel_clean bench-agent && echo "INFO kernel log clean"
