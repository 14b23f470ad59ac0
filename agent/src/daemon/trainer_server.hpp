// SPDX-License-Identifier: GPL-2.0
// The trainers' Unix socket: accepts connections, checks who is calling
// (SO_PEERCRED), reads frames (and sockets passed with SCM_RIGHTS), and hands
// messages to the JobRegistry. A client that sends garbage is told why and
// disconnected; nobody else notices.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/jobs.hpp"
#include "common/log.hpp"
#include "common/unique_fd.hpp"

namespace mercury {

struct SocketOptions {
    std::string path = proto::kDefaultSocketPath;
    unsigned mode = 0660;
    std::string group;  // empty: keep the daemon's group
    unsigned max_clients = 256;
    unsigned frame_timeout_ms = 10000;  // a frame begun must be complete within this
};

class Session;

class TrainerServer {
public:
    TrainerServer(boost::asio::io_context& io, const Logger& log, JobRegistry& jobs);
    // Throws std::runtime_error with a clear reason if the socket cannot be set up.
    void listen(const SocketOptions& options);
    // Serves on @fd, a listening socket systemd set up (mercuryd.socket owns
    // its path, mode and group); the limits of @options apply.
    void adopt(int fd, const SocketOptions& options);
    void stop();

private:
    friend class Session;
    // Applies the limits of @options, then accepts trainers.
    void serve(const SocketOptions& options);
    void accept();
    void closed(uint32_t id);

    boost::asio::io_context& io_;
    const Logger& log_;
    JobRegistry& jobs_;
    boost::asio::local::stream_protocol::acceptor acceptor_;
    boost::asio::steady_timer accept_retry_;  // backs off when accept() fails (EMFILE)
    std::chrono::steady_clock::time_point last_accept_warning_{};
    std::string path_;
    unsigned max_clients_ = 256;
    std::chrono::milliseconds frame_timeout_{10000};
    std::map<uint32_t, std::shared_ptr<Session>> sessions_;
    uint32_t next_id_ = 1;
};

// One connected trainer (or mercuryctl).
class Session : public std::enable_shared_from_this<Session> {
public:
    Session(TrainerServer& server, boost::asio::local::stream_protocol::socket socket, uint32_t id);
    ~Session();
    void start();
    void close();
    // Queues @msg; frames go out one async_write at a time, in order.
    void send(const proto::Message& msg);

private:
    void wait_readable();
    void on_readable();
    // Handles the complete frames received, a few at a time (others get
    // their turn) and only while the client reads its replies.
    void process_input();
    void arm_frame_timer(bool progressed);
    bool handle(const proto::Message& msg);
    bool fail(int error, const std::string& why);
    void write_next();
    // The TCP socket passed with this frame, as a flow key (its cookie).
    bool take_passed_socket(FlowKey& key);

    TrainerServer& server_;
    boost::asio::local::stream_protocol::socket socket_;
    uint32_t id_;
    pid_t peer_pid_ = 0;
    uid_t peer_uid_ = 0;
    bool hello_ = false;
    bool closed_ = false;
    bool closing_ = false;                    // close once the queue is written
    std::deque<std::vector<uint8_t>> out_;    // frames not yet written
    size_t out_bytes_ = 0;
    std::vector<uint8_t> buffer_;
    std::deque<UniqueFd> fds_;  // passed sockets not yet claimed by a Register
    bool input_paused_ = false;              // until the write queue drains
    boost::asio::steady_timer frame_timer_;  // a partial frame's deadline
    bool frame_timer_armed_ = false;
};

}  // namespace mercury
