# SPDX-License-Identifier: GPL-2.0
"""backend="ps" without servers: placement and the secret."""
from __future__ import annotations

import pytest

from mercury import ps
from mercury.torch.ps import MXNET_SPLIT_ELEMS, PARTITION_BYTES, place


def covers(parts, size: int) -> bool:
    """The parts tile [0, size) without gaps or overlaps."""
    at = 0
    for p in sorted(parts, key=lambda p: p.start):
        if p.start != at or p.end <= p.start:
            return False
        at = p.end
    return at == size


def test_balanced_cuts_partitions_and_evens_the_load() -> None:
    step = PARTITION_BYTES // 4
    sizes = [3 * step + 5, 10, step]
    out = place(sizes, 2, "balanced")
    assert [len(parts) for parts in out] == [4, 1, 1]
    for parts, size in zip(out, sizes):
        assert covers(parts, size)
        assert all(p.end - p.start <= step for p in parts)
    load = [0, 0]
    for parts in out:
        for p in parts:
            load[p.server] += p.end - p.start
    assert abs(load[0] - load[1]) <= step
    # Keys are numbered per server, densely, in bucket order.
    for s in (0, 1):
        assert [p.key for parts in out for p in parts if p.server == s] == list(range(sum(
            p.server == s for parts in out for p in parts)))


def test_mxnet_splits_big_buckets_over_all_servers_and_round_robins_the_rest() -> None:
    out = place([MXNET_SPLIT_ELEMS + 1, 7, 9, 11], 3, "mxnet")
    assert sorted(p.server for p in out[0]) == [0, 1, 2] and covers(out[0], MXNET_SPLIT_ELEMS + 1)
    assert [parts[0].server for parts in out[1:]] == [0, 1, 2]
    assert all(len(parts) == 1 and parts[0].start == 0 for parts in out[1:])


def test_place_is_deterministic_and_checks_its_arguments() -> None:
    assert place([5, 6, 7], 2, "balanced") == place([5, 6, 7], 2, "balanced")
    with pytest.raises(ValueError):
        place([5], 0, "balanced")
    with pytest.raises(ValueError):
        place([5], 1, "random")


def test_secret_from_argument_file_or_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("MERCURY_PS_SECRET", raising=False)
    monkeypatch.delenv("MERCURY_PS_SECRET_FILE", raising=False)
    with pytest.raises(ps.PsError, match="no secret"):
        ps.read_secret()
    given = "given: 0123456789abcdefghijklmnop"
    assert ps.read_secret(given) == given.encode()
    monkeypatch.setenv("MERCURY_PS_SECRET", "from env: 0123456789abcdefghijklm")
    assert ps.read_secret() == b"from env: 0123456789abcdefghijklm"
    f = tmp_path / "secret"
    f.write_bytes(b"from file: 0123456789abcdefghijkl\n")
    monkeypatch.setenv("MERCURY_PS_SECRET_FILE", str(f))
    assert ps.read_secret() == b"from file: 0123456789abcdefghijkl"


def test_weak_secrets_are_refused_with_the_rule() -> None:
    for weak in ("given", "x" * 64, "ab" * 20):
        with pytest.raises(ps.PsError, match="at least 32 bytes of at least 10 different values"):
            ps.read_secret(weak)
    assert ps.weak_secret(b"0123456789abcdef0123456789abcdef") == ""


def test_frame_tags_follow_the_frame_number() -> None:
    a, b = bytes(32), bytes([1] * 32)
    up = ps.FrameMac(b"k" * 32, a, b, ps.FrameMac.TO_SERVER)
    again = ps.FrameMac(b"k" * 32, a, b, ps.FrameMac.TO_SERVER)
    first = up.next(b"header", b"payload")
    assert again.next(b"header", b"payload") == first
    assert up.next(b"header", b"payload") != first                 # frame 1
    assert ps.FrameMac(b"k" * 32, a, b, ps.FrameMac.TO_WORKER).next(b"header", b"payload") != first


def test_server_addresses_are_checked() -> None:
    assert ps.parse_address("10.0.0.1:7000") == ("10.0.0.1", 7000)
    assert ps.parse_address("[fd00::1]:7000") == ("fd00::1", 7000)
    for bad in ("10.0.0.1", "10.0.0.1:0", "host:99999", ":x"):
        with pytest.raises(ValueError):
            ps.parse_address(bad)
