// SPDX-License-Identifier: GPL-2.0
// mercury-replay: parameter-server training of a real model *shape* over
// real TCP, compute emulated from the profile, for the paper's experiment.
// The servers are mercury-ps (agent/src/ps/), the one users run; the
// replayer's workers speak its protocol (agent/PROTOCOL.md).
//
//   mercury-replay worker --id W --servers IP:PORT,... COMMON [--iterations K] [--warmup N]
//                         [--secret-file FILE]   (else $MERCURY_PS_SECRET)
//                         --run N   the run's id: every worker of one run the same, a new one per run
//                         [--payload-tags on|off]   off: accept servers run with --payload-tags off
//   mercury-replay ps-args COMMON   (the mercury-ps options that serve the mode:
//                         --job, --cc, --aggregation, --chunk-bytes, --no-agent)
//   mercury-replay sim    --rate-mbit R COMMON [--sim-ranks layer|agent]
//                         (an achievable schedule, simulated: priority per
//                         layer, or by the ranks mercuryd's rule gives)
//   mercury-replay bound  --rate-mbit R COMMON   (a lower bound no run can beat)
//   mercury-replay layers --profile FILE   (the profile's layers, forward order, in
//                         the simple format: name forward_ms backward_ms param_bytes;
//                         how the PyTorch bench reads the same profiles)
//   COMMON: --profile FILE --mode MODE --workers N --servers-count S --byte-divisor D
//           [--cc NAME] [--placement mxnet|balanced] [--job NAME]
//
// Placement: mxnet (the default, the paper's: tensors above 1M elements split
// over all servers, the rest whole, round robin) or balanced (BytePS's:
// 4096000-byte partitions, each to the least loaded server). Every role must
// be given the same one.
// Every data connection's congestion control is set per socket and read
// back (never the host's or the netns's default): --cc, by default mercury
// in priority modes and cubic in the others.
//
// Modes (same bytes in each): fifo (one connection per worker-server pair,
// whole-tensor aggregation: mercury-ps --aggregation tensor), bytescheduler
// (the same connections; tensors cut into --partition-bytes partitions, each
// its own key on the server, sent in layer order from a priority queue, at
// most --credit partitions pushed and not yet acknowledged by the server),
// mercury (a connection per rank, ranks from the agent via libmercury,
// immediate aggregation: --aggregation chunk), mercury-noprio (immediate, no
// priorities), prio-only (priorities, whole-tensor).
//
// Workers print one JSON line: iteration times, mean after warm-up, bytes.
//
// This file: the options and the roles that only compute (ps-args, bound,
// sim, layers); the worker is replay/worker.cpp, its mercury-ps client
// replay/ps_client.cpp, the shared plan replay/plan.hpp.
#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "learner/priorities.hpp"
#include "replay/plan.hpp"
#include "replay/report.hpp"
#include "replay/worker.hpp"
#include "simulator.hpp"

