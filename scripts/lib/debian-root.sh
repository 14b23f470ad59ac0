# SPDX-License-Identifier: GPL-2.0
# Sourced by the scripts that make a Debian root with debootstrap (the fresh
# machine test's, the systemd guest's, the PyTorch 2.x root): one way to
# pick the archive and to make the root, so the roots differ only in suite
# and packages.
#
#   debian_mirror             the Debian archive this host's apt uses
#                             (its point releases and updates), else
#                             deb.debian.org; $MIRROR overrides both.
#   debian_root_make SUITE ROOT LOG [PKG,...]
#                             debootstrap --variant=minbase SUITE into ROOT
#                             (emptied first), with PKG,... and what they
#                             depend on; its output to LOG, whose tail
#                             goes to stderr on failure (then 1).
debian_mirror() {
	local m=""
	if [ -n "${MIRROR:-}" ]; then
		echo "$MIRROR"
		return
	fi
	m=$( (sed -n 's/^URIs: *\([^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources
		sed -n 's/^deb \([^ ]*debian\) [a-z]* .*/\1/p' /etc/apt/sources.list) 2>/dev/null | head -1 || true)
	echo "${m:-http://deb.debian.org/debian}"
}

debian_root_make() {
	local suite=$1 root=$2 log=$3 include=${4:-}
	rm -rf "$root"
	debootstrap --variant=minbase ${include:+--include="$include"} "$suite" "$root" "$(debian_mirror)" \
		>"$log" 2>&1 || { tail -20 "$log" >&2; return 1; }
}
