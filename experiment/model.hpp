// SPDX-License-Identifier: GPL-2.0
// A model as the experiment replays it: layers in topological (forward)
// order with compute times and parameter bytes, and the tensors placed on
// parameter-server shards the way MXNet's kvstore does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mercury::experiment {

struct Layer {
    std::string name;
    double forward_ms = 0;
    double backward_ms = 0;
    uint64_t param_bytes = 0;  // fp32 bytes; 0: no tensor
};

struct Model {
    std::string name;
    std::vector<Layer> layers;  // forward order
};

// Parses PipeDream's graph.txt (nodes + "\tnodeA -- nodeB" edges) and orders
// the layers topologically (Kahn; ties by node number). Throws
// std::runtime_error naming the line on malformed input or a cycle.
Model parse_pipedream(const std::string& text, const std::string& name);

// Our own format, one layer per line: "name forward_ms backward_ms param_bytes";
// '#' starts a comment.
Model parse_simple(const std::string& text, const std::string& name);

// Reads either format (by content) from a file.
Model load_model(const std::string& path);

// bytes / byte_divisor, times * time_factor: emulate a faster link by
// shrinking bytes by the same factor as the link.
Model scale(const Model& m, double byte_divisor, double time_factor);

// One piece of a tensor living on one server.
struct Shard {
    uint32_t tensor = 0;    // index into Placement::tensors
    uint32_t server = 0;
    uint64_t bytes = 0;     // wire bytes (after scaling)
};

struct Tensor {
    uint32_t layer = 0;     // index into Model::layers
    uint64_t bytes = 0;     // wire bytes
    std::vector<uint32_t> shards;  // indices into Placement::shards
};

struct Placement {
    std::vector<Tensor> tensors;
    std::vector<Shard> shards;
};

// MXNet kvstore placement: a tensor above @split_elements fp32 elements is
// split evenly over all servers; smaller ones go whole to one server, round
// robin. @wire_divisor scales bytes (the split decision uses real sizes).
Placement place(const Model& m, uint32_t servers, double wire_divisor, uint64_t split_elements = 1000000);

// BytePS-style balanced placement: every tensor is cut into partitions of at
// most @partition_bytes real bytes (BytePS's default 4096000), and each
// partition goes to the server holding the fewest bytes so far (ties: the
// lowest index). Partitions of one tensor that land on the same server are
// one shard. Every server then takes nearly the same share of each push.
Placement place_balanced(const Model& m, uint32_t servers, double wire_divisor,
                         uint64_t partition_bytes = 4096000);

// Per server, the wire bytes one worker pushes to it.
std::vector<uint64_t> bytes_per_server(const Placement& p, uint32_t servers);

}  // namespace mercury::experiment
