// SPDX-License-Identifier: GPL-2.0
#include "simulator.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <tuple>

namespace mercury::experiment {

namespace {

// One chunk of one shard going one way between a worker and a server.
struct Transfer {
    uint32_t iteration;
    uint32_t layer;       // urgency: the next forward pass needs low layers first
    uint64_t seq;         // arrival order (stable ties)
    double handed;        // when the tensor push or chunk pull was handed over (FIFO order)
    uint32_t shard;
    uint32_t chunk;
    uint64_t bytes;
    uint32_t worker;
    bool pull;            // server -> worker
    bool on_downlink;     // second hop
};

struct Event {
    double time;
    uint64_t seq;
    std::function<void()> action;
    bool operator>(const Event& o) const { return std::tie(time, seq) > std::tie(o.time, o.seq); }
};

class Simulation {
public:
    Simulation(const Model& m, const Placement& p, const SimConfig& c) : model_(m), place_(p), cfg_(c)
    {
        hosts_ = c.workers + c.servers;
        uplinks_.resize(hosts_);
        downlinks_.resize(hosts_);
        for (const auto& s : p.shards)
            chunks_per_shard_.push_back(static_cast<uint32_t>((s.bytes + c.chunk_bytes - 1) / c.chunk_bytes));
        for (uint32_t t = 0; t < p.tensors.size(); ++t)
            tensor_of_layer_[p.tensors[t].layer] = t;
        workers_.resize(c.workers);
        for (auto& w : workers_)
            w.wait_s.assign(m.layers.size(), 0);
    }

    SimResult run()
    {
        for (uint32_t w = 0; w < cfg_.workers; ++w)
            at(0, [this, w] { start_iteration(w, 0); });
        while (!events_.empty()) {
            Event e = events_.top();
            events_.pop();
            now_ = e.time;
            e.action();
        }
        SimResult r;
        const auto& starts = workers_[0].iteration_start;
        for (size_t i = cfg_.warmup + 1; i < starts.size(); ++i)
            r.iteration_s.push_back(starts[i] - starts[i - 1]);
        double sum = 0;
        for (double s : r.iteration_s)
            sum += s;
        r.mean_iteration_s = r.iteration_s.empty() ? 0 : sum / static_cast<double>(r.iteration_s.size());
        r.forward_wait_s = workers_[0].wait_s;
        const uint32_t measured = cfg_.iterations > cfg_.warmup ? cfg_.iterations - cfg_.warmup : 1;
        for (double& w : r.forward_wait_s)
            w /= measured;
        return r;
    }

private:
    struct Link {
        bool busy = false;
        std::vector<Transfer> queue;
        std::map<uint32_t, uint64_t> served;  // connection -> turn it was last served
        uint64_t turn = 0;
    };
    struct Worker {
        std::vector<double> iteration_start;
        uint32_t iteration = 0;
        uint32_t next_forward = 0;
        bool computing = false;
        double waiting_since = -1;  // forward pass blocked on parameters since
        std::vector<double> wait_s;  // per layer, summed over measured iterations
        std::map<std::pair<uint32_t, uint32_t>, uint32_t> pulled;  // (iteration, tensor) -> chunks arrived
    };

    void at(double t, std::function<void()> f) { events_.push({t, seq_++, std::move(f)}); }

    uint64_t chunk_bytes(uint32_t shard, uint32_t chunk) const
    {
        const uint64_t total = place_.shards[shard].bytes;
        return std::min<uint64_t>(cfg_.chunk_bytes, total - uint64_t{chunk} * cfg_.chunk_bytes);
    }
    uint32_t tensor_chunks(uint32_t tensor) const
    {
        uint32_t n = 0;
        for (uint32_t s : place_.tensors[tensor].shards)
            n += chunks_per_shard_[s];
        return n;
    }
    uint32_t server_host(uint32_t shard) const { return cfg_.workers + place_.shards[shard].server; }

    // Per-layer priority (priority, no ranks): one order over every chunk,
    // the most urgent first; a tensor's chunks, and every worker's copy, go
    // chunk by chunk across them. Otherwise connections (a worker-server pair
    // and lane) share a link as TCP flows do: the most urgent class (rank;
    // one class without priority) first, its connections in turn, each
    // first come, first served.
    bool per_layer() const { return cfg_.priority && cfg_.layer_rank.empty(); }
    uint32_t traffic_class(const Transfer& t) const
    {
        return cfg_.priority ? cfg_.layer_rank[t.layer] : 0;
    }
    uint32_t connection(const Transfer& t) const
    {
        const uint32_t server = server_host(t.shard);
        const uint32_t lane = cfg_.priority ? cfg_.layer_rank[t.layer] : 0;
        return ((t.pull ? 1u : 0u) * hosts_ * hosts_ + t.worker * hosts_ + server) * 256 + lane;
    }
    std::vector<Transfer>::iterator next_of(Link& link)
    {
        if (per_layer())
            return std::min_element(link.queue.begin(), link.queue.end(), [](const Transfer& a, const Transfer& b) {
                return std::tie(a.iteration, a.layer, a.chunk, a.shard, a.seq) <
                       std::tie(b.iteration, b.layer, b.chunk, b.shard, b.seq);
            });
        auto key = [&](const Transfer& t) {
            const auto served = link.served.find(connection(t));
            return std::make_tuple(traffic_class(t), served == link.served.end() ? 0 : served->second, connection(t),
                                   t.handed, t.chunk, t.seq);
        };
        return std::min_element(link.queue.begin(), link.queue.end(),
                                [&](const Transfer& a, const Transfer& b) { return key(a) < key(b); });
    }
    double wire_seconds(const Transfer& t) const
    {
        return static_cast<double>(t.bytes + cfg_.header_bytes) * cfg_.wire_per_payload / cfg_.link_bytes_per_s;
    }

