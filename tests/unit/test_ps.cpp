// SPDX-License-Identifier: GPL-2.0
#include <catch2/catch.hpp>

#include <numeric>
#include <string>
#include <vector>

#include "ps/admission.hpp"
#include "ps/aggregator.hpp"
#include "ps/wire.hpp"

using mercury::ps::Aggregation;
using mercury::ps::Aggregator;
using mercury::ps::JobShape;
using mercury::ps::ProtocolError;

namespace {

const auto t0 = Aggregator::Clock::time_point{};
const std::string kSecret = "ZmFrZSBzZWNyZXQgZm9yIHRoZSB1bml0IHRlc3Rz";

std::vector<float> filled(size_t n, float v)
{
    return std::vector<float>(n, v);
}

}  // namespace

TEST_CASE("a chunk's sum goes out once every worker pushed it", "[ps]")
{
    Aggregator agg(JobShape{3, {10}}, 4, Aggregation::kChunk);   // chunks [0,4) [4,8) [8,10)
    CHECK_FALSE(agg.add(0, 0, 4, 0, filled(4, 1), t0));
    CHECK_FALSE(agg.add(2, 0, 4, 0, filled(4, 2), t0));
    const auto sum = agg.add(1, 0, 4, 0, filled(4, 4), t0);
    REQUIRE(sum);
    CHECK(sum->key == 0);
    CHECK(sum->offset == 4);
    CHECK(*sum->values == filled(4, 7));
    // The short last chunk, and the unit starts over for the next iteration.
    for (uint32_t w = 0; w < 3; ++w) {
        const auto s = agg.add(w, 0, 8, 0, filled(2, 1), t0);
        CHECK(static_cast<bool>(s) == (w == 2));
    }
    CHECK_FALSE(agg.add(0, 0, 4, 1, filled(4, 1), t0));   // the chunk's next round
}

TEST_CASE("a push of another round than the unit's is refused and summed nowhere", "[ps]")
{
    Aggregator agg(JobShape{2, {8}}, 4, Aggregation::kChunk);
    CHECK_FALSE(agg.add(0, 0, 0, 0, filled(4, 1), t0));
    const auto first = agg.add(1, 0, 0, 0, filled(4, 2), t0);
    REQUIRE(first);
    CHECK(first->iteration == 0);
    // Worker 0's push of round 0, delivered again after its sum went out:
    // refused (it was summed into round 1 before), and round 1 unchanged.
    CHECK_THROWS_WITH(agg.add(0, 0, 0, 0, filled(4, 1), t0), Catch::Contains("sum went out already"));
    CHECK_THROWS_WITH(agg.add(0, 0, 0, 2, filled(4, 1), t0), Catch::Contains("at iteration 1"));
    CHECK_FALSE(agg.add(0, 0, 0, 1, filled(4, 10), t0));
    const auto second = agg.add(1, 0, 0, 1, filled(4, 20), t0);
    REQUIRE(second);
    CHECK(second->iteration == 1);
    CHECK(*second->values == filled(4, 30));
    // Chunks keep their own rounds: the other chunk is still at 0.
    CHECK_THROWS_AS(agg.add(0, 0, 4, 1, filled(4, 1), t0), ProtocolError);
    CHECK_FALSE(agg.add(0, 0, 4, 0, filled(4, 1), t0));
}

TEST_CASE("a job's footprint counts its records, not only its gradients", "[ps]")
{
    // 65,536 one-element keys: 256 KiB of gradients, megabytes of records.
    JobShape many{256, std::vector<uint64_t>(65536, 1)};
    CHECK(many.bytes() == 65536 * 4);
    CHECK(many.footprint(16384) > 10 * many.bytes());
    CHECK(many.footprint(16384) > (uint64_t{16} << 20));   // 256 reply lanes per key alone
    // One large key: the records are noise.
    JobShape big{4, {uint64_t{1} << 24}};
    CHECK(big.footprint(16384) < big.bytes() + big.bytes() / 100);
}

TEST_CASE("tensor aggregation answers the whole key at once", "[ps]")
{
    Aggregator agg(JobShape{2, {6}}, 4, Aggregation::kTensor);
    CHECK_FALSE(agg.add(0, 0, 0, 0, filled(4, 1), t0));
    CHECK_FALSE(agg.add(1, 0, 0, 0, filled(4, 1), t0));
    CHECK_FALSE(agg.add(0, 0, 4, 0, filled(2, 1), t0));
    const auto sum = agg.add(1, 0, 4, 0, filled(2, 3), t0);
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
    CHECK_THROWS_AS(agg.add(2, 0, 0, 0, filled(4, 1), t0), ProtocolError);   // worker 2 of 2
    CHECK_FALSE(agg.add(0, 0, 0, 0, filled(4, 1), t0));
    CHECK_THROWS_WITH(agg.add(0, 0, 0, 0, filled(4, 1), t0), Catch::Contains("twice"));
}

