#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs CMD inside the Debian root ROOT (scripts/torch-root.sh makes one with
# another PyTorch), in a mount namespace of its own so that nothing it mounts
# outlives it or reaches the host: the root sees the host's /proc, /sys, /dev
# and /tmp, its /run (mercuryd's socket), and this repository and BIN_DIR at
# the paths they have here, so that every path in CMD and its environment
# means the same inside. The network namespace, the environment and the
# working directory are the caller's.
#
# usage: in-root.sh ROOT BIN_DIR CMD...      (as root)
set -euo pipefail
[ "$#" -ge 3 ] || { echo "usage: in-root.sh ROOT BIN_DIR CMD..." >&2; exit 2; }
root=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
shift 2
[ -x "$root/usr/bin/python3" ] || { echo "in-root: $root has no /usr/bin/python3" >&2; exit 2; }

exec unshare --mount --propagation private -- /bin/sh -euc '
root=$1 top=$2 build=$3 cwd=$(pwd)
shift 3
mount -t proc proc "$root/proc"
for d in /sys /dev; do mount --rbind "$d" "$root$d"; done
for d in /tmp /run "$top" "$build"; do
	case $d in "$top"/*) [ "$d" != "$build" ] || continue ;; esac   # already there
	mkdir -p "$root$d"
	mount --rbind "$d" "$root$d"
done
exec chroot "$root" /bin/sh -c "cd \"\$1\" 2>/dev/null || cd /; shift; exec \"\$@\"" - "$cwd" "$@"
' - "$root" "$top" "$build" "$@"