namespace {

using namespace mercury;
using namespace mercury::experiment;
using namespace mercury::replay;

// The options mercury-ps needs to serve this plan's job as the mode says:
// one line for the shell (experiment/train.sh).
int run_ps_args(const Options& o)
{
    const Plan plan(o);
    std::printf("--job %s --cc %s --aggregation %s --chunk-bytes %llu%s\n", plan.job.c_str(), plan.cc.c_str(),
                plan.aggregation().c_str(), static_cast<unsigned long long>(kChunk),
                plan.mode.priority ? "" : " --no-agent");
    return 0;
}

// A lower bound on the iteration time no schedule can beat, whatever the
// transport: the compute time (a worker's forward and backward passes run
// one after the other), and the busiest link's bytes at the link's rate.
// Bytes on a link: every chunk's payload, header and tag, carried in
// full-sized TCP segments (1448 payload bytes in a 1514-byte frame, which is
// what tbf counts); ACKs and bytescheduler's credit messages are left out,
// so the bound stays below anything achievable.
int run_bound(const Options& o)
{
    Plan plan(o);
    // The compute the workers emulate: the profile's times in whole µs.
    const auto [fwd_us, bwd_us] = plan.timings_us();
    double compute_us = 0;
    for (size_t i = 0; i < fwd_us.size(); ++i)
        compute_us += fwd_us[i] + bwd_us[i];
    std::vector<double> server_bytes(o.servers, 0);   // one worker's pushes to each server
    double worker_bytes = 0;
    for (uint32_t s = 0; s < plan.placement.shards.size(); ++s) {
        const double b = static_cast<double>(plan.placement.shards[s].bytes) + kFrameBytes * plan.chunks[s];
        worker_bytes += b;
        server_bytes[plan.placement.shards[s].server] += b;
    }
    // Each server link carries every worker's share of its shards, both ways;
    // each worker link carries all pushes up and all pulls down.
    std::string busiest = "worker link";
    double busiest_bytes = worker_bytes;
    for (uint32_t s = 0; s < o.servers; ++s) {
        if (server_bytes[s] * o.workers > busiest_bytes) {
            busiest_bytes = server_bytes[s] * o.workers;
            busiest = "server " + std::to_string(s) + " link";
        }
    }
    const double link_s = busiest_bytes * kWirePerPayload * 8 / (o.rate_mbit * 1e6);
    const double compute_s = compute_us / 1e6;
    std::printf("{\"role\":\"bound\",\"model\":%s,\"placement\":%s,\"workers\":%u,\"servers\":%u,"
                "\"rate_mbit\":%g,\"byte_divisor\":%g,\"compute_s\":%.4f,\"busiest_link\":%s,\"busiest_link_bytes\":%.0f,"
                "\"link_s\":%.4f,\"bound_s\":%.4f}\n",
                json_text(plan.model.name).c_str(), json_text(o.placement).c_str(), o.workers, o.servers, o.rate_mbit,
                o.byte_divisor, compute_s, json_text(busiest).c_str(),
                busiest_bytes * kWirePerPayload, link_s, std::max(compute_s, link_s));
    return 0;
}

// The mode's schedule simulated on the same links, bytes and framing as the
// bound (simulator.hpp): what a transport that schedules perfectly achieves.
int run_sim(const Options& o)
{
    Plan plan(o);
    SimConfig c;
    c.workers = o.workers;
    c.servers = o.servers;
    c.link_bytes_per_s = o.rate_mbit * 1e6 / 8;
    c.chunk_bytes = kChunk;
    c.header_bytes = kFrameBytes;
    c.wire_per_payload = kWirePerPayload;
    c.priority = plan.mode.priority;
    if (o.sim_ranks != "layer" && o.sim_ranks != "agent")
        throw std::runtime_error("--sim-ranks is layer or agent");
    if (plan.mode.priority && o.sim_ranks == "agent") {
        // The lanes mercuryd would give: its rule on the profile's timings.
        const auto [f, b] = plan.timings_us();
        LayerTimings timings(f.size());
        timings.add(f, b);
        for (const auto& p : compute_priorities(timings, f.size()))
            c.layer_rank.push_back(p.rank);
    }
    c.immediate = plan.mode.immediate;
    c.iterations = o.iterations;
    c.warmup = o.warmup;
    const auto r = simulate(plan.model, plan.placement, c);
    const size_t measured = o.iterations > o.warmup ? o.iterations - o.warmup : 1;
    std::vector<double> wait_sum(r.forward_wait_s);  // back to sums, as the worker keeps them
    for (double& w : wait_sum)
        w *= static_cast<double>(measured);
    std::printf("{\"role\":\"sim\",\"model\":%s,\"mode\":%s,\"mean_s\":%.4f,\"forward_wait_s\":%s,"
                "\"waits\":%s}\n",
                json_text(plan.model.name).c_str(), json_text(o.mode_name).c_str(), r.mean_iteration_s,
                wait_json_total(wait_sum, measured).c_str(), wait_json_top(wait_sum, measured).c_str());
    return 0;
}

// One line per layer, forward order; names lose their spaces (the format's separator).
int run_layers(const Options& o)
{
    const Model model = load_model(o.profile);
    std::printf("# %s: name forward_ms backward_ms param_bytes (from %s)\n", model.name.c_str(), o.profile.c_str());
    for (const Layer& l : model.layers) {
        std::string name = l.name;
        std::replace_if(name.begin(), name.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }, '_');
        std::printf("%s %.6g %.6g %llu\n", name.c_str(), l.forward_ms, l.backward_ms,
                    static_cast<unsigned long long>(l.param_bytes));
    }
    return 0;
}

