#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Fetches Debian 12's newest 6.12 cloud kernel headers (and the kbuild and
# common trees they need) into build/headers/<release>/ and prints the
# headers directory, for compiling the module against 6.12. Not installed on
# the host: the headers package depends on the 6.12 image, whose install pulls
# in initramfs-tools and upgrades systemd. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(cd "$here/.." && pwd)/build/headers}
rel=$(apt-cache depends linux-headers-6.12-cloud-amd64 2>/dev/null |
	sed -n 's/^ *Depends: linux-headers-\(6\.12\..*-cloud-amd64\)$/\1/p' | head -1)
[ -n "$rel" ] || { echo "fetch-headers-6.12: no linux-headers-6.12-cloud-amd64 in apt (apt-get update?)" >&2; exit 1; }
base=${rel%-cloud-amd64}          # 6.12.118+deb12
kbuild=${base%%+*}                 # 6.12.118
dest="$out/$rel"
dir="$dest/root/usr/src/linux-headers-$rel"
if [ -f "$dest/.complete" ]; then
	echo "$dir"
	exit 0
fi
. "$here/lib/apt-unpack.sh"
unpack_debs "$dest" "linux-headers-$rel" "linux-headers-$base-common" "linux-kbuild-$base|linux-kbuild-$kbuild"
# The arch tree includes the common one by absolute path.
sed -i "s|^include /usr/src/|include $dest/root/usr/src/|" "$dir/Makefile"
[ -e "$dir/scripts/basic/fixdep" ] || { echo "fetch-headers-6.12: kbuild tools missing under $dir/scripts" >&2; exit 1; }
touch "$dest/.complete"
echo "$dir"
