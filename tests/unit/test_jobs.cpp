// SPDX-License-Identifier: GPL-2.0
// mercuryd's job logic (daemon/jobs.cpp) against a table of entries
// standing in for the datapath: job ids and isolation, job weights,
// who owns a connection, and the limits a session has.
#include <catch2/catch.hpp>

#include <cerrno>
#include <map>

#include "daemon/authorization.hpp"
#include "daemon/jobs.hpp"
#include "mercury/uapi.h"

namespace {

using mercury::EntryValue;
using mercury::FlowKey;

class Table final : public mercury::EntryTable {
public:
    void set(const FlowKey& key, EntryValue value) override { pending_[key] = value; }
    void remove(const FlowKey& key) override { pending_.erase(key); }
    void flush() override { ++flushes; }
    mercury::KernelSyncStats stats() const override { return {}; }

    const EntryValue* at(const FlowKey& key) const
    {
        const auto it = pending_.find(key);
        return it == pending_.end() ? nullptr : &it->second;
    }
    size_t size() const { return pending_.size(); }
    int flushes = 0;

private:
    std::map<FlowKey, EntryValue, mercury::FlowKeyLess> pending_;
};

FlowKey cookie(uint64_t c)
{
    return FlowKey::by_cookie(c);
}

mercury::proto::Hello hello(const char* job)
{
    mercury::proto::Hello h;
    h.job = job;
    return h;
}

constexpr uint32_t kAlice = 1000, kBob = 1001;

}  // namespace

TEST_CASE("jobs: a lane connection gets its lane's rank and its first layer's weight; one job alone has no job id",
          "[jobs]")
{
    Table table;
    mercury::JobRegistry jobs(table);
    REQUIRE(jobs.open(1, hello("resnet"), kAlice) == 0);
    REQUIRE(jobs.register_lane(1, 3, 8, cookie(7)) == 0);
    const EntryValue* e = table.at(cookie(7));
    REQUIRE(e);
    CHECK(e->rank == mercury::proto::lane_rank(3, 8));
    CHECK(e->weight == mercury::kLaneWeight);   // its rank's most urgent layer's
    CHECK(mercury::kLaneWeight == 2 * MERCURY_WEIGHT_UNIT);
    CHECK(e->job == MERCURY_JOB_NONE);   // auto isolation: one job here
    CHECK(table.flushes > 0);
}

TEST_CASE("jobs: auto isolation gives ids while two jobs run, and takes them back", "[jobs]")
{
    Table table;
    mercury::JobRegistry jobs(table);
    REQUIRE(jobs.open(1, hello("resnet"), kAlice) == 0);
    REQUIRE(jobs.register_lane(1, 0, 8, cookie(1)) == 0);
    // A second worker of the same job is the same job: still no ids.
    REQUIRE(jobs.open(2, hello("resnet"), kAlice) == 0);
    REQUIRE(jobs.register_lane(2, 0, 8, cookie(2)) == 0);
    CHECK(table.at(cookie(1))->job == MERCURY_JOB_NONE);
    // Another job arrives: every entry moves to its job's id.
    REQUIRE(jobs.open(3, hello("vgg"), kAlice) == 0);
    REQUIRE(jobs.register_lane(3, 0, 8, cookie(3)) == 0);
    const uint8_t resnet = table.at(cookie(1))->job, vgg = table.at(cookie(3))->job;
    CHECK(resnet != MERCURY_JOB_NONE);
    CHECK(vgg != MERCURY_JOB_NONE);
    CHECK(resnet != vgg);
    CHECK(table.at(cookie(2))->job == resnet);   // the job's workers share its id
    // It leaves: back to one precedence for every flow here.
    jobs.close(3);
    CHECK(!table.at(cookie(3)));
    CHECK(table.at(cookie(1))->job == MERCURY_JOB_NONE);
    CHECK(table.at(cookie(2))->job == MERCURY_JOB_NONE);
}

TEST_CASE("jobs: the same name from another user is another job", "[jobs]")
{
    Table table;
    mercury::JobRegistry jobs(table);
    jobs.set_isolate_jobs(mercury::JobIsolation::kOn);
    REQUIRE(jobs.open(1, hello("train"), kAlice) == 0);
    REQUIRE(jobs.open(2, hello("train"), kBob) == 0);
    REQUIRE(jobs.register_lane(1, 0, 8, cookie(1)) == 0);
    REQUIRE(jobs.register_lane(2, 0, 8, cookie(2)) == 0);
    CHECK(table.at(cookie(1))->job != table.at(cookie(2))->job);
}

