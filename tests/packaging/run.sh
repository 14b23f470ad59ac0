#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The Debian packages for real, on this host (root): make deb, install the
# three with apt (which pulls in dkms), check what each put where, boot the
# guest kernel with the module DKMS built, purge, and check nothing is left.
#
# usage: run.sh BUILD_DIR      (prints PASS/FAIL lines and a closing
#                               "packaging: N passed, M failed")
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
out=$build/deb
version=$(sed -n 's/^project(mercury VERSION \([0-9.]*\).*/\1/p' "$top/CMakeLists.txt")
krel=$("$top/scripts/guest-kernel.sh")
packages="mercury python3-mercury mercury-dkms"
CHECK_PREFIX=pkg
. "$top/tests/lib/check.sh"
installed() { [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" = "ii " ]; }
none_installed() { for p in $packages; do dpkg-query -W "$p" >/dev/null 2>&1 && return 1; done; return 0; }
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-y -q --no-install-recommends -o Dpkg::Options::=--force-confold)

# A run that stopped half way leaves its packages: start clean.
none_installed || apt-get purge "${apt_opts[@]}" $packages >/dev/null 2>&1

rm -rf "$out"
"$top/scripts/make-deb.sh" "$out" >"$build/make-deb.log" 2>&1
check build "make deb: $(cd "$out" 2>/dev/null && ls *.deb | tr '\n' ' ')" [ "$(ls "$out"/*.deb 2>/dev/null | wc -l)" = 3 ] ||
	tail -5 "$build/make-deb.log"

apt-get install "${apt_opts[@]}" "$out"/mercury_*.deb "$out"/python3-mercury_*.deb "$out"/mercury-dkms_*.deb \
	>"$build/apt-install.log" 2>&1
for p in $packages; do
	check "installed-$p" "$(dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}' "$p" 2>&1)" installed "$p" ||
		tail -5 "$build/apt-install.log"
done
dkms_line=$(dkms status mercury 2>&1 | grep "$krel")
check dkms-built "dkms status: $dkms_line" sh -c "echo '$dkms_line' | grep -q 'mercury/$version, $krel, x86_64: installed'"
# What DKMS built, from its tree: a tcp_mercury.ko installed by hand earlier
# (make install puts one in extra/) would keep DKMS's copy out of updates/.
ko=/var/lib/dkms/mercury/$version/$krel/x86_64/module/tcp_mercury.ko
check dkms-module "$ko, built for $(modinfo -F vermagic "$ko" 2>&1 | cut -d' ' -f1)" \
	sh -c "modinfo -F vermagic '$ko' | grep -q '^$krel '"
check conffile "$(dpkg-query -W -f='${Conffiles}' mercury | tr -s ' \n' ' ')" \
	sh -c "dpkg-query -W -f='\${Conffiles}' mercury | grep -q '/etc/mercury/mercuryd.conf'"
check binaries "$(/usr/sbin/mercuryd --version 2>&1), $(/usr/sbin/mercuryctl --version 2>&1), $(/usr/sbin/mercury-ps --version 2>&1)" \
	sh -c "[ \"\$(/usr/sbin/mercuryd --version 2>&1)\" = 'mercuryd $version' ] && [ \"\$(/usr/sbin/mercury-ps --version 2>&1)\" = 'mercury-ps $version' ]"
check units "$(grep -h '^ExecStart=' /lib/systemd/system/mercuryd.service /lib/systemd/system/mercuryd-bpf.service | tr '\n' ' ')" \
	sh -c "grep -q '^ExecStart=/usr/sbin/mercuryd ' /lib/systemd/system/mercuryd.service && [ -f /lib/systemd/system/mercuryd.socket ]"
check group "the socket's group: $(getent group mercury)" sh -c 'getent group mercury >/dev/null'
check pkg-config "libmercury $(pkg-config --modversion mercury 2>&1): $(pkg-config --libs mercury 2>&1)" \
	[ "$(pkg-config --modversion mercury 2>/dev/null)" = "$version" ]
# A trainer builds against the installed header and library, as the README shows.
trainer_c=$(mktemp --suffix=.c)
printf '#include <mercury/client.h>\nint main(void) { return mercury_strerror(0) == 0; }\n' >"$trainer_c"
check client-header "cc against <mercury/client.h> with \$(pkg-config --cflags --libs mercury)" \
	sh -c "cc '$trainer_c' -o '$trainer_c.bin' \$(pkg-config --cflags --libs mercury) && '$trainer_c.bin'"
rm -f "$trainer_c" "$trainer_c.bin"
(cd / && /usr/bin/python3 -m mercury status --socket /nonexistent >/dev/null 2>&1)
check python "python3 -m mercury status from /: exit $? (3: no agent)" \
	sh -c "cd / && /usr/bin/python3 -m mercury status --socket /nonexistent >/dev/null 2>&1; [ \$? = 3 ]"

# The guest kernel loads what DKMS built (the VM suite prints its hash).
if [ -f "$ko" ]; then
	initrd=$build/initramfs-dkms.cpio.gz
	"$top/scripts/vm/build-initramfs.sh" "$initrd" "$ko" "$build/user/bin" "$build/user/tests/bin" &&
		MERCURY_VM_TIMEOUT=600 "$top/scripts/vm/run.sh" dkms "$initrd" "$build/vm-dkms.log" >/dev/null
	grep -E '^(PASS|FAIL) ' "$build/vm-dkms.log" | tee "$build/vm-dkms.checks"
	passed=$((passed + $(grep -c '^PASS ' "$build/vm-dkms.checks")))
	failed=$((failed + $(grep -c '^FAIL ' "$build/vm-dkms.checks")))
	guest_sha=$(sed -n 's/^INFO ko-sha256 //p' "$build/vm-dkms.log")
	check vm-same-module "guest $guest_sha" [ "$guest_sha" = "$(sha256sum "$ko" | cut -d' ' -f1)" ]
	check vm-finished "the guest ran the suite" grep -q '^MERCURY-VM-DONE rc=0' "$build/vm-dkms.log"
fi

apt-get purge "${apt_opts[@]}" $packages >"$build/apt-purge.log" 2>&1
left=""
none_installed || left="$left packages"
dkms status mercury 2>/dev/null | grep -q . && left="$left dkms:$(dkms status mercury | tr '\n' ';')"
ls -d /usr/src/mercury-* >/dev/null 2>&1 && left="$left /usr/src"
ls /lib/modules/*/updates/dkms/tcp_mercury.ko* /var/lib/dkms/mercury >/dev/null 2>&1 && left="$left modules"
[ -e /etc/mercury ] && left="$left /etc/mercury"
[ -e /usr/sbin/mercuryd ] && left="$left /usr/sbin/mercuryd"
[ -e /lib/systemd/system/mercuryd.service ] && left="$left units"
getent group mercury >/dev/null && left="$left group"
check purged "left after purge:${left:- nothing}" [ -z "$left" ]

echo "packaging: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
