// SPDX-License-Identifier: GPL-2.0
// The replayer's workers as mercury-ps clients (agent/PROTOCOL.md): the
// handshake, in which the server proves it holds the job's secret, then
// tagged frames both ways on non-blocking connections.
#pragma once

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/unique_fd.hpp"
#include "flow_key.hpp"
#include "ps/wire.hpp"
#include "replay/plan.hpp"

namespace mercury::replay {

// The job's secret, as mercury-ps takes it.
std::string read_secret(const std::string& file);

// One connection to a mercury-ps, after the handshake: pushes queued out
// (zeros: the replayer moves bytes, not gradients), each tagged as a
// worker's is; sums, acks and errors in, each tag checked.
// Non-blocking: a blocking write here deadlocks (both ends writing, none reading).
class Conn {
public:
    Conn(int fd, uint32_t server, ps::FrameMac up, ps::FrameMac down, bool tag_payloads);
    int fd() const { return fd_.get(); }
    uint32_t server() const { return server_; }
    bool want_write() const { return !out_.empty(); }

    void queue(ps::Type type, uint32_t key = 0, uint32_t offset = 0, uint32_t count = 0, uint32_t iteration = 0);
    // Writes what the socket takes; returns bytes of frames sent.
    uint64_t flush();

    // Reads and calls @on_message(header) per whole, authentic Pull or Ack.
    // False on EOF; throws on an Error (its text), a bad tag or anything
    // else unexpected.
    template <typename F>
    bool read(F&& on_message)
    {
        char buf[65536];
        const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return true;
        if (n <= 0)
            return false;
        for (ssize_t i = 0; i < n;) {
            if (have_ < sizeof(in_)) {
                const size_t take = std::min<size_t>(sizeof(in_) - have_, static_cast<size_t>(n - i));
                std::memcpy(reinterpret_cast<char*>(&in_) + have_, buf + i, take);
                have_ += take;
                i += static_cast<ssize_t>(take);
                if (have_ < sizeof(in_))
                    continue;
                if (in_.type == ps::Type::kPull && in_.count <= kChunkElems)
                    payload_.resize(in_.count * sizeof(float));
                else if (in_.type == ps::Type::kError && in_.count <= ps::kMaxErrorText)
                    payload_.resize(in_.count);
                else if (in_.type == ps::Type::kAck)
                    payload_.clear();
                else
                    throw std::runtime_error("mercury-ps sent message type " +
                                             std::to_string(static_cast<unsigned>(in_.type)) + " of " +
                                             std::to_string(in_.count));
            }
            const size_t frame = sizeof(in_) + payload_.size() + ps::kTagBytes;
            const size_t take = std::min<size_t>(frame - have_, static_cast<size_t>(n - i));
            for (size_t done = 0; done < take;) {   // into the payload, then the tag
                const size_t at = have_ - sizeof(in_);
                uint8_t* into = at < payload_.size() ? payload_.data() + at : tag_.data() + (at - payload_.size());
                const size_t room = at < payload_.size() ? payload_.size() - at : frame - have_;
                const size_t step = std::min(room, take - done);
                std::memcpy(into, buf + i + done, step);
                done += step;
                have_ += step;
            }
            i += static_cast<ssize_t>(take);
            if (have_ < frame)
                continue;
            have_ = 0;
            const std::span<const uint8_t> tagged(payload_.data(), tag_payloads_ ? payload_.size() : 0);
            if (!ps::same_mac(down_.next({reinterpret_cast<const uint8_t*>(&in_), sizeof(in_)}, tagged), tag_))
                throw std::runtime_error("server " + std::to_string(server_) + ": a message failed authentication");
            if (in_.type == ps::Type::kError)
                throw std::runtime_error("server " + std::to_string(server_) + ": " +
                                         std::string(payload_.begin(), payload_.end()));
            if (in_.type == ps::Type::kPull)
                received_ += payload_.size();
            on_message(in_);
        }
        return true;
    }
    uint64_t received_payload() const { return received_; }

private:
    struct Out {
        ps::Header header;
        size_t payload;
        ps::Tag tag;
        size_t off;   // bytes of the frame written
    };
    static const uint8_t* zeros()
    {
        static const std::vector<uint8_t> bytes(kChunk, 0);
        return bytes.data();
    }

    mercury::UniqueFd fd_;
    uint32_t server_;
    ps::FrameMac up_, down_;
    bool tag_payloads_;   // false: the server runs --payload-tags off (ps::kUntaggedPayloads)
    std::deque<Out> out_;
    ps::Header in_{};
    size_t have_ = 0;
    std::vector<uint8_t> payload_;
    ps::Tag tag_{};
    uint64_t received_ = 0;
};

using Conns = std::vector<std::vector<std::unique_ptr<Conn>>>;  // [server][lane]

// Polls the open connections (only those with unsent data if @writers_only)
// and returns each with its revents; with @writers_only, a connection still
// waiting to write is returned even when it got no event.
// Waits up to @timeout_s (to the microsecond: rounding to milliseconds made
// a worker spin through the last millisecond of every compute step, CPU that
// a small host's servers and agents then lacked) for the connections.
std::vector<std::pair<Conn*, short>> poll_conns(const Conns& conns, bool writers_only, double timeout_s);

// Connects to a mercury-ps and joins the plan's job on @lane: the
// challenge, the Hello with its MAC over the secret, the server's keys;
// AckPushes for bytescheduler. Returns once the server has proven it holds
// the secret (its Ready's tag).
std::unique_ptr<Conn> connect_ps(const Options& o, const Plan& plan, const std::string& secret, const Endpoint& ep,
                                 uint32_t server, uint32_t lane, uint64_t run, uint64_t instance);

}  // namespace mercury::replay
