// SPDX-License-Identifier: GPL-2.0
// mercuryctl: inspect and change Mercury's per-netns table, parameters and
// counters, in tcp_mercury.ko (generic netlink) or the BPF datapath (maps).
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "datapath/datapath.hpp"
#include "mercury/uapi.h"
#include "common/printable.hpp"
#include "protocol/wire.hpp"
#include "common/unique_fd.hpp"

namespace {

using mercury::Datapath;
using mercury::Status;

// Exit codes scripts can rely on.
constexpr int kExitOk = 0;
constexpr int kExitRefused = 1;    // the kernel rejected the request
constexpr int kExitUsage = 2;      // bad command line
constexpr int kExitUnavailable = 3;   // what it needs is not there: no datapath (module, BPF) or no agent

// After the generated help: what FLOW, RANK and the exit codes mean.
constexpr const char* kFooter = R"(Every command acts on the caller's network namespace.

FLOW is --cookie N (getsockopt SO_COOKIE) or LOCAL REMOTE as the local socket
sees them, e.g. 10.0.0.1:40000 10.0.0.2:5201 or [fd00::1]:40000 [fd00::2]:5201.
RANK is 0..7, lower is more urgent. WEIGHT is 1..1024; 16 is one Reno flow.
TAG is a socket's SO_PRIORITY, 7 or more (any process may set 0..6).

Exit status: 0 ok, 1 the datapath refused (reason printed), 2 usage error,
3 no datapath: tcp_mercury is not loaded and no BPF one runs (or, for status,
mercuryd is not running).)";

struct UsageError {
    std::string what;
};

// The command line, as CLI11 fills it in.
struct Options {
    bool json = false;
    std::string datapath = "auto";
    uint32_t tag = 0;
    unsigned rank = 0;
    uint64_t cookie = 0;
    std::vector<std::string> endpoints;     // LOCAL REMOTE of a flow (flow set: then RANK)
    uint16_t weight = 0;
    uint32_t ttl_ms = 0;
    unsigned job = 0;
    std::string job_name;                   // job set NAME
    unsigned job_weight = 1;
    std::vector<std::string> params;        // NAME=VALUE
    std::string socket;
    unsigned interval_ms = 1000;
    unsigned count = 0;                     // top: 0 = until interrupted
};

mercury::FlowKey flow_key(const Options& o, const CLI::App& cmd)
{
    if (cmd.count("--cookie")) {
        if (!o.endpoints.empty())
            throw UsageError{"a flow is --cookie N or LOCAL REMOTE, not both"};
        return mercury::FlowKey::by_cookie(o.cookie);
    }
    if (o.endpoints.size() != 2)
        throw UsageError{"a flow is --cookie N or LOCAL REMOTE"};
    const auto local = mercury::Endpoint::parse(o.endpoints[0]);
    const auto remote = mercury::Endpoint::parse(o.endpoints[1]);
    if (!local || !remote)
        throw UsageError{"endpoints look like 10.0.0.1:5201 or [fd00::1]:5201"};
    auto key = mercury::FlowKey::by_tuple(*local, *remote);
    if (!key)
        throw UsageError{"local and remote endpoints must be of one address family"};
    return *key;
}

mercury::Priority priority(const Options& o, const CLI::App& cmd)
{
    mercury::Priority prio;
    prio.rank = static_cast<uint8_t>(o.rank);
    if (cmd.count("--weight"))
        prio.weight = o.weight;
    if (cmd.count("--ttl"))
        prio.ttl_ms = o.ttl_ms;
    prio.job = static_cast<uint8_t>(o.job);
    return prio;
}

// Entries of no job print as before.
std::string job_text(uint8_t job)
{
    return job ? " job " + std::to_string(job) : "";
}

std::string rank_text(uint8_t rank)
{
    return rank == MERCURY_RANK_NONE ? "none" : std::to_string(rank);
}

int report(const Status& status, const char* what)
{
    if (status)
        return kExitOk;
    std::cerr << "mercuryctl: " << what << ": " << status.describe() << "\n";
    return kExitRefused;
}

