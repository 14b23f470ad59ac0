#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The units under a real systemd: runs as root inside the Debian 12 guest
# that scripts/vm/systemd-guest.sh boots (systemd is PID 1 there), as a
# oneshot unit, and does what a user does after copying the .debs:
#
#   apt-get install ./debs/*.deb          (offline; DKMS builds the module)
#   systemctl enable --now mercuryd.socket
#   a trainer in group mercury connects   (socket activation starts mercuryd,
#                                          ExecStartPre loads the module)
#   systemctl reload / restart, kill -STOP (the watchdog)
#   the same trainer under mercuryd-bpf.socket + .service, and a restart
#   mercury-ps@JOB.service serving a worker that holds the job's secret
#   systemctl stop, apt-get purge
#
# checking each step's effect. Prints PASS/FAIL lines, "systemd: N passed,
# M failed", MERCURY-VM-DONE, and powers the guest off.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
cd /opt/mercury-suite || exit 1
CHECK_PREFIX=systemd
. ./check.sh
JOB=trainjob
LAYERS=4
# wait_for SECONDS CMD...: until CMD succeeds, at most SECONDS.
wait_for() {
	local end=$((SECONDS + $1))
	shift
	until "$@"; do
		[ "$SECONDS" -ge "$end" ] && return 1
		sleep 0.5
	done
}
main_pid() { systemctl show -p MainPID --value "$1"; }
flows() { mercuryctl --datapath "${1:-kmod}" dump 2>/dev/null | grep -c '^flow ' || true; }
has_flows() { [ "$(flows "$@")" -ge "$LAYERS" ]; }
state() { systemctl show -p Type,ActiveState,SubState --value "$1" | tr '\n' ' ' | sed 's/ $//'; }
# The trainer registered with the unit's current process (not entries left
# by the one before it).
rejoined() { journalctl -q -u "$1" _PID="$(main_pid "$1")" | grep -q 'msg="trainer joined"'; }
finish() {
	dmesg | grep -E 'WARNING:|BUG:|Oops|general protection' >/tmp/kernel-faults
	check kernel-log "$(wc -l </tmp/kernel-faults) warnings or oopses in dmesg" [ ! -s /tmp/kernel-faults ]
	echo "systemd: $passed passed, $failed failed"
	echo MERCURY-VM-DONE
	systemctl --no-block poweroff
	exit 0
}

echo "INFO systemd: $(systemctl --version | head -1), kernel $(uname -r), up $(cut -d" " -f1 /proc/uptime) s"
check pid1 "PID 1 is $(cat /proc/1/comm)" [ "$(cat /proc/1/comm)" = systemd ]

# --- install, as a user does: apt, offline (the guest has no network card; the
# base image holds every dependency)
start=$SECONDS
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
	/opt/mercury-suite/debs/mercury_*.deb /opt/mercury-suite/debs/python3-mercury_*.deb /opt/mercury-suite/debs/mercury-dkms_*.deb >/tmp/apt.log 2>&1
rc=$?
check install "apt-get install ./debs/*.deb: exit $rc in $((SECONDS - start)) s" [ "$rc" = 0 ] || tail -20 /tmp/apt.log | sed 's/^/  apt: /' 
version=$(dpkg-query -W -f='${Version}' mercury 2>/dev/null)
check dkms "$(dkms status mercury 2>/dev/null | tr '\n' ' ')" \
	sh -c "dkms status mercury 2>/dev/null | grep 'mercury/$version, $(uname -r), x86_64: installed' >/dev/null"
[ "$rc" = 0 ] || finish

# --- the socket, then socket activation by the first client
systemctl enable --now mercuryd.socket >/tmp/enable.log 2>&1
check socket-active "mercuryd.socket: $(systemctl is-active mercuryd.socket)" systemctl -q is-active mercuryd.socket
sock=/run/mercury/mercuryd.sock
check socket-mode "$sock: mode $(stat -c '%a, group %G' $sock 2>&1)" [ "$(stat -c '%a %G' $sock 2>/dev/null)" = "660 mercury" ]
check not-started "mercuryd.service before any client: $(systemctl is-active mercuryd.service)" \
	sh -c '! systemctl -q is-active mercuryd.service'
check module-not-loaded "tcp_mercury before the agent starts: $(lsmod | grep -c '^tcp_mercury') loaded" \
	sh -c '! lsmod | grep -q "^tcp_mercury "'

useradd --create-home --groups mercury trainer
useradd --create-home outsider
runuser -u outsider -- mercuryctl status >/tmp/outsider.out 2>&1
rc=$?
check outsider-refused "a user not in group mercury: exit $rc, $(head -1 /tmp/outsider.out)" \
	sh -c "[ $rc != 0 ] && grep -qi 'permission denied' /tmp/outsider.out"
check outsider-no-start "the refused client started nothing: mercuryd.service $(systemctl is-active mercuryd.service)" \
	sh -c '! systemctl -q is-active mercuryd.service'

