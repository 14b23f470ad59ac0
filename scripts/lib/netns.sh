# SPDX-License-Identifier: GPL-2.0
# Sourced by the scripts that run a program over loopback without touching
# the host's network (scripts/fuzz.sh, tests/integration/run-ps.sh,
# tests/integration/run-nccl-asan.sh).
#
# in_netns CMD...: CMD in a new network namespace of its own, its loopback
# up (as root).
in_netns() {
	unshare -n sh -c 'ip link set lo up && exec "$@"' sh "$@"
}
