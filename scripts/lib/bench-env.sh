# SPDX-License-Identifier: GPL-2.0
# Sourced by the benchmark scripts after they set $top: the built binaries
# first on PATH (BIN overrides), iproute2 by full path, the profiles, and
# the emulated cluster's shape and link rate (W, S, RATE).
bin=${BIN:-$top/build/user/guest-bin}
export PATH=$bin:$PATH IP=${IP:-/usr/sbin/ip} TC=${TC:-/usr/sbin/tc}
profiles=$top/tests/experiment/profiles
W=${W:-4} S=${S:-4}
RATE=${RATE:-50}
