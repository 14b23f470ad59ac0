#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Prints the kernel release the project builds and tests against, derived from the
# installed linux-headers-cloud-amd64 metapackage so image and headers never drift.
# (Never `uname -r`: the build machines run a different kernel without module support.)
set -euo pipefail
dep=$(dpkg-query -W -f='${Depends}' linux-headers-cloud-amd64 2>/dev/null) || {
	echo "guest-kernel: linux-headers-cloud-amd64 is not installed (run scripts/install-deps.sh)" >&2
	exit 1
}
# "linux-headers-6.1.0-57-cloud-amd64 (= 6.1.192-3)" -> 6.1.0-57-cloud-amd64
rel=$(sed -n 's/^linux-headers-\([^ ,]*\).*/\1/p' <<<"$dep")
[ -n "$rel" ] || { echo "guest-kernel: cannot parse '$dep'" >&2; exit 1; }
echo "$rel"
