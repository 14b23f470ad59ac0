// SPDX-License-Identifier: GPL-2.0
// Keeps the datapath's flow table equal to what the agent wants: pushes only
// changes, re-sets every entry before it expires, waits for the datapath when
// it is absent, and pushes everything again when it was reloaded.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <memory>

#include "common/log.hpp"
#include "daemon/datapath_provider.hpp"

namespace mercury {

struct FlowKeyLess {
    bool operator()(const FlowKey& a, const FlowKey& b) const;
};

struct EntryValue {
    uint8_t rank = 0;
    uint16_t weight = 16;
    uint8_t job = 0;   // 0: no job (precedence shared with every job-0 flow)
    bool operator==(const EntryValue&) const = default;
};

struct KernelSyncOptions {
    uint32_t ttl_ms = 10000;     // entry lifetime requested from the kernel
    uint32_t check_ms = 1000;    // how often to check the module and refresh
};

struct KernelSyncStats {
    bool connected = false;
    uint64_t pushes = 0;         // entry sets and deletes sent
    uint64_t errors = 0;
    uint64_t reconnects = 0;
    size_t entries = 0;          // desired entries
};

// What the job logic needs of the datapath: entries to keep there, and
// whether one is connected. KernelSync is the real one; unit tests use a
// table of their own.
class EntryTable {
public:
    virtual ~EntryTable() = default;
    virtual void set(const FlowKey& key, EntryValue value) = 0;  // takes effect on flush()
    virtual void remove(const FlowKey& key) = 0;
    virtual void flush() = 0;                                    // push pending changes now
    virtual KernelSyncStats stats() const = 0;
};

class KernelSync final : public EntryTable {
public:
    KernelSync(boost::asio::io_context& io, const Logger& log, DatapathProvider& provider,
               KernelSyncOptions options);

    void start();
    void stop();
    void set(const FlowKey& key, EntryValue value) override;
    void remove(const FlowKey& key) override;
    void flush() override;
    void set_options(KernelSyncOptions options) { options_ = options; }
    KernelSyncStats stats() const override;
    // The datapath's own counters for this netns, as of the last check
    // (empty while there is no datapath).
    const Stats& datapath_stats() const { return datapath_stats_; }
    // Called after every entry set or delete sent to the datapath: how long
    // it took, and its error (0: done).
    using PushObserver = std::function<void(std::chrono::nanoseconds took, int error)>;
    void set_push_observer(PushObserver observer) { observe_push_ = std::move(observer); }

private:
    using Clock = std::chrono::steady_clock;

    void schedule_check();
    void check();
    bool connect();
    void disconnect(const Status& why);
    bool push(const FlowKey& key, const EntryValue& value);
    Status timed(const std::function<Status()>& call);  // counts and observes one push
    void push_all();

    boost::asio::steady_timer timer_;
    const Logger& log_;
    DatapathProvider& provider_;
    KernelSyncOptions options_;
    std::unique_ptr<Datapath> datapath_;
    std::map<FlowKey, EntryValue, FlowKeyLess> desired_;
    std::map<FlowKey, EntryValue, FlowKeyLess> pushed_;   // what the kernel holds, as far as we know
    std::set<FlowKey, FlowKeyLess> dirty_;                // changed since the last flush()
    Clock::time_point last_refresh_{};
    KernelSyncStats stats_;
    Stats datapath_stats_;
    PushObserver observe_push_;
    bool warned_absent_ = false;
    bool warned_no_jobs_ = false;
    bool stopped_ = false;
};

}  // namespace mercury
