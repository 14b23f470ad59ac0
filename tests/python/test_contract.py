# SPDX-License-Identifier: GPL-2.0
"""mercury.contract and the version against their C and CMake sources."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

import mercury
from mercury import contract
from conftest import TOP

PROBE = r"""
#include <cstdio>
#include <asm-generic/socket.h>
#include "mercury/uapi.h"
#include "protocol/wire.hpp"
int main() {
    std::printf("NUM_RANKS %d\nMAX_LANES %d\nSO_COOKIE %d\n", MERCURY_NUM_RANKS,
                mercury::proto::kMaxLanes, SO_COOKIE);
    for (int lanes = 1; lanes <= mercury::proto::kMaxLanes; ++lanes)
        for (int lane = 0; lane < lanes; ++lane)
            std::printf("lane_rank %d %d %d\n", lane, lanes, mercury::proto::lane_rank(lane, lanes));
    for (int lanes = 1; lanes <= mercury::proto::kMaxLanes; ++lanes)
        for (int rank = 0; rank < MERCURY_NUM_RANKS; ++rank)
            std::printf("rank_lane %d %d %d\n", rank, lanes, mercury::proto::rank_lane(rank, lanes));
}
"""


@pytest.fixture(scope="module")
def c_side(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("contract")
    src, exe = d / "probe.cpp", d / "probe"
    src.write_text(PROBE)
    subprocess.run(["g++", "-std=c++20", f"-I{TOP}/include", f"-I{TOP}/agent/src", str(src), "-o", str(exe)],
                   check=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout


def value(out: str, name: str) -> int:
    return int(re.search(rf"^{name} (\d+)$", out, re.M).group(1))


def test_constants_match_c(c_side: str) -> None:
    assert contract.NUM_RANKS == value(c_side, "NUM_RANKS")
    assert contract.MAX_LANES == value(c_side, "MAX_LANES")
    assert contract.SO_COOKIE == value(c_side, "SO_COOKIE")
    assert mercury.NUM_RANKS == contract.NUM_RANKS and mercury.MAX_LANES == contract.MAX_LANES


def test_lane_formulas_match_c(c_side: str) -> None:
    lines = re.findall(r"^(lane_rank|rank_lane) (\d+) (\d+) (\d+)$", c_side, re.M)
    assert len(lines) == 36 + 64
    for fn, a, lanes, want in lines:
        assert getattr(contract, fn)(int(a), int(lanes)) == int(want), (fn, a, lanes)


def test_version_is_cmakes() -> None:
    with open(os.path.join(TOP, "CMakeLists.txt")) as f:
        cmake = re.search(r"project\(mercury VERSION ([0-9.]+)", f.read()).group(1)
    assert mercury.__version__ == cmake


def test_pip_installs_the_tree(tmp_path) -> None:
    target, src = tmp_path / "site", tmp_path / "src"
    # From a copy: setuptools writes its egg-info next to the sources.
    shutil.copytree(os.path.join(TOP, "python"), src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    subprocess.run(["/usr/bin/python3", "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-cache-dir", "--target", str(target), str(src)],
                   check=True, capture_output=True, cwd=tmp_path)
    out = subprocess.run(["/usr/bin/python3", "-c", "import mercury, mercury.torch, mercury.contract; "
                          "print(mercury.__version__, mercury.__file__)"],
                         env={**os.environ, "PYTHONPATH": str(target)}, capture_output=True, text=True, check=True)
    version, path = out.stdout.split()
    assert version == mercury.__version__ and path.startswith(str(target))
    assert (target / "mercury" / "py.typed").exists()


PS_PROBE = r"""
#include <cstdio>
#include <cstddef>
#include "ps/wire.hpp"
using namespace mercury::ps;
int main() {
    std::printf("MAGIC %u\nVERSION %u\nNONCE_BYTES %zu\nMAC_BYTES %zu\nMAX_JOB_NAME %zu\nMAX_LANES %u\n"
                "MAX_KEYS %u\n", kMagic, kVersion, kNonceBytes, kMacBytes, kMaxJobName, kMaxLanes, kMaxKeys);
    std::printf("PUSH %d\nBYE %d\nACK_PUSHES %d\nREADY %d\nPULL %d\nERROR %d\nACK %d\n", int(Type::kPush),
                int(Type::kBye), int(Type::kAckPushes), int(Type::kReady), int(Type::kPull), int(Type::kError),
                int(Type::kAck));
    std::printf("CHALLENGE %zu\nHELLO %zu\nHEADER %zu\n", sizeof(Challenge), offsetof(Hello, mac), sizeof(Header));
    std::printf("UNTAGGED_PAYLOADS %u\n", unsigned(kUntaggedPayloads));
    std::printf("TAG_BYTES %zu\nMAX_ERROR_TEXT %zu\nMIN_SECRET_BYTES %zu\nMIN_SECRET_DISTINCT %zu\nHELLO_PREFIX %zu\n",
                kTagBytes, kMaxErrorText, kMinSecretBytes, kMinSecretDistinct, kHelloPrefix);
}
"""


def test_ps_wire_matches_c(tmp_path) -> None:
    """mercury.ps's wire values and record sizes are agent/src/ps/wire.hpp's."""
    from mercury import ps
    src, exe = tmp_path / "probe.cpp", tmp_path / "probe"
    src.write_text(PS_PROBE)
    subprocess.run(["g++", "-std=c++20", f"-I{TOP}/include", f"-I{TOP}/agent/src", str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    for name in ("MAGIC", "VERSION", "NONCE_BYTES", "MAC_BYTES", "MAX_JOB_NAME", "MAX_LANES", "MAX_KEYS",
                 "PUSH", "BYE", "ACK_PUSHES", "READY", "PULL", "ERROR", "ACK", "TAG_BYTES", "MAX_ERROR_TEXT",
                 "MIN_SECRET_BYTES", "MIN_SECRET_DISTINCT", "HELLO_PREFIX", "UNTAGGED_PAYLOADS"):
        assert getattr(ps, name) == value(out, name), name
    assert ps.CHALLENGE.size == value(out, "CHALLENGE")
    assert ps.HELLO.size == value(out, "HELLO")
    assert ps.HEADER.size == value(out, "HEADER")
