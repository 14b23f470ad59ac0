#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The BPF datapath's behaviour and jobs checks, again and again, where users'
# hosts are: a busy CPU beside them and, every other run, random losses on
# every link. What it is for: a window of 0 (the kernel WARNs once per call
# site and boot, so one run on a machine that already warned sees nothing)
# and checks that pass only on a quiet machine. Every run has the datapath's
# zero_windows counter and the mercury-probe windows observer on, and
# re-arms the kernel's WARN_ON_ONCEs after each test (bpf_tests.sh).
#
# usage: stress.sh BUILD_DIR [RUNS] [OUT_DIR]   (as root; default 20 runs)
# env:   TESTS="..."   the tests to run (default: the jobs and behaviour
#                      suites' tests, tests/cc/jobs.sh and behaviour.sh)
#        LOAD=N        busy loops beside them, niced (default 2)
#        LOSS_PPM=N    random loss on the lossy runs, per million data
#                      segments (default 5000: 0.5%); 0 for none
#
# What it judges: no window <= 0 held by a mercury socket (the probe; in
# the VM zero_windows) and no kernel warning, over all runs, and that every
# run finished. The behaviour checks are the suites' to judge, in their own
# conditions: those that failed here under load and loss are listed per run
# (INFO) and counted, with the windows the datapath repaired after the
# kernel skipped a hook and the values of jobs/weights. Closes with
# "stress: N passed, M failed" and exits non-zero on any FAIL.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: stress.sh BUILD_DIR [RUNS] [OUT_DIR]}" && pwd)
runs=${2:-20}
out=${3:-$(mktemp -d /tmp/mercury-stress.XXXXXX)}
mkdir -p "$out"
rm -f "$out"/run-*.log "$out/summary.txt"	# an earlier run's, in the same folder
load=${LOAD:-2}
loss=${LOSS_PPM:-5000}
if [ -z "${TESTS:-}" ]; then
	TESTS=$(cd "$top/tests/cc" && bash -c '. ./behaviour.sh; . ./jobs.sh; echo $BEHAVIOUR_TESTS $JOBS_TESTS')
fi

busy=()
stop_load() { [ "${#busy[@]}" -eq 0 ] || kill "${busy[@]}" 2>/dev/null; }
trap stop_load EXIT
for _ in $(seq "$load"); do
	nice -n 19 sh -c 'while :; do :; done' &
	busy+=($!)
done

{
echo "INFO stress: $runs runs of: $TESTS"
echo "INFO stress: $load busy loops; random loss of $loss ppm on even runs; logs in $out"
for i in $(seq "$runs"); do
	ppm=0
	[ $((i % 2)) = 0 ] && ppm=$loss
	start=$(date +%s)
	ONLY="$TESTS" LOSS_PPM=$ppm "$top/tests/native/bpf_tests.sh" "$build" >"$out/run-$i.log" 2>&1
	summary_line=$(grep '^bpf: ' "$out/run-$i.log" | tail -1)
	what="run $i (loss $ppm ppm, $(($(date +%s) - start)) s): ${summary_line:-did not finish}"
	if [ -z "$summary_line" ]; then
		echo "FAIL stress/run-$i: $what"
	elif grep -q '^FAIL' "$out/run-$i.log"; then
		# Judged by the suites in their own conditions; listed here.
		echo "INFO stress/run-$i: $what; failed under load and loss: $(grep '^FAIL' "$out/run-$i.log" | sed 's/:.*//; s/^FAIL //' | tr '\n' ' ')"
	else
		echo "PASS stress/run-$i  # $what"
	fi
done

logs=("$out"/run-*.log)
zero=$(cat "${logs[@]}" | grep -cE '^FAIL [^ ]*/(zero-windows|zero-windows-seen|windows-probe)')
warn=$(cat "${logs[@]}" | grep -cE '^FAIL [^ ]*/dmesg')
probe=$(cat "${logs[@]}" | grep -c '^PASS bpf/no-zero-windows')
echo "== over $runs runs"
echo "INFO checks that failed (count, name):"
cat "${logs[@]}" | grep '^FAIL' | sed 's/:.*//; s/^FAIL //' | sort | uniq -c | sort -rn | sed 's/^/INFO   /'
echo "INFO windows found out of range and repaired by the datapath (a hook the kernel did not run): $(cat "${logs[@]}" | grep -c '^INFO [^ ]*/zero-windows:') tests"
echo "INFO recoveries the kernel entered without running BPF (cc/recoveries-observed): $(cat "${logs[@]}" | sed -n 's/^INFO cc\/recoveries-observed: the kernel ran no BPF program for \([0-9]*\) of.*/\1/p' | awk '{ n += $1 } END { print n + 0 }')"
echo "INFO jobs/weights, job 1 : job 2 by run: $(cat "${logs[@]}" | sed -n 's/^[A-Z]* jobs\/weights .*last 4 s: \([0-9.]*\):1.*/\1/p' | tr '\n' ' ')"
verdict() {	# verdict NAME OK DETAIL
	if [ "$2" = 1 ]; then echo "PASS $1  # $3"; else echo "FAIL $1: $3"; fi
}
verdict stress/windows "$([ "$zero" = 0 ] && [ "$probe" -gt 0 ] && echo 1)" \
	"windows <= 0 held by a mercury socket (mercury-probe windows; zero_windows in the VM) in $zero tests; the probe watched $probe of $runs runs whole"
verdict stress/kernel-log "$([ "$warn" = 0 ] && echo 1)" "kernel warnings in $warn tests of $runs runs"
} | tee "$out/summary.txt"
passed=$(grep -c '^PASS' "$out/summary.txt")
failed=$(grep -c '^FAIL' "$out/summary.txt")
echo "stress: $passed passed, $failed failed"
[ "$failed" = 0 ]
