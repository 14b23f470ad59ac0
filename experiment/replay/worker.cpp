// SPDX-License-Identifier: GPL-2.0
#include "replay/worker.hpp"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <openssl/rand.h>

#include <mercury/client.hpp>
#include "replay/bytescheduler.hpp"
#include "replay/ps_client.hpp"
#include "replay/report.hpp"

namespace mercury::replay {

namespace {

using Clock = std::chrono::steady_clock;

double now_s()
{
    return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Declares the model and its profiled timings to the agent and takes the
// ranks it learned from them (priority modes only); each lane's connection
// is then registered as carrying a layer of that rank, so the agent (not the
// replayer) decides both the lanes and the kernel entries.
std::unique_ptr<Client> join_agent(Plan& plan, const std::string& job, uint32_t id)
{
    if (!plan.mode.priority)
        return nullptr;
    auto client = std::make_unique<Client>(job, id);
    std::vector<std::string> names;
    std::vector<uint64_t> bytes;
    for (const auto& l : plan.model.layers) {
        names.push_back(l.name);
        bytes.push_back(l.param_bytes);
    }
    client->declare_model(names, bytes);
    const auto [f, b] = plan.timings_us();
    client->report_timings(0, f, b);
    client->subscribe_ranks();
    const auto layers = static_cast<uint32_t>(plan.model.layers.size());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::vector<uint8_t> ranks = client->layer_ranks(layers);
    while (ranks.empty() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        ranks = client->layer_ranks(layers);
    }
    if (ranks.empty())
        throw std::runtime_error("priority modes need mercuryd: no ranks from the agent within 10 s "
                                 "(is it running? $MERCURY_SOCKET)");
    plan.assign_ranks(ranks);
    return client;
}

}  // namespace

int run_worker(const Options& o)
{
    Plan plan(o);
    std::vector<Endpoint> servers;
    std::stringstream ss(o.servers_csv);
    for (std::string item; std::getline(ss, item, ',');)
        servers.push_back(*Endpoint::parse(item));
    if (servers.size() != o.servers)
        throw std::runtime_error("--servers lists " + std::to_string(servers.size()) + " endpoints");
    const std::string secret = read_secret(o.secret_file);
    if (!o.run)
        throw std::runtime_error("worker needs --run N, the same for every worker of the run (mercury-ps refuses "
                                 "workers of another run, and of a run that has ended)");

    auto agent = join_agent(plan, plan.job, o.id);
    uint64_t instance = 0;
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&instance), sizeof(instance)) != 1)
        throw std::runtime_error("no random bytes for the worker's instance");
    // conns[server][lane]; lanes with no tensors stay closed, and so do
    // servers with no keys (more servers than shards).
    Conns conns(servers.size());
    for (uint32_t s = 0; s < servers.size(); ++s) {
        conns[s].resize(plan.lanes.size());
        if (plan.keys_of_server[s].empty())
            continue;
        for (uint32_t lane = 0; lane < plan.lanes.size(); ++lane) {
            if (!plan.lanes[lane])
                continue;
            conns[s][lane] = connect_ps(o, plan, secret, servers[s], s, lane, o.run, instance);
            if (agent)
                agent->register_socket(plan.layer_of_rank[lane], conns[s][lane]->fd());
        }
    }

    const auto [fwd_us, bwd_us] = plan.timings_us();
    std::vector<std::map<uint32_t, uint32_t>> pulled(o.iterations);  // iteration -> tensor -> chunks
    std::vector<uint32_t> pushed_in(plan.keys.size(), 0);            // per key: the iteration last pushed
    std::vector<uint32_t> tensor_of_layer(plan.model.layers.size(), UINT32_MAX);
    std::vector<uint32_t> tensor_chunks(plan.placement.tensors.size(), 0);
    for (uint32_t t = 0; t < plan.placement.tensors.size(); ++t) {
        tensor_of_layer[plan.placement.tensors[t].layer] = t;
        for (uint32_t s : plan.placement.tensors[t].shards)
            tensor_chunks[t] += plan.chunks[s];
    }

    uint64_t sent = 0, pushed_payload = 0;

    uint32_t iteration = 0;
    size_t layer = 0;
    bool backward = false;
    double busy_until = 0;             // 0: not computing
    double compute_clock = now_s();    // when the last compute step ended
    bool waiting = false;              // forward pass blocked on parameters
    std::vector<double> wait_s(plan.model.layers.size(), 0);  // per layer, after warm-up
    std::vector<double> boundaries{compute_clock};
    const size_t n_layers = plan.model.layers.size();

    auto params_ready = [&](size_t l) {
        const uint32_t t = tensor_of_layer[l];
        return iteration == 0 || t == UINT32_MAX || pulled[iteration - 1][t] == tensor_chunks[t];
    };
    // A key's chunks onto its lane's connection to its server.
    auto push_key = [&](uint32_t key, uint32_t it) {
        const Key& k = plan.keys[key];
        pushed_in[key] = it;
        for (uint32_t c = k.first_chunk; c < k.first_chunk + k.chunks; ++c) {
            const uint32_t count = plan.chunk_elems(k.shard, c);
            conns[k.server][plan.lane(k.shard)]->queue(ps::Type::kPush, k.id, (c - k.first_chunk) * kChunkElems, count,
                                                       it);
            pushed_payload += uint64_t{count} * sizeof(float);
        }
    };
    PartitionScheduler scheduler(plan, o.credit);
    auto push = [&](size_t l) {
        const uint32_t t = tensor_of_layer[l];
        if (t == UINT32_MAX)
            return;
        if (plan.mode.partitioned) {
            scheduler.add(iteration, t);
            scheduler.pump(push_key);
            return;
        }
        for (uint32_t s : plan.placement.tensors[t].shards)
            for (uint32_t k : plan.keys_of_shard[s])
                push_key(k, iteration);
    };
    // Sums count toward the iteration their key was last pushed in: a
    // worker pushes a key again only after that sum came back.
    auto on_message = [&](const Conn& conn, const ps::Header& h) {
        const auto& ids = plan.keys_of_server[conn.server()];
        if (h.key >= ids.size())
            throw std::runtime_error("server " + std::to_string(conn.server()) + " answered key " +
                                     std::to_string(h.key) + ", which it does not have");
        const uint32_t key = ids[h.key];
        if (h.iteration != pushed_in[key])
            throw std::runtime_error("server " + std::to_string(conn.server()) + " answered key " +
                                     std::to_string(h.key) + " of iteration " + std::to_string(h.iteration) +
                                     "; it was pushed in " + std::to_string(pushed_in[key]));
        if (h.type == ps::Type::kAck)
            scheduler.acked(key, uint64_t{h.offset} + h.count);
        else
            ++pulled.at(pushed_in[key])[plan.placement.shards[plan.keys[key].shard].tensor];
    };
    auto serve_connections = [&](double timeout_s) {
        for (const auto& [conn, revents] : poll_conns(conns, false, timeout_s)) {
            if (revents & POLLOUT)
                sent += conn->flush();
            if (revents & (POLLIN | POLLHUP | POLLERR))
                if (!conn->read([&](const ps::Header& h) { on_message(*conn, h); }))
                    throw std::runtime_error("server " + std::to_string(conn->server()) + " closed a connection");
        }
        scheduler.pump(push_key);
    };

    double last_progress = now_s();
    size_t last_state = SIZE_MAX;
    while (iteration < o.iterations) {
        // Compute: one layer at a time, forward then backward.
        const double now = now_s();
        // Watchdog: a stuck run says where it is stuck instead of hanging.
        const size_t state = (iteration * 2 + backward) * (n_layers + 1) + layer;
        if (state != last_state) {
            last_state = state;
            last_progress = now;
        } else if (now - last_progress > 20) {
            size_t queued = 0;
            for (auto& per_server : conns)
                for (auto& c : per_server)
                    queued += c && c->want_write();
            const uint32_t t = tensor_of_layer[layer];
            throw std::runtime_error(
                "no progress for 20 s: iteration " + std::to_string(iteration) + (backward ? " backward" : " forward") +
                " layer " + std::to_string(layer) + ", tensor " + std::to_string(t) + " has " +
                (t == UINT32_MAX || !iteration ? std::string("-") : std::to_string(pulled[iteration - 1][t])) + "/" +
                (t == UINT32_MAX ? std::string("-") : std::to_string(tensor_chunks[t])) + " chunks, " +
                std::to_string(queued) + " connections with unsent data");
        }
        // Compute runs on its own clock: a layer starts when the previous one
        // ended (not when this process happened to wake up), or when its
        // parameters arrived if it had to wait. Late wakeups cost nothing.
        if (busy_until && now >= busy_until) {
            const double ended = busy_until;
            busy_until = 0;
            compute_clock = ended;
            if (!backward) {
                if (++layer == n_layers) {
                    backward = true;
                    layer = n_layers - 1;
                    busy_until = ended + bwd_us[layer] / 1e6;
                }
            } else {
                push(layer);
                if (layer == 0) {
                    ++iteration;
                    boundaries.push_back(ended);
                    backward = false;
                    if (agent) {
                        agent->begin_iteration(iteration);
                        agent->report_timings(iteration, fwd_us, bwd_us);
                    }
                } else {
                    --layer;
                    busy_until = ended + bwd_us[layer] / 1e6;
                }
            }
        }
        if (!busy_until && !backward && iteration < o.iterations && params_ready(layer)) {
            // Waited for parameters: the layer starts now; else back to back.
            const double start = waiting ? now : compute_clock;
            // What the wait cost: the layer starts now, not when the last one ended.
            if (waiting && iteration >= o.warmup)
                wait_s[layer] += now - compute_clock;
            busy_until = start + fwd_us[layer] / 1e6 + 1e-9;
            waiting = false;
        } else if (!busy_until && !backward) {
            waiting = true;
        }

        // Until the compute step ends (a late wakeup: the compute clock
        // absorbs it), or a while for parameters.
        const double wait = busy_until ? std::max(0.0, busy_until - now_s()) : 0.05;
        serve_connections(wait);
    }

    // The last iteration's sums, as every other's, before the workers leave
    // the job (a member that leaves early ends it for the others).
    const double drain_until = now_s() + 60;
    auto drained = [&] {
        for (uint32_t t = 0; t < tensor_chunks.size(); ++t)
            if (pulled[o.iterations - 1][t] != tensor_chunks[t])
                return false;
        return scheduler.idle();
    };
    while (!drained()) {
        if (now_s() > drain_until)
            throw std::runtime_error("the last iteration's sums did not all come back within 60 s");
        serve_connections(0.1);
    }
    // Bye on every connection; the server closes each once it has read it.
    for (auto& per_server : conns)
        for (auto& c : per_server)
            if (c)
                c->queue(ps::Type::kBye);
    for (bool pending = true; pending;) {
        pending = false;
        for (const auto& [conn, revents] : poll_conns(conns, true, 0.1)) {
            pending = true;
            if (revents & POLLOUT)
                sent += conn->flush();
        }
    }
    for (auto& per_server : conns)
        for (auto& c : per_server)
            if (c) {
                pollfd p{c->fd(), POLLIN, 0};
                while (::poll(&p, 1, 10000) > 0 && c->read([](const ps::Header&) {})) {
                }
            }

    uint64_t received = 0;
    for (auto& per_server : conns)
        for (auto& c : per_server)
            if (c)
                received += c->received_payload();
    std::vector<double> iters;
    for (size_t i = 1; i < boundaries.size(); ++i)
        iters.push_back(boundaries[i] - boundaries[i - 1]);
    double mean = 0;
    size_t counted = 0;
    for (size_t i = o.warmup; i < iters.size(); ++i, ++counted)
        mean += iters[i];
    mean = counted ? mean / static_cast<double>(counted) : 0;
    const uint64_t per_iteration = plan.elems_per_iteration() * sizeof(float);
    std::printf("{\"role\":\"worker\",\"id\":%u,\"model\":%s,\"mode\":%s,\"cc\":%s,\"placement\":%s,"
                "\"iterations\":[",
                o.id, json_text(plan.model.name).c_str(), json_text(o.mode_name).c_str(), json_text(plan.cc).c_str(),
                json_text(o.placement).c_str());
    for (size_t i = 0; i < iters.size(); ++i)
        std::printf("%s%.4f", i ? "," : "", iters[i]);
    // The measured iterations on CLOCK_MONOTONIC (steady_clock), so link
    // samples taken by other processes can be lined up with them.
    std::printf("],\"measured_from_s\":%.4f,\"measured_to_s\":%.4f",
                boundaries[std::min<size_t>(o.warmup, boundaries.size() - 1)], boundaries.back());
    std::printf(",\"forward_wait_s\":%s,\"waits\":%s", wait_json_total(wait_s, counted).c_str(),
                wait_json_top(wait_s, counted).c_str());
    std::printf(",\"mean_s\":%.4f,\"pushed_bytes\":%llu,\"expected_push_bytes\":%llu,\"pulled_bytes\":%llu,"
                "\"expected_pull_bytes\":%llu,\"wire_bytes_sent\":%llu}\n",
                mean, static_cast<unsigned long long>(pushed_payload),
                static_cast<unsigned long long>(per_iteration * o.iterations),
                static_cast<unsigned long long>(received),
                static_cast<unsigned long long>(per_iteration * o.iterations),
                static_cast<unsigned long long>(sent));
    return 0;
}

}  // namespace mercury::replay
