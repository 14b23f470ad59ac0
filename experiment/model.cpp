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

namespace {

constexpr const char* kNodeForm =
    "a node line 'nodeN -- DESCRIPTION -- forward_compute_time=MS, backward_compute_time=MS, "
    "activation_size=BYTES or [BYTES; ...], parameter_size=BYTES [-- stage_id=K]' or an edge line "
    "'<tab>nodeA -- nodeB'";

// "key=value, key=value": a value is a number or a bracketed list "[a; b]"
// (activation_size of a node with several outputs). Returns "" or what is wrong.
std::string parse_attributes(const std::string& text, std::map<std::string, std::string>& out)
{
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t eq = text.find('=', pos);
        if (eq == std::string::npos)
            return "expected key=value at '" + text.substr(pos) + "'";
        std::string key = text.substr(pos, eq - pos);
        key.erase(0, key.find_first_not_of(' '));
        size_t end;
        if (eq + 1 < text.size() && text[eq + 1] == '[') {
            end = text.find(']', eq);
            if (end == std::string::npos)
                return "unterminated list in " + key;
            ++end;
        } else {
            end = std::min(text.find(',', eq), text.size());
        }
        out[key] = text.substr(eq + 1, end - eq - 1);
        pos = end;
        if (pos < text.size() && text[pos] == ',')
            ++pos;
    }
    return "";
}

bool parse_number(const std::string& text, double& out)
{
    try {
        size_t used = 0;
        out = std::stod(text, &used);
        return text.find_first_not_of(" \t\r", used) == std::string::npos;
    } catch (const std::exception&) {
        return false;
    }
}

// A number or "[a; b; ...]" of numbers.
bool parse_number_or_list(const std::string& text, double& total)
{
    if (text.empty() || text.front() != '[')
        return parse_number(text, total);
    total = 0;
    std::istringstream items(text.substr(1, text.size() - 2));
    for (std::string item; std::getline(items, item, ';');) {
        double v = 0;
        if (!parse_number(item, v))
            return false;
        total += v;
    }
    return true;
}

}  // namespace

Model parse_pipedream(const std::string& text, const std::string& name)
{
    // PipeDream's profiler output (profiler/*/profiles/*/graph.txt), and its
    // partitioned graphs, which end node lines with " -- stage_id=K".
    static const std::regex node_re(R"(^(node\d+) -- (.*) -- (forward_compute_time=.*?)(?: -- stage_id=\d+)?\s*$)");
    static const std::regex edge_re(R"(^\s+(node\d+) -- (node\d+)\s*$)");

    std::map<std::string, Layer> nodes;
    std::vector<std::pair<std::string, std::string>> edges;
    std::istringstream in(text);
    std::string line;
    for (size_t lineno = 1; std::getline(in, line); ++lineno) {
        if (line.find_first_not_of(" \t\r") == std::string::npos)
            continue;
        std::smatch m;
        if (std::regex_match(line, m, edge_re)) {
            edges.emplace_back(m[1], m[2]);
            continue;
        }
        if (!std::regex_match(line, m, node_re))
            bad(name, lineno, std::string("expected ") + kNodeForm);
        std::map<std::string, std::string> attrs;
        if (const std::string err = parse_attributes(m[3], attrs); !err.empty())
            bad(name, lineno, err);
        Layer l;
        l.name = m[1].str() + " " + m[2].str().substr(0, m[2].str().find('('));
        double param = 0, activation = 0;
        const std::pair<const char*, double*> wanted[] = {{"forward_compute_time", &l.forward_ms},
                                                          {"backward_compute_time", &l.backward_ms},
                                                          {"parameter_size", &param}};
        for (const auto& [key, dst] : wanted) {
            const auto it = attrs.find(key);
            if (it == attrs.end())
                bad(name, lineno, std::string("missing ") + key + " (expected " + kNodeForm + ")");
            if (!parse_number(it->second, *dst))
                bad(name, lineno, std::string(key) + " is not a number: '" + it->second + "'");
        }
        if (const auto it = attrs.find("activation_size");
            it != attrs.end() && !parse_number_or_list(it->second, activation))
            bad(name, lineno, "activation_size is neither a number nor a list [a; b; ...]: '" + it->second + "'");
        if (l.forward_ms < 0 || l.backward_ms < 0)
            bad(name, lineno, "negative compute time");
        if (param < 0)
            bad(name, lineno, "negative parameter_size");
        l.param_bytes = static_cast<uint64_t>(std::llround(param));
        if (!nodes.emplace(m[1], l).second)
            bad(name, lineno, "node " + m[1].str() + " defined twice");
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

Placement place_balanced(const Model& m, uint32_t servers, double wire_divisor, uint64_t partition_bytes)
{
    if (!servers || !partition_bytes)
        throw std::invalid_argument("place_balanced: servers and partition_bytes must be positive");
    Placement p;
    std::vector<uint64_t> load(servers, 0);   // real bytes per server so far
    for (uint32_t i = 0; i < m.layers.size(); ++i) {
        const uint64_t real = m.layers[i].param_bytes;
        if (real == 0)
            continue;
        const auto tensor_id = static_cast<uint32_t>(p.tensors.size());
        Tensor t;
        t.layer = i;
        t.bytes = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(static_cast<double>(real) / wire_divisor)));
        // Real bytes of this tensor per server, partition by partition.
        std::vector<uint64_t> real_on(servers, 0);
        for (uint64_t off = 0; off < real; off += partition_bytes) {
            const uint64_t part = std::min(partition_bytes, real - off);
            const auto s = static_cast<uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
            load[s] += part;
            real_on[s] += part;
        }
        // Wire bytes in the same proportions; the rounding remainder goes to
        // the last shard so the tensor keeps its exact size.
        uint64_t assigned = 0;
        uint32_t last = 0;
        for (uint32_t s = 0; s < servers; ++s)
            if (real_on[s])
                last = s;
        for (uint32_t s = 0; s < servers; ++s) {
            if (!real_on[s])
                continue;
            uint64_t bytes = s == last ? t.bytes - assigned
                                       : static_cast<uint64_t>(static_cast<double>(t.bytes) *
                                                               static_cast<double>(real_on[s]) /
                                                               static_cast<double>(real));
            if (!bytes)
                continue;
            assigned += bytes;
            t.shards.push_back(static_cast<uint32_t>(p.shards.size()));
            p.shards.push_back({tensor_id, s, bytes});
        }
        p.tensors.push_back(t);
    }
    return p;
}

std::vector<uint64_t> bytes_per_server(const Placement& p, uint32_t servers)
{
    std::vector<uint64_t> out(servers, 0);
    for (const auto& s : p.shards)
        out.at(s.server) += s.bytes;
    return out;
}

}  // namespace mercury::experiment
