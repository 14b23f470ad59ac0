#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# /init of the test VM: mount, load the guest's network modules, run the suite
# named by mercury.suite= on the kernel command line, power off.
export PATH=/mercury/bin:/usr/sbin:/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs run /run
mount -t tmpfs tmp /tmp
echo 1 >/proc/sys/kernel/panic_on_warn 2>/dev/null || true
while read -r m; do
	insmod "$m" || echo "FAIL vm/insmod: $m"
done </etc/mercury-modules
/usr/sbin/ip link set lo up

# Under qemu's TCG (no KVM here) a vCPU can keep running a stale copy of
# code that another vCPU patches with text_poke_bp(): it traps on the int3
# of the half-patched site, the handler sees the patch done and restarts the
# instruction, and the stale copy traps again, on both CPUs, for good (soft
# lockup at __netif_receive_skb_core's ingress check while mercury-probe
# removed its clsact qdisc). Real CPUs refetch. So patch, before any
# traffic, what the tests would patch while flows run, and keep it so:
# - tc's ingress/egress jump labels: a clsact qdisc on lo;
# - the tcp_cong_state_set tracepoint: its jump label turns on with the first
#   probe, and its static call moves to the iterator with the second. Two
#   probes here (counting this netns: nothing the tests read) keep both; a
#   test's probe then only changes the list the iterator walks.
/usr/sbin/tc qdisc add dev lo clsact || echo "FAIL vm/pin-clsact: no clsact on lo"
for n in 1 2; do
	mercury-probe recoveries >/run/pin-tracepoint-$n 2>&1 &
	i=0
	until grep -q '^ready' /run/pin-tracepoint-$n || [ $i -ge 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	grep -q '^ready' /run/pin-tracepoint-$n || echo "FAIL vm/pin-tracepoint: $(cat /run/pin-tracepoint-$n)"
done

suite=$(sed -n 's/.*mercury\.suite=\([^ ]*\).*/\1/p' /proc/cmdline)
cd /mercury/tests && sh "./$suite.sh"
echo "MERCURY-VM-DONE rc=$?"
sync
poweroff -f
echo o >/proc/sysrq-trigger
