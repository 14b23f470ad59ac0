// SPDX-License-Identifier: GPL-2.0
#include "ps/aggregator.hpp"

#include <algorithm>

namespace mercury::ps {

uint64_t JobShape::bytes() const
{
    uint64_t elems = 0;
    for (uint64_t n : key_elems)
        elems += n;
    return elems * sizeof(float);
}

uint64_t JobShape::footprint(uint32_t chunk_elems) const
{
    // Per key: the Key record; per chunk: its bitmap words, its unit's
    // counters and a started_ entry (a map node, ~64 bytes); per key and
    // worker: the server's reply lane. An upper bound, not an estimate of
    // the allocator's overhead.
    constexpr uint64_t kPerKey = 4 * sizeof(std::vector<uint32_t>) + 64;
    const uint64_t words = (uint64_t{workers} + 63) / 64;
    uint64_t total = bytes();
    for (uint64_t n : key_elems) {
        const uint64_t chunks = chunk_elems ? (n + chunk_elems - 1) / chunk_elems : n;
        total += kPerKey + chunks * (words * sizeof(uint64_t) + 2 * sizeof(uint32_t) + 64) + workers;
    }
    return total;
}

Aggregator::Aggregator(JobShape shape, uint32_t chunk_elems, Aggregation aggregation)
    : shape_(std::move(shape)), chunk_elems_(chunk_elems), aggregation_(aggregation), words_((shape_.workers + 63) / 64)
{
    if (!shape_.workers || !chunk_elems_)
        throw std::invalid_argument("a job needs workers and a chunk size");
    keys_.resize(shape_.key_elems.size());
    for (uint32_t k = 0; k < keys_.size(); ++k) {
        keys_[k].sum.assign(shape_.key_elems[k], 0.0f);
        keys_[k].pushed.assign(chunks(k) * words_, 0);
        keys_[k].arrived.assign(aggregation_ == Aggregation::kChunk ? chunks(k) : 1, 0);
        keys_[k].round.assign(keys_[k].arrived.size(), 0);
    }
}

uint64_t Aggregator::chunks(uint32_t key) const
{
    return (shape_.key_elems[key] + chunk_elems_ - 1) / chunk_elems_;
}

std::pair<uint64_t, uint64_t> Aggregator::unit_chunks(uint32_t key, uint64_t chunk) const
{
    if (aggregation_ == Aggregation::kChunk)
        return {chunk, chunk + 1};
    return {0, chunks(key)};
}

void Aggregator::check(uint32_t key, uint64_t offset, size_t count) const
{
    if (key >= keys_.size())
        throw ProtocolError("key " + std::to_string(key) + " not declared (" + std::to_string(keys_.size()) + " keys)");
    const uint64_t size = shape_.key_elems[key];
    if (offset % chunk_elems_ || offset >= size)
        throw ProtocolError("offset " + std::to_string(offset) + " of key " + std::to_string(key) +
                            " is not a chunk of its " + std::to_string(size) + " elements");
    if (count != std::min<uint64_t>(chunk_elems_, size - offset))
        throw ProtocolError("chunk at " + std::to_string(offset) + " of key " + std::to_string(key) + " has " +
                            std::to_string(count) + " elements, not " +
                            std::to_string(std::min<uint64_t>(chunk_elems_, size - offset)));
}

std::optional<Aggregator::Sum> Aggregator::add(uint32_t worker, uint32_t key, uint64_t offset, uint32_t iteration,
                                               std::span<const float> data, Clock::time_point now)
{
    check(key, offset, data.size());
    if (worker >= shape_.workers)
        throw ProtocolError("worker " + std::to_string(worker) + " of " + std::to_string(shape_.workers));
    Key& k = keys_[key];
    const uint64_t chunk = offset / chunk_elems_;
    const uint64_t unit = aggregation_ == Aggregation::kChunk ? chunk : 0;
    if (iteration != k.round[unit])
        throw ProtocolError("worker " + std::to_string(worker) + " pushed key " + std::to_string(key) + " offset " +
                            std::to_string(offset) + " for iteration " + std::to_string(iteration) +
                            "; the chunk is at iteration " + std::to_string(k.round[unit]) +
                            (iteration < k.round[unit] ? " (a push whose sum went out already)" : ""));
    uint64_t& word = k.pushed[chunk * words_ + worker / 64];
    const uint64_t bit = uint64_t{1} << (worker % 64);
    if (word & bit)
        throw ProtocolError("worker " + std::to_string(worker) + " pushed key " + std::to_string(key) + " offset " +
                            std::to_string(offset) + " twice before its sum went out");
    word |= bit;
    float* sum = k.sum.data() + offset;
    for (size_t i = 0; i < data.size(); ++i)
        sum[i] += data[i];

    const auto [first, end] = unit_chunks(key, chunk);
    started_.try_emplace({key, first}, now);
    if (++k.arrived[unit] < shape_.workers * (end - first))
        return std::nullopt;

    // Complete: the sum goes out, the unit starts over for the next iteration.
    const uint64_t from = first * chunk_elems_;
    const uint64_t to = std::min<uint64_t>(end * chunk_elems_, shape_.key_elems[key]);
    auto values = std::make_shared<std::vector<float>>(k.sum.begin() + static_cast<std::ptrdiff_t>(from),
                                                       k.sum.begin() + static_cast<std::ptrdiff_t>(to));
    std::fill(k.sum.begin() + static_cast<std::ptrdiff_t>(from), k.sum.begin() + static_cast<std::ptrdiff_t>(to), 0.0f);
    std::fill(k.pushed.begin() + static_cast<std::ptrdiff_t>(first * words_),
              k.pushed.begin() + static_cast<std::ptrdiff_t>(end * words_), 0);
    k.arrived[unit] = 0;
    const uint32_t round = k.round[unit]++;
    started_.erase({key, first});
    return Sum{key, from, round, std::move(values)};
}

std::optional<Aggregator::Stall> Aggregator::oldest_incomplete() const
{
    if (started_.empty())
        return std::nullopt;
    const auto oldest = std::min_element(started_.begin(), started_.end(),
                                         [](const auto& a, const auto& b) { return a.second < b.second; });
    const auto [key, first] = oldest->first;
    const auto [from, end] = unit_chunks(key, first);
    Stall stall{key, first * chunk_elems_, oldest->second, {}};
    for (uint32_t w = 0; w < shape_.workers; ++w)
        for (uint64_t c = from; c < end; ++c)
            if (!(keys_[key].pushed[c * words_ + w / 64] & (uint64_t{1} << (w % 64)))) {
                stall.missing.push_back(w);
                break;
            }
    return stall;
}

}  // namespace mercury::ps
