#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Installs everything Mercury needs to build and test on Debian 12, idempotently:
# build tools, user-space libraries, clang-14 for the BPF datapath and the fuzzer
# (the version Debian 12 ships and that builds both), qemu, and the Debian 6.1
# cloud kernel headers the module is built against, and Debian's PyTorch for
# mercury.torch. The matching kernel *image* for the test VM is fetched by
# scripts/fetch-guest-kernel.sh, and the 6.12 headers the module is also
# compiled against by scripts/fetch-headers-6.12.sh (neither is installed:
# that would pull in initramfs-tools and upgrade systemd).
set -euo pipefail

PKGS=(
	build-essential make cmake pkg-config git
	libnl-3-dev libnl-genl-3-dev libboost-dev catch2 python3 strace
	prometheus-cpp-dev nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libsystemd-dev systemd
	libbpf-dev libelf-dev zlib1g-dev bpftool
	clang-14 libclang-rt-14-dev llvm-14 gnuplot-nox
	qemu-system-x86 busybox-static cpio kmod iproute2
	linux-headers-cloud-amd64
	python3-torch python3-torchvision
)

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
	echo "install-deps: all packages present"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: need root to install: ${missing[*]}" >&2
	exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
