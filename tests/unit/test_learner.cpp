// SPDX-License-Identifier: GPL-2.0
#include <catch2/catch.hpp>
#include <random>

#include "learner/priorities.hpp"
#include "learner/timing.hpp"

using namespace mercury;

TEST_CASE("the first sample is used at once", "[learner]")
{
    RobustEstimate e;
    e.add(1234);
    CHECK(e.value_us() == 1234);
}

TEST_CASE("noise averages out and outliers are ignored", "[learner]")
{
    RobustEstimate e;
    std::mt19937 rng(7);
    std::normal_distribution<double> noise(1000, 50);
    for (int i = 0; i < 50; ++i) {
        e.add(static_cast<uint32_t>(noise(rng)));
        if (i % 10 == 5)
            e.add(250000);  // a stall or GC pause
        if (i >= 5)
            CHECK(e.value_us() == Approx(1000).margin(120));
    }
}

TEST_CASE("a real change of level is followed within half a window", "[learner]")
{
    RobustEstimate e;
    for (int i = 0; i < 20; ++i)
        e.add(1000);
    int iterations = 0;
    while (e.value_us() != 3000 && iterations < 20) {
        e.add(3000);
        ++iterations;
    }
    CHECK(e.value_us() == 3000);
    CHECK(iterations <= static_cast<int>(RobustEstimate::kWindow / 2 + 1));
}

TEST_CASE("reports for another layer count are refused", "[learner]")
{
    LayerTimings t(3);
    CHECK_FALSE(t.add({1, 2}, {1, 2}));
    CHECK(t.add({1, 2, 3}, {4, 5, 6}));
    CHECK(t.iterations() == 1);
    CHECK(t.backward_us(2) == 6);
}

TEST_CASE("ranks follow deadlines, not layer indices", "[priorities]")
{
    // Layer 0 is long: everything after it is needed late, together.
    LayerTimings t(4);
    t.add({7000, 100, 100, 100}, {1, 1, 1, 1});
    const auto p = compute_priorities(t, 4);
    CHECK(p[0].deadline_us == 0);
    CHECK(p[1].deadline_us == 7000);
    CHECK(p[3].deadline_us == 7200);
    CHECK(p[0].rank == 0);
    CHECK(p[1].rank == 7);   // 7000/7300 of the pass: the last slice
    CHECK(p[2].rank == p[3].rank);
}

TEST_CASE("equal layers spread over the ranks", "[priorities]")
{
    LayerTimings t(4);
    t.add({1000, 1000, 1000, 1000}, {1, 1, 1, 1});
    const auto p = compute_priorities(t, 4);
    CHECK(p[0].rank == 0);
    CHECK(p[1].rank == 2);
    CHECK(p[2].rank == 4);
    CHECK(p[3].rank == 6);
}

TEST_CASE("more layers than ranks group by time, earlier gets more weight", "[priorities]")
{
    const size_t n = 160;  // ResNet-50-sized
    LayerTimings t(n);
    t.add(std::vector<uint32_t>(n, 500), std::vector<uint32_t>(n, 900));
    const auto p = compute_priorities(t, n);
    for (size_t i = 1; i < n; ++i) {
        CHECK(p[i].rank >= p[i - 1].rank);   // never more urgent than an earlier layer
        CHECK(p[i].rank < MERCURY_NUM_RANKS);
        if (p[i].rank == p[i - 1].rank)
            CHECK(p[i].weight <= p[i - 1].weight);
    }
    CHECK(p.front().rank == 0);
    CHECK(p.back().rank == MERCURY_NUM_RANKS - 1);
    CHECK(p.front().weight == 32);
}

TEST_CASE("before any timing, layers spread by index", "[priorities]")
{
    LayerTimings t(8);
    const auto p = compute_priorities(t, 8);
    for (size_t i = 0; i < 8; ++i)
        CHECK(p[i].rank == i);
}