TEST_CASE("jobs: isolation off never gives ids", "[jobs]")
{
    Table table;
    mercury::JobRegistry jobs(table);
    jobs.set_isolate_jobs(mercury::JobIsolation::kOff);
    for (uint32_t s = 1; s <= 3; ++s) {
        REQUIRE(jobs.open(s, hello(s == 1 ? "a" : s == 2 ? "b" : "c"), kAlice) == 0);
        REQUIRE(jobs.register_lane(s, 0, 8, cookie(s)) == 0);
    }
    for (uint64_t c = 1; c <= 3; ++c)
        CHECK(table.at(cookie(c))->job == MERCURY_JOB_NONE);
}

TEST_CASE("jobs: a job's weight multiplies its entries' weights, clamped to the datapath's", "[jobs]")
{
    Table table;
    mercury::JobRegistry jobs(table);
    REQUIRE(jobs.open(1, hello("resnet"), kAlice) == 0);
    REQUIRE(jobs.register_lane(1, 0, 8, cookie(1)) == 0);
    jobs.set_job_weight("resnet", 4);
    CHECK(table.at(cookie(1))->weight == 4 * mercury::kLaneWeight);
    jobs.set_job_weight("resnet", 60000);
    CHECK(table.at(cookie(1))->weight == MERCURY_WEIGHT_MAX);
    // Entries registered later get it too.
    REQUIRE(jobs.register_lane(1, 1, 8, cookie(2)) == 0);
    CHECK(table.at(cookie(2))->weight == MERCURY_WEIGHT_MAX);
}

TEST_CASE("jobs: a connection has one owner, the latest claim; closing the other leaves it", "[jobs]")
{
    Table table;
    mercury::JobRegistry jobs(table);
    REQUIRE(jobs.open(1, hello("a"), kAlice) == 0);
    REQUIRE(jobs.open(2, hello("a"), kAlice) == 0);
    REQUIRE(jobs.register_lane(1, 7, 8, cookie(9)) == 0);
    REQUIRE(jobs.register_lane(2, 0, 8, cookie(9)) == 0);   // proven again, by another session
    CHECK(table.at(cookie(9))->rank == mercury::proto::lane_rank(0, 8));
    jobs.close(1);                                           // the first claimant goes
    REQUIRE(table.at(cookie(9)));                            // the entry stays: session 2's
    CHECK(table.at(cookie(9))->rank == mercury::proto::lane_rank(0, 8));
    jobs.close(2);
    CHECK(!table.at(cookie(9)));
    CHECK(table.size() == 0);
}

TEST_CASE("jobs: bad requests are refused and change nothing", "[jobs]")
{
    Table table;
    mercury::JobRegistry jobs(table);
    jobs.set_max_flows_per_session(2);
    CHECK(jobs.register_lane(1, 0, 8, cookie(1)) == EPROTO);   // no hello yet
    CHECK(jobs.open(1, hello(""), kAlice) == EINVAL);
    REQUIRE(jobs.open(1, hello("a"), kAlice) == 0);
    CHECK(jobs.open(1, hello("a"), kAlice) == EALREADY);
    CHECK(jobs.register_lane(1, 8, 8, cookie(1)) == EINVAL);   // lane out of range
    CHECK(jobs.register_lane(1, 0, 9, cookie(1)) == EINVAL);   // more lanes than ranks
    CHECK(jobs.register_flow(1, 0, cookie(1)) == EPROTO);      // layers before a model
    CHECK(table.size() == 0);
    REQUIRE(jobs.register_lane(1, 0, 8, cookie(1)) == 0);
    REQUIRE(jobs.register_lane(1, 1, 8, cookie(2)) == 0);
    CHECK(jobs.register_lane(1, 2, 8, cookie(3)) == ENOSPC);   // its limit
    CHECK(table.size() == 2);
    CHECK(!table.at(cookie(3)));
}

TEST_CASE("authorization: only root sets job weights or names a connection by cookie or tuple", "[jobs]")
{
    using namespace mercury;
    const Caller user{kAlice}, root{0};
    proto::JobWeight weight;
    weight.job = "a";
    weight.weight = 4;
    CHECK(authorize(user, weight).error == EPERM);
    CHECK(!authorize(root, weight));
    proto::Register by_cookie;
    by_cookie.kind = proto::ConnKind::kCookie;
    CHECK(authorize(user, by_cookie).error == EPERM);
    CHECK(!authorize(root, by_cookie));
    proto::Register passed;
    passed.kind = proto::ConnKind::kPassedFd;
    CHECK(!authorize(user, passed));   // ownership is proven by the socket itself
    CHECK(!authorize(user, proto::StatusRequest{}));
    CHECK(!authorize(user, hello("a")));
}