TEST_CASE("the oldest incomplete unit names the workers it waits for", "[ps]")
{
    Aggregator agg(JobShape{70, {8}}, 4, Aggregation::kChunk);   // more workers than a bitmap word
    CHECK_FALSE(agg.oldest_incomplete());
    const auto later = t0 + std::chrono::seconds(5);
    for (uint32_t w = 0; w < 70; ++w)
        if (w != 3 && w != 65)
            agg.add(w, 0, 4, 0, filled(4, 1), t0);
    agg.add(0, 0, 0, 0, filled(4, 1), later);
    const auto stall = agg.oldest_incomplete();
    REQUIRE(stall);
    CHECK(stall->offset == 4);
    CHECK(stall->since == t0);
    CHECK(stall->missing == std::vector<uint32_t>{3, 65});
    agg.add(3, 0, 4, 0, filled(4, 1), t0);
    const auto sum = agg.add(65, 0, 4, 0, filled(4, 1), t0);
    REQUIRE(sum);
    CHECK(*sum->values == filled(4, 70));
    CHECK(agg.oldest_incomplete()->offset == 0);
}

TEST_CASE("frame tags depend on the direction, the frame's number and every byte", "[ps]")
{
    using mercury::ps::FrameMac;
    uint8_t a[mercury::ps::kNonceBytes] = {1}, b[mercury::ps::kNonceBytes] = {2};
    const std::vector<uint8_t> header{1, 2, 3}, payload(1000, 7);
    FrameMac up(kSecret, a, b, FrameMac::Direction::kToServer), up2(kSecret, a, b, FrameMac::Direction::kToServer);
    FrameMac down(kSecret, a, b, FrameMac::Direction::kToWorker);
    const auto first = up.next(header, payload);
    CHECK(mercury::ps::same_mac(first, up2.next(header, payload)));       // the other end computes the same
    CHECK_FALSE(mercury::ps::same_mac(first, down.next(header, payload))); // not the other direction's
    CHECK_FALSE(mercury::ps::same_mac(first, up.next(header, payload)));   // frame 1 is not frame 0 (replay)
    auto flipped = payload;
    flipped[999] ^= 1;
    FrameMac fresh(kSecret, a, b, FrameMac::Direction::kToServer), swapped(kSecret, b, a, FrameMac::Direction::kToServer);
    CHECK_FALSE(mercury::ps::same_mac(first, fresh.next(header, flipped)));     // one bit of the payload
    CHECK_FALSE(mercury::ps::same_mac(first, swapped.next(header, payload)));   // the nonces' order
}

TEST_CASE("a weak secret is refused, with the rule and how to make one", "[ps]")
{
    CHECK(mercury::ps::weak_secret(kSecret).empty());
    CHECK_THAT(mercury::ps::weak_secret("a"), Catch::Contains("at least 32 bytes") && Catch::Contains("urandom"));
    CHECK_FALSE(mercury::ps::weak_secret(std::string(64, 'x')).empty());        // long, one value
    CHECK_FALSE(mercury::ps::weak_secret("abababababababababababababababab").empty());
    CHECK(mercury::ps::weak_secret("0123456789abcdef0123456789abcdef").empty());  // hex of 16 bytes
}

TEST_CASE("before authentication, one address holds few slots and refusals close it for a window", "[ps]")
{
    using mercury::ps::Admission;
    Admission::Limits limits;
    limits.handshakes_per_address = 2;
    limits.handshakes = 3;
    limits.refusals_per_address = 3;
    limits.window = std::chrono::milliseconds(1000);
    limits.log_lines_per_second = 2;
    Admission admission(limits);
    const auto t = Admission::Clock::time_point{} + std::chrono::hours(1);
    CHECK(admission.open("10.0.0.1", t).empty());
    CHECK(admission.open("10.0.0.1", t).empty());
    CHECK_THAT(admission.open("10.0.0.1", t), Catch::Contains("from one address"));
    CHECK(admission.open("10.0.0.2", t).empty());                                // another host gets in
    CHECK_THAT(admission.open("10.0.0.3", t), Catch::Contains("handshakes at once"));   // the total
    admission.handshake_over("10.0.0.1");
    admission.handshake_over("10.0.0.1");
    admission.handshake_over("10.0.0.1");   // one too many: no underflow
    CHECK(admission.handshakes() == 1);
    for (int i = 0; i < 3; ++i)
        admission.refused("10.0.0.1", t);
    CHECK_THAT(admission.open("10.0.0.1", t), Catch::Contains("refusals"));
    CHECK(admission.open("10.0.0.4", t).empty());
    CHECK(admission.open("10.0.0.1", t + std::chrono::milliseconds(1001)).empty());   // the window ended
    uint64_t suppressed = 0;
    CHECK(admission.log_now(t, suppressed));
    CHECK(admission.log_now(t, suppressed));
    CHECK_FALSE(admission.log_now(t, suppressed));
    CHECK_FALSE(admission.log_now(t, suppressed));
    CHECK(admission.log_now(t + std::chrono::seconds(1), suppressed));
    CHECK(suppressed == 2);
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