    void enqueue(Link& link, uint32_t host, Transfer t, bool down)
    {
        t.seq = seq_++;
        link.queue.push_back(t);
        if (!link.busy)
            serve(link, host, down);
    }

    void serve(Link& link, uint32_t host, bool down)
    {
        if (link.queue.empty()) {
            link.busy = false;
            return;
        }
        auto it = next_of(link);
        Transfer t = *it;
        if (!per_layer())
            link.served[connection(t)] = ++link.turn;
        link.queue.erase(it);
        link.busy = true;
        at(now_ + wire_seconds(t), [this, &link, host, down, t] {
            if (down)
                arrived(t);
            else
                enqueue(downlinks_[t.pull ? t.worker : server_host(t.shard)], t.pull ? t.worker : server_host(t.shard),
                        t, true);
            serve(link, host, down);
        });
    }

    void arrived(const Transfer& t)
    {
        if (t.pull) {
            Worker& w = workers_[t.worker];
            ++w.pulled[{t.iteration, place_.shards[t.shard].tensor}];
            try_forward(t.worker);
            return;
        }
        // At the server: aggregate per chunk (immediate) or per shard.
        const auto key = cfg_.immediate ? std::make_tuple(t.iteration, t.shard, t.chunk)
                                        : std::make_tuple(t.iteration, t.shard, UINT32_MAX);
        const uint32_t need = cfg_.workers * (cfg_.immediate ? 1 : chunks_per_shard_[t.shard]);
        if (++aggregated_[key] < need)
            return;
        const uint32_t first = cfg_.immediate ? t.chunk : 0;
        const uint32_t last = cfg_.immediate ? t.chunk + 1 : chunks_per_shard_[t.shard];
        for (uint32_t c = first; c < last; ++c)
            for (uint32_t w = 0; w < cfg_.workers; ++w)
                enqueue(uplinks_[server_host(t.shard)], server_host(t.shard),
                        {t.iteration, t.layer, 0, now_, t.shard, c, chunk_bytes(t.shard, c), w, true, false}, false);
    }

    void start_iteration(uint32_t w, uint32_t iteration)
    {
        Worker& wk = workers_[w];
        wk.iteration = iteration;
        wk.next_forward = 0;
        wk.iteration_start.push_back(now_);
        try_forward(w);
    }

    bool params_ready(uint32_t w, uint32_t layer)
    {
        Worker& wk = workers_[w];
        const auto t = tensor_of_layer_.find(layer);
        if (wk.iteration == 0 || t == tensor_of_layer_.end())
            return true;
        return wk.pulled[{wk.iteration - 1, t->second}] == tensor_chunks(t->second);
    }

    void try_forward(uint32_t w)
    {
        Worker& wk = workers_[w];
        if (wk.computing || wk.iteration >= cfg_.iterations || wk.next_forward >= model_.layers.size())
            return;
        if (!params_ready(w, wk.next_forward)) {
            if (wk.waiting_since < 0)
                wk.waiting_since = now_;
            return;
        }
        if (wk.waiting_since >= 0 && wk.iteration >= cfg_.warmup)
            wk.wait_s[wk.next_forward] += now_ - wk.waiting_since;
        wk.waiting_since = -1;
        wk.computing = true;
        const uint32_t layer = wk.next_forward++;
        at(now_ + model_.layers[layer].forward_ms / 1000, [this, w, layer] {
            workers_[w].computing = false;
            if (layer + 1 == model_.layers.size())
                backward(w, layer);
            else
                try_forward(w);
        });
    }

    void backward(uint32_t w, uint32_t layer)
    {
        at(now_ + model_.layers[layer].backward_ms / 1000, [this, w, layer] {
            const Worker& wk = workers_[w];
            const auto t = tensor_of_layer_.find(layer);
            if (t != tensor_of_layer_.end())
                for (uint32_t s : place_.tensors[t->second].shards)
                    for (uint32_t c = 0; c < chunks_per_shard_[s]; ++c)
                        enqueue(uplinks_[w], w,
                                {wk.iteration, layer, 0, now_, s, c, chunk_bytes(s, c), w, false, false}, false);
            if (layer == 0)
                start_iteration(w, wk.iteration + 1);
            else
                backward(w, layer - 1);
        });
    }

    const Model& model_;
    const Placement& place_;
    SimConfig cfg_;
    uint32_t hosts_ = 0;
    double now_ = 0;
    uint64_t seq_ = 0;
    std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
    std::vector<Link> uplinks_, downlinks_;
    std::vector<uint32_t> chunks_per_shard_;
    std::map<uint32_t, uint32_t> tensor_of_layer_;
    std::vector<Worker> workers_;
    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, uint32_t> aggregated_;
};

}  // namespace

SimResult simulate(const Model& model, const Placement& placement, const SimConfig& config)
{
    return Simulation(model, placement, config).run();
}

}  // namespace mercury::experiment
