// SPDX-License-Identifier: GPL-2.0
// The NCCL plugin's pure parts: what a peer's Hello may hold, how a message
// is cut, which lane a traffic class is, how many sockets NCCL's
// environment asks for, and how an address goes into NCCL's handle
// (tests/tools/mercury_nccl_harness.cpp drives the rest).
#include <arpa/inet.h>

#include <catch2/catch.hpp>

#include "devices.hpp"
#include "endpoint.hpp"
#include "lanes.hpp"
#include "nccl_net.h"
#include "wire.hpp"

using namespace mercury::nccl;

namespace {

Hello good_hello()
{
    return Hello{kMagic, kVersion, 2, 0xfeed, 7, 65536, 4, 3, 0};
}

}  // namespace

TEST_CASE("a Hello is taken only with the listener's magic, secret, counts and ranges")
{
    CHECK(hello_error(good_hello(), 0xfeed, 4) == nullptr);
    Hello h = good_hello();
    h.magic ^= 1;
    CHECK(hello_error(h, 0xfeed, 4) != nullptr);
    CHECK(hello_error(good_hello(), 0xbeef, 4) != nullptr);   // another listener's secret
    CHECK(hello_error(good_hello(), 0xfeed, 2) != nullptr);   // another socket count
    h = good_hello();
    h.index = 5;   // data sockets 1..4, control 0
    CHECK(hello_error(h, 0xfeed, 4) != nullptr);
    h.index = 4;
    CHECK(hello_error(h, 0xfeed, 4) == nullptr);
    h.lane = kLanes;
    CHECK(hello_error(h, 0xfeed, 4) != nullptr);
    h = good_hello();
    h.min_chunk = kMinChunkFloor - 1;
    CHECK(hello_error(h, 0xfeed, 4) != nullptr);
    h.min_chunk = kMinChunkCeiling + 1;
    CHECK(hello_error(h, 0xfeed, 4) != nullptr);
}

TEST_CASE("a message is cut as NCCL's socket transport cuts it")
{
    CHECK(chunk_size(1000, 0, 65536) == 1000);                 // no data sockets: one piece
    CHECK(chunk_size(1000, 8, 65536) == 65536);                // never below the smallest chunk
    CHECK(chunk_size(8u << 20, 8, 65536) == 1u << 20);         // an even share
    CHECK(chunk_size((8u << 20) + 1, 8, 65536) == (1u << 20) + 1);   // rounded up: 8 chunks cover it
}

TEST_CASE("a traffic class is a lane; unset is the least urgent; others are refused")
{
    std::string error;
    CHECK(lane_of_class(NCCL_NET_TRAFFIC_CLASS_UNDEF, &error) == kDefaultLane);
    CHECK(kDefaultLane == kLanes - 1);
    for (int c = 0; c < kLanes; ++c)
        CHECK(lane_of_class(c, &error) == c);
    CHECK(error.empty());
    CHECK(lane_of_class(kLanes, &error) == -1);
    CHECK(error.find("traffic class 8") != std::string::npos);
    error.clear();
    CHECK(lane_of_class(-2, &error) == -1);
    CHECK(!error.empty());
}

TEST_CASE("socket counts follow NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD, NCCL's defaults and limits")
{
    std::string error;
    // A virtual NIC (no vendor): NCCL's default is no data sockets.
    CHECK(nccl_socket_count("lo", nullptr, nullptr, &error) == 0);
    CHECK(nccl_socket_count("lo", "-2", "-2", &error) == 0);
    CHECK(nccl_socket_count("lo", "2", "4", &error) == 8);
    CHECK(nccl_socket_count("lo", "1", nullptr, &error) == 1);   // 1 per thread by default
    CHECK(error.empty());
    CHECK(nccl_socket_count("lo", "4", "16", &error) == 64);
    CHECK(nccl_socket_count("lo", "4", "17", &error) == 64);      // at most 64: 16 per thread
    CHECK(error.find("more than 64") != std::string::npos);
    error.clear();
    CHECK(nccl_socket_count("lo", "64", "1", &error) == 16);      // at most 16 threads
    CHECK(nccl_socket_count("lo", "two", "4", &error) == 0);      // not a count: its default
    CHECK(error.find("NCCL_SOCKET_NTHREADS=two") != std::string::npos);
}

TEST_CASE("an endpoint goes into NCCL's handle and back, either family")
{
    for (const char* text : {"10.1.2.3", "fe80::1:2"}) {
        sockaddr_storage a{};
        if (std::string(text).find(':') == std::string::npos) {
            auto* in = reinterpret_cast<sockaddr_in*>(&a);
            in->sin_family = AF_INET;
            REQUIRE(::inet_pton(AF_INET, text, &in->sin_addr) == 1);
        } else {
            auto* in6 = reinterpret_cast<sockaddr_in6*>(&a);
            in6->sin6_family = AF_INET6;
            REQUIRE(::inet_pton(AF_INET6, text, &in6->sin6_addr) == 1);
        }
        const Endpoint e = Endpoint(a).with_port(5000);
        Handle h{};
        e.to_handle(&h);
        const auto back = Endpoint::from_handle(h);
        REQUIRE(back);
        CHECK(back->family() == e.family());
        CHECK(back->port() == 5000);
        CHECK(back->text() == e.text());
        CHECK(back->length() == (e.family() == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6)));
    }
    sockaddr_storage v4{};
    v4.ss_family = AF_INET;
    CHECK(Endpoint(v4).with_port(80).text() == "0.0.0.0:80");
    Handle bad{};
    bad.family = AF_UNIX;
    CHECK_FALSE(Endpoint::from_handle(bad));
}
