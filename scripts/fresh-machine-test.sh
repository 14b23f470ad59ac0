#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Proves the README's two commands on a fresh Debian 12: a throwaway root
# made with debootstrap (minbase, from Debian's archive, plus make only),
# a clone of this repository's HEAD in it, then CI's entry point
# (CI=true bash .ci/run) and, unless NO_DEMO=1, make demo. The root shares
# this host's kernel (namespaces, BPF, qemu work as on the host); nothing
# the host has installed is visible in it. Takes about 25 minutes.
#
# usage: fresh-machine-test.sh [ROOT_DIR]    (as root; default /var/tmp/mercury-fresh)
#        prints the run's output; exits with make test's status
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-/var/tmp/mercury-fresh}
. "$top/scripts/lib/debian-root.sh"

mounts_under() { awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts | sort -r; }
unmount_all() { for m in $(mounts_under); do umount -l "$m"; done; }
trap unmount_all EXIT

[ "$(id -u)" = 0 ] || { echo "fresh-machine-test: run as root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "fresh-machine-test: apt-get install debootstrap" >&2; exit 1; }
unmount_all
# Deleting a root with /sys or /dev still bound into it would reach the host's.
[ -z "$(mounts_under)" ] || { echo "fresh-machine-test: mounts remain under $root: refusing to delete it" >&2; exit 1; }
rm -rf "$root"
debian_root_make bookworm "$root" "$root.debootstrap.log" ||
	{ echo "fresh-machine-test: debootstrap failed (see $root.debootstrap.log)" >&2; exit 1; }
cp /etc/resolv.conf "$root/etc/"
[ -f /etc/apt/sources.list.d/debian.sources ] &&
	cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/" && rm -f "$root/etc/apt/sources.list"
mount --bind "$root" "$root"   # ip netns exec needs / to be a mount point
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/run"
mkdir -p "$root/work"
git clone -q "$top" "$root/work/main"
[ -d "$top/../shared" ] && cp -r "$top/../shared" "$root/work/shared"
echo "fresh-machine-test: $(git -C "$root/work/main" log --oneline -1)"

in_root() { chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
	LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }
in_root sh -c 'apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends make >/dev/null'
rc=0
in_root CI=true bash -c 'cd /work/main && bash .ci/run' || rc=$?
echo "fresh-machine-test: make test exit $rc"
if [ "${NO_DEMO:-0}" != 1 ]; then
	in_root bash -c 'cd /work/main && make demo' || { echo "fresh-machine-test: make demo failed"; rc=1; }
fi
exit "$rc"
