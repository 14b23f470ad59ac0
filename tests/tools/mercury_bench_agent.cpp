// SPDX-License-Identifier: GPL-2.0
// mercury-bench-agent: how fast mercuryd turns timing reports into kernel
// entries. Plays a trainer with N layers (one real TCP connection each,
// registered through libmercury), alternates two timing profiles whose ranks
// differ for most layers, and measures from report_timings() until the
// kernel's table holds every new rank. Also: raw netlink set rate, and the
// agent's CPU time per iteration (from /proc/PID/stat).
//
//   mercury-bench-agent --layers N --connect ADDR:PORT --agent-pid PID [--iterations K]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "datapath/genl_client.hpp"
#include "learner/priorities.hpp"
#include <mercury/client.hpp>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what)
{
    std::fprintf(stderr, "mercury-bench-agent: %s\n", what.c_str());
    std::exit(1);
}

double cpu_seconds(int pid)
{
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));
    std::string skip;
    unsigned long utime = 0, stime = 0;
    for (int i = 3; i < 14; ++i)
        fields >> skip;
    fields >> utime >> stime;
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::map<uint64_t, uint8_t> kernel_ranks(mercury::GenlClient& nl)
{
    std::vector<mercury::FlowEntry> flows;
    nl.dump_flows(flows);
    std::map<uint64_t, uint8_t> out;
    for (const auto& f : flows)
        if (f.key.cookie)
            out[*f.key.cookie] = f.rank;
    return out;
}

double percentile(std::vector<double> v, double p)
{
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv)
{
    size_t layers = 160, iterations = 40;
    std::string connect;
    int agent_pid = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--layers") layers = std::stoul(v);
        else if (a == "--connect") connect = v;
        else if (a == "--agent-pid") agent_pid = std::stoi(v);
        else if (a == "--iterations") iterations = std::stoul(v);
        else die("unknown option " + a);
    }
    const auto server = mercury::Endpoint::parse(connect);
    if (!server || !agent_pid)
        die("usage: --layers N --connect IPv4:PORT --agent-pid PID [--iterations K]");

    std::unique_ptr<mercury::GenlClient> nl;
    if (!mercury::GenlClient::open(nl))
        die("tcp_mercury not loaded");
    mercury::Client client("bench", 0);
    std::vector<std::string> names;
    std::vector<uint64_t> sizes(layers, 1 << 20);
    for (size_t i = 0; i < layers; ++i)
        names.push_back("l" + std::to_string(i));
    client.declare_model(names, sizes);

    std::vector<int> fds;
    std::vector<uint64_t> cookies;
    for (size_t i = 0; i < layers; ++i) {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in sin{};
        sin.sin_family = AF_INET;
        sin.sin_port = htons(server->port);
        std::memcpy(&sin.sin_addr, server->addr.data(), 4);
        if (::connect(fd, reinterpret_cast<const sockaddr*>(&sin), sizeof(sin)) != 0)
            die("connect");
        uint64_t cookie = 0;
        socklen_t len = sizeof(cookie);
        getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len);
        client.register_socket(static_cast<uint32_t>(i), fd);
        fds.push_back(fd);
        cookies.push_back(cookie);
    }

    // Profile A: time grows with the layer index; B: it shrinks. Deadlines,
    // and so ranks, differ for most layers between the two.
    std::vector<uint32_t> fwd_a(layers), fwd_b(layers), bwd(layers, 500);
    for (size_t i = 0; i < layers; ++i) {
        fwd_a[i] = static_cast<uint32_t>(100 + 20 * i);
        fwd_b[i] = static_cast<uint32_t>(100 + 20 * (layers - 1 - i));
    }
    auto expected = [&](const std::vector<uint32_t>& fwd) {
        mercury::LayerTimings t(layers);
        for (size_t k = 0; k < mercury::RobustEstimate::kWindow; ++k)
            t.add(fwd, bwd);
        return mercury::compute_priorities(t, layers);
    };
    const auto want_a = expected(fwd_a), want_b = expected(fwd_b);

    // Warm up on A until the kernel holds every layer.
    uint64_t iteration = 0;
    for (size_t k = 0; k < mercury::RobustEstimate::kWindow; ++k)
        client.report_timings(++iteration, fwd_a, bwd);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (kernel_ranks(*nl).size() < layers && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));

    // Each switch needs kWindow/2+1 reports before the medians move; time the
    // report that tips them, until the kernel shows every new rank.
    std::vector<double> latency_ms;
    const double cpu0 = cpu_seconds(agent_pid);
    const size_t reports0 = iteration;
    bool on_a = true;
    for (size_t s = 0; s < iterations; ++s) {
        on_a = !on_a;
        const auto& fwd = on_a ? fwd_a : fwd_b;
        const auto& want = on_a ? want_a : want_b;
        for (size_t k = 0; k < mercury::RobustEstimate::kWindow / 2; ++k)
            client.report_timings(++iteration, fwd, bwd);
        const auto t0 = Clock::now();
        client.report_timings(++iteration, fwd, bwd);
        bool done = false;
        while (!done && Clock::now() - t0 < std::chrono::seconds(5)) {
            const auto ranks = kernel_ranks(*nl);
            done = true;
            for (size_t i = 0; i < layers && done; ++i) {
                const auto it = ranks.find(cookies[i]);
                done = it != ranks.end() && it->second == want[i].rank;
            }
        }
        if (done)
            latency_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        // Settle the rest of the window on this profile.
        for (size_t k = 0; k < mercury::RobustEstimate::kWindow / 2; ++k)
            client.report_timings(++iteration, fwd, bwd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const double cpu_per_report_ms = (cpu_seconds(agent_pid) - cpu0) * 1000 / static_cast<double>(iteration - reports0);

    // Raw kernel rate: set every layer's entry, back to back.
    const size_t rounds = 10;
    const auto r0 = Clock::now();
    for (size_t r = 0; r < rounds; ++r)
        for (size_t i = 0; i < layers; ++i)
            nl->set_flow(mercury::FlowKey::by_cookie(cookies[i]), {static_cast<uint8_t>(r % 8), {}, 60000u});
    const double secs = std::chrono::duration<double>(Clock::now() - r0).count();

    std::printf("BENCH agent layers=%zu rank_switches=%zu/%zu latency_p50_ms=%.2f latency_p99_ms=%.2f "
                "agent_cpu_ms_per_iteration=%.3f netlink_sets_per_s=%.0f\n",
                layers, latency_ms.size(), iterations, percentile(latency_ms, 0.5), percentile(latency_ms, 0.99),
                cpu_per_report_ms, static_cast<double>(rounds * layers) / secs);
    for (int fd : fds)
        ::close(fd);
    return latency_ms.size() == iterations ? 0 : 1;
}
