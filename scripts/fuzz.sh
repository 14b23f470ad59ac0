#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Builds the protocol decoder's libFuzzer target with clang (ASan + UBSan)
# and runs it for a bounded time (default 30 s). Prints one PASS/FAIL line.
# usage: fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
out=build/fuzz
mkdir -p "$out/corpus"
if ! build_log=$(clang++-14 -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-Iagent/src -Iinclude tests/fuzz/fuzz_protocol.cpp agent/src/protocol/wire.cpp agent/src/flow_key.cpp \
	-o "$out/fuzz_protocol" 2>&1); then
	echo "$build_log" | tail -n 20 | sed 's/^/    /'
	echo "FAIL fuzz/build: the fuzz target does not compile"
	exit 1
fi
# tests/fuzz/regressions: inputs that once crashed the decoder, replayed first.
if "$out/fuzz_protocol" -max_total_time="$secs" -seed=1 -print_final_stats=1 -artifact_prefix="$out/" \
	"$out/corpus" tests/fuzz/regressions \
	>"$out/fuzz.log" 2>&1; then
	echo "PASS fuzz/protocol-decoder  # $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/fuzz.log" | grep -o '[0-9]*$') inputs in ${secs}s, corpus $(ls "$out/corpus" | wc -l)"
else
	echo "FAIL fuzz/protocol-decoder: see $out/fuzz.log (the input: $out/crash-*; keep it in tests/fuzz/regressions/)"
	tail -30 "$out/fuzz.log"
	exit 1
fi
