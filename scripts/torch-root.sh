#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# A Debian root with another generation of PyTorch for the torch suite
# (tests/torch/run.sh BIN_DIR ROOT): Debian 13 by default, whose
# python3-torch is PyTorch 2.6 (Python 3.13), made the way
# scripts/fresh-machine-test.sh makes its root (debootstrap minbase from
# Debian's archive) with python3-torch and what it depends on, pytest for
# the unit tests that use torch and iproute2 for those that make a network
# namespace; nothing else.
#
# Cached as build/roots/SUITE-torch-KEY/, KEY a hash of this script, the
# suite and the archive: made once (about 2 minutes, 1.5 GB), older ones
# removed. Prints the root's directory.
#
# usage: torch-root.sh [SUITE]      (as root; SUITE defaults to trixie)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/scripts/lib/debian-root.sh"
suite=${1:-trixie}
[ "$(id -u)" = 0 ] || { echo "torch-root: run as root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "torch-root: apt-get install debootstrap (make deps)" >&2; exit 1; }

key=$( (sha256sum "$0" "$top/scripts/lib/debian-root.sh" | cut -d' ' -f1; echo "$suite $(debian_mirror)") |
	sha256sum | cut -c1-16)
cache=$top/build/roots
root=$cache/$suite-torch-$key
if [ -f "$root/.complete" ]; then
	echo "$root"
	exit 0
fi
mkdir -p "$cache"
find "$cache" -mindepth 1 -maxdepth 1 -name "$suite-torch-*" -exec rm -rf {} +
log=$cache/$suite-torch.log
echo "torch-root: debootstrap $suite with python3-torch, pytest and iproute2 from $(debian_mirror) (log: $log)" >&2
debian_root_make "$suite" "$root.tmp" "$log" python3-torch,python3-pytest,iproute2
# (Without /proc, torch's UCX prints an error on stdout: to the log.)
chroot "$root.tmp" /usr/bin/python3 -c 'import torch; open("/.torch-version", "w").write(torch.__version__)' \
	>>"$log" 2>&1 || { echo "torch-root: torch does not import in the new root (see $log)" >&2; exit 1; }
echo "torch-root: PyTorch $(cat "$root.tmp/.torch-version")" >&2
touch "$root.tmp/.complete"
mv "$root.tmp" "$root"
echo "$root"
