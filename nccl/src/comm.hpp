// SPDX-License-Identifier: GPL-2.0
// The plugin's transport: NCCL's listen / connect / accept and isend /
// irecv / test over TCP, from host memory. Every call returns at once; the
// sockets are non-blocking and the work moves on whenever NCCL calls in
// (its proxy thread tests its requests in a loop), on the calling thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "devices.hpp"
#include "nccl_net.h"
#include "wire.hpp"

namespace mercury::nccl {

using Clock = std::chrono::steady_clock;

class Comm;

// A failure NCCL is told about: its code, and the reason for its log.
struct Failure {
    ncclResult_t code = ncclSuccess;
    std::string reason;
    explicit operator bool() const { return code != ncclSuccess; }
};

// One isend or irecv (with up to kMaxGroup receives).
struct Request {
    Comm* comm = nullptr;
    bool used = false;
    bool send = false;
    int n = 0;
    std::array<char*, kMaxGroup> data{};
    std::array<uint64_t, kMaxGroup> capacity{};   // sends: the size
    std::array<int, kMaxGroup> tag{};
    std::array<uint64_t, kMaxGroup> received{};
    std::array<bool, kMaxGroup> matched{};
    int matched_count = 0;
    uint32_t chunks_left = 0;   // chunks still to move on data sockets
    bool control_done = false;  // header (and inline data) moved
};

// A part of a message on one socket: bytes to write or to read into.
struct Piece {
    char* data = nullptr;
    uint64_t size = 0;
    uint64_t done = 0;
    Request* owner = nullptr;
};

// What both ends of a connection share: its sockets, their queues, the
// way a message is cut, and the failure that ends it.
class Comm {
public:
    Comm(std::vector<UniqueFd> sockets, uint32_t min_chunk, uint8_t lane, uint32_t timeout_ms, std::string peer);
    virtual ~Comm();
    Comm(const Comm&) = delete;
    Comm& operator=(const Comm&) = delete;

    // Moves whatever can move now; the comm's failure, if any.
    virtual Failure progress() = 0;
    // True once @r is complete (sizes filled for a receive).
    virtual bool complete(const Request& r) const = 0;

    Request* take_request();
    // NCCL has seen @r complete: its slot is free again.
    virtual void retire(Request* r) { *r = Request{}; }
    const Failure& failure() const { return failure_; }
    uint32_t data_sockets() const { return static_cast<uint32_t>(sockets_.size() - 1); }
    const std::string& peer() const { return peer_; }

protected:
    int control() const { return sockets_[0].get(); }
    int data_socket(uint32_t i) const { return sockets_[1 + i].get(); }
    // Deals @size bytes at @data to the data sockets' queues (both ends
    // deal alike); returns the number of chunks.
    uint32_t deal(char* data, uint64_t size, Request* owner);
    // Moves the data sockets' queues (@write: send, else receive).
    void move_data(bool write);
    // Moves one piece on @fd; false when the socket would block (or failed).
    bool move(int fd, Piece& p, bool write);
    void fail(ncclResult_t code, std::string reason);
    void progressed() { last_progress_ = Clock::now(); }
    // A message being received that moved nothing for the timeout fails:
    // its sender had committed it, so a silence that long is a stopped or
    // vanished sender.
    void check_stall(bool work_pending);

    std::vector<UniqueFd> sockets_;   // [0] control, then data
    std::vector<std::deque<Piece>> queues_;   // per data socket
    uint32_t min_chunk_;
    uint32_t next_socket_ = 0;
    uint8_t lane_;
    uint32_t timeout_ms_;
    std::string peer_;
    Failure failure_;
    Clock::time_point last_progress_ = Clock::now();
    std::array<Request, NCCL_NET_MAX_REQUESTS> requests_{};
};

class SendComm final : public Comm {
public:
    using Comm::Comm;
    Failure isend(void* data, uint64_t size, int tag, Request** out);
    Failure progress() override;
    bool complete(const Request& r) const override { return r.control_done && !r.chunks_left; }

private:
    struct Outgoing {
        Header header{};
        uint64_t header_done = 0;
        Piece inline_data;   // no data sockets: the bytes follow the header
    };
    std::deque<Outgoing> control_queue_;
};

class RecvComm final : public Comm {
public:
    using Comm::Comm;
    Failure irecv(int n, void** data, const size_t* sizes, const int* tags, Request** out);
    Failure progress() override;
    bool complete(const Request& r) const override
    {
        return r.matched_count == r.n && r.control_done && !r.chunks_left;
    }
    void retire(Request* r) override;

private:
    // Reads and places the next header; false if it would block.
    bool read_header();
    std::deque<Request*> posted_;   // in the order NCCL posted them
    Header header_{};
    uint64_t header_done_ = 0;
    Piece inline_data_;             // no data sockets: a message's bytes after its header
    bool reading_inline_ = false;
};

// listen(): a socket on the device's address; accept() groups the sockets
// of each connection by the id in their Hello.
class ListenComm {
public:
    ListenComm(const Device& dev, const Settings& settings, Handle* handle, Failure* failure);
    // A complete connection's RecvComm, or nullptr for now (and *failure).
    std::unique_ptr<RecvComm> accept(Failure* failure);

private:
    struct Arriving {
        UniqueFd fd;
        Hello hello{};
        size_t got = 0;
        Clock::time_point since;
        std::string peer;
    };
    struct Group {
        std::vector<UniqueFd> sockets;   // by index, control first
        uint8_t lane = 0;
        uint32_t min_chunk = 0;
        uint32_t present = 0;
        Clock::time_point since;
        std::string peer;
    };
    UniqueFd fd_;
    Settings settings_;
    uint64_t secret_ = 0;
    std::vector<Arriving> arriving_;
    std::map<uint64_t, Group> groups_;
};

// connect(): opens the control and data sockets, each with its Hello; done
// once every socket is connected and has sent it.
class Connector {
public:
    Connector(const Handle& handle, const Settings& settings, uint8_t lane, Failure* failure);
    // The SendComm once every socket is up, else nullptr (and *failure).
    std::unique_ptr<SendComm> step(Failure* failure);

private:
    struct Opening {
        UniqueFd fd;
        Hello hello{};
        bool connected = false;
        size_t sent = 0;
    };
    std::vector<Opening> sockets_;
    Settings settings_;
    uint8_t lane_;
    std::string peer_;
    Clock::time_point since_ = Clock::now();
};

// A secret or connection id: random, from the kernel.
uint64_t random_u64();
// "10.0.0.1:5000" for a socket's peer.
std::string peer_name(int fd);
// Non-blocking TCP socket options every socket of the plugin gets: no
// Nagle, and a silent peer detected within @timeout_ms.
bool configure_socket(int fd, uint32_t timeout_ms);

}  // namespace mercury::nccl
