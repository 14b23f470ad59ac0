// SPDX-License-Identifier: GPL-2.0
#include "daemon/config.hpp"

#define TOML_HEADER_ONLY 1
#include <toml++/toml.h>

#include <charconv>
#include <cstdio>
#include <iostream>
#include <map>

#include "protocol/wire.hpp"

namespace mercury {

namespace {

constexpr const char* kHelp = R"(usage: mercuryd [OPTIONS]

Per-worker agent of Mercury: learns per-layer compute timings from trainers
(libmercury) and pushes per-connection priorities into the datapath:
tcp_mercury.ko, or the eBPF congestion control it loads itself.
Runs in the foreground; logs to stderr. SIGTERM/SIGINT stop, SIGHUP reloads
the config file (log_level, entry_ttl_ms, check_ms).

Options (each may also be set in the config file, TOML: `key = "text"` or
`key = 123`, the option's name with _ for -; flags win):
  --config FILE        config file (default: none)
  --datapath KIND      kmod (tcp_mercury.ko), bpf (load and register the eBPF
                       CC "mercury", or share the one another mercuryd on this
                       host loaded; unregistered when the loader exits) or
                       auto: the module when it can be loaded, else bpf
                       (default auto)
  --socket PATH        trainers' Unix socket (default /run/mercury/mercuryd.sock)
  --socket-mode MODE   octal permissions of the socket (default 0660)
  --socket-group NAME  group owning the socket (default: the daemon's)
  --max-clients N      trainers and mercuryctl connected at once; more are
                       refused with EBUSY (default 256)
  --max-flows-per-client N
                       connections one trainer may register (layers and
                       lanes); more are refused with ENOSPC (default 16384)
  --frame-timeout-ms N a client that leaves a frame incomplete this long is
                       disconnected with ETIMEDOUT (default 10000)
  --isolate-jobs MODE  auto, true or false. true: each job (trainers of one
                       job name) gets its own datapath job id, so one job's
                       ranks never hold another job's flows, and jobs share
                       links per job (needs tcp_mercury of this version, or
                       the BPF datapath); auto: as true while two or more
                       jobs run on this host, as false while one does (it
                       then pays nothing for isolation); false: ranks order
                       every flow on the host (default auto)
  --job-weight N       weight of a job that `mercuryctl job set` did not
                       weigh, 1..64: its entries' weights are multiplied by
                       it (default 1)
  --entry-ttl-ms N     lifetime of kernel entries, refreshed at 1/3 (default 10000)
  --check-ms N         how often to check on the datapath (default 1000)
  --log-level LEVEL    debug, info, warn or error (default info)
  --metrics ADDR:PORT  serve Prometheus metrics at http://ADDR:PORT/metrics,
                       e.g. 127.0.0.1:9469 (default: off)
  --help               this text
  --version            print the version and exit
)";

using Settings = std::map<std::string, std::string>;

bool to_unsigned(const std::string& text, unsigned& out, int base = 10)
{
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
    return ec == std::errc{} && end == text.data() + text.size();
}

// A --metrics value: "ADDR:PORT" ("[::1]:P" for IPv6), port 0..65535.
std::string check_metrics_address(const std::string& address)
{
    const auto colon = address.rfind(':');
    unsigned port = 0;
    if (colon == std::string::npos || colon == 0)
        return "metrics must be ADDR:PORT, such as 127.0.0.1:9469";
    if (!to_unsigned(address.substr(colon + 1), port) || port > 65535)
        return "metrics port must be 0..65535 (in ADDR:PORT)";
    return "";
}

// Applies one setting; returns an error message or "".
std::string apply(Config& c, const std::string& key, const std::string& value)
{
    unsigned n = 0;
    if (key == "datapath") {
        const auto kind = parse_datapath_kind(value);
        if (!kind)
            return "datapath must be auto, kmod or bpf";
        c.datapath = *kind;
    } else if (key == "socket") {
        if (value.empty() || value.front() != '/')
            return "socket must be an absolute path";
        c.socket.path = value;
    } else if (key == "socket_mode") {
        if (!to_unsigned(value, n, 8) || n > 0777)
            return "socket_mode must be octal permissions such as 0660";
        c.socket.mode = n;
    } else if (key == "socket_group") {
        c.socket.group = value;
    } else if (key == "max_clients") {
        if (!to_unsigned(value, n) || n < 1 || n > 65536)
            return "max_clients must be 1..65536";
        c.socket.max_clients = n;
    } else if (key == "max_flows_per_client") {
        if (!to_unsigned(value, n) || n < 1 || n > 1000000)
            return "max_flows_per_client must be 1..1000000";
        c.max_flows_per_client = n;
    } else if (key == "isolate_jobs") {
        if (value == "true")
            c.isolate_jobs = JobIsolation::kOn;
        else if (value == "false")
            c.isolate_jobs = JobIsolation::kOff;
        else if (value == "auto")
            c.isolate_jobs = JobIsolation::kAuto;
        else
            return "isolate_jobs must be auto, true or false";
    } else if (key == "job_weight") {
        if (!to_unsigned(value, n) || n < 1 || n > proto::kMaxJobWeight)
            return "job_weight must be 1..64";
        c.job_weight = n;
    } else if (key == "frame_timeout_ms") {
        if (!to_unsigned(value, n) || n < 100 || n > 600000)
            return "frame_timeout_ms must be 100..600000";
        c.socket.frame_timeout_ms = n;
    } else if (key == "entry_ttl_ms") {
        if (!to_unsigned(value, n) || n < 300 || n > 3600000)
            return "entry_ttl_ms must be 300..3600000";
        c.kernel.ttl_ms = n;
    } else if (key == "check_ms") {
        if (!to_unsigned(value, n) || n < 50 || n > 60000)
            return "check_ms must be 50..60000";
        c.kernel.check_ms = n;
    } else if (key == "metrics") {
        if (auto err = check_metrics_address(value); !err.empty())
            return err;
        c.metrics = value;
    } else if (key == "log_level") {
        if (!parse_log_level(value, c.log_level))
            return "log_level must be debug, info, warn or error";
    } else {
        return "unknown setting '" + key + "'";
    }
    return "";
}

// The config file is TOML (toml++): `key = "text"` or `key = 123`, `#`
// comments. Each setting keeps its line, for error messages.
std::string read_file(const std::string& path, Settings& out, std::map<std::string, std::string>& where)
{
    toml::table file;
    try {
        file = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
        const auto& at = e.source().begin;
        std::string why(e.description());
        // The format before 0.2 had bare words: say how to write them now.
        if (why.find("value type") != std::string::npos || why.find("unexpected character") != std::string::npos)
            why += " (text values are quoted: socket = \"/run/mercury/mercuryd.sock\")";
        return path + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": " + why;
    }
    for (const auto& [key, node] : file) {
        const std::string name(key.str());
        const std::string line = path + ":" + std::to_string(node.source().begin.line);
        if (const auto text = node.value_exact<std::string>()) {
            out[name] = *text;
        } else if (const auto flag = node.value_exact<bool>()) {
            out[name] = *flag ? "true" : "false";
        } else if (const auto number = node.value_exact<int64_t>()) {
            if (*number < 0)
                return line + ": " + name + " must not be negative";
            char buf[32];
            // socket_mode = 0o660 is a TOML integer; the setting reads octal text.
            std::snprintf(buf, sizeof(buf), name == "socket_mode" ? "%llo" : "%llu",
                          static_cast<unsigned long long>(*number));
            out[name] = buf;
        } else {
            return line + ": " + name + " must be text, a whole number or true/false";
        }
        where[name] = line;
    }
    return "";
}

// Flags as settings ("--socket-mode" -> "socket_mode"); "help" when asked.
std::string parse_flags(const std::vector<std::string>& args, Settings& out, std::string& config_file, bool& help)
{
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--help" || a == "-h") {
            help = true;
            return "";
        }
        if (a.rfind("--", 0) != 0)
            return "unexpected argument '" + a + "'";
        std::string key = a.substr(2), value;
        const auto eq = key.find('=');
        if (eq != std::string::npos) {
            value = key.substr(eq + 1);
            key = key.substr(0, eq);
        } else if (i + 1 < args.size()) {
            value = args[++i];
        } else {
            return "missing value for " + a;
        }
        for (char& ch : key)
            ch = ch == '-' ? '_' : ch;
        if (key == "config")
            config_file = value;
        else
            out[key] = value;
    }
    return "";
}

std::string build(const std::vector<std::string>& args, Config& c, bool& help)
{
    Settings flags, file;
    std::map<std::string, std::string> where;  // file setting -> "FILE:LINE"
    std::string config_file;
    if (auto err = parse_flags(args, flags, config_file, help); !err.empty() || help)
        return err;
    if (!config_file.empty())
        if (auto err = read_file(config_file, file, where); !err.empty())
            return err;
    c.config_file = config_file;
    for (const auto& [k, v] : file)
        if (auto err = apply(c, k, v); !err.empty())
            return where[k] + ": " + err;
    for (const auto& [k, v] : flags)
        if (auto err = apply(c, k, v); !err.empty())
            return err;
    return "";
}

}  // namespace

ConfigResult load_config(const std::vector<std::string>& args)
{
    for (const auto& a : args) {
        if (a == "--version") {
            std::cout << "mercuryd " << MERCURY_VERSION << "\n";
            return {std::nullopt, 0};
        }
    }
    Config c;
    bool help = false;
    const std::string err = build(args, c, help);
    if (help) {
        std::cout << kHelp;
        return {std::nullopt, 0};
    }
    if (!err.empty()) {
        std::cerr << "mercuryd: " << err << " (see mercuryd --help)\n";
        return {std::nullopt, 2};
    }
    return {c, 0};
}

std::string reload_config(Config& current, const std::vector<std::string>& args)
{
    Config fresh;
    bool help = false;
    if (auto err = build(args, fresh, help); !err.empty())
        return err;
    // The socket, the datapath, the metrics address and the job settings
    // (jobs hold their ids and weights) stay as they are until a restart.
    fresh.socket = current.socket;
    fresh.isolate_jobs = current.isolate_jobs;
    fresh.job_weight = current.job_weight;
    fresh.datapath = current.datapath;
    fresh.metrics = current.metrics;
    current = fresh;
    return "";
}

}  // namespace mercury
