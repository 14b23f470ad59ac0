// SPDX-License-Identifier: GPL-2.0
#include "model.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <queue>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

namespace mercury::experiment {

namespace {

[[noreturn]] void bad(const std::string& name, size_t lineno, const std::string& why)
{
    throw std::runtime_error(name + ":" + std::to_string(lineno) + ": " + why);
}

}  // namespace

Model parse_pipedream(const std::string& text, const std::string& name)
{
    static const std::regex node_re(
        R"(^(node\d+) -- (.*) -- forward_compute_time=([0-9.eE+-]+), backward_compute_time=([0-9.eE+-]+), )"
        R"(activation_size=([0-9.eE+-]+), parameter_size=([0-9.eE+-]+)\s*$)");
    static const std::regex edge_re(R"(^\s+(node\d+) -- (node\d+)\s*$)");

    std::map<std::string, Layer> nodes;
    std::vector<std::pair<std::string, std::string>> edges;
    std::istringstream in(text);
    std::string line;
    for (size_t lineno = 1; std::getline(in, line); ++lineno) {
        if (line.find_first_not_of(" \t\r") == std::string::npos)
            continue;
        std::smatch m;
        if (std::regex_match(line, m, node_re)) {
            Layer l;
            l.name = m[1].str() + " " + m[2].str().substr(0, m[2].str().find('('));
            l.forward_ms = std::stod(m[3]);
            l.backward_ms = std::stod(m[4]);
            l.param_bytes = static_cast<uint64_t>(std::llround(std::stod(m[6])));
            if (l.forward_ms < 0 || l.backward_ms < 0)
                bad(name, lineno, "negative compute time");
            if (!nodes.emplace(m[1], l).second)
                bad(name, lineno, "node " + m[1].str() + " defined twice");
        } else if (std::regex_match(line, m, edge_re)) {
            edges.emplace_back(m[1], m[2]);
        } else {
            bad(name, lineno, "neither a node nor an edge line");
        }
    }
    if (nodes.empty())
        throw std::runtime_error(name + ": no nodes");

    auto number = [](const std::string& id) { return std::stoul(id.substr(4)); };
    std::map<std::string, std::set<std::string>> out;
    std::map<std::string, size_t> indegree;
    for (const auto& [id, layer] : nodes)
        indegree[id] = 0;
    for (const auto& [a, b] : edges) {
        if (!nodes.count(a) || !nodes.count(b))
            throw std::runtime_error(name + ": edge " + a + " -- " + b + " names an unknown node");
        if (out[a].insert(b).second)
            ++indegree[b];
    }
    auto later = [&](const std::string& x, const std::string& y) { return number(x) > number(y); };
    std::priority_queue<std::string, std::vector<std::string>, decltype(later)> ready(later);
    for (const auto& [id, d] : indegree)
        if (d == 0)
            ready.push(id);
    Model model;
    model.name = name;
    while (!ready.empty()) {
        const std::string id = ready.top();
        ready.pop();
        model.layers.push_back(nodes[id]);
        for (const auto& next : out[id])
            if (--indegree[next] == 0)
                ready.push(next);
    }
    if (model.layers.size() != nodes.size())
        throw std::runtime_error(name + ": the graph has a cycle");
    return model;
}

Model parse_simple(const std::string& text, const std::string& name)
{
    Model model;
    model.name = name;
    std::istringstream in(text);
    std::string line;
    for (size_t lineno = 1; std::getline(in, line); ++lineno) {
        line = line.substr(0, line.find('#'));
        std::istringstream fields(line);
        Layer l;
        if (!(fields >> l.name))
            continue;
        std::string extra;
        if (!(fields >> l.forward_ms >> l.backward_ms >> l.param_bytes) || (fields >> extra))
            bad(name, lineno, "expected: name forward_ms backward_ms param_bytes");
        if (l.forward_ms < 0 || l.backward_ms < 0)
            bad(name, lineno, "negative compute time");
        model.layers.push_back(l);
    }
    if (model.layers.empty())
        throw std::runtime_error(name + ": no layers");
    return model;
}

Model load_model(const std::string& path)
{
    std::ifstream in(path);
    if (!in)
        throw std::runtime_error("cannot read profile " + path);
    std::stringstream buf;
    buf << in.rdbuf();
    std::string name = path.substr(path.find_last_of('/') + 1);
    name = name.substr(0, name.find('.'));
    const std::string text = buf.str();
    return text.rfind("node", 0) == 0 ? parse_pipedream(text, name) : parse_simple(text, name);
}

Model scale(const Model& m, double byte_divisor, double time_factor)
{
    Model out = m;
    for (auto& l : out.layers) {
        l.forward_ms *= time_factor;
        l.backward_ms *= time_factor;
        l.param_bytes = static_cast<uint64_t>(std::llround(static_cast<double>(l.param_bytes) / byte_divisor));
    }
    return out;
}

Placement place(const Model& m, uint32_t servers, double wire_divisor, uint64_t split_elements)
{
    Placement p;
    uint32_t next_server = 0;
    for (uint32_t i = 0; i < m.layers.size(); ++i) {
        const uint64_t real = m.layers[i].param_bytes;
        if (real == 0)
            continue;
        Tensor t;
        t.layer = i;
        t.bytes = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(static_cast<double>(real) / wire_divisor)));
        const auto tensor_id = static_cast<uint32_t>(p.tensors.size());
        if (real / 4 > split_elements && servers > 1) {
            for (uint32_t s = 0; s < servers; ++s) {
                const uint64_t part = t.bytes / servers + (s < t.bytes % servers ? 1 : 0);
                t.shards.push_back(static_cast<uint32_t>(p.shards.size()));
                p.shards.push_back({tensor_id, s, part});
            }
        } else {
            t.shards.push_back(static_cast<uint32_t>(p.shards.size()));
            p.shards.push_back({tensor_id, next_server, t.bytes});
            next_server = (next_server + 1) % servers;
        }
        p.tensors.push_back(t);
    }
    return p;
}

}  // namespace mercury::experiment
