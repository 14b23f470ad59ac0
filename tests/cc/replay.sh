# SPDX-License-Identifier: GPL-2.0
# The experiment's replayer (experiment/replay/) on the emulated
# cluster (experiment/cluster.sh), in the VM with the module and natively with
# the BPF datapath. SCRIPTS and PROFILES say where the scripts and profiles
# are. Sourced by both suites; needs lib.sh.
SCRIPTS=${SCRIPTS:-/mercury/scripts}
PROFILES=${PROFILES:-/mercury/profiles}

all_cc() {	# all_cc JSON CC: 2 workers and 2 servers report CC, and no other
	[ "$(printf '%s\n' "$1" | grep -c "\"cc\":\"$2\"")" = 4 ] &&
		[ "$(printf '%s\n' "$1" | grep -o '"cc":"[a-z0-9_]*"' | sort -u | wc -l)" = 1 ]
}

# The experiment's replayer end to end in every mode (2 workers, 2 servers,
# ResNet-18 shape, 3 iterations): it finishes, and every byte is accounted
# for: each worker pushed and pulled exactly what the placement says, and the
# servers together received every worker's pushes. No speed is asserted.
#
# Each mode's connections run the CC it names, set per socket: the hosts'
# default is made reno here, so a connection that fell back to it shows.
test_replay_modes() {
	export IP TC
	local mode verdict rc json want ccs ns
	for mode in fifo bytescheduler mercury mercury-noprio prio-only; do
		sh "$SCRIPTS/cluster.sh" up 2 2 100
		for ns in $($IP netns list | awk '$1 ~ /^mc-[ws][0-9]+$/ { print $1 }'); do
			set_default_cc "$ns" reno
		done
		json=$(timeout 120 sh "$SCRIPTS/train.sh" "$PROFILES/resnet18.graph.txt" $mode 2 2 100 3)
		verdict=$(echo "$json" | awk -v workers=2 -f check_replay.awk)
		rc=$?
		expect "replay/$mode" "$verdict" [ "$rc" = 0 ]
		case $mode in mercury | prio-only) want=mercury ;; *) want=cubic ;; esac
		ccs=$(printf '%s\n' "$json" | grep -o '"cc":"[a-z0-9_]*"' | sort | uniq -c | tr -s ' \n' ' ')
		expect "replay/$mode-cc" "connections' CC on reno hosts: $ccs" all_cc "$json" "$want"
		sh "$SCRIPTS/cluster.sh" down
	done
	# BytePS's balanced placement, the replayer's alternative to MXNet's.
	sh "$SCRIPTS/cluster.sh" up 2 2 100
	json=$(REPLAY_ARGS="--placement balanced" timeout 120 sh "$SCRIPTS/train.sh" \
		"$PROFILES/resnet18.graph.txt" mercury 2 2 100 3)
	verdict=$(echo "$json" | awk -v workers=2 -f check_replay.awk)
	rc=$?
	expect replay/balanced "$verdict; $(printf '%s\n' "$json" | grep -c '"placement":"balanced"') workers balanced" \
		[ "$rc" = 0 -a "$(printf '%s\n' "$json" | grep -c '"placement":"balanced"')" = 2 ]
	sh "$SCRIPTS/cluster.sh" down
}

