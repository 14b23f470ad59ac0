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

suite=$(sed -n 's/.*mercury\.suite=\([^ ]*\).*/\1/p' /proc/cmdline)
cd /mercury/tests && sh "./$suite.sh"
echo "MERCURY-VM-DONE rc=$?"
sync
poweroff -f
echo o >/proc/sysrq-trigger
