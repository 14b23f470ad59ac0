// SPDX-License-Identifier: GPL-2.0
// mercuryd's configuration: a TOML file (see agent/mercuryd.conf, parsed by
// toml++) overridden by command-line flags of the same names.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "daemon/jobs.hpp"
#include "daemon/kernel_sync.hpp"
#include "common/log.hpp"
#include "daemon/trainer_server.hpp"
#include "datapath/datapath.hpp"

namespace mercury {

struct Config {
    std::string config_file;  // empty: none
    DatapathKind datapath = DatapathKind::kAuto;
    SocketOptions socket;
    KernelSyncOptions kernel;
    unsigned max_flows_per_client = 16384;   // registered connections per trainer
    JobIsolation isolate_jobs = JobIsolation::kAuto;   // datapath job ids per job name
    unsigned job_weight = 1;                 // jobs mercuryctl job set did not weigh
    std::string metrics;                     // ADDR:PORT of /metrics; empty: off
    LogLevel log_level = LogLevel::kInfo;
};

struct ConfigResult {
    std::optional<Config> config;  // nullopt: error (or --help) already handled
    int exit_code = 0;             // when config is nullopt
};

// Parses flags and the config file they name. Prints --help or a clear error.
ConfigResult load_config(const std::vector<std::string>& args);

// Re-reads @current.config_file (SIGHUP). Returns an error message, empty on success.
std::string reload_config(Config& current, const std::vector<std::string>& args);

}  // namespace mercury
