// SPDX-License-Identifier: GPL-2.0
// What user space checks before anything reaches a datapath (the BPF maps
// cannot refuse a value), and the shared map layouts.
#include <cerrno>
#include <cstddef>

#include <catch2/catch.hpp>

#include "datapath/datapath.hpp"
#include "mercury/bpf_maps.h"

using mercury::Params;
using mercury::Priority;

TEST_CASE("priorities outside the uapi limits are refused with a reason", "[datapath]")
{
    CHECK(mercury::validate(Priority{0, 1, 100}));
    CHECK(mercury::validate(Priority{7, 1024, 3600000}));
    CHECK(mercury::validate(Priority{3, std::nullopt, std::nullopt}));

    const auto rank = mercury::validate(Priority{8, std::nullopt, std::nullopt});
    CHECK(rank.error == -EINVAL);
    CHECK(rank.message == "rank 8 is out of range [0..7]");
    CHECK(mercury::validate(Priority{0, 0, std::nullopt}).error == -EINVAL);
    CHECK(mercury::validate(Priority{0, 1025, std::nullopt}).error == -EINVAL);
    CHECK(mercury::validate(Priority{0, std::nullopt, 99}).error == -EINVAL);
}

TEST_CASE("parameters outside the uapi limits are refused", "[datapath]")
{
    Params ok;
    ok.cwnd_floor = 64;
    ok.delay_thresh_us = 0;
    ok.max_hold_ms = 10;
    CHECK(mercury::validate(ok));

    Params floor;
    floor.cwnd_floor = 0;
    CHECK(mercury::validate(floor).message == "cwnd_floor 0 is out of range [1..64]");
    Params hold;
    hold.max_hold_ms = 60001;
    CHECK(mercury::validate(hold).error == -EINVAL);
    Params debug;
    debug.debug = 2;
    CHECK(mercury::validate(debug).error == -EINVAL);
}

TEST_CASE("datapath kinds parse from their names only", "[datapath]")
{
    CHECK(mercury::parse_datapath_kind("auto") == mercury::DatapathKind::kAuto);
    CHECK(mercury::parse_datapath_kind("kmod") == mercury::DatapathKind::kKmod);
    CHECK(mercury::parse_datapath_kind("bpf") == mercury::DatapathKind::kBpf);
    CHECK_FALSE(mercury::parse_datapath_kind("BPF"));
    CHECK_FALSE(mercury::parse_datapath_kind(""));
    CHECK(mercury::to_string(mercury::DatapathKind::kBpf) == "bpf");
}

// The BPF target and x86-64 must lay these out alike; explicit padding
// makes the sizes and offsets below hold on both.
TEST_CASE("BPF map layouts have no implicit padding", "[datapath]")
{
    CHECK(sizeof(mercury_bpf_tag_key) == 16);
    CHECK(sizeof(mercury_bpf_flow_key) == 56);
    CHECK(offsetof(mercury_bpf_flow_key, cookie) == 16);
    CHECK(offsetof(mercury_bpf_flow_key, saddr) == 24);
    CHECK(sizeof(mercury_bpf_entry) == 16);
    CHECK(sizeof(mercury_bpf_config) == 40);
    CHECK(sizeof(mercury_bpf_state) == 8 * (MERCURY_NUM_JOBS * (MERCURY_NUM_RANKS + 4) + MERCURY_BPF_CNT_MAX));
    CHECK(offsetof(mercury_bpf_entry, job) == 11);
    CHECK(sizeof(mercury_bpf_sock_state) == 16);
}
