// SPDX-License-Identifier: GPL-2.0
#include <sys/socket.h>

#include <catch2/catch.hpp>

#include "common/printable.hpp"
#include "protocol/wire.hpp"

using namespace mercury;
using namespace mercury::proto;

namespace {

Message round_trip(const Message& m)
{
    const auto frame = encode(m);
    const auto d = decode(frame);
    REQUIRE(d.status == DecodeStatus::kOk);
    REQUIRE(d.consumed == frame.size());
    return d.message;
}

std::vector<uint8_t> frame_with(uint32_t body_len, uint8_t version, uint8_t type, std::vector<uint8_t> body)
{
    std::vector<uint8_t> f = {static_cast<uint8_t>(body_len), static_cast<uint8_t>(body_len >> 8),
                              static_cast<uint8_t>(body_len >> 16), static_cast<uint8_t>(body_len >> 24),
                              version, type, 0, 0};
    for (uint8_t b : body)  // not insert(): GCC 12 warns falsely (-Warray-bounds) on it here
        f.push_back(b);
    return f;
}

}  // namespace

TEST_CASE("every message type survives encode/decode", "[protocol]")
{
    Timings t{42, {1, 2, 3}, {4, 5, 6}};
    Model model{{{"conv1", 37632}, {"fc8", 16388000}}};
    Register by_cookie{3, ConnKind::kCookie, FlowKey::by_cookie(0xfeedULL)};
    Register by_tuple{1, ConnKind::kTuple,
                      *FlowKey::by_tuple(*Endpoint::parse("10.0.0.1:40000"), *Endpoint::parse("10.0.0.2:5201"))};
    Register by_fd{2, ConnKind::kPassedFd, {}};
    Register by_v6{0, ConnKind::kTuple,
                   *FlowKey::by_tuple(*Endpoint::parse("[fd00::1]:1"), *Endpoint::parse("[fd00::2]:2"))};
    for (const Message& m : std::vector<Message>{
             Hello{"resnet50", 3, 1234}, HelloAck{7}, model, t, by_cookie, by_tuple, by_fd, by_v6, Iteration{9},
             StatusRequest{StatusFormat::kText}, StatusReply{"{\"jobs\":[]}"}, Error{22, "bad"}, RegisterLane{2, 4},
             SubscribeRanks{}, Ranks{3, true, {0, 0, 1, 7}}, Ranks{0, false, {}}, JobWeight{"vgg16-a", 3}})
        CHECK(round_trip(m) == m);
}

TEST_CASE("a job weight names a job and is 1..64", "[protocol]")
{
    const auto type = static_cast<uint8_t>(Type::JobWeight);
    // string "a" (u16 length 1), weight (u16)
    CHECK(decode(frame_with(5, kVersion, type, {1, 0, 'a', 64, 0})).status == DecodeStatus::kOk);
    CHECK(decode(frame_with(5, kVersion, type, {1, 0, 'a', 65, 0})).status == DecodeStatus::kMalformed);
    CHECK(decode(frame_with(5, kVersion, type, {1, 0, 'a', 0, 0})).status == DecodeStatus::kMalformed);
    CHECK(decode(frame_with(4, kVersion, type, {0, 0, 1, 0})).status == DecodeStatus::kMalformed);   // no name
    CHECK(decode(frame_with(0, kVersion, static_cast<uint8_t>(type + 1), {})).status == DecodeStatus::kUnknownType);
}

TEST_CASE("names from clients are shown without control bytes", "[protocol]")
{
    CHECK(printable("resnet50") == "resnet50");
    CHECK(printable("a\x1b[31mred\n") == "a\\x1b[31mred\\x0a");
    CHECK(printable(std::string("nul\0x", 5)) == "nul\\x00x");
    CHECK(printable("back\\slash\x7f") == "back\\x5cslash\\x7f");
}

TEST_CASE("lanes cover every rank, each lane starting at its first", "[protocol]")
{
    for (uint8_t lanes = 1; lanes <= kMaxLanes; ++lanes) {
        CHECK(lane_rank(0, lanes) == 0);
        for (uint8_t rank = 0; rank < MERCURY_NUM_RANKS; ++rank) {
            const uint8_t lane = rank_lane(rank, lanes);
            REQUIRE(lane < lanes);
            CHECK(lane_rank(lane, lanes) <= rank);
            if (lane + 1 < lanes)
                CHECK(rank < lane_rank(static_cast<uint8_t>(lane + 1), lanes));
        }
    }
    CHECK(lane_rank(1, 4) == 2);
    CHECK(rank_lane(7, 4) == 3);
}