int cmd_dump(Datapath& datapath, bool json)
{
    std::vector<mercury::TagEntry> tags;
    std::vector<mercury::FlowEntry> flows;
    if (int rc = report(datapath.dump_tags(tags), "dump tags"))
        return rc;
    if (int rc = report(datapath.dump_flows(flows), "dump flows"))
        return rc;

    if (json) {
        auto out = nlohmann::json{{"tags", nlohmann::json::array()}, {"flows", nlohmann::json::array()}};
        for (const auto& e : tags)
            out["tags"].push_back({{"tag", e.tag}, {"rank", e.rank}, {"weight", e.weight}, {"job", e.job},
                                   {"expires_ms", e.expires_ms}});
        for (const auto& e : flows)
            out["flows"].push_back({{"flow", e.key.to_string()}, {"rank", e.rank}, {"weight", e.weight},
                                    {"job", e.job}, {"expires_ms", e.expires_ms}});
        std::cout << out.dump() << "\n";
        return kExitOk;
    }
    for (const auto& e : tags)
        std::printf("tag %-10u rank %-4s weight %-5u expires %ums%s\n", e.tag, rank_text(e.rank).c_str(),
                    e.weight, e.expires_ms, job_text(e.job).c_str());
    for (const auto& e : flows)
        std::printf("flow %s rank %s weight %u expires %ums%s\n", e.key.to_string().c_str(),
                    rank_text(e.rank).c_str(), e.weight, e.expires_ms, job_text(e.job).c_str());
    return kExitOk;
}

void print_map(const std::map<std::string, uint64_t>& values, bool json)
{
    if (json) {
        std::cout << nlohmann::json(values).dump() << "\n";
        return;
    }
    for (const auto& [k, v] : values)
        std::printf("%-16s %llu\n", k.c_str(), static_cast<unsigned long long>(v));
}

int cmd_params(Datapath& datapath, const std::vector<std::string>& settings, bool json)
{
    if (!settings.empty()) {
        mercury::Params params;
        for (const auto& kv : settings) {
            const auto eq = kv.find('=');
            uint64_t value = 0;
            const char* end = kv.data() + kv.size();
            if (eq == std::string::npos)
                throw UsageError{"parameters are set as NAME=VALUE, got '" + kv + "'"};
            const auto [stop, ec] = std::from_chars(kv.data() + eq + 1, end, value);
            if (ec != std::errc{} || stop != end || eq + 1 == kv.size())
                throw UsageError{"invalid value in '" + kv + "'"};
            if (const Status s = set_param_by_name(params, kv.substr(0, eq), value); !s)
                throw UsageError{s.message};
        }
        return report(datapath.set_params(params), "set parameters");
    }
    mercury::Params params;
    if (int rc = report(datapath.get_params(params), "get parameters"))
        return rc;
    print_map(params_as_map(params), json);
    return kExitOk;
}

