// SPDX-License-Identifier: GPL-2.0
#include <catch2/catch.hpp>

#include "model.hpp"
#include "simulator.hpp"

using namespace mercury::experiment;

TEST_CASE("PipeDream graphs come out in topological order", "[experiment]")
{
    // Node numbers deliberately out of order; edges decide.
    const std::string g =
        "node3 -- Linear(in_features=4, out_features=2, bias=True) -- forward_compute_time=1.000, "
        "backward_compute_time=2.000, activation_size=8.0, parameter_size=40.000\n"
        "node1 -- Input0 -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=4.0, "
        "parameter_size=0.000\n"
        "node2 -- ReLU(inplace) -- forward_compute_time=0.500, backward_compute_time=0.250, activation_size=4.0, "
        "parameter_size=0.000\n"
        "\tnode1 -- node2\n\tnode2 -- node3\n";
    const Model m = parse_pipedream(g, "tiny");
    REQUIRE(m.layers.size() == 3);
    CHECK(m.layers[0].name == "node1 Input0");
    CHECK(m.layers[1].name == "node2 ReLU");
    CHECK(m.layers[2].name == "node3 Linear");
    CHECK(m.layers[2].param_bytes == 40);
    CHECK(m.layers[2].backward_ms == 2.0);
}

TEST_CASE("every PipeDream profile variant parses", "[experiment]")
{
    // A node with several outputs lists one activation size per output
    // (profiler/translation/profiles/gnmt/graph.txt).
    const Model lists = parse_pipedream(
        "node1 -- Input0 -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=0.0, "
        "parameter_size=0.000\n"
        "node7 -- LSTM(2048, 1024) -- forward_compute_time=3.190, backward_compute_time=5.348, "
        "activation_size=[6291456.0; 131072.0; 131072.0], parameter_size=50364416.000\n"
        "\tnode1 -- node7\n",
        "gnmt");
    REQUIRE(lists.layers.size() == 2);
    CHECK(lists.layers[1].name == "node7 LSTM");
    CHECK(lists.layers[1].param_bytes == 50364416);
    CHECK(lists.layers[1].backward_ms == 5.348);

    // Partitioned graphs end node lines with a stage (graph/test_graphs/*_partitioned.txt).
    const Model staged = parse_pipedream(
        "node2 -- Conv2d(64, 64, kernel_size=(1, 1), stride=(1, 1), bias=False) -- forward_compute_time=1.029, "
        "backward_compute_time=2.034, activation_size=102760448.000, parameter_size=16384.000 -- stage_id=0\n"
        "node3 -- ReLU(inplace) -- forward_compute_time=0.5, backward_compute_time=0.25, "
        "activation_size=102760448.000, parameter_size=0.000 -- stage_id=1\n"
        "\tnode2 -- node3\n",
        "staged");
    REQUIRE(staged.layers.size() == 2);
    CHECK(staged.layers[0].param_bytes == 16384);
    CHECK(staged.layers[1].forward_ms == 0.5);

    // Descriptions may hold " -- "-free nesting, commas and parentheses.
    const Model nested = parse_pipedream(
        "node5 -- EmuBidirLSTM(  (bidir): LSTM(1024, 1024, bidirectional=True)  (layer1): LSTM(1024, 1024)) -- "
        "forward_compute_time=5.247, backward_compute_time=0.016, activation_size=12582912.0, "
        "parameter_size=67174400.000\n",
        "nested");
    REQUIRE(nested.layers.size() == 1);
    CHECK(nested.layers[0].param_bytes == 67174400);
}

TEST_CASE("malformed profiles fail clearly", "[experiment]")
{
    CHECK_THROWS_WITH(parse_pipedream("node1 -- X -- nonsense\n", "bad"), Catch::Contains("bad:1"));
    CHECK_THROWS_WITH(parse_pipedream("node1 -- X -- nonsense\n", "bad"), Catch::Contains("expected a node line"));
    CHECK_THROWS_WITH(parse_pipedream("node1 -- X -- forward_compute_time=1, activation_size=2, parameter_size=0\n",
                                      "nobwd"),
                      Catch::Contains("missing backward_compute_time"));
    CHECK_THROWS_WITH(parse_pipedream("node1 -- X -- forward_compute_time=1, backward_compute_time=1, "
                                      "activation_size=[1; x], parameter_size=0\n",
                                      "badlist"),
                      Catch::Contains("activation_size is neither a number nor a list"));
    CHECK_THROWS_WITH(parse_pipedream("node1 -- X -- forward_compute_time=fast, backward_compute_time=1, "
                                      "activation_size=1, parameter_size=0\n",
                                      "nan"),
                      Catch::Contains("forward_compute_time is not a number"));
    CHECK_THROWS_WITH(parse_pipedream("", "empty"), Catch::Contains("no nodes"));
    const std::string cyc =
        "node1 -- A -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=0\n"
        "node2 -- B -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=0\n"
        "\tnode1 -- node2\n\tnode2 -- node1\n";
    CHECK_THROWS_WITH(parse_pipedream(cyc, "cyc"), Catch::Contains("cycle"));
    CHECK_THROWS_WITH(parse_pipedream(
                          "node1 -- A -- forward_compute_time=1, backward_compute_time=1, activation_size=1, "
                          "parameter_size=0\n\tnode1 -- node9\n",
                          "dangling"),
                      Catch::Contains("unknown node"));
    CHECK_THROWS_WITH(parse_simple("conv 1 2\n", "short"), Catch::Contains("short:1"));
    CHECK_THROWS_WITH(parse_simple("conv 1 -2 3\n", "neg"), Catch::Contains("negative"));
}

