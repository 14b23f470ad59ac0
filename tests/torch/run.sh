#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make torchtest`: mercury.torch on real PyTorch (Debian's python3-torch),
# natively with the BPF datapath. Registers the datapath (a loader mercuryd,
# unless a CC named mercury is already there), starts the worker's mercuryd
# and two mercury-ps servers (job torchtest, a secret of this run's) in a
# network namespace of its own and runs tests/torch/checks.py there (Gloo
# and the servers over that namespace's loopback). (mercury-ps's own suite
# is tests/integration/run-ps.sh.) Prints PASS/FAIL lines and
# "torch: N passed, M failed"; exits non-zero on any failure.
#
# With ROOT, the Python side (checks.py, its workers, mercury.torch and the
# libmercury it loads) runs in that Debian root instead, on its Python and
# PyTorch (scripts/torch-root.sh makes one with Debian 13's PyTorch 2.6);
# mercuryd, mercury-ps and the datapath are this host's, as above.
#
# usage: run.sh BIN_DIR [ROOT]      (as root)
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
python=(/usr/bin/python3)
[ -n "${2:-}" ] && python=("$top/tests/torch/in-root.sh" "$2" "$build" /usr/bin/python3)
export PATH=$build/bin:$build/tests/bin:$PATH
. "$top/scripts/bpf-loader.sh"

ns=mercury-torch
sock=/run/mercury-torch-agent.sock
log=${TORCH_LOG_DIR:-/tmp}/mercury-torch-agent.log
ps_log=${TORCH_LOG_DIR:-/tmp}/mercury-torch-ps.log
servers="127.0.0.1:7101,127.0.0.1:7102"
secret_dir=$(mktemp -d)
agent="" ps_pids=""
cleanup() {
	[ -n "$agent" ] && kill "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
	for p in $ps_pids; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	rm -rf "$secret_dir"
	ip netns del $ns 2>/dev/null
	bpf_loader_stop
	rm -f "$sock"
}
trap cleanup EXIT

if ! "${python[@]}" -c 'import torch' 2>/dev/null; then
	echo "FAIL torch/setup: ${2:-this host} has no Debian python3-torch (make deps, or scripts/torch-root.sh, installs it)"
	echo "torch: 0 passed, 1 failed"
	exit 1
fi
if ! bpf_loader_start torch-loader "$log"; then
	echo "FAIL torch/setup: the BPF datapath did not register (see $log)"
	echo "torch: 0 passed, 1 failed"
	exit 1
fi
ip netns del $ns 2>/dev/null
ip netns add $ns
ip -n $ns link set lo up
ip netns exec $ns mercuryd --datapath=bpf --socket $sock --check-ms 100 2>>"$log" &
agent=$!
for _ in $(seq 100); do [ -S $sock ] && break; sleep 0.05; done
head -c 32 /dev/urandom | base64 >"$secret_dir/secret"
chmod 600 "$secret_dir/secret"
: >"$ps_log"
for s in ${servers//,/ }; do
	MERCURY_SOCKET=$sock ip netns exec $ns mercury-ps --listen "$s" --job torchtest \
		--secret-file "$secret_dir/secret" --cc mercury 2>>"$ps_log" &
	ps_pids="$ps_pids $!"
done

# USE_LIBUV=0: Debian builds PyTorch 2.x without libuv, which its TCP
# store asks for by default (1.13 has no such option and ignores it).
USE_LIBUV=0 MERCURY_SOCKET=$sock MERCURY_JOB=torchtest MERCURY_PS_SECRET_FILE="$secret_dir/secret" GLOO_SOCKET_IFNAME=lo \
	LIBMERCURY="$build/agent/libmercury.so" \
	ip netns exec $ns "${python[@]}" "$top/tests/torch/checks.py" --mercuryctl "$build/bin/mercuryctl" \
	--servers "$servers"
rc=$?
for p in $ps_pids; do
	kill -0 "$p" 2>/dev/null || { echo "FAIL torch/ps-alive: a mercury-ps died (see $ps_log)"; rc=1; }
done
if grep -q 'level=error' "$ps_log"; then
	echo "FAIL torch/ps-log: the servers logged errors in runs that should have none: $(grep -m1 'level=error' "$ps_log")"
	rc=1
fi
kill -0 "$agent" 2>/dev/null || { echo "FAIL torch/agent-alive: mercuryd died (see $log)"; rc=1; }
exit $rc