Options parse(int argc, char** argv)
{
    Options o;
    if (argc < 2)
        throw std::runtime_error("usage: mercury-replay worker|ps-args|sim|bound|layers OPTIONS (see the header of experiment/replay/main.cpp)");
    o.role = argv[1];
    if (o.role == "server")
        throw std::runtime_error("the replayer's servers are mercury-ps: see experiment/train.sh (mercury-replay "
                                 "ps-args prints the options a mode needs)");
    for (int i = 2; i < argc; i += 2) {
        if (i + 1 >= argc)
            throw std::runtime_error(std::string("missing value for ") + argv[i]);
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--id") o.id = static_cast<uint32_t>(std::stoul(v));
        else if (a == "--profile") o.profile = v;
        else if (a == "--mode") o.mode_name = v;
        else if (a == "--servers") o.servers_csv = v;
        else if (a == "--workers") o.workers = static_cast<uint32_t>(std::stoul(v));
        else if (a == "--servers-count") o.servers = static_cast<uint32_t>(std::stoul(v));
        else if (a == "--iterations") o.iterations = static_cast<uint32_t>(std::stoul(v));
        else if (a == "--warmup") o.warmup = static_cast<uint32_t>(std::stoul(v));
        else if (a == "--byte-divisor") o.byte_divisor = std::stod(v);
        else if (a == "--rate-mbit") o.rate_mbit = std::stod(v);
        else if (a == "--partition-bytes") o.partition_bytes = std::stoull(v);
        else if (a == "--credit") o.credit = static_cast<uint32_t>(std::stoul(v));
        else if (a == "--cc") o.cc = v;
        else if (a == "--placement") o.placement = v;
        else if (a == "--sim-ranks") o.sim_ranks = v;
        else if (a == "--job") o.job = v;
        else if (a == "--secret-file") o.secret_file = v;
        else if (a == "--run") o.run = std::stoull(v);
        else if (a == "--payload-tags") {
            if (v != "on" && v != "off")
                throw std::runtime_error("--payload-tags is on or off, not '" + v + "'");
            o.payload_tags = v == "on";
        }
        else throw std::runtime_error("unknown option " + a);
    }
    if (o.role == "layers") {
        if (o.profile.empty())
            throw std::runtime_error("layers needs --profile");
        return o;
    }
    if (o.profile.empty() || !o.workers || !o.servers || o.byte_divisor <= 0 || o.iterations < 2)
        throw std::runtime_error("need --profile, --workers, --servers-count, --byte-divisor > 0, --iterations >= 2");
    if (o.placement != "mxnet" && o.placement != "balanced")
        throw std::runtime_error("--placement is mxnet or balanced, not '" + o.placement + "'");
    if (!o.partition_bytes || !o.credit)
        throw std::runtime_error("--partition-bytes and --credit must be positive");
    return o;
}

}  // namespace

int main(int argc, char** argv)
{
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::signal(SIGPIPE, SIG_IGN);  // a peer that left is an EPIPE, not our death
    try {
        const Options o = parse(argc, argv);
        if (o.role == "worker")
            return run_worker(o);
        if (o.role == "ps-args")
            return run_ps_args(o);
        if (o.role == "sim")
            return run_sim(o);
        if (o.role == "bound")
            return run_bound(o);
        if (o.role == "layers")
            return run_layers(o);
        throw std::runtime_error("role is worker, ps-args, sim, bound or layers");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mercury-replay: %s\n", e.what());
        return 1;
    }
}
