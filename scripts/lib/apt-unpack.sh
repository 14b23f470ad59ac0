# SPDX-License-Identifier: GPL-2.0
# Sourced by the fetch-* scripts: Debian packages unpacked into a directory
# of our own, never installed on the host (installing kernel images or
# headers pulls in initramfs-tools and upgrades systemd).
#
#   unpack_debs DEST CHOICE...   one package per CHOICE, "pkg" or
#                                "pkg|fallback|...": the first apt has.
#                                All are unpacked into DEST/root (DEST is
#                                emptied first); 1 if a CHOICE has none.
unpack_debs() {
	local dest=$1 choice pkg tmp got deb
	shift
	rm -rf "$dest" && mkdir -p "$dest/root"
	tmp=$(mktemp -d)
	for choice in "$@"; do
		got=""
		for pkg in $(echo "$choice" | tr '|' ' '); do
			if (cd "$tmp" && apt-get download -q "$pkg" >&2); then
				got=$pkg
				break
			fi
		done
		if [ -z "$got" ]; then
			echo "unpack_debs: apt has none of: $choice" >&2
			rm -rf "$tmp"
			return 1
		fi
	done
	for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$dest/root"; done
	rm -rf "$tmp"
}
