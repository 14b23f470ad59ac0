#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The module DKMS built from the mercury-dkms package (tests/packaging/),
# booted in the guest kernel: it loads, registers "mercury", serves its
# netlink family, carries a flow and unloads, with a clean kernel log.
. ./lib.sh
. ./behaviour.sh

KO=/lib/modules/$(uname -r)/extra/tcp_mercury.ko
echo "INFO ko-sha256 $(sha256sum $KO | cut -d' ' -f1)"
has_tag() { ctl h1 dump | grep -q '^tag 12 *rank 1 '; }
test_dkms_module() {
	expect dkms/insmod "the DKMS-built module loads" insmod $KO
	expect dkms/registered "listed in tcp_available_congestion_control" \
		grep -qw mercury /proc/sys/net/ipv4/tcp_available_congestion_control
	topo_same_host
	ctl h1 tag set 12 1 --weight 32
	expect dkms/netlink "its netlink family takes a tag: $(entries_of h1)" has_tag
	flow h1 dkms --cc mercury --prio 12 --seconds 1
	wait_flows
	expect dkms/flow "a mercury flow at rank 1: $(grep -o 'rank=[^ ]*' /tmp/flow-dkms | tail -1)" \
		[ "$(result_field /tmp/flow-dkms rank)" = 1 ]
	topo_clear
	unload_module 100
	expect dkms/rmmod "unloads" [ ! -d /sys/module/tcp_mercury ]
}

dmesg -c >/dev/null
run_test dkms_module
kernel_clean final && pass vm/kernel-log "no WARNING/BUG/Oops/leak in dmesg"
summary