TEST_CASE("the simple format and scaling", "[experiment]")
{
    const Model m = parse_simple("# name fwd bwd bytes\nconv 2 4 1000\nfc 1 1 300 # comment\n", "s");
    REQUIRE(m.layers.size() == 2);
    const Model s = scale(m, 100, 0.5);
    CHECK(s.layers[0].param_bytes == 10);
    CHECK(s.layers[0].forward_ms == 1.0);
    CHECK(s.layers[1].param_bytes == 3);
}

TEST_CASE("placement follows MXNet's kvstore", "[experiment]")
{
    Model m;
    m.layers = {{"big", 1, 1, 8000000},    // 2M elements: split over all servers
                {"none", 1, 1, 0},         // no tensor
                {"a", 1, 1, 4000},         // whole, round robin
                {"b", 1, 1, 4000},
                {"c", 1, 1, 4000}};
    const Placement p = place(m, 4, 100);
    REQUIRE(p.tensors.size() == 4);
    CHECK(p.tensors[0].shards.size() == 4);
    uint64_t total = 0;
    for (uint32_t s : p.tensors[0].shards)
        total += p.shards[s].bytes;
    CHECK(total == 80000);   // scaled, nothing lost in the split
    CHECK(p.tensors[1].layer == 2);
    CHECK(p.shards[p.tensors[1].shards[0]].server == 0);
    CHECK(p.shards[p.tensors[2].shards[0]].server == 1);
    CHECK(p.shards[p.tensors[3].shards[0]].server == 2);
}

TEST_CASE("balanced placement evens out the servers, as BytePS's", "[experiment]")
{
    Model m;
    m.layers = {{"big", 1, 1, 10000000},   // 3 partitions of 4096000 B (the last 1808000)
                {"none", 1, 1, 0},
                {"a", 1, 1, 3000000},
                {"b", 1, 1, 3000000},
                {"c", 1, 1, 1000}};
    const Placement p = place_balanced(m, 4, 1);
    REQUIRE(p.tensors.size() == 4);
    // Greedy by load: big -> 0, 1, 2; a -> 3; b -> 2 (1808000, least); c -> 3.
    CHECK(p.tensors[0].shards.size() == 3);
    CHECK(p.shards[p.tensors[1].shards[0]].server == 3);
    CHECK(p.shards[p.tensors[2].shards[0]].server == 2);
    CHECK(p.shards[p.tensors[3].shards[0]].server == 3);
    for (const auto& t : p.tensors) {   // nothing lost or made up
        uint64_t total = 0;
        for (uint32_t s : t.shards)
            total += p.shards[s].bytes;
        CHECK(total == t.bytes);
    }
    const auto load = bytes_per_server(p, 4);
    CHECK(load == std::vector<uint64_t>{4096000, 4096000, 4808000, 3001000});

    // MXNet's placement sends the big tensor to every server and the rest
    // round robin: its busiest server carries more than balanced's.
    const auto mxnet = bytes_per_server(place(m, 4, 1), 4);
    CHECK(*std::max_element(mxnet.begin(), mxnet.end()) > *std::max_element(load.begin(), load.end()));

    // Scaled bytes keep every tensor's exact size, shares in proportion.
    const Placement scaled = place_balanced(m, 4, 7);
    for (const auto& t : scaled.tensors) {
        uint64_t total = 0;
        for (uint32_t s : t.shards)
            total += scaled.shards[s].bytes;
        CHECK(total == t.bytes);
    }
    CHECK_THROWS(place_balanced(m, 0, 1));
}

