// SPDX-License-Identifier: GPL-2.0
// mercuryctl: inspect and change Mercury's per-netns table, parameters and
// counters, in tcp_mercury.ko (generic netlink) or the BPF datapath (maps).
#include <charconv>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "datapath/datapath.hpp"
#include "mercury/uapi.h"
#include "protocol/wire.hpp"

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

// Minimal JSON object printer: keys and values are plain identifiers/numbers.
class JsonObject {
public:
    explicit JsonObject(std::string& out) : out_(out) { out_ += "{"; }
    ~JsonObject() { out_ += "}"; }
    JsonObject(const JsonObject&) = delete;
    JsonObject& operator=(const JsonObject&) = delete;

    void number(const std::string& key, uint64_t value) { field(key) += std::to_string(value); }
    void string(const std::string& key, const std::string& value) { field(key) += "\"" + value + "\""; }
    std::string& raw(const std::string& key) { return field(key); }

private:
    std::string& field(const std::string& key)
    {
        if (!first_)
            out_ += ",";
        first_ = false;
        out_ += "\"" + key + "\":";
        return out_;
    }
    std::string& out_;
    bool first_ = true;
};

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
        std::string out;
        {
            JsonObject root(out);
            std::string& t = root.raw("tags");
            t += "[";
            for (size_t i = 0; i < tags.size(); ++i) {
                if (i)
                    t += ",";
                JsonObject o(t);
                o.number("tag", tags[i].tag);
                o.number("rank", tags[i].rank);
                o.number("weight", tags[i].weight);
                o.number("expires_ms", tags[i].expires_ms);
            }
            t += "]";
            std::string& f = root.raw("flows");
            f += "[";
            for (size_t i = 0; i < flows.size(); ++i) {
                if (i)
                    f += ",";
                JsonObject o(f);
                o.string("flow", flows[i].key.to_string());
                o.number("rank", flows[i].rank);
                o.number("weight", flows[i].weight);
                o.number("expires_ms", flows[i].expires_ms);
            }
            f += "]";
        }
        std::cout << out << "\n";
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
        std::string out;
        {
            JsonObject o(out);
            for (const auto& [k, v] : values)
                o.number(k, v);
        }
        std::cout << out << "\n";
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

// Asks mercuryd over its Unix socket; the daemon renders the document.
int cmd_status(Args& args, bool json)
{
    std::string path = std::getenv("MERCURY_SOCKET") ? std::getenv("MERCURY_SOCKET") : mercury::proto::kDefaultSocketPath;
    if (args.take_flag("--socket"))
        path = args.next("socket path");
    args.expect_end();

    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
        std::cerr << "mercuryctl: cannot reach mercuryd at " << path << ": " << std::strerror(errno) << "\n";
        if (fd >= 0)
            ::close(fd);
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
                    std::cout << reply->document << (json ? "\n" : "");
                    rc = kExitOk;
                } else if (const auto* error = std::get_if<mercury::proto::Error>(&d.message)) {
                    std::cerr << "mercuryctl: mercuryd refused: " << error->message << " ("
                              << std::strerror(static_cast<int>(error->code)) << ")\n";
                    ::close(fd);
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
    ::close(fd);
    if (rc != kExitOk)
        std::cerr << "mercuryctl: no status reply from mercuryd at " << path << "\n";
    return rc;
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
