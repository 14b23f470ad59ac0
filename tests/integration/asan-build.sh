# SPDX-License-Identifier: GPL-2.0
# Sourced by the suites that run on the sanitizer build (run-ps.sh,
# run-nccl-asan.sh): one configuration of BUILD/asan for both, so neither
# rebuilds what the other built.
#
# asan_build BUILD_DIR TARGET...: configures BUILD_DIR/asan (Debug, ASan and
# UBSan, shared libraries too) and builds TARGETs; the log in
# BUILD_DIR/asan-build.log. Returns non-zero on failure.
asan_build() {
	local build=$1
	shift
	local flags="-fsanitize=address,undefined"
	cmake -S "$top" -B "$build/asan" -DCMAKE_BUILD_TYPE=Debug -DMERCURY_STATIC=OFF -DMERCURY_BPF=OFF \
		-DCMAKE_CXX_FLAGS="$flags -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
		-DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null &&
		cmake --build "$build/asan" -j"$(nproc)" --target "$@" >"$build/asan-build.log" 2>&1
}