runuser -u trainer -- python3 trainer.py "$JOB" "$LAYERS" >/tmp/trainer.out 2>&1 &
trainer=$!
wait_for 60 grep -q '^registered' /tmp/trainer.out
wait_for 30 systemctl -q is-active mercuryd.service
check activated "the trainer's connect started mercuryd.service: $(state mercuryd.service)" \
	[ "$(state mercuryd.service)" = "notify active running" ] || journalctl -q -u mercuryd.service | tail -15
check trainer-registered "$(head -1 /tmp/trainer.out)" grep -qx "registered $LAYERS" /tmp/trainer.out
check modprobe "ExecStartPre=+modprobe: $(lsmod | grep '^tcp_mercury ' | cut -c1-40)" \
	sh -c 'lsmod | grep -q "^tcp_mercury "'
wait_for 10 has_flows
check entries "the module's table holds the trainer's $LAYERS sockets: $(flows) flow entries" has_flows
check agent-user "mercuryd runs as $(ps -o user= -p "$(main_pid mercuryd.service)") (DynamicUser)" \
	sh -c "[ \"\$(ps -o user= -p $(main_pid mercuryd.service))\" != root ]"
check agent-caps "mercuryd's effective capabilities: $(grep CapEff /proc/"$(main_pid mercuryd.service)"/status | cut -f2)" \
	[ "$(grep CapEff /proc/"$(main_pid mercuryd.service)"/status | cut -f2)" = 0000000000001000 ]

# --- reload (SIGHUP): same process, entries kept
pid=$(main_pid mercuryd.service)
systemctl reload mercuryd.service
sleep 2
check reload "systemctl reload: main PID $pid -> $(main_pid mercuryd.service), $(state mercuryd.service), $(flows) entries" \
	sh -c "[ $pid = \$(systemctl show -p MainPID --value mercuryd.service) ] && [ \$(mercuryctl dump | grep -c '^flow ') -ge $LAYERS ]"

# --- restart: a new agent; the trainer's library reconnects and registers again
systemctl restart mercuryd.service
wait_for 30 rejoined mercuryd.service
wait_for 30 has_flows
check restart "systemctl restart: main PID $pid -> $(main_pid mercuryd.service), $(state mercuryd.service), $(flows) entries" \
	sh -c "[ $pid != \$(systemctl show -p MainPID --value mercuryd.service) ] && [ \$(mercuryctl dump | grep -c '^flow ') -ge $LAYERS ]"
check restart-rejoined "the trainer registered with the new agent" rejoined mercuryd.service

# --- a wedged agent: the watchdog (WatchdogSec=30s) kills and restarts it
pid=$(main_pid mercuryd.service)
start=$SECONDS
kill -STOP "$pid"
wait_for 60 sh -c "[ \$(systemctl show -p MainPID --value mercuryd.service) != $pid ] && systemctl -q is-active mercuryd.service"
took=$((SECONDS - start))
wait_for 30 rejoined mercuryd.service
wait_for 30 has_flows
check watchdog "kill -STOP $pid: restarted after $took s as $(main_pid mercuryd.service), $(flows) entries" \
	sh -c "[ \$(systemctl show -p MainPID --value mercuryd.service) != $pid ] && [ \$(mercuryctl dump | grep -c '^flow ') -ge $LAYERS ]"
check watchdog-rejoined "the trainer registered with the restarted agent" rejoined mercuryd.service
check watchdog-logged "$(journalctl -q -u mercuryd.service | grep -m1 -i watchdog | cut -c1-120)" \
	sh -c 'journalctl -q -u mercuryd.service | grep -qi "watchdog timeout"'

journalctl -q -u mercuryd.service -p err >/tmp/errors
# The watchdog's own SIGABRT is an error, and was asked for.
grep -viE 'watchdog|SIGABRT|Failed with result|core-dump|dumped core' /tmp/errors >/tmp/unexpected
check journal "journalctl -u mercuryd -p err, beside the watchdog's kill: $(wc -l </tmp/unexpected) lines $(head -2 /tmp/unexpected | tr '\n' ' ')" \
	[ ! -s /tmp/unexpected ]

# --- the BPF datapath, as a host that bars modules runs it: its own socket,
# whose first client (the trainer's library, reconnecting) starts
# mercuryd-bpf.service
systemctl disable --now mercuryd.socket mercuryd.service >/dev/null 2>&1
modprobe -r tcp_mercury
systemctl enable --now mercuryd-bpf.socket >/dev/null 2>&1
wait_for 60 has_flows bpf
check bpf-activated "the trainer's reconnect started mercuryd-bpf.service: $(state mercuryd-bpf.service); mercuryd.service $(systemctl is-active mercuryd.service)" \
	[ "$(state mercuryd-bpf.service)" = "notify active running" ] || journalctl -q -u mercuryd-bpf.service | tail -15
check bpf-cc "net.ipv4.tcp_available_congestion_control: $(sysctl -n net.ipv4.tcp_available_congestion_control)" \
	sh -c 'sysctl -n net.ipv4.tcp_available_congestion_control | grep -qw mercury'
