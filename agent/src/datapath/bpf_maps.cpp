// SPDX-License-Identifier: GPL-2.0
#include "datapath/bpf_maps.hpp"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "datapath/sock_diag.hpp"

namespace mercury {

namespace {

// Where the loading mercuryd's /run is, as seen from this mount namespace:
// "" if its pins are visible here, else /proc/OWNER/root.
std::string pin_root()
{
    if (access(MERCURY_BPF_PIN_DIR, F_OK) == 0)
        return "";
    std::ifstream owner(MERCURY_BPF_OWNER_FILE);
    long pid = 0;
    if (owner >> pid && pid > 0) {
        const std::string there = "/proc/" + std::to_string(pid) + "/root";
        if (access((there + MERCURY_BPF_PIN_DIR).c_str(), F_OK) == 0)
            return there;
    }
    return "";
}

// Where the loading mercuryd pinned @map, as seen from this mount namespace.
std::string pin_path(const char* map)
{
    return pin_root() + MERCURY_BPF_PIN_DIR "/" + map;
}

// Serialises read-modify-writes of a netns's config entry among every
// process that writes it (agents, mercuryctl): a map update cannot
// increment, so without it concurrent writers lost table_gen bumps and
// could undo each other's parameters.
class ConfigLock {
public:
    ConfigLock() : fd_(::open((pin_root() + MERCURY_BPF_LOCK_FILE).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600))
    {
        if (fd_)
            while (::flock(fd_.get(), LOCK_EX) != 0 && errno == EINTR) {
            }
    }
    bool held() const { return static_cast<bool>(fd_); }

private:
    UniqueFd fd_;  // closing it releases the lock
};

Status errno_status(const std::string& what)
{
    const int err = errno;
    return Status{-err, what + ": " + std::strerror(err)};
}

// Keys of a hash map, read before anything is deleted (deleting while
// walking with get_next_key restarts the walk).
template <typename Key>
std::vector<Key> all_keys(int fd)
{
    std::vector<Key> keys;
    Key key{};
    const Key* prev = nullptr;
    while (bpf_map_get_next_key(fd, prev, &key) == 0) {
        keys.push_back(key);
        prev = &keys.back();
    }
    return keys;
}

// Calls @fn(key, entry) for every entry of @netns that has not expired;
// returns how many entries the map holds in all (every netns, expired too).
template <typename Key, typename Fn>
size_t for_each_live(int fd, uint64_t netns, uint64_t now, Fn&& fn)
{
    const auto keys = all_keys<Key>(fd);
    for (const auto& k : keys) {
        mercury_bpf_entry e{};
        if (k.netns == netns && bpf_map_lookup_elem(fd, &k, &e) == 0 && e.expires_ns > now)
            fn(k, e);
    }
    return keys.size();
}

uint32_t expires_ms(const mercury_bpf_entry& e, uint64_t now)
{
    return e.expires_ns > now ? static_cast<uint32_t>((e.expires_ns - now) / 1000000) : 0;
}

// Per-netns counters; the last one exists only host-wide.
#define MERCURY_EVENT_NAME(NAME, name) #name,
constexpr std::array<const char*, MERCURY_BPF_CNT_MAX> kCounterNames{
    MERCURY_EVENTS(MERCURY_EVENT_NAME) "global_uncounted",
};
#undef MERCURY_EVENT_NAME

mercury_bpf_config default_config()
{
    mercury_bpf_config cfg{};
    cfg.cwnd_floor = MERCURY_DEFAULT_CWND_FLOOR;
    cfg.delay_thresh_us = MERCURY_DEFAULT_DELAY_THRESH_US;
    cfg.entry_ttl_ms = MERCURY_DEFAULT_ENTRY_TTL_MS;
    cfg.max_hold_ms = MERCURY_DEFAULT_MAX_HOLD_MS;
    cfg.max_entries = MERCURY_DEFAULT_MAX_ENTRIES;
    return cfg;
}

bool default_params(const mercury_bpf_config& cfg)
{
    const mercury_bpf_config d = default_config();
    return cfg.cwnd_floor == d.cwnd_floor && cfg.delay_thresh_us == d.delay_thresh_us &&
           cfg.entry_ttl_ms == d.entry_ttl_ms && cfg.max_hold_ms == d.max_hold_ms && cfg.max_entries == d.max_entries;
}

// A new config slot's first gen: flows cache the gen they resolved at, and a
// slot freed and created again must not repeat one of them.
uint32_t fresh_gen()
{
    uint32_t gen = 0;
    if (getrandom(&gen, sizeof(gen), 0) != sizeof(gen))
        gen = static_cast<uint32_t>(monotonic_ns() >> 10);
    return gen ? gen : 1;   // 0 is what a netns without a slot reads
}

Status caller_netns(uint64_t& out)
{
    constexpr int kSoNetnsCookie = 71;   // SO_NETNS_COOKIE, Linux 5.14
    const UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    socklen_t len = sizeof(out);
    if (!sock || getsockopt(sock.get(), SOL_SOCKET, kSoNetnsCookie, &out, &len) != 0)
        return errno_status("cannot read this netns's cookie (SO_NETNS_COOKIE needs Linux 5.14)");
    return {};
}

}  // namespace

uint64_t monotonic_ns()
{
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

bool congestion_control_registered(std::string_view name)
{
    std::ifstream in("/proc/sys/net/ipv4/tcp_available_congestion_control");
    for (std::string w; in >> w;)
        if (w == name)
            return true;
    return false;
}

bool bpf_datapath_running()
{
    return congestion_control_registered(MERCURY_CA_NAME) &&
           access(pin_path(MERCURY_BPF_MAP_CONFIG).c_str(), F_OK) == 0;
}

Status BpfMaps::open(std::unique_ptr<BpfMaps>& out)
{
    if (!bpf_datapath_running())
        return Status{-ENOENT, "the BPF datapath is not running (no '" MERCURY_CA_NAME
                               "' CC with maps pinned under " MERCURY_BPF_PIN_DIR "): start mercuryd --datapath=bpf"};
    std::unique_ptr<BpfMaps> maps(new BpfMaps());
    if (Status s = caller_netns(maps->netns_); !s)
        return s;
    const std::pair<UniqueFd*, const char*> wanted[] = {
        {&maps->tags_, MERCURY_BPF_MAP_TAGS},
        {&maps->flows_, MERCURY_BPF_MAP_FLOWS},
        {&maps->config_, MERCURY_BPF_MAP_CONFIG},
        {&maps->state_, MERCURY_BPF_MAP_STATE},
    };
    for (const auto& [fd, name] : wanted) {
        *fd = UniqueFd(bpf_obj_get(pin_path(name).c_str()));
        if (!*fd)
            return errno_status("cannot open " + pin_path(name));
    }
    out = std::move(maps);
    return {};
}

mercury_bpf_config BpfMaps::config() const
{
    mercury_bpf_config cfg{};
    if (bpf_map_lookup_elem(config_.get(), &netns_, &cfg) != 0)
        cfg = default_config();
    return cfg;
}

Status BpfMaps::store_config(const mercury_bpf_config& cfg)
{
    if (bpf_map_update_elem(config_.get(), &netns_, &cfg, BPF_ANY) != 0)
        return errno == E2BIG ? Status{-ENOSPC, "the BPF config map has no room for another network namespace"}
                              : errno_status("cannot store this netns's parameters");
    return {};
}

Status BpfMaps::update_config(const std::function<void(mercury_bpf_config&)>& change)
{
    const ConfigLock lock;
    if (!lock.held())
        return errno_status("cannot lock " MERCURY_BPF_LOCK_FILE);
    mercury_bpf_config cfg = config();
    change(cfg);
    return store_config(cfg);
}

// One change to the tag or flow table. The netns's config slot is stored
// first: where the config map has no room for it, nothing is written. Then
// gen moves, and flows, which cache what they resolved until gen changes (or
// 20 ms pass), look again.
Status BpfMaps::change_table(const std::function<Status(const mercury_bpf_config&, TableChange&)>& write)
{
    const ConfigLock lock;
    if (!lock.held())
        return errno_status("cannot lock " MERCURY_BPF_LOCK_FILE);
    mercury_bpf_config cfg{};
    const bool had_slot = bpf_map_lookup_elem(config_.get(), &netns_, &cfg) == 0;
    if (!had_slot) {
        cfg = default_config();
        cfg.gen = fresh_gen();
        if (Status s = store_config(cfg); !s)
            return s;
    }
    TableChange change;
    if (Status s = write(cfg, change); !s)
        return s;
    if (!change.moved && change.entries == 0)
        return {};
    cfg.entries = static_cast<uint32_t>(std::max<int64_t>(0, int64_t{cfg.entries} + change.entries));
    if (change.moved)
        ++cfg.gen;
    return store_config(cfg);
}

namespace {

// Writes @e at @key of @map, within the netns's max_entries (@cfg).
template <typename Key>
Status put_entry(int map, const Key& key, const mercury_bpf_entry& e, const mercury_bpf_config& cfg,
                 BpfMaps::TableChange& change, const char* what)
{
    mercury_bpf_entry old{};
    const bool exists = bpf_map_lookup_elem(map, &key, &old) == 0;
    if (!exists && cfg.entries >= cfg.max_entries)
        return Status{-ENOSPC, "this network namespace holds " + std::to_string(cfg.entries) +
                                   " entries, its max_entries (mercuryctl params max_entries=N raises it)"};
    if (bpf_map_update_elem(map, &key, &e, exists ? BPF_EXIST : BPF_NOEXIST) != 0)
        return errno == E2BIG ? Status{-ENOSPC, std::string("the BPF ") + what + " map is full (shared by all "
                                                "network namespaces)"}
                              : errno_status(std::string("cannot set the ") + what);
    change.moved = !(exists && old.rank == e.rank && old.weight == e.weight && old.job == e.job);
    change.entries = exists ? 0 : 1;
    return {};
}

template <typename Key>
Status delete_entry(int map, const Key& key, BpfMaps::TableChange& change, const char* what)
{
    if (bpf_map_delete_elem(map, &key) != 0)
        return errno == ENOENT ? Status{-ENOENT, std::string("no such ") + what + " entry"}
                               : errno_status(std::string("cannot delete the ") + what);
    change.entries = -1;
    return {};
}

}  // namespace

Status BpfMaps::entry_for(const Priority& prio, mercury_bpf_entry& out) const
{
    if (Status s = validate(prio); !s)
        return s;
    const uint32_t ttl_ms = prio.ttl_ms.value_or(config().entry_ttl_ms);
    out = mercury_bpf_entry{};
    out.rank = prio.rank;
    out.weight = prio.weight.value_or(MERCURY_WEIGHT_UNIT);
    out.job = prio.job;
    out.expires_ns = monotonic_ns() + static_cast<uint64_t>(ttl_ms) * 1000000ULL;
    return {};
}

std::optional<mercury_bpf_flow_key> BpfMaps::flow_key(const FlowKey& key) const
{
    mercury_bpf_flow_key k{};
    k.netns = netns_;
    if (key.cookie) {
        if (!*key.cookie)
            return std::nullopt;
        k.kind = MERCURY_BPF_KEY_COOKIE;
        k.cookie = *key.cookie;
        return k;
    }
    if (key.local.family != key.remote.family || (key.local.family != AF_INET && key.local.family != AF_INET6))
        return std::nullopt;
    k.kind = MERCURY_BPF_KEY_TUPLE;
    k.family = static_cast<uint8_t>(key.local.family);
    k.sport = key.local.port;
    k.dport = key.remote.port;
    auto put = [&](uint8_t* dst, const Endpoint& ep) {
        if (ep.family == AF_INET6) {
            std::memcpy(dst, ep.addr.data(), 16);
            return;
        }
        dst[10] = dst[11] = 0xff;   // v4-mapped, as the program builds it
        std::memcpy(dst + 12, ep.addr.data(), 4);
    };
    put(k.saddr, key.local);
    put(k.daddr, key.remote);
    return k;
}

Status BpfMaps::set_tag(uint32_t tag, const Priority& prio)
{
    mercury_bpf_entry e;
    if (Status s = validate_tag(tag); !s)
        return s;
    if (Status s = entry_for(prio, e); !s)
        return s;
    const mercury_bpf_tag_key k{netns_, tag, 0};
    return change_table([&](const mercury_bpf_config& cfg, TableChange& change) {
        return put_entry(tags_.get(), k, e, cfg, change, "tag");
    });
}

Status BpfMaps::del_tag(uint32_t tag)
{
    const mercury_bpf_tag_key k{netns_, tag, 0};
    return change_table([&](const mercury_bpf_config&, TableChange& change) {
        return delete_entry(tags_.get(), k, change, "tag");
    });
}

Status BpfMaps::set_flow(const FlowKey& key, const Priority& prio)
{
    const auto k = flow_key(key);
    if (!k)
        return Status{-EINVAL, "a flow needs a non-zero cookie or a complete address tuple of one family"};
    mercury_bpf_entry e;
    if (Status s = entry_for(prio, e); !s)
        return s;
    return change_table([&](const mercury_bpf_config& cfg, TableChange& change) {
        return put_entry(flows_.get(), *k, e, cfg, change, "flow");
    });
}

Status BpfMaps::del_flow(const FlowKey& key)
{
    const auto k = flow_key(key);
    if (!k)
        return Status{-EINVAL, "a flow needs a non-zero cookie or a complete address tuple of one family"};
    return change_table([&](const mercury_bpf_config&, TableChange& change) {
        return delete_entry(flows_.get(), *k, change, "flow");
    });
}

Status BpfMaps::flush()
{
    return change_table([&](const mercury_bpf_config&, TableChange& change) -> Status {
        for (const auto& k : all_keys<mercury_bpf_tag_key>(tags_.get()))
            if (k.netns == netns_ && bpf_map_delete_elem(tags_.get(), &k) == 0)
                --change.entries;
        for (const auto& k : all_keys<mercury_bpf_flow_key>(flows_.get()))
            if (k.netns == netns_ && bpf_map_delete_elem(flows_.get(), &k) == 0)
                --change.entries;
        return {};
    });
}

Status BpfMaps::dump_tags(std::vector<TagEntry>& out)
{
    out.clear();
    const uint64_t now = monotonic_ns();
    for_each_live<mercury_bpf_tag_key>(tags_.get(), netns_, now, [&](const auto& k, const mercury_bpf_entry& e) {
        out.push_back(TagEntry{k.tag, e.rank, e.weight, e.job, expires_ms(e, now)});
    });
    return {};
}

Status BpfMaps::dump_flows(std::vector<FlowEntry>& out)
{
    out.clear();
    const uint64_t now = monotonic_ns();
    for_each_live<mercury_bpf_flow_key>(flows_.get(), netns_, now, [&](const auto& k, const mercury_bpf_entry& e) {
        FlowEntry f;
        if (k.kind == MERCURY_BPF_KEY_COOKIE) {
            f.key = FlowKey::by_cookie(k.cookie);
        } else {
            Endpoint local, remote;
            local.family = remote.family = k.family;
            const size_t off = k.family == AF_INET ? 12 : 0;
            std::memcpy(local.addr.data(), k.saddr + off, 16 - off);
            std::memcpy(remote.addr.data(), k.daddr + off, 16 - off);
            local.port = k.sport;
            remote.port = k.dport;
            f.key.local = local;
            f.key.remote = remote;
        }
        f.rank = e.rank;
        f.weight = e.weight;
        f.job = e.job;
        f.expires_ms = expires_ms(e, now);
        out.push_back(f);
    });
    return {};
}

Status BpfMaps::get_params(Params& out)
{
    const mercury_bpf_config cfg = config();
    out = Params{};
    out.cwnd_floor = cfg.cwnd_floor;
    out.delay_thresh_us = cfg.delay_thresh_us;
    out.entry_ttl_ms = cfg.entry_ttl_ms;
    out.max_hold_ms = cfg.max_hold_ms;
    out.max_entries = cfg.max_entries;
    return {};
}

Status BpfMaps::set_params(const Params& params)
{
    if (params.debug)
        return Status{-EOPNOTSUPP, "debug is not a parameter of the BPF datapath (it does not log)"};
    if (Status s = validate(params); !s)
        return s;
    return update_config([&](mercury_bpf_config& cfg) {
        cfg.cwnd_floor = params.cwnd_floor.value_or(cfg.cwnd_floor);
        cfg.delay_thresh_us = params.delay_thresh_us.value_or(cfg.delay_thresh_us);
        cfg.entry_ttl_ms = params.entry_ttl_ms.value_or(cfg.entry_ttl_ms);
        cfg.max_hold_ms = params.max_hold_ms.value_or(cfg.max_hold_ms);
        cfg.max_entries = params.max_entries.value_or(cfg.max_entries);
    });
}

Status BpfMaps::get_stats(Stats& out)
{
    out.clear();
    // The maps outlive an unregistered program; report it gone.
    if (!bpf_datapath_running())
        return Status{-ENOENT, "the BPF datapath was unregistered (its mercuryd exited)"};
    mercury_bpf_state st{};
    bpf_map_lookup_elem(state_.get(), &netns_, &st);   // absent: all zero
    for (size_t i = 0; i < MERCURY_BPF_CNT_UNCOUNTED; ++i)
        out[kCounterNames[i]] = st.counters[i];
    const uint64_t global_key = MERCURY_BPF_GLOBAL_STATE;
    mercury_bpf_state global_state{};
    const bool has_global = bpf_map_lookup_elem(state_.get(), &global_key, &global_state) == 0;
    out[kCounterNames[MERCURY_BPF_CNT_UNCOUNTED]] = global_state.counters[MERCURY_BPF_CNT_UNCOUNTED];

    const uint64_t now = monotonic_ns();
    uint64_t tags = 0, flows = 0;
    const size_t global =
        for_each_live<mercury_bpf_tag_key>(tags_.get(), netns_, now, [&](const auto&, const auto&) { ++tags; }) +
        for_each_live<mercury_bpf_flow_key>(flows_.get(), netns_, now, [&](const auto&, const auto&) { ++flows; });
    const mercury_bpf_config cfg = config();
    out["tag_entries"] = tags;
    out["flow_entries"] = flows;
    out["expired"] = cfg.expired;
    out["table_gen"] = cfg.gen;
    out["global_entries"] = global;
    out["global_netns_slots"] = all_keys<uint64_t>(config_.get()).size();
    out["global_netns_states"] = all_keys<uint64_t>(state_.get()).size() - (has_global ? 1 : 0);
    return {};
}

size_t BpfMaps::collect_expired()
{
    const uint64_t now = monotonic_ns();
    std::map<uint64_t, uint64_t> per_netns;
    auto sweep = [&](int fd, const auto& keys) {
        for (const auto& k : keys) {
            mercury_bpf_entry e{};
            if (bpf_map_lookup_elem(fd, &k, &e) == 0 && e.expires_ns <= now && bpf_map_delete_elem(fd, &k) == 0)
                ++per_netns[k.netns];
        }
    };
    sweep(tags_.get(), all_keys<mercury_bpf_tag_key>(tags_.get()));
    sweep(flows_.get(), all_keys<mercury_bpf_flow_key>(flows_.get()));
    size_t total = 0;
    {
        const ConfigLock lock;
        for (const auto& [netns, n] : per_netns) {
            total += n;
            // No slot: a netns whose slot is gone; never create one here, or
            // every dead netns would keep one.
            mercury_bpf_config cfg{};
            if (bpf_map_lookup_elem(config_.get(), &netns, &cfg) != 0)
                continue;
            cfg.expired += n;
            cfg.entries = cfg.entries > n ? static_cast<uint32_t>(cfg.entries - n) : 0;
            bpf_map_update_elem(config_.get(), &netns, &cfg, BPF_EXIST);
        }
    }
    reclaim_unused_netns();
    return total;
}

// Whether @netns holds nothing the defaults would not give back: no entries,
// default parameters, no mercury socket (its gen and counters aside).
bool BpfMaps::unused(uint64_t netns) const
{
    mercury_bpf_config cfg{};
    if (bpf_map_lookup_elem(config_.get(), &netns, &cfg) == 0 && (cfg.entries != 0 || !default_params(cfg)))
        return false;
    mercury_bpf_state st{};
    return !(bpf_map_lookup_elem(state_.get(), &netns, &st) == 0 &&
             st.counters[MERCURY_BPF_CNT_FLOWS_RELEASED] < st.counters[MERCURY_BPF_CNT_FLOWS_INIT]);
}

// Namespaces come and go, and nothing tells the maps: the config slot and
// counters of a netns that stayed unused for kReclaimSweeps sweeps in a row
// are freed, or the maps would fill up. A netns still alive loses only its
// counters (they start again from zero) and its gen, which restarts from a
// random value no flow has cached (fresh_gen).
void BpfMaps::reclaim_unused_netns()
{
    std::set<uint64_t> seen;
    for (const auto netns : all_keys<uint64_t>(config_.get()))
        seen.insert(netns);
    for (const auto netns : all_keys<uint64_t>(state_.get()))
        if (netns != MERCURY_BPF_GLOBAL_STATE)
            seen.insert(netns);
    std::map<uint64_t, unsigned> still_unused;
    const ConfigLock lock;   // no writer may add an entry in between
    for (const auto netns : seen) {
        if (!unused(netns))
            continue;
        const auto it = unused_sweeps_.find(netns);
        const unsigned sweeps = (it == unused_sweeps_.end() ? 0 : it->second) + 1;
        if (sweeps < kReclaimSweeps) {
            still_unused[netns] = sweeps;
            continue;
        }
        bpf_map_delete_elem(config_.get(), &netns);
        bpf_map_delete_elem(state_.get(), &netns);
    }
    unused_sweeps_ = std::move(still_unused);
}

// The program keeps each socket's rank and hold in socket storage
// (mercury_socks); sock_diag hands it out with the socket.
Status BpfMaps::list_sockets(std::vector<SocketView>& out)
{
    const UniqueFd socks(bpf_obj_get(pin_path(MERCURY_BPF_MAP_SOCKS).c_str()));
    if (!socks)
        return errno_status("cannot open the BPF socket storage " MERCURY_BPF_MAP_SOCKS);
    std::vector<DiagSocket> sockets;
    if (Status s = diag_tcp_sockets(sockets, socks.get()); !s)
        return s;
    for (const auto& d : sockets) {
        if (d.cc != MERCURY_CA_NAME)
            continue;
        SocketView v = tcp_view(d);
        if (d.storage.size() >= sizeof(mercury_bpf_sock_state)) {
            mercury_bpf_sock_state st{};
            std::memcpy(&st, d.storage.data(), sizeof(st));
            if (st.rank != MERCURY_RANK_NONE)
                v.rank = st.rank;
            v.weight = st.weight;
            v.tag = st.tag;
            v.held = st.held != 0;
            v.job = st.job;
            v.holds = st.holds;
        }
        out.push_back(v);
    }
    return {};
}

std::optional<mercury_bpf_sock_state> BpfMaps::socket_state(int fd)
{
    const UniqueFd socks(bpf_obj_get(pin_path(MERCURY_BPF_MAP_SOCKS).c_str()));
    mercury_bpf_sock_state st{};
    if (!socks || bpf_map_lookup_elem(socks.get(), &fd, &st) != 0)
        return std::nullopt;
    return st;
}

}  // namespace mercury
