// SPDX-License-Identifier: GPL-2.0
// Structured logs on stderr, one event per line: ts=... level=... msg="..." k=v.
// When stderr is the journal (systemd's JOURNAL_STREAM names it), each line
// starts with its syslog priority, <7> debug to <3> error (sd-daemon(3)), so
// `journalctl -p warning` filters.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace mercury {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

bool parse_log_level(std::string_view text, LogLevel& out);

// True if $JOURNAL_STREAM ("DEV:INODE") is the file stderr is open on.
bool stderr_is_journal();

class Logger {
public:
    using Fields = std::initializer_list<std::pair<std::string_view, std::string>>;

    void set_level(LogLevel level) { level_ = level; }
    void debug(std::string_view msg, Fields fields = {}) const { log(LogLevel::kDebug, msg, fields); }
    void info(std::string_view msg, Fields fields = {}) const { log(LogLevel::kInfo, msg, fields); }
    void warn(std::string_view msg, Fields fields = {}) const { log(LogLevel::kWarn, msg, fields); }
    void error(std::string_view msg, Fields fields = {}) const { log(LogLevel::kError, msg, fields); }

private:
    void log(LogLevel level, std::string_view msg, Fields fields) const;
    LogLevel level_ = LogLevel::kInfo;
    bool priority_prefix_ = stderr_is_journal();
};

}  // namespace mercury
