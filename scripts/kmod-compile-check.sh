#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Compiles tcp_mercury.ko against another kernel's headers (W=1), in a copy
# of the tree so the 6.1 build the VM tests load is left alone. Fails on any
# warning or error. Used by `make test` for Debian's 6.12 cloud headers,
# which do not boot reliably under this qemu (see doc/testing.md).
#
# usage: kmod-compile-check.sh HEADERS_DIR
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
kdir=$1
if [ ! -e "$kdir/Makefile" ]; then
	echo "FAIL kmod/compile: no kernel headers at $kdir"
	exit 1
fi
ver=$(basename "$kdir" | sed 's/^linux-headers-//')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$top/kmod" "$top/include" "$work/"
make -C "$work/kmod" clean KDIR="$kdir" >/dev/null 2>&1
if ! out=$(make -C "$kdir" M="$work/kmod" W=1 modules 2>&1); then
	# The compiler's and make's own last words: the reason may be neither
	# an "error:" nor a "warning:" (a missing tool is "not found").
	echo "$out" | tail -n 25 | sed 's/^/    /'
	echo "FAIL kmod/compile-$ver: the module does not build against $ver"
	exit 1
fi
warnings=$(echo "$out" | grep -E '(warning|error):' | grep -v 'Skipping BTF' || true)
if [ -n "$warnings" ]; then
	echo "$warnings" | head -20
	echo "FAIL kmod/compile-$ver: warnings with W=1"
	exit 1
fi
echo "PASS kmod/compile-$ver  # tcp_mercury.ko builds against $ver with W=1, no warnings"
