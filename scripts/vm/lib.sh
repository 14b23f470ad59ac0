# SPDX-License-Identifier: GPL-2.0
#
# What scripts/vm/run.sh and scripts/vm/systemd-guest.sh share, sourced:
# booting the guest kernel under qemu (TCG: no KVM here) with its serial
# console in a log, and the tally of a guest suite's PASS/FAIL lines.
# Both need $guest, the directory fetch-guest-kernel.sh prints.

# boot_guest LOG FILTER QEMU_ARGS...: boots $guest/vmlinuz with QEMU_ARGS
# (the initramfs, disks, memory, the kernel command line), killed after
# $MERCURY_VM_TIMEOUT seconds (default 900); the console goes to LOG, its
# lines matching FILTER (an ERE) to stdout. Sets qemu_rc.
boot_guest() {
	local log=$1 filter=$2
	shift 2
	mkdir -p "$(dirname "$log")"
	timeout --foreground "${MERCURY_VM_TIMEOUT:-900}" qemu-system-x86_64 \
		-accel tcg -cpu max -smp 2 \
		-nodefaults -no-reboot -display none -serial stdio \
		-kernel "$guest/vmlinuz" "$@" \
		</dev/null 2>&1 | sed -u 's/\r$//' | tee "$log" | grep --line-buffered -E "$filter"
	qemu_rc=${PIPESTATUS[0]}
}

# guest_tally NAME LOG: sets passed and failed from LOG's PASS and FAIL
# lines; a guest that never printed MERCURY-VM-DONE is one failure more,
# shown with the kernel's first report whole (panic, BUG, WARNING, Oops, RCU
# stall). Prints "NAME: N passed, M failed".
guest_tally() {
	local name=$1 log=$2
	passed=$(grep -c '^PASS ' "$log")
	failed=$(grep -c '^FAIL ' "$log")
	if ! grep -q '^MERCURY-VM-DONE' "$log"; then
		echo "FAIL $name/finished: the guest did not finish the suite (qemu exit ${qemu_rc:-?}; kernel panic or timeout?)"
		awk '/Kernel panic|BUG:|WARNING:|Oops|rcu: INFO/ { n = 60 } n-- > 0' "$log" | head -60
		failed=$((failed + 1))
	fi
	echo "$name: $passed passed, $failed failed"
}
