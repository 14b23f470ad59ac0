// SPDX-License-Identifier: GPL-2.0
// mercury-ps: a parameter server for one data-parallel job. Workers
// (mercury.torch with backend="ps") push gradient chunks; the server sums
// each chunk once every worker's copy arrived and sends it straight back.
#include <sys/resource.h>
#include <sys/stat.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/signal_set.hpp>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "common/log.hpp"
#include "ps/metrics.hpp"
#include "ps/server.hpp"

namespace {

constexpr const char* kFooter = R"(
The secret: the file's contents (a trailing newline dropped), else
$MERCURY_PS_SECRET. Every worker of the job must hold the same one; a
connection that cannot prove it is refused and logged, and the server
proves it to every worker before the worker sends a gradient. It must be
at least 32 bytes of at least 10 different values (a weak one could be
guessed offline from one recorded handshake). Generate one with
  head -c 32 /dev/urandom | base64 > /etc/mercury/ps-JOB.secret

Descriptors: each connection takes one, and 128 more are kept for the
rest. The server raises its soft limit as far as the hard one allows. By
default --max-connections is 4096 or what the hard limit covers, whichever
is less (logged); one given explicitly that the limit cannot cover stops
the server with the reason.

The server serves one job at a time, any number of runs in turn. A worker
that vanishes without saying bye, or a chunk that waits --timeout-ms for a
worker, ends the job: every worker is told why.)";

struct Options {
    std::string listen, job, secret_file, cc = "mercury", aggregation = "chunk", log_level = "info";
    std::string agent_socket, metrics;
    bool no_agent = false;
    std::string payload_tags = "on";
    uint32_t chunk_bytes = 65536, max_workers = 256, max_connections = 0;   // 0: as the limit allows
    uint64_t max_model_mb = 4096, timeout_ms = 60000, handshake_timeout_ms = 3000;
};

// @option's "IP:PORT" or "[IPv6]:PORT".
boost::asio::ip::tcp::endpoint parse_endpoint(const std::string& option, const std::string& text)
{
    const auto colon = text.rfind(':');
    if (colon == std::string::npos)
        throw std::runtime_error(option + " wants ADDRESS:PORT, not '" + text + "'");
    std::string host = text.substr(0, colon);
    if (host.size() > 1 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    boost::system::error_code ec;
    const auto address = boost::asio::ip::make_address(host, ec);
    if (ec)
        throw std::runtime_error(option + ": '" + host + "' is not an IP address");
    unsigned long port = 0;
    try {
        size_t used = 0;
        port = std::stoul(text.substr(colon + 1), &used);
        if (used != text.size() - colon - 1 || port > 65535)
            throw std::out_of_range("port");
    } catch (const std::exception&) {
        throw std::runtime_error(option + ": bad port in '" + text + "'");
    }
    return {address, static_cast<unsigned short>(port)};
}

constexpr uint32_t kDefaultMaxConnections = 4096;   // 256 workers x 8 lanes per server, with room
constexpr rlim_t kOtherDescriptors = 128;            // the listener, the log, the agent, 64 metrics connections

// Raises the soft descriptor limit for @max_connections (0: the default,
// lowered to what the hard limit covers); the connections it covers.
// Throws std::runtime_error if an explicit @max_connections cannot be.
uint32_t raise_descriptor_limit(uint32_t max_connections)
{
    struct rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0)
        throw std::runtime_error(std::string("getrlimit: ") + std::strerror(errno));
    uint32_t want = max_connections;
    if (!want) {
        const rlim_t room = limit.rlim_max > kOtherDescriptors ? limit.rlim_max - kOtherDescriptors : 0;
        want = static_cast<uint32_t>(std::min<rlim_t>(kDefaultMaxConnections, room));
        if (want < 64)
            throw std::runtime_error("the descriptor limit (" + std::to_string(limit.rlim_max) +
                                     ") leaves room for " + std::to_string(want) +
                                     " connections: raise LimitNOFILE or `ulimit -Hn`");
    }
    const rlim_t need = rlim_t{want} + kOtherDescriptors;
    if (limit.rlim_cur < need && limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = std::min(need, limit.rlim_max);
        if (::setrlimit(RLIMIT_NOFILE, &limit) != 0)
            throw std::runtime_error(std::string("setrlimit: ") + std::strerror(errno));
    }
    if (limit.rlim_cur < need)
        throw std::runtime_error("--max-connections " + std::to_string(want) + " needs " + std::to_string(need) +
                                 " descriptors; the hard limit is " + std::to_string(limit.rlim_max) +
                                 " (raise LimitNOFILE or `ulimit -Hn`, or lower --max-connections)");
    return want;
}

std::string read_secret(const std::string& file, const mercury::Logger& log)
{
    const std::string secret = mercury::ps::load_secret(file);
    struct stat st{};
    if (!file.empty() && ::stat(file.c_str(), &st) == 0 && (st.st_mode & S_IROTH))
        log.warn("the secret file is world-readable", {{"file", file}});
    if (secret.empty())
        throw std::runtime_error("no secret: give --secret-file FILE or set MERCURY_PS_SECRET "
                                 "(a server without one would sum anyone's bytes into the job)");
    return secret;
}

}  // namespace

