// SPDX-License-Identifier: GPL-2.0
#include <arpa/inet.h>

#include <catch2/catch.hpp>

#include "flow_key.hpp"

using mercury::Endpoint;
using mercury::FlowKey;

TEST_CASE("endpoints parse IPv4 and bracketed IPv6", "[flowkey]")
{
    auto v4 = Endpoint::parse("10.0.0.1:5201");
    REQUIRE(v4);
    CHECK(v4->family == AF_INET);
    CHECK(v4->port == 5201);
    CHECK(v4->to_string() == "10.0.0.1:5201");

    auto v6 = Endpoint::parse("[fd00::2]:80");
    REQUIRE(v6);
    CHECK(v6->family == AF_INET6);
    CHECK(v6->to_string() == "[fd00::2]:80");
}

TEST_CASE("malformed endpoints are rejected", "[flowkey]")
{
    for (const char* bad : {"", "10.0.0.1", "10.0.0.1:", "10.0.0.1:0", "10.0.0.1:65536", "10.0.0.1:12x",
                            "host:80", "fd00::1:80", "[fd00::1]80", "300.1.1.1:80"})
        CHECK_FALSE(Endpoint::parse(bad));
}

TEST_CASE("a flow key needs one family on both ends", "[flowkey]")
{
    auto a = Endpoint::parse("10.0.0.1:1");
    auto b = Endpoint::parse("[fd00::1]:2");
    CHECK_FALSE(FlowKey::by_tuple(*a, *b));
    auto key = FlowKey::by_tuple(*a, *Endpoint::parse("10.0.0.2:2"));
    REQUIRE(key);
    CHECK(key->to_string() == "10.0.0.1:1->10.0.0.2:2");
    CHECK(FlowKey::by_cookie(42).to_string() == "cookie:42");
}
