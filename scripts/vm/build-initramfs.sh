#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Builds the test VM's initramfs: busybox, iproute2 (ip, tc, ss) with the
# libraries ldd lists, the guest kernel's veth/tbf/htb/bridge modules,
# tcp_mercury.ko, the project's binaries (and the libraries of those not
# static), tests/vm/ and the checks
# shared with the native BPF suite (tests/cc/).
#
# usage: build-initramfs.sh OUT.cpio.gz KO BIN_DIR...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=$1 ko=$2
shift 2

rel=$("$top/scripts/guest-kernel.sh")
# Workload profiles: PipeDream's measured per-layer profiles (MIT), vendored.
profiles=$top/experiment/profiles
guest=$("$top/scripts/fetch-guest-kernel.sh")
root=$(mktemp -d)
chmod 0755 "$root"	# the guest's /: unprivileged test processes must reach /lib
trap 'rm -rf "$root"' EXIT

mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,run,tmp,etc,var} \
	"$root/lib/modules/$rel/extra" "$root/mercury/bin"
ln -s ../run "$root/var/run"

cp /bin/busybox "$root/bin/busybox"
for applet in $(/bin/busybox --list); do
	[ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done

copy_with_libs() {	# copy a dynamic binary and what it loads
	local bin=$1 dest=$2 lib
	cp "$bin" "$root$dest"
	for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done
}
for tool in ip tc ss; do
	copy_with_libs "$(command -v $tool)" "/usr/sbin/$tool"
done
copy_with_libs "$(command -v setpriv)" /usr/bin/setpriv	# the units' capabilities, as systemd grants them

# Guest modules in dependency order; insmod'ed by /init. tcp_diag: ss -ti;
# sch_ingress (clsact) and cls_bpf: mercury-probe's deterministic drops.
: >"$root/etc/mercury-modules"
for m in veth sch_tbf sch_htb bridge tcp_diag sch_ingress cls_bpf; do
	modprobe -S "$rel" -d "$guest/root" --show-depends "$m" | awk '$1 == "insmod" { print $2 }' |
	while read -r path; do
		dest="/lib/modules/$rel/${path#*/lib/modules/$rel/}"
		if [ ! -e "$root$dest" ]; then
			mkdir -p "$root$(dirname "$dest")"
			cp "$path" "$root$dest"
			echo "$dest" >>"$root/etc/mercury-modules"
		fi
	done
done
cp "$guest/root/lib/modules/$rel"/modules.{order,builtin,builtin.modinfo} "$root/lib/modules/$rel/"
cp "$ko" "$root/lib/modules/$rel/extra/"
depmod -b "$root" "$rel"

for dir in "$@"; do
	for prog in "$dir"/*; do
		if ldd "$prog" >/dev/null 2>&1; then	# mercuryd: prometheus-cpp is shared only
			copy_with_libs "$prog" "/mercury/bin/${prog##*/}"
		else
			cp "$prog" "$root/mercury/bin/"
		fi
	done
done
cp -r "$top/tests/vm" "$root/mercury/tests"
cp -r "$top/agent/systemd" "$root/mercury/systemd"
cp -r "$top/agent/boot" "$root/mercury/boot"
cp "$top/tests/cc"/* "$top/experiment/demo.sh" "$root/mercury/tests/"
mkdir -p "$root/mercury/scripts" "$root/mercury/profiles"
cp "$top/experiment/cluster.sh" "$top/experiment/train.sh" "$root/mercury/scripts/"
cp "$profiles"/*.graph.txt "$root/mercury/profiles/"
cp "$top/tests/vm/guest-init.sh" "$root/init"
chmod +x "$root/init"

(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$out"