int main(int argc, char** argv)
{
    CLI::App app{"mercury-ps: a parameter server for one data-parallel training job, with immediate\n"
                 "per-chunk aggregation (mercury.torch backend=\"ps\")",
                 "mercury-ps"};
    Options o;
    app.footer(kFooter);
    app.set_version_flag("--version", std::string("mercury-ps ") + MERCURY_VERSION);
    app.add_option("--listen", o.listen, "ADDRESS:PORT to serve on")->required();
    app.add_option("--job", o.job, "the job's name; workers of other jobs are refused")->required()
        ->check([](const std::string& s) {
            return s.empty() || s.size() > mercury::ps::kMaxJobName ? "1..64 bytes" : std::string();
        });
    app.add_option("--secret-file", o.secret_file, "file holding the job's secret (else $MERCURY_PS_SECRET)");
    app.add_option("--cc", o.cc, "congestion control of every connection, set and read back")
        ->capture_default_str();
    app.add_option("--aggregation", o.aggregation,
                   "chunk: answer each chunk once every worker pushed it; tensor: once every worker pushed "
                   "the whole key (the vanilla parameter server)")
        ->check(CLI::IsMember({"chunk", "tensor"}))->capture_default_str();
    app.add_option("--chunk-bytes", o.chunk_bytes, "bytes per push and pull")
        ->check(CLI::Range(4096u, 1u << 22))->capture_default_str();
    app.add_option("--timeout-ms", o.timeout_ms, "a chunk waiting this long for a worker ends the job")
        ->check(CLI::Range(uint64_t{100}, uint64_t{3600000}))->capture_default_str();
    app.add_option("--handshake-timeout-ms", o.handshake_timeout_ms,
                   "a connection that has not joined the job within this long is closed")
        ->check(CLI::Range(uint64_t{100}, uint64_t{60000}))->capture_default_str();
    app.add_option("--max-model-mb", o.max_model_mb,
                   "largest job accepted, MiB: its gradients and its per-chunk and per-worker records")
        ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))->capture_default_str();
    app.add_option("--max-workers", o.max_workers, "most workers a job may declare")
        ->check(CLI::Range(1u, 65536u))->capture_default_str();
    app.add_option("--max-connections", o.max_connections,
                   "connections at once, more are refused (default: 4096, or what the descriptor limit covers)")
        ->check(CLI::Range(1u, 1u << 20));
    app.add_option("--agent-socket", o.agent_socket, "mercuryd's socket (default: $MERCURY_SOCKET, else libmercury's)");
    app.add_flag("--no-agent", o.no_agent, "do not rank connections through mercuryd");
    app.add_option("--payload-tags", o.payload_tags,
                   "off: frames' tags cover their headers only, so gradients could be altered in flight; for a "
                   "trusted emulated testbed whose CPU cannot afford HMAC over every byte (workers must accept it)")
        ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
    app.add_option("--log-level", o.log_level, "debug, info, warn or error")->capture_default_str();
    app.add_option("--metrics", o.metrics, "serve Prometheus metrics at http://ADDR:PORT/metrics (default: off)");
    CLI11_PARSE(app, argc, argv);

    mercury::Logger log;
    mercury::LogLevel level;
    if (!mercury::parse_log_level(o.log_level, level)) {
        std::cerr << "mercury-ps: --log-level is debug, info, warn or error\n";
        return 2;
    }
    log.set_level(level);
    if (o.chunk_bytes % sizeof(float)) {
        std::cerr << "mercury-ps: --chunk-bytes must be a multiple of 4\n";
        return 2;
    }
    try {
        mercury::ps::ServerOptions options;
        options.job = o.job;
        options.secret = read_secret(o.secret_file, log);
        options.cc = o.cc;
        options.aggregation = o.aggregation == "tensor" ? mercury::ps::Aggregation::kTensor
                                                        : mercury::ps::Aggregation::kChunk;
        options.chunk_elems = o.chunk_bytes / sizeof(float);
        options.stall_timeout = std::chrono::milliseconds(o.timeout_ms);
        options.handshake_timeout = std::chrono::milliseconds(o.handshake_timeout_ms);
        options.max_model_bytes = o.max_model_mb << 20;
        options.max_workers = o.max_workers;
        options.max_connections = raise_descriptor_limit(o.max_connections);
        options.use_agent = !o.no_agent;
        options.payload_tags = o.payload_tags == "on";
        options.agent_socket = o.agent_socket;

        boost::asio::io_context io;
        // Before the server: it reports to them until it is gone.
        std::unique_ptr<mercury::ps::Metrics> metrics;
        if (!o.metrics.empty())
            metrics = std::make_unique<mercury::ps::Metrics>(io, parse_endpoint("--metrics", o.metrics));
        mercury::ps::Server server(io, log, options);
        server.set_observer(metrics.get());
        const auto at = parse_endpoint("--listen", o.listen);
        server.listen(at);
        log.info("serving", {{"job", o.job},
                             {"listen", o.listen},
                             {"cc", o.cc},
                             {"aggregation", o.aggregation},
                             {"payload_tags", o.payload_tags},
                             {"max_connections", std::to_string(options.max_connections)}});
        boost::asio::signal_set signals(io, SIGTERM, SIGINT);
        signals.async_wait([&](const boost::system::error_code& ec, int) {
            if (ec)
                return;
            log.info("stopping");
            server.stop();
            io.stop();
        });
        std::signal(SIGPIPE, SIG_IGN);
        io.run();
    } catch (const std::exception& e) {
        std::cerr << "mercury-ps: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
