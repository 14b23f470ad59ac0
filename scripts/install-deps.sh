#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Installs everything Mercury needs to build and test on Debian 12, idempotently:
# build tools, user-space libraries, clang-14 for the BPF datapath and the fuzzer
# (the version Debian 12 ships and that builds both), qemu, and the Debian 6.1
# cloud kernel headers the module is built against, and Debian's PyTorch for
# mercury.torch; debootstrap and e2fsprogs for the systemd guest
# (scripts/vm/build-rootfs.sh). The matching kernel *image* for the test VM is fetched by
# scripts/fetch-guest-kernel.sh, and the 6.12 headers the module is also
# compiled against by scripts/fetch-headers-6.12.sh (neither is installed:
# that would pull in initramfs-tools and upgrade systemd).
#
# Then it checks that every external command the builds and suites run is on
# PATH (COMMANDS below), and names the missing one and its package: a tool
# installed by hand on one machine must not hide a missing entry here.
set -euo pipefail

PKGS=(
	build-essential make cmake pkg-config git file
	libnl-3-dev libnl-genl-3-dev libboost-dev libssl-dev catch2 python3 strace
	prometheus-cpp-dev nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libsystemd-dev systemd
	libbpf-dev libelf-dev zlib1g-dev bpftool dwarves
	clang-14 libclang-rt-14-dev llvm-14 gnuplot-nox
	qemu-system-x86 busybox-static cpio kmod iproute2 debootstrap e2fsprogs
	linux-headers-cloud-amd64
	python3-torch python3-torchvision
	python3-pytest python3-pip python3-setuptools python3-wheel
)

# command:package for every external program `make`, `make test` and
# `make demo` run (beyond coreutils, util-linux and the shell). Kbuild runs
# pahole for the BTF of modules built against kernels that ship vmlinux
# (6.12's headers do); CPack's .deb generator runs file and dpkg-shlibdeps;
# the packaging suite's apt pulls in dkms itself.
COMMANDS=(
	make:make cc:build-essential g++:build-essential cmake:cmake ctest:cmake
	pkg-config:pkg-config git:git strace:strace
	cpack:cmake file:file dpkg-shlibdeps:dpkg-dev
	clang-14:clang-14 clang++-14:clang-14 bpftool:bpftool pahole:dwarves
	qemu-system-x86_64:qemu-system-x86 busybox:busybox-static cpio:cpio
	debootstrap:debootstrap mkfs.ext4:e2fsprogs
	depmod:kmod modinfo:kmod ip:iproute2 tc:iproute2 ss:iproute2 bridge:iproute2
	gnuplot:gnuplot-nox systemd-analyze:systemd systemd-socket-activate:systemd
	/usr/bin/python3:python3
)

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
	echo "install-deps: all packages present"
elif [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: need root to install: ${missing[*]}" >&2
	exit 1
else
	echo "install-deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# sbin directories too: a user's PATH may lack them, the scripts' may not.
absent=()
for entry in "${COMMANDS[@]}"; do
	cmd=${entry%%:*}
	PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin command -v "$cmd" >/dev/null ||
		absent+=("$cmd (Debian package ${entry#*:})")
done
if [ "${#absent[@]}" -ne 0 ]; then
	printf 'install-deps: missing after install: %s\n' "${absent[@]}" >&2
	exit 1
fi
# Debian's Python modules, not whatever python3 comes first in PATH (two
# processes, setuptools first: its distutils hack refuses to load after torch or pip).
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null &&
	/usr/bin/python3 -c 'import setuptools, wheel, pip, pytest' 2>/dev/null || {
	echo "install-deps: /usr/bin/python3 cannot import torch, torchvision, pytest, pip, setuptools and wheel" \
		"(python3-torch python3-torchvision python3-pytest python3-pip python3-setuptools python3-wheel)" >&2
	exit 1
}
