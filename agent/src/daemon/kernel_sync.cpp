// SPDX-License-Identifier: GPL-2.0
#include "daemon/kernel_sync.hpp"

#include <tuple>

namespace mercury {

bool FlowKeyLess::operator()(const FlowKey& a, const FlowKey& b) const
{
    auto tie = [](const FlowKey& k) {
        return std::tie(k.cookie, k.local.family, k.local.addr, k.local.port, k.remote.addr, k.remote.port);
    };
    return tie(a) < tie(b);
}

KernelSync::KernelSync(boost::asio::io_context& io, const Logger& log, DatapathProvider& provider,
                       KernelSyncOptions options)
    : timer_(io), log_(log), provider_(provider), options_(options)
{
}

void KernelSync::start()
{
    connect();
    schedule_check();
}

// Stops pushing: entries already in the datapath stay until they expire.
void KernelSync::stop()
{
    stopped_ = true;
    timer_.cancel();
    datapath_.reset();
}

void KernelSync::set(const FlowKey& key, EntryValue value)
{
    desired_[key] = value;
    dirty_.insert(key);
}

void KernelSync::remove(const FlowKey& key)
{
    if (desired_.erase(key))
        dirty_.insert(key);
}

KernelSyncStats KernelSync::stats() const
{
    KernelSyncStats s = stats_;
    s.connected = datapath_ != nullptr;
    s.entries = desired_.size();
    return s;
}

bool KernelSync::connect()
{
    const Status s = provider_.open(datapath_);
    if (!s) {
        datapath_.reset();
        if (!warned_absent_)
            log_.warn("no Mercury datapath; training continues without priorities, retrying",
                      {{"reason", s.describe()}});
        warned_absent_ = true;
        return false;
    }
    log_.info("using the datapath", {{"datapath", std::string(datapath_->name())}, {"entries", std::to_string(desired_.size())}});
    warned_absent_ = false;
    warned_no_jobs_ = false;
    ++stats_.reconnects;
    pushed_.clear();
    dirty_.clear();  // everything goes now
    push_all();
    return datapath_ != nullptr;
}

void KernelSync::disconnect(const Status& why)
{
    datapath_stats_.clear();
    log_.warn("lost the datapath; will reconnect and push everything", {{"reason", why.describe()}});
    datapath_.reset();
    pushed_.clear();
    dirty_.clear();  // the next connect() pushes everything
}

Status KernelSync::timed(const std::function<Status()>& call)
{
    const auto start = Clock::now();
    const Status s = call();
    ++stats_.pushes;
    if (observe_push_)
        observe_push_(Clock::now() - start, s.error);
    return s;
}

bool KernelSync::push(const FlowKey& key, const EntryValue& value)
{
    // An older module has no jobs: ranks still apply, shared by all jobs.
    uint8_t job = value.job;
    if (job && !datapath_->supports_jobs()) {
        if (!warned_no_jobs_)
            log_.warn("the loaded tcp_mercury predates jobs (netlink version 1): jobs share one precedence "
                      "until it is replaced by this version's module");
        warned_no_jobs_ = true;
        job = 0;
    }
    const Status s =
        timed([&] { return datapath_->set_flow(key, Priority{value.rank, value.weight, options_.ttl_ms, job}); });
    if (!s) {
        ++stats_.errors;
        // The family went away (module unloaded or reloaded): start over.
        if (s.error == -ENOENT || s.error == -EOPNOTSUPP || s.error == -EIO) {
            disconnect(s);
            return false;
        }
        log_.warn("datapath refused an entry", {{"flow", key.to_string()}, {"reason", s.describe()}});
        return true;
    }
    pushed_[key] = value;
    return true;
}

void KernelSync::push_all()
{
    for (const auto& [key, value] : desired_)
        if (!datapath_ || !push(key, value))
            return;
    last_refresh_ = Clock::now();
}

// Pushes what changed since the last flush: its cost follows the change,
// not the table (a registration must not cost one push per registered flow).
void KernelSync::flush()
{
    if (!datapath_)
        return;
    const auto changed = std::move(dirty_);
    dirty_.clear();
    // Deletions first: an entry the agent no longer wants must not linger.
    for (const auto& key : changed) {
        const auto p = pushed_.find(key);
        if (desired_.count(key) || p == pushed_.end())
            continue;
        const Status s = timed([&] { return datapath_->del_flow(key); });
        if (!s && s.error != -ENOENT) {
            ++stats_.errors;
            disconnect(s);
            return;
        }
        pushed_.erase(p);
    }
    for (const auto& key : changed) {
        const auto d = desired_.find(key);
        if (d == desired_.end())
            continue;
        const auto p = pushed_.find(key);
        if (p != pushed_.end() && p->second == d->second)
            continue;
        if (!push(key, d->second))
            return;
    }
}

void KernelSync::schedule_check()
{
    if (stopped_)
        return;
    timer_.expires_after(std::chrono::milliseconds(options_.check_ms));
    timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec)
            check();
    });
}

void KernelSync::check()
{
    provider_.maintain();
    if (!datapath_) {
        connect();
    } else {
        // Fewer entries in the kernel than we pushed: reloaded or flushed.
        Stats kstats;
        const Status s = datapath_->get_stats(kstats);
        datapath_stats_ = kstats;
        if (!s) {
            disconnect(s);
            connect();
        } else if (kstats["flow_entries"] < pushed_.size()) {
            log_.info("kernel table lost entries (module reloaded?); pushing all",
                      {{"kernel", std::to_string(kstats["flow_entries"])}, {"ours", std::to_string(pushed_.size())}});
            pushed_.clear();
            push_all();
        } else if (Clock::now() - last_refresh_ >= std::chrono::milliseconds(options_.ttl_ms / 3)) {
            push_all();  // re-set before the kernel expires them
        } else {
            flush();
        }
    }
    schedule_check();
}

}  // namespace mercury
