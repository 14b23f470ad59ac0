// SPDX-License-Identifier: GPL-2.0
#include "common/log.hpp"
#include "common/printable.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace mercury {

namespace {

const char* name(LogLevel level)
{
    switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
    }
    return "?";
}

// sd-daemon(3)'s "<N>": LOG_DEBUG 7, LOG_INFO 6, LOG_WARNING 4, LOG_ERR 3.
const char* syslog_prefix(LogLevel level)
{
    switch (level) {
    case LogLevel::kDebug: return "<7>";
    case LogLevel::kInfo: return "<6>";
    case LogLevel::kWarn: return "<4>";
    case LogLevel::kError: return "<3>";
    }
    return "<6>";
}

// Values with spaces, quotes or '=' are quoted so lines stay parseable;
// control bytes (a client's job name may hold any) are escaped.
std::string quoted(std::string_view raw)
{
    const std::string v = printable(raw);
    if (!v.empty() && v.find_first_of(" \"=") == std::string::npos)
        return v;
    std::string out = "\"";
    for (char c : v) {
        if (c == '"')
            out += '\\';
        out += c;
    }
    return out + "\"";
}

}  // namespace

bool stderr_is_journal()
{
    const char* stream = std::getenv("JOURNAL_STREAM");
    struct stat st {};
    if (!stream || ::fstat(STDERR_FILENO, &st) != 0)
        return false;
    return std::string(stream) == std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

bool parse_log_level(std::string_view text, LogLevel& out)
{
    for (auto level : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
        if (text == name(level)) {
            out = level;
            return true;
        }
    }
    return false;
}

void Logger::log(LogLevel level, std::string_view msg, Fields fields) const
{
    if (level < level_)
        return;
    const auto now = std::chrono::system_clock::now();
    const std::time_t secs = std::chrono::system_clock::to_time_t(now);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char ts[32];
    std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);

    std::string line = priority_prefix_ ? syslog_prefix(level) : "";
    line += std::string("ts=") + ts + "." + std::to_string(1000 + ms).substr(1) + "Z level=" + name(level) +
                       " msg=" + quoted(msg);
    for (const auto& [k, v] : fields)
        line += " " + std::string(k) + "=" + quoted(v);
    line += "\n";
    std::fputs(line.c_str(), stderr);
}

}  // namespace mercury
