// SPDX-License-Identifier: GPL-2.0
#include "datapath/datapath.hpp"

#include <array>
#include <cerrno>
#include <cstring>

#include "datapath/bpf_maps.hpp"
#include "datapath/genl_client.hpp"
#include "mercury/uapi.h"

namespace mercury {

namespace {

// One table for names, uapi ids and Params fields, so they cannot drift.
constexpr std::array<ParamField, 6> kParamFields{{
    {"cwnd_floor", MERCURY_PARAM_CWND_FLOOR, false},
    {"delay_thresh_us", MERCURY_PARAM_DELAY_THRESH_US, false},
    {"entry_ttl_ms", MERCURY_PARAM_ENTRY_TTL_MS, false},
    {"max_entries", MERCURY_PARAM_MAX_ENTRIES, false},
    {"max_hold_ms", MERCURY_PARAM_MAX_HOLD_MS, false},
    {"debug", MERCURY_PARAM_DEBUG, true},
}};

Status out_of_range(const std::string& what, uint64_t value, uint64_t lo, uint64_t hi)
{
    return Status{-EINVAL, what + " " + std::to_string(value) + " is out of range [" + std::to_string(lo) + ".." +
                               std::to_string(hi) + "]"};
}

Status check_range(const std::optional<uint32_t>& v, const char* what, uint64_t lo, uint64_t hi)
{
    if (v && (*v < lo || *v > hi))
        return out_of_range(what, *v, lo, hi);
    return {};
}

}  // namespace

std::string Status::describe() const
{
    std::string text = error ? std::strerror(-error) : "ok";
    if (!message.empty())
        text += " (" + message + ")";
    return text;
}

std::span<const ParamField> param_fields()
{
    return kParamFields;
}

std::optional<uint32_t> Params::* param_member(int id)
{
    switch (id) {
    case MERCURY_PARAM_CWND_FLOOR: return &Params::cwnd_floor;
    case MERCURY_PARAM_DELAY_THRESH_US: return &Params::delay_thresh_us;
    case MERCURY_PARAM_ENTRY_TTL_MS: return &Params::entry_ttl_ms;
    case MERCURY_PARAM_MAX_ENTRIES: return &Params::max_entries;
    case MERCURY_PARAM_MAX_HOLD_MS: return &Params::max_hold_ms;
    default: return nullptr;
    }
}

Status set_param_by_name(Params& params, const std::string& name, uint64_t value)
{
    for (const auto& f : kParamFields) {
        if (name != f.name)
            continue;
        if (f.is_u8) {
            if (value > 0xff)
                return Status{-EINVAL, name + " is out of range"};
            params.debug = static_cast<uint8_t>(value);
        } else {
            if (value > 0xffffffffULL)
                return Status{-EINVAL, name + " is out of range"};
            params.*param_member(f.id) = static_cast<uint32_t>(value);
        }
        return {};
    }
    return Status{-EINVAL, "unknown parameter '" + name + "'"};
}

std::map<std::string, uint64_t> params_as_map(const Params& params)
{
    std::map<std::string, uint64_t> out;
    for (const auto& f : kParamFields) {
        if (f.is_u8) {
            if (params.debug)
                out[f.name] = *params.debug;
        } else if (const auto& v = params.*param_member(f.id)) {
            out[f.name] = *v;
        }
    }
    return out;
}

Status validate(const Priority& prio)
{
    if (prio.rank >= MERCURY_NUM_RANKS)
        return out_of_range("rank", prio.rank, 0, MERCURY_NUM_RANKS - 1);
    if (prio.weight && (*prio.weight < MERCURY_WEIGHT_MIN || *prio.weight > MERCURY_WEIGHT_MAX))
        return out_of_range("weight", *prio.weight, MERCURY_WEIGHT_MIN, MERCURY_WEIGHT_MAX);
    if (prio.job >= MERCURY_NUM_JOBS)
        return out_of_range("job", prio.job, 0, MERCURY_NUM_JOBS - 1);
    return check_range(prio.ttl_ms, "ttl_ms", MERCURY_TTL_MS_MIN, MERCURY_TTL_MS_MAX);
}

Status validate_tag(uint32_t tag)
{
    if (tag < MERCURY_TAG_MIN)
        return Status{-ERANGE, "tag " + std::to_string(tag) + " is out of range [" + std::to_string(MERCURY_TAG_MIN) +
                                   "..4294967295]: any process may set SO_PRIORITY 0.." +
                                   std::to_string(MERCURY_TAG_MIN - 1) +
                                   ", so those tags cannot claim a rank (register the socket with mercuryd instead)"};
    return {};
}

Status validate(const Params& p)
{
    Status s = check_range(p.cwnd_floor, "cwnd_floor", MERCURY_CWND_FLOOR_MIN, MERCURY_CWND_FLOOR_MAX);
    if (s)
        s = check_range(p.delay_thresh_us, "delay_thresh_us", 0, MERCURY_DELAY_THRESH_US_MAX);
    if (s)
        s = check_range(p.entry_ttl_ms, "entry_ttl_ms", MERCURY_TTL_MS_MIN, MERCURY_TTL_MS_MAX);
    if (s)
        s = check_range(p.max_entries, "max_entries", MERCURY_MAX_ENTRIES_MIN, MERCURY_MAX_ENTRIES_MAX);
    if (s)
        s = check_range(p.max_hold_ms, "max_hold_ms", MERCURY_MAX_HOLD_MS_MIN, MERCURY_MAX_HOLD_MS_MAX);
    if (s && p.debug && *p.debug > 1)
        s = out_of_range("debug", *p.debug, 0, 1);
    return s;
}

std::optional<DatapathKind> parse_datapath_kind(std::string_view text)
{
    if (text == "auto")
        return DatapathKind::kAuto;
    if (text == "kmod")
        return DatapathKind::kKmod;
    if (text == "bpf")
        return DatapathKind::kBpf;
    return std::nullopt;
}

std::string_view to_string(DatapathKind kind)
{
    switch (kind) {
    case DatapathKind::kKmod: return "kmod";
    case DatapathKind::kBpf: return "bpf";
    default: return "auto";
    }
}

Status open_datapath(DatapathKind kind, std::unique_ptr<Datapath>& out)
{
    Status s;
    if (kind != DatapathKind::kBpf) {
        std::unique_ptr<GenlClient> nl;
        s = GenlClient::open(nl);
        if (s) {
            out = std::move(nl);
            return s;
        }
        if (kind == DatapathKind::kKmod)
            return s;
    }
    std::unique_ptr<BpfMaps> maps;
    const Status b = BpfMaps::open(maps);
    if (b) {
        out = std::move(maps);
        return b;
    }
    if (kind == DatapathKind::kAuto)
        return Status{-ENOENT, "no Mercury datapath: tcp_mercury is not loaded, and the BPF one is not running (" +
                                   b.message + ")"};
    return b;
}

}  // namespace mercury
