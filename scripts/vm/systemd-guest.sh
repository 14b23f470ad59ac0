#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Boots a real Debian 12 with systemd as PID 1 on the guest kernel under qemu
# (TCG) and runs tests/systemd/suite.sh in it: the .debs installed with apt
# inside the guest, the units driven with systemctl (see that file). The
# base root filesystem comes from build-rootfs.sh (cached); each run copies
# it, adds the .debs and the suite, and boots a fresh ext4 image of it.
#
# usage: systemd-guest.sh DEB_DIR [LOG]
# Prints the suite's PASS/FAIL lines and "systemd: N passed, M failed";
# exit 0 only if the guest finished the suite with checks and no failure.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
debs=$(cd "$1" && pwd) || exit 2
log=${2:-$top/build/vm-systemd.log}
rel=$("$top/scripts/guest-kernel.sh") || exit 1
guest=$("$top/scripts/fetch-guest-kernel.sh") || exit 1
. "$here/lib.sh"
shopt -s nullglob
packages=("$debs"/mercury_*.deb "$debs"/python3-mercury_*.deb "$debs"/mercury-dkms_*.deb)
if [ "${#packages[@]}" -ne 3 ]; then
	echo "FAIL systemd/debs: expected mercury, python3-mercury and mercury-dkms in $debs"
	echo "systemd: 0 passed, 1 failed"
	exit 1
fi
base=$("$here/build-rootfs.sh" "${packages[@]}") || {
	echo "FAIL systemd/rootfs: could not build the guest's root filesystem"
	echo "systemd: 0 passed, 1 failed"
	exit 1
}

work=$(mktemp -d "$top/build/systemd-guest.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
cp -a "$base" "$root"
rm -f "$root/.complete"
# Readable by the suite's unprivileged trainer.
suite_dir=$root/opt/mercury-suite
mkdir -p "$suite_dir/debs"
cp "${packages[@]}" "$suite_dir/debs/"
cp "$top/tests/systemd/suite.sh" "$top/tests/systemd/trainer.py" "$top/tests/systemd/ps_worker.py" \
	"$top/tests/lib/check.sh" "$suite_dir/"
cat >"$root/etc/systemd/system/mercury-suite.service" <<'EOF'
[Unit]
Description=Mercury's suite under systemd (tests/systemd/suite.sh)
After=multi-user.target

[Service]
Type=oneshot
TimeoutStartSec=infinity
ExecStart=/opt/mercury-suite/suite.sh
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
EOF
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
ln -s ../mercury-suite.service "$root/etc/systemd/system/multi-user.target.wants/mercury-suite.service"

# The root filesystem: an ext4 image of the tree (sparse; the guest has room
# to install and build).
mkfs.ext4 -q -F -L root -d "$root" "$work/root.img" 4G || exit 1

# A minimal initramfs: the virtio disk's modules, then systemd on it.
init=$work/init
mkdir -p "$init"/{bin,dev,proc,sys,newroot,lib/modules}
cp /bin/busybox "$init/bin/busybox"
for applet in sh mount umount insmod sleep switch_root echo; do ln -s busybox "$init/bin/$applet"; done
: >"$init/modules"
for m in virtio_pci virtio_blk; do
	modprobe -S "$rel" -d "$guest/root" --show-depends "$m" | awk '$1 == "insmod" { print $2 }' |
		while read -r path; do
			name=${path##*/}
			[ -e "$init/lib/modules/$name" ] && continue
			cp "$path" "$init/lib/modules/$name"
			echo "/lib/modules/$name" >>"$init/modules"
		done
done
cat >"$init/init" <<'EOF'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
while read -r m; do insmod "$m"; done </modules
i=0
while [ ! -b /dev/vda ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
mount -t ext4 -o rw /dev/vda /newroot || { echo "FAIL systemd/boot: no root disk"; exec sh; }
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /sbin/init
EOF
chmod +x "$init/init"
(cd "$init" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"

echo "vm: booting Debian 12 with systemd on $rel under qemu TCG (log: $log)"
boot_guest "$log" '^(PASS|FAIL|INFO|==)' -m 2048 -initrd "$work/initrd.gz" \
	-drive "file=$work/root.img,if=virtio,format=raw" \
	-append "console=ttyS0 panic=-1 oops=panic softlockup_panic=1 loglevel=4 systemd.show_status=0"
guest_tally systemd "$log"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
