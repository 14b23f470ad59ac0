#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Fetches Debian's cloud kernel image matching the installed headers into
# build/guest/<release>/ (vmlinuz + /lib/modules tree with depmod run), without
# installing it on the host: `apt-get install` would pull in initramfs-tools.
# Idempotent: does nothing when the tree is already there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../build/guest}
rel=$("$here/guest-kernel.sh")
ver=$(dpkg-query -W -f='${Version}' "linux-headers-$rel")
dest="$out/$rel"

if [ -f "$dest/.complete" ]; then
	echo "$dest"
	exit 0
fi

. "$here/lib/apt-unpack.sh"
# The signed image and the unsigned one carry the same kernel; take whichever exists.
unpack_debs "$dest" "linux-image-$rel=$ver|linux-image-$rel-unsigned=$ver"
cp "$dest/root/boot/vmlinuz-$rel" "$dest/vmlinuz"
depmod -b "$dest/root" "$rel"
touch "$dest/.complete"
echo "$dest"
