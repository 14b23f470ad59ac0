// SPDX-License-Identifier: GPL-2.0
// mercuryctl: inspect and change Mercury's per-netns table, parameters and
// counters, in tcp_mercury.ko (generic netlink) or the BPF datapath (maps).
#include <charconv>
#include <cstdio>
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

#include <nlohmann/json.hpp>

#include "datapath/datapath.hpp"
#include "mercury/uapi.h"
#include "printable.hpp"
#include "protocol/wire.hpp"
#include "unique_fd.hpp"

namespace {

using mercury::Datapath;
using mercury::Status;

// Exit codes scripts can rely on.
constexpr int kExitOk = 0;
constexpr int kExitRefused = 1;    // the kernel rejected the request
constexpr int kExitUsage = 2;      // bad command line
constexpr int kExitNoModule = 3;   // no datapath: module not loaded, BPF not running

constexpr const char* kUsage = R"(usage: mercuryctl [--json] [--datapath=auto|kmod|bpf] COMMAND [ARGS]

Commands (act on the caller's network namespace):
  tag set TAG RANK [--weight W] [--ttl MS]   priority for sockets with SO_PRIORITY TAG
                                             (TAG >= 7: any process may set 0..6)
  tag del TAG
  flow set FLOW RANK [--weight W] [--ttl MS] priority for one connection
  flow del FLOW
  dump                                       list tag and flow entries
  flush                                      remove every entry
  params [NAME=VALUE ...]                    show, or set, parameters
  stats                                      show counters
  flows [--socket PATH]                      every mercury socket of the netns: the job
                                             and layer that registered it (asks mercuryd),
                                             rank, weight, tag, held, cwnd, srtt, bytes acked
  top [--interval-ms N] [--count N]          flows, refreshed (default every 1000 ms)
  status [--socket PATH]                     ask mercuryd: jobs, learned timings,
                                             ranks and weights per layer
  --help, --version                          this text; the version

FLOW is --cookie N (getsockopt SO_COOKIE) or LOCAL REMOTE as the local socket
sees them, e.g. 10.0.0.1:40000 10.0.0.2:5201 or [fd00::1]:40000 [fd00::2]:5201.
RANK is 0..7, lower is more urgent. WEIGHT is 1..1024; 16 is one Reno flow.

--datapath picks tcp_mercury.ko (kmod) or the eBPF program a mercuryd loaded
(bpf); auto, the default, uses the module when it is loaded, else BPF.

Exit status: 0 ok, 1 the datapath refused (reason printed), 2 usage error,
3 no datapath: tcp_mercury is not loaded and no BPF one runs (or, for status,
mercuryd is not running).
)";

struct UsageError {
    std::string what;
};

template <typename T>
T parse_number(std::string_view text, const char* what)
{
    T value{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size())
        throw UsageError{std::string("invalid ") + what + " '" + std::string(text) + "'"};
    return value;
}

class Args {
public:
    Args(int argc, char** argv) : args_(argv + 1, argv + argc) {}

