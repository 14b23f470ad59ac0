# SPDX-License-Identifier: GPL-2.0
# The experiment's replayer (tests/experiment/replay.cpp) on the emulated
# cluster (scripts/cluster.sh), in the VM with the module and natively with
# the BPF datapath. SCRIPTS and PROFILES say where the scripts and profiles
# are. Sourced by both suites; needs lib.sh.
SCRIPTS=${SCRIPTS:-/mercury/scripts}
PROFILES=${PROFILES:-/mercury/profiles}

# The experiment's replayer end to end in every mode (2 workers, 2 servers,
# ResNet-18 shape, 3 iterations): it finishes, and every byte is accounted
# for: each worker pushed and pulled exactly what the placement says, and the
# servers together received every worker's pushes. No speed is asserted.
test_replay_modes() {
	export IP TC
	local mode verdict rc
	for mode in fifo bytescheduler mercury mercury-noprio prio-only; do
		sh "$SCRIPTS/cluster.sh" up 2 2 100
		verdict=$(timeout 120 sh "$SCRIPTS/train.sh" "$PROFILES/resnet18.graph.txt" $mode 2 2 100 3 |
			awk -v workers=2 -f check_replay.awk)
		rc=$?
		expect "replay/$mode" "$verdict" [ "$rc" = 0 ]
		sh "$SCRIPTS/cluster.sh" down
	done
}