check bpf-entries "the BPF maps hold the trainer's sockets: $(flows bpf) flow entries" has_flows bpf
# A restarted loader takes over the pins (run-mercury-bpf.mount keeps the
# bpffs outside the agent): the same files (inodes), every entry in them.
pins() { ls -i /run/mercury/bpf 2>/dev/null | sort -k2 | tr '\n' ' '; }
pins_before=$(pins)
pid=$(main_pid mercuryd-bpf.service)
systemctl restart mercuryd-bpf.service
wait_for 30 systemctl -q is-active mercuryd-bpf.service
took_over=$(journalctl -q -u mercuryd-bpf.service _PID="$(main_pid mercuryd-bpf.service)" | grep -o 'maps="[^"]*"')
check bpf-pins-kept "pins before: '$pins_before'; after the restart ($pid -> $(main_pid mercuryd-bpf.service), $took_over): '$(pins)'; $(flows bpf) entries" \
	sh -c "[ -n '$pins_before' ] && [ \"\$(ls -i /run/mercury/bpf | sort -k2 | tr '\n' ' ')\" = '$pins_before' ] && [ '$took_over' = 'maps=\"taken over from the previous loader\"' ] && [ \$(mercuryctl --datapath bpf dump | grep -c '^flow ') -ge $LAYERS ]"
check bpf-restarted "$(state mercuryd-bpf.service)" [ "$(state mercuryd-bpf.service)" = "notify active running" ]
journalctl -q -u mercuryd-bpf.service -p err >/tmp/bpf-errors
check bpf-journal "journalctl -u mercuryd-bpf -p err: $(wc -l </tmp/bpf-errors) lines $(head -2 /tmp/bpf-errors | tr '\n' ' ')" \
	[ ! -s /tmp/bpf-errors ]

# --- a parameter server for one job, as doc/operations.md sets it up
head -c 32 /dev/urandom | base64 >/etc/mercury/ps-suitejob.secret
chmod 600 /etc/mercury/ps-suitejob.secret
echo "MERCURY_PS_LISTEN=127.0.0.1:7100" >/etc/mercury/ps-suitejob.env
systemctl start mercury-ps@suitejob.service
MERCURY_PS_SECRET_FILE=/etc/mercury/ps-suitejob.secret python3 ps_worker.py suitejob 127.0.0.1:7100 >/tmp/ps.out 2>&1
check ps-serves "mercury-ps@suitejob.service ($(state mercury-ps@suitejob.service), as $(ps -o user= -p "$(main_pid mercury-ps@suitejob.service)" 2>/dev/null)): $(tr '\n' ' ' </tmp/ps.out)" \
	grep -qx "sum ok" /tmp/ps.out || journalctl -q -u mercury-ps@suitejob.service | tail -15
check ps-refuses "a worker without the secret: $(grep -m1 refused /tmp/ps.out)" grep -q "^refused" /tmp/ps.out
check ps-logged "the refusal in the journal: $(journalctl -q -u mercury-ps@suitejob.service | grep -m1 'wrong secret' | cut -c1-160)" \
	sh -c 'journalctl -q -u mercury-ps@suitejob.service | grep -q "wrong secret"'
systemctl stop mercury-ps@suitejob.service
rm -f /etc/mercury/ps-suitejob.secret /etc/mercury/ps-suitejob.env

# --- stop, purge: nothing left
kill "$trainer" 2>/dev/null
wait "$trainer" 2>/dev/null
systemctl disable --now mercuryd-bpf.socket mercuryd-bpf.service >/dev/null 2>&1
check stopped "mercuryd-bpf.socket $(systemctl is-active mercuryd-bpf.socket), mercuryd-bpf $(systemctl is-active mercuryd-bpf.service), $(pgrep -c mercuryd) agents" \
	sh -c '! pgrep -x mercuryd >/dev/null && ! systemctl -q is-active mercuryd.socket mercuryd-bpf.socket mercuryd-bpf.service mercuryd.service'
DEBIAN_FRONTEND=noninteractive apt-get purge -y -q mercury python3-mercury mercury-dkms >/tmp/purge.log 2>&1
rc=$?
check purge "apt-get purge: exit $rc" [ "$rc" = 0 ] || tail -20 /tmp/purge.log | sed 's/^/  apt: /' 
left=$( (ls -d /lib/systemd/system/mercury* /lib/systemd/system/run-mercury-bpf.mount /etc/mercury /usr/sbin/mercury* /run/mercury/mercuryd.sock 2>/dev/null
	find /lib/modules -name 'tcp_mercury.ko*' 2>/dev/null
	getent group mercury
	mountpoint -q /run/mercury/bpf && echo "bpffs at /run/mercury/bpf"
	grep -qw mercury /proc/sys/net/ipv4/tcp_available_congestion_control && echo "CC mercury registered") | tr '\n' ' ')
check nothing-left "units, programs, /etc/mercury, the module, group mercury, BPF pins, the CC: '${left}'" [ -z "$left" ]
finish
