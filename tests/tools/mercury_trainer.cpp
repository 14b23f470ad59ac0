// SPDX-License-Identifier: GPL-2.0
// mercury-trainer: a trainer as mercuryd sees one, for integration tests.
//
//   mercury-trainer run --job J --connect ADDR:PORT --forward-us 1000,1000,...
//                       [--cc NAME] [--send-layers 0,3] [--seconds S] [--period-ms MS]
//   mercury-trainer garbage [--socket PATH]
//
// run: declares a model with one layer per --forward-us value, opens one TCP
// connection per layer and registers it with libmercury (the socket is passed
// to the agent), reports timings every period, sends as fast as it can on
// the --send-layers connections, and prints "layer i acked=N" lines at the
// end. garbage: writes junk at the agent and reports whether it was cut off.
#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "flow_key.hpp"
#include <mercury/client.hpp>
#include "protocol/wire.hpp"

namespace {

[[noreturn]] void die(const std::string& what)
{
    std::fprintf(stderr, "mercury-trainer: %s\n", what.c_str());
    std::exit(1);
}

std::vector<uint32_t> numbers(const std::string& csv)
{
    std::vector<uint32_t> out;
    std::stringstream ss(csv);
    for (std::string item; std::getline(ss, item, ',');)
        out.push_back(static_cast<uint32_t>(std::stoul(item)));
    return out;
}

int connect_tcp(const mercury::Endpoint& ep, const std::string& cc)
{
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    if (!cc.empty())
        if (const std::string why = mercury::set_congestion_control(fd, cc); !why.empty())
            die(why);
    const linger abort_on_close{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close));
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(ep.port);
    std::memcpy(&sin.sin_addr, ep.addr.data(), 4);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&sin), sizeof(sin)) < 0)
        die("connect " + ep.to_string() + ": " + std::strerror(errno));
    return fd;
}

uint64_t acked(int fd)
{
    tcp_info info{};
    socklen_t len = sizeof(info);
    getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len);
    return info.tcpi_bytes_acked;
}

int run(int argc, char** argv)
{
    std::string job = "job", connect, cc, socket_path;
    std::vector<uint32_t> forward, send_layers;
    double seconds = 3;
    uint32_t period_ms = 100;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--job") job = v;
        else if (a == "--connect") connect = v;
        else if (a == "--cc") cc = v;
        else if (a == "--socket") socket_path = v;
        else if (a == "--forward-us") forward = numbers(v);
        else if (a == "--send-layers") send_layers = numbers(v);
        else if (a == "--seconds") seconds = std::stod(v);
        else if (a == "--period-ms") period_ms = static_cast<uint32_t>(std::stoul(v));
        else die("unknown option " + a);
    }
    const auto server = mercury::Endpoint::parse(connect);
    if (!server || server->family != AF_INET || forward.empty())
        die("run needs --connect IPv4:PORT and --forward-us");

    mercury::Client client(job, 0, socket_path.empty() ? nullptr : socket_path.c_str());
    if (!client.valid())
        die("mercury_open failed");
    std::vector<std::string> names;
    std::vector<uint64_t> sizes;
    for (size_t i = 0; i < forward.size(); ++i) {
        names.push_back("layer" + std::to_string(i));
        sizes.push_back(1 << 20);
    }
    int rc = client.declare_model(names, sizes);
    std::printf("declare_model rc=%d connected=%d\n", rc, client.connected() ? 1 : 0);

    std::vector<int> conns;
    for (size_t i = 0; i < forward.size(); ++i) {
        conns.push_back(connect_tcp(*server, cc));
        rc = client.register_socket(static_cast<uint32_t>(i), conns.back());
        std::printf("register layer=%zu rc=%d\n", i, rc);
    }
    std::fflush(stdout);

    const std::vector<uint32_t> backward(forward.size(), 100);
    std::vector<char> buf(1 << 16, 't');
    const auto start = std::chrono::steady_clock::now();
    auto next_report = start;
    uint64_t iteration = 0;
    while (std::chrono::steady_clock::now() - start < std::chrono::duration<double>(seconds)) {
        if (std::chrono::steady_clock::now() >= next_report) {
            client.begin_iteration(++iteration);
            client.report_timings(iteration, forward, backward);
            next_report += std::chrono::milliseconds(period_ms);
        }
        std::vector<pollfd> fds;
        for (uint32_t layer : send_layers)
            fds.push_back({conns.at(layer), POLLOUT, 0});
        if (fds.empty()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            continue;
        }
        ::poll(fds.data(), fds.size(), 10);
        for (const auto& p : fds)
            if (p.revents & POLLOUT)
                ::send(p.fd, buf.data(), buf.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    for (size_t i = 0; i < conns.size(); ++i)
        std::printf("layer %zu acked=%llu\n", i, static_cast<unsigned long long>(acked(conns[i])));
    std::printf("iterations=%llu connected=%d\n", static_cast<unsigned long long>(iteration),
                client.connected() ? 1 : 0);
    for (int fd : conns)
        ::close(fd);
    return 0;
}

// Junk at the agent: it must cut us off (EOF) without hurting anyone else.
int garbage(int argc, char** argv)
{
    std::string path = mercury::proto::kDefaultSocketPath;
    if (argc >= 4 && std::string(argv[2]) == "--socket")
        path = argv[3];
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0)
        die("connect " + path);
    const char junk[] = "GET / HTTP/1.1\r\nHost: mercury\r\n\r\n\xff\xfe\x01\x02";
    ::send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
    const timeval timeout{3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    char reply[512];
    ssize_t n, total = 0;
    while ((n = ::recv(fd, reply, sizeof(reply), 0)) > 0)
        total += n;
    std::printf("garbage: %s (%zd reply bytes)\n", n == 0 ? "disconnected" : "still connected", total);
    ::close(fd);
    return n == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv)
{
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "run")
        return run(argc, argv);
    if (mode == "garbage")
        return garbage(argc, argv);
    die("usage: mercury-trainer run ... | garbage [--socket PATH]");
}
