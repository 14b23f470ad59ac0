#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The systemd guest's base root filesystem: Debian 12 from debootstrap, with
# systemd as PID 1, the guest kernel's modules and headers, dkms, and every
# package the given .debs depend on, so that the guest installs them with
# apt offline (DKMS then builds tcp_mercury inside the guest). Not the .debs
# themselves: they change with every commit, the base does not.
#
# Cached as build/rootfs/base-KEY/, KEY a hash of this script, the guest
# kernel and the package list: rebuilt only when one of them changes (about
# 3 minutes; older bases are removed).
#
# usage: build-rootfs.sh DEB...      prints the base directory
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
[ "$#" -gt 0 ] || { echo "usage: build-rootfs.sh DEB..." >&2; exit 2; }

rel=$("$top/scripts/guest-kernel.sh")
ver=$(dpkg-query -W -f='${Version}' "linux-headers-$rel")
guest=$("$top/scripts/fetch-guest-kernel.sh")
. "$top/scripts/lib/debian-root.sh"
# The host's own mirror and suites (the guest kernel's headers may be in a
# point release or security update only): its apt sources go into the guest.
sources=/etc/apt/sources.list.d/debian.sources
mirror=$(debian_mirror)

# What the .debs need besides each other: "libfoo (>= 1), libbar | libbaz"
# -> libfoo libbar.
deps=$(for deb in "$@"; do dpkg-deb -f "$deb" Depends; done | tr ',' '\n' |
	sed 's/|.*//; s/(.*)//; s/:any//; s/ //g' | grep -vxE 'mercury|python3-mercury|mercury-dkms|' | sort -u | tr '\n' ' ')
# systemd-sysv: /sbin/init; dbus: systemctl and journalctl talk to PID 1
# through it; procps: pgrep; the guest kernel's headers for DKMS.
packages="systemd systemd-sysv dbus kmod iproute2 procps util-linux dkms linux-headers-$rel=$ver $deps"
key=$( (sha256sum "$0" | cut -d' ' -f1; echo "$rel $ver $mirror"; echo "$packages") | sha256sum | cut -c1-16)
cache=$top/build/rootfs
base=$cache/base-$key
if [ -f "$base/.complete" ]; then
	echo "$base"
	exit 0
fi

mkdir -p "$cache"
find "$cache" -mindepth 1 -maxdepth 1 -name 'base-*' -exec rm -rf {} +
rm -rf "$base.tmp"
root=$base.tmp
log=$cache/build.log
echo "build-rootfs: debootstrap bookworm from $mirror into $root (log: $log)" >&2
debian_root_make bookworm "$root" "$log" systemd,systemd-sysv,dbus

if [ -f "$sources" ]; then
	cp "$sources" "$root/etc/apt/sources.list.d/" && rm -f "$root/etc/apt/sources.list"
elif [ -f /etc/apt/sources.list ]; then
	cp /etc/apt/sources.list "$root/etc/apt/sources.list"
fi
# Nothing starts inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
trap 'umount "$root/dev" "$root/proc" 2>/dev/null || true' EXIT
# shellcheck disable=SC2086 # $packages is a list
chroot "$root" sh -c "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	--no-install-recommends $packages && apt-get clean" >>"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
umount "$root/dev" "$root/proc"
trap - EXIT
rm -f "$root/usr/sbin/policy-rc.d"

# The guest kernel's modules (its image is booted from outside), beside the
# headers package's /lib/modules/REL/build.
cp -a "$guest/root/lib/modules/$rel/." "$root/lib/modules/$rel/"
depmod -b "$root" "$rel"

echo guest >"$root/etc/hostname"
echo '/dev/vda / ext4 rw,noatime 0 0' >"$root/etc/fstab"
# Quiet, quick boots: no login prompt on the test's console, no timers
# that would start apt or fstrim during a suite.
for unit in serial-getty@ttyS0.service getty@tty1.service apt-daily.timer apt-daily-upgrade.timer \
	fstrim.timer e2scrub_all.timer e2scrub_reap.service systemd-timesyncd.service; do
	ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
touch "$root/.complete"
mv "$root" "$base"
echo "$base"