TEST_CASE("simulator: hand-computed single worker, single server", "[experiment]")
{
    // One layer, 1 ms forward, 1 ms backward, 1000 B; link 1 MB/s; one chunk.
    // Push: 1 ms up + 1 ms down; pull: 1 ms up + 1 ms down. Iteration =
    // fwd 1 + bwd 1 + 4 ms transfer = 6 ms.
    Model m;
    m.layers = {{"l", 1, 1, 1000}};
    const Placement p = place(m, 1, 1);
    SimConfig c;
    c.workers = 1;
    c.servers = 1;
    c.link_bytes_per_s = 1e6;
    c.chunk_bytes = 1000;
    c.iterations = 6;
    c.warmup = 1;
    CHECK(simulate(m, p, c).mean_iteration_s == Approx(0.006));

    // Chunk headers and framing take link time: with a 250-byte header and 2x
    // framing each of the 4 hops carries 2500 wire bytes, 2.5 ms: 12 ms.
    c.header_bytes = 250;
    c.wire_per_payload = 2.0;
    CHECK(simulate(m, p, c).mean_iteration_s == Approx(0.012));
}

TEST_CASE("simulator: priority and immediate aggregation each help, together most", "[experiment]")
{
    // Front layer small, back layer big: FIFO makes the front wait.
    Model m;
    m.layers = {{"front", 5, 5, 400000}, {"mid", 5, 5, 400000}, {"back", 5, 5, 4000000}};
    const Placement p = place(m, 2, 1);
    auto run = [&](bool prio, bool imm) {
        SimConfig c;
        c.workers = 2;
        c.servers = 2;
        c.link_bytes_per_s = 100e6;
        c.chunk_bytes = 10000;
        c.priority = prio;
        c.immediate = imm;
        return simulate(m, p, c).mean_iteration_s;
    };
    const double fifo = run(false, false), prio = run(true, false), imm = run(false, true), both = run(true, true);
    CHECK(prio <= fifo);
    CHECK(imm < fifo);
    CHECK(both <= prio);
    CHECK(both <= imm);
    CHECK(both < fifo);
}

TEST_CASE("simulator: compute-bound models gain nothing", "[experiment]")
{
    Model m;
    m.layers = {{"a", 50, 50, 1000}, {"b", 50, 50, 1000}};
    const Placement p = place(m, 1, 1);
    SimConfig c;
    c.workers = 2;
    c.servers = 1;
    c.link_bytes_per_s = 1e9;
    c.chunk_bytes = 1000;
    const double fifo = simulate(m, p, c).mean_iteration_s;
    c.priority = false;
    c.immediate = false;
    CHECK(fifo == Approx(0.2).epsilon(0.01));
}

TEST_CASE("simulator: a split tensor goes to every server at once", "[experiment]")
{
    // 2 workers, 2 servers, one 8 MB tensor split 4 MB + 4 MB, no compute,
    // 1 MB/s links. Interleaved, each server's downlink takes half of each
    // worker's uplink: pushes end after 8 s and pulls ride along, so an
    // iteration is 8 s plus a few chunks of pipelining. One server at a time,
    // both workers would crowd server 0 first and one iteration would take
    // 12 s or more.
    Model m;
    m.layers = {{"big", 0, 0, 8000000}};
    const Placement p = place(m, 2, 1);
    REQUIRE(p.shards.size() == 2);
    SimConfig c;
    c.workers = 2;
    c.servers = 2;
    c.link_bytes_per_s = 1e6;
    c.chunk_bytes = 10000;
    c.iterations = 5;
    c.warmup = 1;
    const double t = simulate(m, p, c).mean_iteration_s;
    CHECK(t >= 8.0);
    CHECK(t < 8.1);
}

TEST_CASE("simulator: inside a rank, a front layer waits behind a later big one", "[experiment]")
{
    // Backward pushes the big back layer first; sharing its lane (one rank),
    // the small front layer's pull queues behind it. Its own rank lets it pass.
    Model m;
    m.layers = {{"front", 1, 1, 400000}, {"back", 1, 1, 4000000}};
    const Placement p = place(m, 1, 1);
    auto run = [&](std::vector<uint8_t> ranks) {
        SimConfig c;
        c.workers = 2;
        c.servers = 1;
        c.link_bytes_per_s = 10e6;
        c.chunk_bytes = 10000;
        c.layer_rank = std::move(ranks);
        return simulate(m, p, c);
    };
    const auto shared = run({0, 0}), apart = run({0, 1});
    CHECK(apart.mean_iteration_s <= shared.mean_iteration_s);
    CHECK(shared.forward_wait_s[0] > 5 * apart.forward_wait_s[0]);
    // Per-layer priority (no ranks) is what separate ranks give here.
    CHECK(run({}).mean_iteration_s == Approx(apart.mean_iteration_s));
}
