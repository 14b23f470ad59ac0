#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# make deb: builds mercury, python3-mercury and mercury-dkms (.deb) into
# OUT_DIR, from a build configured for /usr with dynamically linked programs.
#
# usage: make-deb.sh OUT_DIR
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
cmake -S "$top" -B "$out/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
	-DMERCURY_STATIC=OFF -DMERCURY_UNIT_DIR=/lib/systemd/system \
	-DMERCURY_PYTHON_DIR=lib/python3/dist-packages >/dev/null
cmake --build "$out/build" -j"$(nproc)" --target mercuryd mercuryctl mercury
(cd "$out/build" && cpack -B "$out" >/dev/null)
rm -rf "$out/_CPack_Packages"
ls "$out"/*.deb
