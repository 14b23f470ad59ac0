// SPDX-License-Identifier: GPL-2.0
#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "ps/aggregator.hpp"
#include "ps/wire.hpp"

using mercury::ps::Aggregation;
using mercury::ps::Aggregator;
using mercury::ps::JobShape;
using mercury::ps::ProtocolError;

namespace {

const auto t0 = Aggregator::Clock::time_point{};

std::vector<float> filled(size_t n, float v)
{
    return std::vector<float>(n, v);
}

}  // namespace

TEST_CASE("a chunk's sum goes out once every worker pushed it", "[ps]")
{
    Aggregator agg(JobShape{3, {10}}, 4, Aggregation::kChunk);   // chunks [0,4) [4,8) [8,10)
    CHECK_FALSE(agg.add(0, 0, 4, filled(4, 1), t0));
    CHECK_FALSE(agg.add(2, 0, 4, filled(4, 2), t0));
    const auto sum = agg.add(1, 0, 4, filled(4, 4), t0);
    REQUIRE(sum);
    CHECK(sum->key == 0);
    CHECK(sum->offset == 4);
    CHECK(*sum->values == filled(4, 7));
    // The short last chunk, and the unit starts over for the next iteration.
    for (uint32_t w = 0; w < 3; ++w) {
        const auto s = agg.add(w, 0, 8, filled(2, 1), t0);
        CHECK(static_cast<bool>(s) == (w == 2));
    }
    CHECK_FALSE(agg.add(0, 0, 4, filled(4, 1), t0));
}

TEST_CASE("tensor aggregation answers the whole key at once", "[ps]")
{
    Aggregator agg(JobShape{2, {6}}, 4, Aggregation::kTensor);
    CHECK_FALSE(agg.add(0, 0, 0, filled(4, 1), t0));
    CHECK_FALSE(agg.add(1, 0, 0, filled(4, 1), t0));
    CHECK_FALSE(agg.add(0, 0, 4, filled(2, 1), t0));
    const auto sum = agg.add(1, 0, 4, filled(2, 3), t0);
    REQUIRE(sum);
    CHECK(sum->offset == 0);
    CHECK(*sum->values == std::vector<float>{2, 2, 2, 2, 4, 4});
}

TEST_CASE("pushes that break the job's shape are refused", "[ps]")
{
    Aggregator agg(JobShape{2, {10, 3}}, 4, Aggregation::kChunk);
    CHECK_THROWS_AS(agg.check(2, 0, 4), ProtocolError);      // no such key
    CHECK_THROWS_AS(agg.check(0, 2, 4), ProtocolError);      // not chunk-aligned
    CHECK_THROWS_AS(agg.check(0, 12, 4), ProtocolError);     // past the end
    CHECK_THROWS_AS(agg.check(0, 8, 4), ProtocolError);      // the last chunk is 2 long
    CHECK_THROWS_AS(agg.check(1, 0, 4), ProtocolError);
    CHECK_NOTHROW(agg.check(1, 0, 3));
    CHECK_THROWS_AS(agg.add(2, 0, 0, filled(4, 1), t0), ProtocolError);   // worker 2 of 2
    CHECK_FALSE(agg.add(0, 0, 0, filled(4, 1), t0));
    CHECK_THROWS_WITH(agg.add(0, 0, 0, filled(4, 1), t0), Catch::Contains("twice"));
}

TEST_CASE("the oldest incomplete unit names the workers it waits for", "[ps]")
{
    Aggregator agg(JobShape{70, {8}}, 4, Aggregation::kChunk);   // more workers than a bitmap word
    CHECK_FALSE(agg.oldest_incomplete());
    const auto later = t0 + std::chrono::seconds(5);
    for (uint32_t w = 0; w < 70; ++w)
        if (w != 3 && w != 65)
            agg.add(w, 0, 4, filled(4, 1), t0);
    agg.add(0, 0, 0, filled(4, 1), later);
    const auto stall = agg.oldest_incomplete();
    REQUIRE(stall);
    CHECK(stall->offset == 4);
    CHECK(stall->since == t0);
    CHECK(stall->missing == std::vector<uint32_t>{3, 65});
    agg.add(3, 0, 4, filled(4, 1), t0);
    const auto sum = agg.add(65, 0, 4, filled(4, 1), t0);
    REQUIRE(sum);
    CHECK(*sum->values == filled(4, 70));
    CHECK(agg.oldest_incomplete()->offset == 0);
}

TEST_CASE("the handshake MAC depends on the secret, nonce, fields and job", "[ps]")
{
    mercury::ps::Hello hello{};
    hello.magic = mercury::ps::kMagic;
    hello.worker = 1;
    uint8_t nonce[mercury::ps::kNonceBytes] = {1, 2, 3};
    const auto base = mercury::ps::hello_mac("secret", nonce, hello, "job");
    CHECK(mercury::ps::same_mac(base, mercury::ps::hello_mac("secret", nonce, hello, "job")));
    CHECK_FALSE(mercury::ps::same_mac(base, mercury::ps::hello_mac("Secret", nonce, hello, "job")));
    CHECK_FALSE(mercury::ps::same_mac(base, mercury::ps::hello_mac("secret", nonce, hello, "jab")));
    hello.worker = 2;
    CHECK_FALSE(mercury::ps::same_mac(base, mercury::ps::hello_mac("secret", nonce, hello, "job")));
    hello.worker = 1;
    nonce[0] = 9;
    CHECK_FALSE(mercury::ps::same_mac(base, mercury::ps::hello_mac("secret", nonce, hello, "job")));
}
