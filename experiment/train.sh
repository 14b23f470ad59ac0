#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# One training run on the emulated cluster (experiment/cluster.sh must be up):
# starts mercuryd on every host for priority modes, a mercury-ps on every
# server host (the options the mode needs from mercury-replay ps-args, a
# fresh secret), then the workers; prints the workers' JSON lines (one per
# worker) and one per server from its log (what it was pushed).
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

# The job's secret, fresh per run, shared by its workers and servers.
secret="$out/secret"
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret")
# The run's id, fresh too: the servers take no worker of another run.
run_id=$(od -An -N7 -tu8 /dev/urandom | tr -d ' ')
run_id=$((run_id + 1))
ps_args=$(mercury-replay ps-args $common)
# PS_PAYLOAD_TAGS=off: frames' tags cover headers only, on servers and
# workers alike (a trusted testbed whose CPU cannot afford HMAC per byte:
# the VM demo under qemu TCG).
payload_tags="--payload-tags ${PS_PAYLOAD_TAGS:-on}"
list=""
j=0
while [ $j -lt "$servers" ]; do
	MERCURY_SOCKET=/run/mc-s$j.sock $IP netns exec "mc-s$j" \
		mercury-ps --listen "10.3.0.$((100 + j)):$port" --secret-file "$secret" $ps_args $payload_tags --log-level info \
		2>"$out/s$j.log" &
	servers_pids="${servers_pids:-} $!"
	list="$list${list:+,}10.3.0.$((100 + j)):$port"
	j=$((j + 1))
done
pids=""
i=0
while [ $i -lt "$workers" ]; do
	MERCURY_SOCKET=/run/mc-w$i.sock $IP netns exec "mc-w$i" \
		mercury-replay worker --id $i --servers "$list" --secret-file "$secret" --run "$run_id" $payload_tags $common >"$out/w$i.json" 2>&1 &
	pids="$pids $!"
	i=$((i + 1))
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
# A server's job ends once every worker has said bye (or with an error).
log_field() {	# log_field FILE MSG KEY: KEY's value on MSG's last line
	sed -n "s/.*msg=\"*$2\"* .*$3=\"*\([^\" ]*\).*/\1/p" "$1" | tail -1
}
j=0
for p in $servers_pids; do
	log="$out/s$j.log"
	n=200
	while [ $n -gt 0 ] && grep -q 'msg="job started"' "$log" &&
		! grep -q 'msg="job finished"\|msg="ending job"' "$log"; do
		sleep 0.1
		n=$((n - 1))
	done
	kill "$p" 2>/dev/null || true
	wait "$p" || rc=1
	if grep -q 'msg="ending job"\|level=error' "$log" || [ $n = 0 ]; then
		echo "train.sh: server $j:" >&2
		cat "$log" >&2
		rc=1
	fi
	printf '{"role":"server","id":%d,"cc":"%s","received_bytes":%s}\n' $j \
		"$(log_field "$log" serving cc)" "$(log_field "$log" 'job finished' pushed_bytes | grep . || echo 0)"
	j=$((j + 1))
done
for a in $agents; do kill "$a" 2>/dev/null || true; done
cat "$out"/w*.json
rm -rf "$out"
exit $rc
