#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The GPU check: Mercury's NCCL plugin and mercury.torch on a machine with
# NVIDIA GPUs and a CUDA PyTorch (tests/gpu/check.py says what it checks).
# Under 5 minutes, nothing fetched from the network. Prints INFO, PASS, FAIL
# and SKIP lines and "gpu-check: N passed, M failed, K skipped"; exits 1 on
# any FAIL, 2 if it cannot start.
#
# Needs the plugin and libmercury built (make, or this tree's build/user
# copied over); builds them itself where cmake and a compiler are there.
# Starts a mercuryd of its own when it can (root and a datapath: the module
# or BPF struct_ops), so that mercury.torch runs its lanes; without one it
# trains on one lane and the check says so.
#
# usage: scripts/gpu-check.sh [BUILD_DIR]      (default build/user)
#        PYTHON=/path/to/python3 picks the Python with the CUDA PyTorch.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build/user}

python=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
	command -v "$p" >/dev/null 2>&1 || continue
	if "$p" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
		python=$p
		break
	fi
done
if [ -z "$python" ]; then
	echo "gpu-check: no Python here imports a PyTorch that sees a GPU (set PYTHON=...)" >&2
	command -v nvidia-smi >/dev/null && nvidia-smi -L >&2
	exit 2
fi

if [ ! -f "$build/lib/libnccl-net-mercury.so" ]; then
	if command -v cmake >/dev/null && command -v c++ >/dev/null; then
		echo "INFO building the plugin and libmercury in $build"
		cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
			cmake --build "$build" -j"$(nproc)" --target nccl-net-mercury mercury >/dev/null ||
			{ echo "gpu-check: building in $build failed" >&2; exit 2; }
	else
		echo "gpu-check: $build/lib/libnccl-net-mercury.so missing and no cmake/c++ to build it" >&2
		exit 2
	fi
fi

agent=""
tmp=$(mktemp -d)
cleanup() {
	[ -n "$agent" ] && kill "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
if [ "$(id -u)" = 0 ] && [ -x "$build/bin/mercuryd" ]; then
	"$build/bin/mercuryd" --socket "$tmp/agent.sock" 2>"$tmp/agent.log" &
	agent=$!
	for _ in $(seq 50); do [ -S "$tmp/agent.sock" ] && break; sleep 0.1; done
	if [ -S "$tmp/agent.sock" ]; then
		export MERCURY_SOCKET=$tmp/agent.sock
		echo "INFO mercuryd running: $(head -1 "$tmp/agent.log")"
	else
		echo "INFO no mercuryd: $(tail -1 "$tmp/agent.log"); mercury.torch trains on one lane"
		kill "$agent" 2>/dev/null; wait "$agent" 2>/dev/null; agent=""
	fi
else
	echo "INFO no mercuryd (needs root and $build/bin/mercuryd): mercury.torch trains on one lane"
fi
echo "INFO $(uname -r), $("$python" --version 2>&1) at $(command -v "$python")"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader |
	sed 's/^/INFO GPU: /'

export PYTHONPATH=$top/python${PYTHONPATH:+:$PYTHONPATH}
export LD_LIBRARY_PATH=$build/agent:$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
timeout 290 "$python" "$top/tests/gpu/check.py" --plugin-dir "$build/lib"
rc=$?
[ $rc = 124 ] && echo "FAIL gpu-check: did not finish in 290 s" && rc=1
exit $rc
