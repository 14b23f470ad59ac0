#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a
# bounded time (default 30 s each): the agent protocol decoder
# (tests/fuzz/fuzz_protocol.cpp) and the NCCL plugin's handshake and
# receive stream (tests/fuzz/fuzz_nccl.cpp, over loopback TCP in a network
# namespace of its own: run as root). Prints one PASS/FAIL line per target;
# exits non-zero on any failure.
# usage: fuzz.sh [SECONDS]
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/netns.sh
secs=${1:-30}
out=build/fuzz
mkdir -p "$out"
cxx=(clang++-14 -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
	-Iagent/src -Iagent/include -Iinclude)
failed=0

# build NAME SOURCES...: the target, or a FAIL line.
build() {
	local name=$1 log
	shift
	if ! log=$("${cxx[@]}" "$@" -o "$out/$name" 2>&1); then
		echo "$log" | tail -n 20 | sed 's/^/    /'
		echo "FAIL fuzz/$name: the fuzz target does not compile"
		return 1
	fi
}

# run NAME LABEL PREFIX CORPUS...: fuzz for $secs (PREFIX: a command the
# target runs under, e.g. a network namespace); inputs that once crashed it
# are among the corpora, replayed first.
run() {
	local name=$1 label=$2 prefix=$3
	shift 3
	mkdir -p "$out/$name-corpus"
	if $prefix "$out/$name" -max_total_time="$secs" -seed=1 -max_len=8192 -print_final_stats=1 \
		-artifact_prefix="$out/$name-" "$out/$name-corpus" "$@" >"$out/$name.log" 2>&1; then
		echo "PASS fuzz/$label  # $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$name.log" |
			grep -o '[0-9]*$') inputs in ${secs}s, corpus $(ls "$out/$name-corpus" | wc -l)"
	else
		echo "FAIL fuzz/$label: see $out/$name.log (the input: $out/$name-crash-*; once fixed, keep it in $1)"
		tail -30 "$out/$name.log"
		failed=1
	fi
}

if build fuzz_protocol tests/fuzz/fuzz_protocol.cpp agent/src/protocol/wire.cpp agent/src/flow_key.cpp; then
	run fuzz_protocol protocol-decoder "" tests/fuzz/regressions
else
	failed=1
fi

# The plugin's transport and what it links: libmercury (its lanes) and the log.
if build fuzz_nccl -Inccl/src tests/fuzz/fuzz_nccl.cpp nccl/src/comm.cpp nccl/src/devices.cpp nccl/src/endpoint.cpp nccl/src/lanes.cpp \
	agent/src/client/client.cpp agent/src/protocol/wire.cpp agent/src/flow_key.cpp agent/src/common/log.cpp \
	-lpthread; then
	# The seeds must get past the handshake and complete, or the fuzzer
	# would start where a hostile peer starts, not where a real one does.
	seeds=$(MERCURY_FUZZ_VERBOSE=1 in_netns "$out/fuzz_nccl" -runs=0 tests/fuzz/nccl-seeds/* 2>&1 |
		grep -c '^fuzz_nccl: accepted, complete')
	if [ "$seeds" -lt "$(ls tests/fuzz/nccl-seeds | wc -l)" ]; then
		echo "FAIL fuzz/nccl-receive: only $seeds runs of the $(ls tests/fuzz/nccl-seeds | wc -l) seeds completed"
		failed=1
	else
		run fuzz_nccl nccl-receive in_netns tests/fuzz/nccl-seeds
	fi
else
	failed=1
fi
exit $failed