TEST_CASE("a frame split anywhere needs more bytes, then decodes", "[protocol]")
{
    const auto frame = encode(Model{{{"a", 1}, {"b", 2}}});
    for (size_t cut = 0; cut < frame.size(); ++cut)
        CHECK(decode(std::span(frame).first(cut)).status == DecodeStatus::kNeedMore);
    CHECK(decode(frame).status == DecodeStatus::kOk);
}

TEST_CASE("back-to-back frames decode one at a time", "[protocol]")
{
    auto stream = encode(Iteration{1});
    const auto second = encode(Iteration{2});
    stream.insert(stream.end(), second.begin(), second.end());
    const auto d1 = decode(stream);
    REQUIRE(d1.status == DecodeStatus::kOk);
    const auto d2 = decode(std::span(stream).subspan(d1.consumed));
    REQUIRE(d2.status == DecodeStatus::kOk);
    CHECK(std::get<Iteration>(d2.message).iteration == 2);
}

TEST_CASE("malformed frames are named, never accepted", "[protocol]")
{
    SECTION("wrong version") { CHECK(decode(frame_with(0, 2, 6, {})).status == DecodeStatus::kBadVersion); }
    SECTION("unknown type") { CHECK(decode(frame_with(0, kVersion, 99, {})).status == DecodeStatus::kUnknownType); }
    SECTION("type zero") { CHECK(decode(frame_with(0, kVersion, 0, {})).status == DecodeStatus::kUnknownType); }
    SECTION("oversized, rejected from the header alone")
    {
        CHECK(decode(frame_with(kMaxBody + 1, kVersion, 3, {})).status == DecodeStatus::kOversized);
    }
    SECTION("truncated body")
    {
        CHECK(decode(frame_with(3, kVersion, static_cast<uint8_t>(Type::Iteration), {1, 2, 3})).status ==
              DecodeStatus::kMalformed);
    }
    SECTION("trailing bytes")
    {
        auto f = frame_with(9, kVersion, static_cast<uint8_t>(Type::Iteration), {1, 0, 0, 0, 0, 0, 0, 0, 7});
        CHECK(decode(f).status == DecodeStatus::kMalformed);
    }
    SECTION("layer count larger than the body could hold")
    {
        CHECK(decode(frame_with(4, kVersion, static_cast<uint8_t>(Type::Model), {0xff, 0xff, 0, 0})).status ==
              DecodeStatus::kMalformed);
    }
    SECTION("name longer than allowed")
    {
        std::vector<uint8_t> body = {0x00, 0x01};  // 256 bytes
        body.resize(2 + 256 + 8, 'x');
        CHECK(decode(frame_with(static_cast<uint32_t>(body.size()), kVersion, static_cast<uint8_t>(Type::Hello),
                                body))
                  .status == DecodeStatus::kMalformed);
    }
    SECTION("unknown connection kind")
    {
        CHECK(decode(frame_with(5, kVersion, static_cast<uint8_t>(Type::Register), {0, 0, 0, 0, 9})).status ==
              DecodeStatus::kMalformed);
    }
    SECTION("tuple with a bad family")
    {
        CHECK(decode(frame_with(6, kVersion, static_cast<uint8_t>(Type::Register), {0, 0, 0, 0, 3, 7})).status ==
              DecodeStatus::kMalformed);
    }
    SECTION("lane not below the lane count")
    {
        CHECK(decode(frame_with(2, kVersion, static_cast<uint8_t>(Type::RegisterLane), {4, 4})).status ==
              DecodeStatus::kMalformed);
    }
    SECTION("more lanes than ranks")
    {
        CHECK(decode(frame_with(2, kVersion, static_cast<uint8_t>(Type::RegisterLane), {0, 9})).status ==
              DecodeStatus::kMalformed);
    }
    SECTION("a rank beyond the datapath's")
    {
        CHECK(decode(frame_with(10, kVersion, static_cast<uint8_t>(Type::Ranks), {0, 0, 0, 0, 1, 1, 0, 0, 0, 8}))
                  .status == DecodeStatus::kMalformed);
    }
    SECTION("unknown status format")
    {
        CHECK(decode(frame_with(1, kVersion, static_cast<uint8_t>(Type::StatusRequest), {5})).status ==
              DecodeStatus::kMalformed);
    }
}
