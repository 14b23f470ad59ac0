// SPDX-License-Identifier: GPL-2.0
// mercuryd: one io_context; signals stop (SIGTERM, SIGINT) or reload (SIGHUP).
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "daemon/config.hpp"
#include "daemon/datapath_provider.hpp"
#include "daemon/jobs.hpp"
#include "daemon/kernel_sync.hpp"
#include "common/log.hpp"
#include "daemon/metrics.hpp"
#include "daemon/systemd.hpp"
#include "daemon/trainer_server.hpp"

namespace {

void watch_signals(boost::asio::signal_set& signals, mercury::Config& config, const std::vector<std::string>& args,
                   mercury::Logger& log, mercury::KernelSync& kernel, mercury::TrainerServer& server,
                   mercury::SystemdNotifier& systemd)
{
    signals.async_wait([&](const boost::system::error_code& ec, int signo) {
        if (ec)
            return;
        if (signo == SIGHUP) {
            systemd.reloading();
            if (const auto err = mercury::reload_config(config, args); !err.empty()) {
                log.error("config reload failed; keeping the old one", {{"reason", err}});
            } else {
                log.set_level(config.log_level);
                kernel.set_options(config.kernel);
                log.info("config reloaded");
            }
            systemd.ready("serving trainers");
            watch_signals(signals, config, args, log, kernel, server, systemd);
            return;
        }
        // Entries stay in the kernel and expire on their own; a restarted
        // agent re-pushes them when trainers reconnect. So the datapath is
        // let go before the sessions close, which would withdraw them.
        log.info("stopping; kernel entries expire on their own", {{"signal", std::to_string(signo)},
                                                                  {"entry_ttl_ms", std::to_string(config.kernel.ttl_ms)}});
        systemd.stopping();
        kernel.stop();
        server.stop();
    });
}

}  // namespace

int main(int argc, char** argv)
{
    const std::vector<std::string> args(argv + 1, argv + argc);
    auto loaded = mercury::load_config(args);
    if (!loaded.config)
        return loaded.exit_code;
    mercury::Config config = *loaded.config;

    mercury::Logger log;
    log.set_level(config.log_level);
    boost::asio::io_context io;
    mercury::DatapathProvider datapath(config.datapath, log);
    mercury::KernelSync kernel(io, log, datapath, config.kernel);
    mercury::JobRegistry jobs(kernel);
    jobs.set_max_flows_per_session(config.max_flows_per_client);
    jobs.set_isolate_jobs(config.isolate_jobs);
    jobs.set_default_job_weight(static_cast<uint16_t>(config.job_weight));
    mercury::TrainerServer server(io, log, jobs);
    mercury::SystemdNotifier systemd(io);
    try {
        if (const auto fd = mercury::activated_socket())
            server.adopt(*fd, config.socket);
        else
            server.listen(config.socket);
    } catch (const std::exception& e) {
        log.error("cannot start", {{"reason", e.what()}});
        return 1;
    }
    // Before the datapath is touched: a taken port stops nothing half started.
    std::unique_ptr<mercury::Metrics> metrics;
    if (!config.metrics.empty()) {
        try {
            metrics = std::make_unique<mercury::Metrics>(io, config.metrics, jobs, kernel,
                                                         std::chrono::milliseconds(config.kernel.check_ms));
        } catch (const std::exception& e) {
            log.error("cannot start", {{"reason", e.what()}});
            return 1;
        }
        log.info("serving metrics", {{"address", config.metrics}, {"port", std::to_string(metrics->port())}});
    }
    kernel.start();

    boost::asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);
    watch_signals(signals, config, args, log, kernel, server, systemd);
    std::signal(SIGPIPE, SIG_IGN);
    log.info("mercuryd started", {{"protocol", "1"}, {"datapath", std::string(mercury::to_string(config.datapath))}});
    systemd.ready("serving trainers");
    io.run();
    datapath.release();
    return 0;
}