    bool empty() const { return pos_ >= args_.size(); }
    std::string next(const char* what)
    {
        if (empty())
            throw UsageError{std::string("missing ") + what};
        return args_[pos_++];
    }
    bool take_flag(std::string_view flag)
    {
        if (!empty() && args_[pos_] == flag) {
            ++pos_;
            return true;
        }
        return false;
    }
    void expect_end() const
    {
        if (!empty())
            throw UsageError{"unexpected argument '" + args_[pos_] + "'"};
    }

private:
    std::vector<std::string> args_;
    size_t pos_ = 0;
};

mercury::FlowKey parse_flow(Args& args)
{
    if (args.take_flag("--cookie"))
        return mercury::FlowKey::by_cookie(parse_number<uint64_t>(args.next("cookie"), "cookie"));
    const auto local = mercury::Endpoint::parse(args.next("local endpoint"));
    const auto remote = mercury::Endpoint::parse(args.next("remote endpoint"));
    if (!local || !remote)
        throw UsageError{"endpoints look like 10.0.0.1:5201 or [fd00::1]:5201"};
    auto key = mercury::FlowKey::by_tuple(*local, *remote);
    if (!key)
        throw UsageError{"local and remote endpoints must be of one address family"};
    return *key;
}

mercury::Priority parse_priority(Args& args)
{
    mercury::Priority prio;
    prio.rank = parse_number<uint8_t>(args.next("rank"), "rank");
    while (!args.empty()) {
        if (args.take_flag("--weight"))
            prio.weight = parse_number<uint16_t>(args.next("weight"), "weight");
        else if (args.take_flag("--ttl"))
            prio.ttl_ms = parse_number<uint32_t>(args.next("ttl"), "ttl");
        else
            args.expect_end();
    }
    return prio;
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

int cmd_dump(Datapath& nl, bool json)
{
    std::vector<mercury::TagEntry> tags;
    std::vector<mercury::FlowEntry> flows;
    if (int rc = report(nl.dump_tags(tags), "dump tags"))
        return rc;
    if (int rc = report(nl.dump_flows(flows), "dump flows"))
        return rc;

    if (json) {
        auto out = nlohmann::json{{"tags", nlohmann::json::array()}, {"flows", nlohmann::json::array()}};
        for (const auto& e : tags)
            out["tags"].push_back({{"tag", e.tag}, {"rank", e.rank}, {"weight", e.weight}, {"expires_ms", e.expires_ms}});
        for (const auto& e : flows)
            out["flows"].push_back({{"flow", e.key.to_string()}, {"rank", e.rank}, {"weight", e.weight},
                                    {"expires_ms", e.expires_ms}});
        std::cout << out.dump() << "\n";
        return kExitOk;
    }
    for (const auto& e : tags)
        std::printf("tag %-10u rank %-4s weight %-5u expires %ums\n", e.tag, rank_text(e.rank).c_str(),
                    e.weight, e.expires_ms);
    for (const auto& e : flows)
        std::printf("flow %s rank %s weight %u expires %ums\n", e.key.to_string().c_str(),
                    rank_text(e.rank).c_str(), e.weight, e.expires_ms);
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

int cmd_params(Datapath& nl, Args& args, bool json)
{
    if (!args.empty()) {
        mercury::Params params;
        while (!args.empty()) {
            const std::string kv = args.next("NAME=VALUE");
            const auto eq = kv.find('=');
            if (eq == std::string::npos)
                throw UsageError{"parameters are set as NAME=VALUE, got '" + kv + "'"};
            const Status s = set_param_by_name(params, kv.substr(0, eq),
                                               parse_number<uint64_t>(kv.substr(eq + 1), "value"));
            if (!s)
                throw UsageError{s.message};
        }
        return report(nl.set_params(params), "set parameters");
    }
    mercury::Params params;
    if (int rc = report(nl.get_params(params), "get parameters"))
        return rc;
    print_map(params_as_map(params), json);
    return kExitOk;
}

std::string agent_socket_path(Args& args)
{
    std::string path = std::getenv("MERCURY_SOCKET") ? std::getenv("MERCURY_SOCKET") : mercury::proto::kDefaultSocketPath;
    if (args.take_flag("--socket"))
        path = args.next("socket path");
    return path;
}

// Asks mercuryd at @path for its status document (the daemon renders it).
// Returns an exit code; on kExitOk, @document holds the reply. Errors are
// printed unless @quiet.
int fetch_status(const std::string& path, bool json, std::string& document, bool quiet = false)
{
    const mercury::UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int fd = sock.get();
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (!sock || ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
        if (!quiet)
            std::cerr << "mercuryctl: cannot reach mercuryd at " << path << ": " << std::strerror(errno) << "\n";
        return kExitNoModule;
    }
    const timeval timeout{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    const auto request = mercury::proto::encode(
        mercury::proto::StatusRequest{json ? mercury::proto::StatusFormat::kJson : mercury::proto::StatusFormat::kText});
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

int cmd_status(Args& args, bool json)
{
    const std::string path = agent_socket_path(args);
    args.expect_end();
    std::string document;
    const int rc = fetch_status(path, json, document);
    if (rc == kExitOk)
        std::cout << document << (json ? "\n" : "");
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
int print_flows(Datapath& nl, const std::string& path, bool json)
{
    std::vector<mercury::SocketView> sockets;
    if (int rc = report(nl.list_sockets(sockets), "list sockets"))
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
                           {"tag", v.tag}, {"held", v.held}, {"holds", v.holds}, {"cwnd", v.cwnd},
                           {"srtt_us", v.srtt_us}, {"bytes_acked", v.bytes_acked}});
        }
        std::cout << out.dump() << "\n";
        return kExitOk;
    }
    std::printf("%-22s %-22s %-16s %5s %4s %6s %5s %4s %6s %6s %8s %12s\n", "local", "remote", "job", "layer", "rank",
                "weight", "tag", "held", "holds", "cwnd", "srtt_us", "bytes_acked");
    for (const auto& v : sockets) {
        const Owner* owner = owner_of(v);
        const std::string layer = !owner ? "-" : owner->layer ? std::to_string(*owner->layer) : "lane";
        std::printf("%-22s %-22s %-16.16s %5s %4s %6u %5u %4s %6u %6u %8u %12llu\n", v.local.to_string().c_str(),
                    v.remote.to_string().c_str(), owner ? mercury::printable(owner->job).c_str() : "-", layer.c_str(),
                    v.rank ? std::to_string(*v.rank).c_str() : "-", v.weight, v.tag, v.held ? "yes" : "no", v.holds, v.cwnd,
                    v.srtt_us, static_cast<unsigned long long>(v.bytes_acked));
    }
    return kExitOk;
}

int cmd_flows(Datapath& nl, Args& args, bool json, bool live)
{
    unsigned interval_ms = 1000, count = 0;   // top: 0 = until interrupted
    std::string path = agent_socket_path(args);
    while (!args.empty()) {
        if (live && args.take_flag("--interval-ms"))
            interval_ms = parse_number<unsigned>(args.next("interval"), "interval");
        else if (live && args.take_flag("--count"))
            count = parse_number<unsigned>(args.next("count"), "count");
        else if (args.take_flag("--socket"))
            path = args.next("socket path");
        else
            args.expect_end();
    }
    if (!live)
        return print_flows(nl, path, json);
    for (unsigned i = 0; count == 0 || i < count; ++i) {
        if (i > 0)
            ::usleep(interval_ms * 1000);
        if (!json)
            std::cout << "\033[H\033[2J" << std::flush;  // clear, as top does
        if (int rc = print_flows(nl, path, json))
            return rc;
        std::cout << std::flush;
    }
    return kExitOk;
}

int run(Args& args, bool json, mercury::DatapathKind kind)
{
    const std::string cmd = args.next("command");
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
        std::cout << kUsage;
        return kExitOk;
    }
    if (cmd == "--version") {
        std::cout << "mercuryctl " << MERCURY_VERSION << "\n";
        return kExitOk;
    }
    if (cmd == "status")
        return cmd_status(args, json);

    std::unique_ptr<Datapath> nl;
    if (const Status s = mercury::open_datapath(kind, nl); !s) {
        std::cerr << "mercuryctl: " << s.describe() << "\n";
        return s.error == -ENOENT ? kExitNoModule : kExitRefused;
    }

    if (cmd == "tag" || cmd == "flow") {
        const std::string op = args.next("set or del");
        const bool tag = cmd == "tag";
        if (op == "set") {
            if (tag) {
                const auto id = parse_number<uint32_t>(args.next("tag"), "tag");
                return report(nl->set_tag(id, parse_priority(args)), "set tag");
            }
            const auto key = parse_flow(args);
            return report(nl->set_flow(key, parse_priority(args)), "set flow");
        }
        if (op == "del") {
            Status s;
            if (tag)
                s = nl->del_tag(parse_number<uint32_t>(args.next("tag"), "tag"));
            else
                s = nl->del_flow(parse_flow(args));
            args.expect_end();
            return report(s, tag ? "delete tag" : "delete flow");
        }
        throw UsageError{"'" + cmd + "' takes set or del, not '" + op + "'"};
    }
    if (cmd == "dump") {
        args.expect_end();
        return cmd_dump(*nl, json);
    }
    if (cmd == "flush") {
        args.expect_end();
        return report(nl->flush(), "flush");
    }
    if (cmd == "params")
        return cmd_params(*nl, args, json);
    if (cmd == "flows" || cmd == "top")
        return cmd_flows(*nl, args, json, cmd == "top");
    if (cmd == "stats") {
        args.expect_end();
        mercury::Stats stats;
        if (int rc = report(nl->get_stats(stats), "get stats"))
            return rc;
        print_map(stats, json);
        return kExitOk;
    }
    throw UsageError{"unknown command '" + cmd + "'"};
}

}  // namespace

int main(int argc, char** argv)
{
    // --json and --datapath may stand anywhere on the line.
    std::vector<char*> rest{argv[0]};
    bool json = false;
    auto kind = mercury::DatapathKind::kAuto;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg(argv[i]);
        if (arg == "--json") {
            json = true;
        } else if (arg.starts_with("--datapath=")) {
            const auto k = mercury::parse_datapath_kind(arg.substr(11));
            if (!k) {
                std::cerr << "mercuryctl: --datapath takes auto, kmod or bpf, not '" << arg.substr(11) << "'\n";
                return kExitUsage;
            }
            kind = *k;
        } else {
            rest.push_back(argv[i]);
        }
    }
    Args args(static_cast<int>(rest.size()), rest.data());
    try {
        if (args.empty()) {
            std::cerr << kUsage;
            return kExitUsage;
        }
        return run(args, json, kind);
    } catch (const UsageError& e) {
        std::cerr << "mercuryctl: " << e.what << "\n(see mercuryctl --help)\n";
        return kExitUsage;
    }
}