// Asks mercuryd at @path for its status document (the daemon renders it),
// after sending @before if given (an Error then says it was refused).
// Returns an exit code; on kExitOk, @document holds the reply. Errors are
// printed unless @quiet.
int fetch_status(const std::string& path, bool json, std::string& document, bool quiet = false,
                 const std::optional<mercury::proto::Message>& before = std::nullopt)
{
    const mercury::UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int fd = sock.get();
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (!sock || ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
        if (!quiet)
            std::cerr << "mercuryctl: cannot reach mercuryd at " << path << ": " << std::strerror(errno) << "\n";
        return kExitUnavailable;
    }
    const timeval timeout{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    auto request = before ? mercury::proto::encode(*before) : std::vector<uint8_t>{};
    const auto status_request = mercury::proto::encode(
        mercury::proto::StatusRequest{json ? mercury::proto::StatusFormat::kJson : mercury::proto::StatusFormat::kText});
    request.insert(request.end(), status_request.begin(), status_request.end());
    std::vector<uint8_t> buf;
    int rc = kExitRefused;
    // Read whatever the agent answers even if the request could not be
    // written: an agent that refuses us (EBUSY) may have closed already,
    // with its reason waiting in our receive queue.
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    {
        uint8_t chunk[65536];
        for (;;) {
            const auto d = mercury::proto::decode(buf);
            if (d.status == mercury::proto::DecodeStatus::kOk) {
                if (const auto* reply = std::get_if<mercury::proto::StatusReply>(&d.message)) {
                    document = reply->document;
                    rc = kExitOk;
                } else if (const auto* error = std::get_if<mercury::proto::Error>(&d.message)) {
                    if (!quiet)
                        std::cerr << "mercuryctl: mercuryd refused: " << error->message << " ("
                                  << std::strerror(static_cast<int>(error->code)) << ")\n";
                    return kExitRefused;
                }
                break;
            }
            if (d.status != mercury::proto::DecodeStatus::kNeedMore)
                break;
            const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
            if (n <= 0)
                break;
            buf.insert(buf.end(), chunk, chunk + n);
        }
    }
    if (rc != kExitOk && !quiet)
        std::cerr << "mercuryctl: no status reply from mercuryd at " << path << "\n";
    return rc;
}

int cmd_status(const std::string& path, bool json)
{
    std::string document;
    const int rc = fetch_status(path, json, document);
    if (rc == kExitOk)
        std::cout << document << (json ? "\n" : "");
    return rc;
}

// job set NAME --weight W: mercuryd applies it to the job's entries (root only).
int cmd_job_set(const Options& o)
{
    if (o.job_name.empty() || o.job_name.size() > mercury::proto::kMaxName)
        throw UsageError{"a job name is 1.." + std::to_string(mercury::proto::kMaxName) + " bytes"};
    std::string document;
    const int rc = fetch_status(o.socket, true, document, false,
                                mercury::proto::JobWeight{o.job_name, static_cast<uint16_t>(o.job_weight)});
    if (rc == kExitOk)
        std::cout << "job " << mercury::printable(o.job_name) << " weight " << o.job_weight << "\n";
    return rc;
}

// Who registered a connection, from the agent's status: job and layer (or lane).
struct Owner {
    std::string job;
    std::optional<size_t> layer;   // nullopt: a lane
    std::string layer_name;
};

std::map<std::string, Owner> owners_from_agent(const std::string& path)
{
    std::map<std::string, Owner> owners;
    std::string document;
    if (fetch_status(path, true, document, true) != kExitOk)
        return owners;
    const auto status = nlohmann::json::parse(document, nullptr, false);
    if (status.is_discarded())
        return owners;
    for (const auto& job : status.value("jobs", nlohmann::json::array())) {
        const std::string name = job.value("job", "");
        for (const auto& lane : job.value("lanes", nlohmann::json::array()))
            owners[lane.value("flow", "")] = {name, std::nullopt, ""};
        const auto layers = job.value("layers", nlohmann::json::array());
        for (size_t i = 0; i < layers.size(); ++i)
            for (const auto& flow : layers[i].value("flows", nlohmann::json::array()))
                owners[flow.get<std::string>()] = {name, i, layers[i].value("name", "")};
    }
    return owners;
}

// Every mercury socket of this netns, joined with what mercuryd knows of it.
int print_flows(Datapath& datapath, const std::string& path, bool json)
{
    std::vector<mercury::SocketView> sockets;
    if (int rc = report(datapath.list_sockets(sockets), "list sockets"))
        return rc;
    const auto owners = owners_from_agent(path);
    auto owner_of = [&](const mercury::SocketView& v) -> const Owner* {
        for (const auto& key : {mercury::FlowKey::by_cookie(v.cookie).to_string(),
                                v.local.to_string() + "->" + v.remote.to_string()})
            if (const auto it = owners.find(key); it != owners.end())
                return &it->second;
        return nullptr;
    };
    if (json) {
        auto out = nlohmann::json::array();
        for (const auto& v : sockets) {
            const Owner* owner = owner_of(v);
            out.push_back({{"local", v.local.to_string()}, {"remote", v.remote.to_string()}, {"cookie", v.cookie},
                           {"job", owner ? nlohmann::json(owner->job) : nlohmann::json()},
                           {"layer", owner && owner->layer ? nlohmann::json(*owner->layer) : nlohmann::json()},
                           {"layer_name", owner && owner->layer ? nlohmann::json(owner->layer_name) : nlohmann::json()},
                           {"lane", owner && !owner->layer},
                           {"rank", v.rank ? nlohmann::json(*v.rank) : nlohmann::json()}, {"weight", v.weight},
                           {"job_id", v.job}, {"tag", v.tag}, {"held", v.held}, {"holds", v.holds}, {"cwnd", v.cwnd},
                           {"srtt_us", v.srtt_us}, {"bytes_acked", v.bytes_acked}});
        }
        std::cout << out.dump() << "\n";
        return kExitOk;
    }
    std::printf("%-22s %-22s %-16s %3s %5s %4s %6s %5s %4s %6s %6s %8s %12s\n", "local", "remote", "job", "id", "layer",
                "rank", "weight", "tag", "held", "holds", "cwnd", "srtt_us", "bytes_acked");
    for (const auto& v : sockets) {
        const Owner* owner = owner_of(v);
        const std::string layer = !owner ? "-" : owner->layer ? std::to_string(*owner->layer) : "lane";
        std::printf("%-22s %-22s %-16.16s %3u %5s %4s %6u %5u %4s %6u %6u %8u %12llu\n", v.local.to_string().c_str(),
                    v.remote.to_string().c_str(), owner ? mercury::printable(owner->job).c_str() : "-", v.job,
                    layer.c_str(),
                    v.rank ? std::to_string(*v.rank).c_str() : "-", v.weight, v.tag, v.held ? "yes" : "no", v.holds, v.cwnd,
                    v.srtt_us, static_cast<unsigned long long>(v.bytes_acked));
    }
    return kExitOk;
}

// top: flows again every @interval_ms, @count times (0: until interrupted).
int cmd_top(Datapath& datapath, const Options& o)
{
    for (unsigned i = 0; o.count == 0 || i < o.count; ++i) {
        if (i > 0)
            ::usleep(o.interval_ms * 1000);
        if (!o.json)
            std::cout << "\033[H\033[2J" << std::flush;  // clear, as top does
        if (int rc = print_flows(datapath, o.socket, o.json))
            return rc;
        std::cout << std::flush;
    }
    return kExitOk;
}

// Runs the one (sub)command the user chose.
int run(const CLI::App& app, const Options& o)
{
    auto chosen = [&](const char* name) { return app.got_subcommand(name); };
    auto under = [&](const char* parent, const char* name) {
        return app.got_subcommand(parent) && app.get_subcommand(parent)->got_subcommand(name);
    };
    if (chosen("status"))
        return cmd_status(o.socket, o.json);
    if (under("job", "set"))
        return cmd_job_set(o);

    // A flow's key and priority are checked before the datapath is opened.
    std::optional<mercury::FlowKey> key;
    mercury::Priority prio;
    if (under("flow", "set")) {
        Options args = o;  // ARGS is [LOCAL REMOTE] RANK
        const std::string rank = args.endpoints.back();
        args.endpoints.pop_back();
        const auto [end, ec] = std::from_chars(rank.data(), rank.data() + rank.size(), args.rank);
        if (ec != std::errc{} || end != rank.data() + rank.size() || args.rank > 255)
            throw UsageError{"invalid rank '" + rank + "'"};
        const CLI::App& cmd = *app.get_subcommand("flow")->get_subcommand("set");
        key = flow_key(args, cmd);
        prio = priority(args, cmd);
    } else if (under("flow", "del")) {
        key = flow_key(o, *app.get_subcommand("flow")->get_subcommand("del"));
    }

    std::unique_ptr<Datapath> datapath;
    if (const Status s = mercury::open_datapath(*mercury::parse_datapath_kind(o.datapath), datapath); !s) {
        std::cerr << "mercuryctl: " << s.describe() << "\n";
        return s.error == -ENOENT ? kExitUnavailable : kExitRefused;
    }
    if (under("tag", "set"))
        return report(datapath->set_tag(o.tag, priority(o, *app.get_subcommand("tag")->get_subcommand("set"))), "set tag");
    if (under("tag", "del"))
        return report(datapath->del_tag(o.tag), "delete tag");
    if (under("flow", "set"))
        return report(datapath->set_flow(*key, prio), "set flow");
    if (under("flow", "del"))
        return report(datapath->del_flow(*key), "delete flow");
    if (chosen("dump"))
        return cmd_dump(*datapath, o.json);
    if (chosen("flush"))
        return report(datapath->flush(), "flush");
    if (chosen("params"))
        return cmd_params(*datapath, o.params, o.json);
    if (chosen("flows"))
        return print_flows(*datapath, o.socket, o.json);
    if (chosen("top"))
        return cmd_top(*datapath, o);
    mercury::Stats stats;  // stats
    if (int rc = report(datapath->get_stats(stats), "get stats"))
        return rc;
    print_map(stats, o.json);
    return kExitOk;
}

// The command line: subcommands, --opt value and --opt=value, --json and
// --datapath anywhere, generated --help.
void describe(CLI::App& app, Options& o)
{
    app.footer(kFooter);
    app.set_version_flag("--version", std::string("mercuryctl ") + MERCURY_VERSION);
    app.fallthrough();  // --json and --datapath after the command too
    app.require_subcommand(1);
    app.add_flag("--json", o.json, "JSON output");
    app.add_option("--datapath", o.datapath, "auto (the module if loaded, else BPF), kmod or bpf")
        ->check(CLI::IsMember({"auto", "kmod", "bpf"}));
    const char* env = std::getenv("MERCURY_SOCKET");
    o.socket = env ? env : mercury::proto::kDefaultSocketPath;
    auto socket_option = [&](CLI::App* cmd) {
        cmd->add_option("--socket", o.socket, "mercuryd's socket ($MERCURY_SOCKET or " +
                                                   std::string(mercury::proto::kDefaultSocketPath) + ")");
    };
    auto priority_options = [&](CLI::App* cmd) {
        cmd->add_option("--weight", o.weight, "share while competing, 1..1024 (16: one Reno flow)");
        cmd->add_option("--ttl", o.ttl_ms, "lifetime in ms (default: the netns's entry_ttl_ms)");
        cmd->add_option("--job", o.job,
                        "job id 1..15: ranks then order only this job's flows (default 0: no job)")
            ->check(CLI::Range(0, 255));
    };

    CLI::App* tag = app.add_subcommand("tag", "priority by SO_PRIORITY tag")->require_subcommand(1);
    CLI::App* tag_set = tag->add_subcommand("set", "set TAG's rank");
    tag_set->add_option("TAG", o.tag, "SO_PRIORITY value, 7 or more")->required();
    tag_set->add_option("RANK", o.rank, "0..7, lower is more urgent")->required()->check(CLI::Range(0, 255));
    priority_options(tag_set);
    tag->add_subcommand("del", "remove TAG's entry")->add_option("TAG", o.tag, "SO_PRIORITY value")->required();

    CLI::App* flow = app.add_subcommand("flow", "priority for one connection")->require_subcommand(1);
    CLI::App* flow_set = flow->add_subcommand("set", "set a connection's rank: --cookie N RANK or LOCAL REMOTE RANK");
    flow_set->add_option("--cookie", o.cookie, "the socket's SO_COOKIE");
    // One list: CLI11 would hand RANK to an optional LOCAL REMOTE pair first.
    flow_set->add_option("ARGS", o.endpoints, "[LOCAL REMOTE] RANK")->required()->expected(1, 3);
    priority_options(flow_set);
    CLI::App* flow_del = flow->add_subcommand("del", "remove a connection's entry: --cookie N or LOCAL REMOTE");
    flow_del->add_option("--cookie", o.cookie, "the socket's SO_COOKIE");
    flow_del->add_option("ENDPOINTS", o.endpoints, "LOCAL REMOTE (without --cookie)")->expected(0, 2);

    app.add_subcommand("dump", "list tag and flow entries and the time they have left");
    app.add_subcommand("flush", "remove every entry");
    app.add_subcommand("params", "show, or set, the netns's parameters")
        ->add_option("NAME=VALUE", o.params, "e.g. cwnd_floor=2");
    app.add_subcommand("stats", "show the datapath's counters");
    socket_option(app.add_subcommand("status", "ask mercuryd: jobs, learned timings, ranks and weights per layer"));
    CLI::App* job = app.add_subcommand("job", "a job's settings in mercuryd")->require_subcommand(1);
    CLI::App* job_set = job->add_subcommand("set", "set job NAME's weight: its share against other jobs (root)");
    job_set->add_option("NAME", o.job_name, "the job name its trainers give")->required();
    job_set->add_option("--weight", o.job_weight, "1..64, multiplies its entries' weights")
        ->required()
        ->check(CLI::Range(1u, static_cast<unsigned>(mercury::proto::kMaxJobWeight)));
    socket_option(job_set);
    socket_option(app.add_subcommand("flows", "every mercury socket of the netns: the job and layer that "
                                              "registered it (asks mercuryd), rank, weight, tag, hold, cwnd, "
                                              "srtt, bytes acked"));
    CLI::App* top = app.add_subcommand("top", "flows, refreshed");
    socket_option(top);
    top->add_option("--interval-ms", o.interval_ms, "refresh period (default 1000)")->check(CLI::Range(10u, 3600000u));
    top->add_option("--count", o.count, "refreshes, then exit (default: until interrupted)");
}

}  // namespace

int main(int argc, char** argv)
{
    CLI::App app{"mercuryctl: inspect and change Mercury's per-netns table, parameters and counters, in "
                 "tcp_mercury.ko (generic netlink) or the BPF datapath (pinned maps); ask mercuryd.",
                 "mercuryctl"};
    Options o;
    describe(app, o);
    try {
        app.parse(argc, argv);
    } catch (const CLI::Success& e) {
        return app.exit(e);  // --help, --version
    } catch (const CLI::ParseError& e) {
        std::cerr << "mercuryctl: " << e.what() << "\n(see mercuryctl --help)\n";
        return kExitUsage;
    }
    try {
        return run(app, o);
    } catch (const UsageError& e) {
        std::cerr << "mercuryctl: " << e.what << "\n(see mercuryctl --help)\n";
        return kExitUsage;
    }
}
