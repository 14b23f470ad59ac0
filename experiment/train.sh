#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# One training run on the emulated cluster (experiment/cluster.sh must be up):
# starts mercuryd on every host for priority modes, the servers, then the
# workers; prints the workers' JSON lines (one per worker) and the servers'.
#
#   train.sh PROFILE MODE WORKERS SERVERS BYTE_DIVISOR ITERATIONS
#
# env: REPLAY_ARGS (more mercury-replay options, e.g. --job NAME), PORT (the
# servers', 7000), AGENTS=external (mercuryd already runs on every host: a
# second job shares it, experiment/bench/bench-jobs.sh).
set -eu
IP=${IP:-/usr/sbin/ip}
profile=$1 mode=$2 workers=$3 servers=$4 divisor=$5 iterations=$6
out=$(mktemp -d)
common="--profile $profile --mode $mode --workers $workers --servers-count $servers --byte-divisor $divisor --iterations $iterations ${REPLAY_ARGS:-}"

agents=""
port=${PORT:-7000}
case "${AGENTS:-own}:$mode" in
own:mercury | own:prio-only)
	for host in $($IP netns list | awk '{ print $1 }' | grep -E '^mc-(w|s)[0-9]+$'); do
		$IP netns exec "$host" mercuryd --socket "/run/$host.sock" --log-level warn 2>>"$out/agents.log" &
		agents="$agents $!"
	done
	sleep 0.5
	;;
esac

list=""
j=0
while [ $j -lt "$servers" ]; do
	MERCURY_SOCKET=/run/mc-s$j.sock $IP netns exec "mc-s$j" \
		mercury-replay server --id $j --listen "10.3.0.$((100 + j)):$port" $common >"$out/s$j.json" 2>&1 &
	servers_pids="${servers_pids:-} $!"
	list="$list${list:+,}10.3.0.$((100 + j)):$port"
	j=$((j + 1))
done
pids=""
i=0
while [ $i -lt "$workers" ]; do
	MERCURY_SOCKET=/run/mc-w$i.sock $IP netns exec "mc-w$i" \
		mercury-replay worker --id $i --servers "$list" $common >"$out/w$i.json" 2>&1 &
	pids="$pids $!"
	i=$((i + 1))
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
# Servers report once the last gradients are in and the workers hung up.
for p in $servers_pids; do wait "$p" || rc=1; done
for a in $agents; do kill "$a" 2>/dev/null || true; done
cat "$out"/w*.json "$out"/s*.json
rm -rf "$out"
exit $rc
