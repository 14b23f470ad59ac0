// SPDX-License-Identifier: GPL-2.0
// mercury-nltest: bad input against the real tcp_mercury generic netlink
// family. Every case checks the error the kernel returns, its extack reason
// where it gives one, and that the table did not change. Prints one
// "PASS nl/<case>" or "FAIL nl/<case>: why" line per case; exits 1 on any
// failure. Run as root in a netns with the module loaded.
#include <sched.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "datapath/genl_client.hpp"
#include "mercury/uapi.h"
#include "common/unique_fd.hpp"

namespace {

using mercury::GenlClient;
using mercury::Status;

// Builds raw attribute payloads, including ones libnl would refuse to build.
class Attrs {
public:
    Attrs& raw(uint16_t type, const void* data, uint16_t len, int extra_len = 0)
    {
        const uint16_t nla_len = static_cast<uint16_t>(4 + len + extra_len);
        put16(nla_len);
        put16(type);
        const auto* p = static_cast<const uint8_t*>(data);
        bytes_.insert(bytes_.end(), p, p + len);
        while (bytes_.size() % 4)
            bytes_.push_back(0);
        return *this;
    }
    template <typename T>
    Attrs& val(uint16_t type, T v) { return raw(type, &v, sizeof(v)); }
    Attrs& nest(uint16_t type, const Attrs& inner)
    {
        return raw(type | NLA_F_NESTED_FLAG, inner.bytes_.data(), static_cast<uint16_t>(inner.bytes_.size()));
    }
    const std::vector<uint8_t>& bytes() const { return bytes_; }

    static constexpr uint16_t NLA_F_NESTED_FLAG = 1 << 15;

private:
    void put16(uint16_t v)
    {
        bytes_.push_back(static_cast<uint8_t>(v));
        bytes_.push_back(static_cast<uint8_t>(v >> 8));
    }
    std::vector<uint8_t> bytes_;
};

struct Snapshot {
    uint64_t gen = 0, tags = 0, flows = 0;
    mercury::Params params;
    bool operator==(const Snapshot& o) const
    {
        return gen == o.gen && tags == o.tags && flows == o.flows &&
               mercury::params_as_map(params) == mercury::params_as_map(o.params);
    }
};

class Runner {
public:
    explicit Runner(GenlClient& nl) : nl_(nl) {}

    Snapshot snapshot()
    {
        mercury::Stats s;
        Snapshot snap;
        nl_.get_stats(s);
        nl_.get_params(snap.params);
        snap.gen = s["table_gen"];
        snap.tags = s["tag_entries"];
        snap.flows = s["flow_entries"];
        return snap;
    }

    // @body returns the Status to judge; the table must not change.
    void expect(const std::string& name, int want_error, bool want_message, const std::function<Status()>& body)
    {
        const Snapshot before = snapshot();
        const Status got = body();
        const Snapshot after = snapshot();
        std::string why;
        if (got.error != want_error)
            why = "error " + std::to_string(got.error) + " (" + got.describe() + "), want " + std::to_string(want_error);
        else if (want_message && got.message.empty())
            why = "no extack message";
        else if (!(before == after))
            why = "table or parameters changed";
        report(name, why, got.message);
    }

    void report(const std::string& name, const std::string& why, const std::string& detail = {})
    {
        if (why.empty()) {
            std::printf("PASS nl/%s%s%s\n", name.c_str(), detail.empty() ? "" : "  # ", detail.c_str());
        } else {
            std::printf("FAIL nl/%s: %s\n", name.c_str(), why.c_str());
            failed_ = true;
        }
        std::fflush(stdout);
    }

    Status raw(uint8_t cmd, const Attrs& a, uint8_t version = MERCURY_GENL_VERSION)
    {
        return nl_.send_raw(cmd, a.bytes(), version);
    }

    bool failed() const { return failed_; }
    GenlClient& nl() { return nl_; }

private:
    GenlClient& nl_;
    bool failed_ = false;
};

Attrs tag_set(uint32_t tag, uint8_t rank)
{
    return Attrs().val<uint32_t>(MERCURY_ATTR_TAG, tag).val<uint8_t>(MERCURY_ATTR_RANK, rank);
}

Attrs v4_tuple()
{
    const uint8_t a[4] = {10, 0, 0, 1}, b[4] = {10, 0, 0, 2};
    return Attrs()
        .val<uint8_t>(MERCURY_FLOW_ATTR_FAMILY, AF_INET)
        .raw(MERCURY_FLOW_ATTR_SADDR, a, 4)
        .raw(MERCURY_FLOW_ATTR_DADDR, b, 4)
        .val<uint16_t>(MERCURY_FLOW_ATTR_SPORT, 40000)
        .val<uint16_t>(MERCURY_FLOW_ATTR_DPORT, 5201);
}

// Runs @act in a child process with other credentials (@drop). The child
// exits 0 when @act's error is @want_error, 1 when it is another, >= 90 when
// it could not get that far.
int in_child(const std::function<void()>& drop, const std::function<Status(GenlClient&)>& act, int want_error)
{
    const pid_t pid = fork();
    if (pid == 0) {
        drop();
        std::unique_ptr<GenlClient> nl;
        if (!GenlClient::open(nl))
            _exit(100);
        const Status s = act(*nl);
        if (s.error != want_error)
            std::fprintf(stderr, "child: error %d (%s), want %d\n", s.error, s.describe().c_str(), want_error);
        _exit(s.error == want_error ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}

void drop_to_nobody()
{
    if (setgid(65534) || setuid(65534))
        _exit(98);
}

Status child_result(int rc, const std::string& want)
{
    return rc == 0 ? Status{} : Status{-EIO, "child exit " + std::to_string(rc) + ", want " + want};
}

Status set_tag_4242(GenlClient& nl)
{
    return nl.set_tag(4242, mercury::Priority{1, {}, {}});
}

// A raw generic netlink socket with extended acks on, or -errno.
int open_genl_socket()
{
    const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
    if (fd < 0)
        return -errno;
    const int one = 1;
    setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
    return fd;
}

// Sends nlctrl's @cmd naming our family; false (errno set) if it did not go out.
bool send_ctrl_request(int fd, uint8_t cmd, uint16_t flags)
{
    struct {
        nlmsghdr nlh;
        genlmsghdr genl;
        nlattr name_attr;
        char name[NLA_ALIGN(sizeof(MERCURY_GENL_NAME))];
    } req{};
    req.nlh.nlmsg_len = sizeof(req);
    req.nlh.nlmsg_type = GENL_ID_CTRL;
    req.nlh.nlmsg_flags = NLM_F_REQUEST | flags;
    req.nlh.nlmsg_seq = 1;
    req.genl.cmd = cmd;
    req.genl.version = 2;
    req.name_attr.nla_type = CTRL_ATTR_FAMILY_NAME;
    req.name_attr.nla_len = NLA_HDRLEN + sizeof(MERCURY_GENL_NAME);
    std::memcpy(req.name, MERCURY_GENL_NAME, sizeof(MERCURY_GENL_NAME));
    return send(fd, &req, sizeof(req), 0) == static_cast<ssize_t>(sizeof(req));
}

// CTRL_CMD_GETPOLICY for our family, as a dump with extended acks on: the
// kernel writes out every policy entry, which is where an integer attribute
// checked by a validate function would WARN. Returns the number of policy
// messages, or a negative errno.
long dump_policy()
{
    const int fd = open_genl_socket();
    if (fd < 0)
        return fd;
    if (!send_ctrl_request(fd, CTRL_CMD_GETPOLICY, NLM_F_DUMP)) {
        const int err = errno;
        close(fd);
        return -err;
    }
    long messages = 0;
    std::vector<char> buf(64 << 10);
    for (;;) {
        ssize_t n = recv(fd, buf.data(), buf.size(), 0);
        if (n <= 0) {
            close(fd);
            return n < 0 ? -errno : -EIO;
        }
        for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, static_cast<size_t>(n));
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_DONE) {
                close(fd);
                return messages;
            }
            if (h->nlmsg_type == NLMSG_ERROR) {
                const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
                close(fd);
                return e->error ? e->error : -EIO;
            }
            ++messages;
        }
    }
}

void run_cases(Runner& r)
{
    r.expect("rank-out-of-range", -ERANGE, true, [&] { return r.raw(MERCURY_CMD_TAG_SET, tag_set(11, 8)); });
    {
        // The policy's bounds come back with the error, and the client names them.
        const Status s = r.raw(MERCURY_CMD_TAG_SET, tag_set(11, 8));
        r.report("range-error-names-bounds",
                 s.message.find("allowed 0..7") != std::string::npos ? "" : "message: " + s.message, s.message);
    }
    // Any process may set SO_PRIORITY 0..6 on its sockets: such tags cannot claim a rank.
    r.expect("tag-unprivileged-priority", -ERANGE, true, [&] { return r.raw(MERCURY_CMD_TAG_SET, tag_set(6, 0)); });
    {
        const Status s = r.raw(MERCURY_CMD_TAG_SET, tag_set(0, 0));
        r.report("tag-min-names-bounds",
                 s.message.find("allowed 7..") != std::string::npos ? "" : "message: " + s.message, s.message);
    }
    r.expect("weight-zero", -ERANGE, true,
             [&] { return r.raw(MERCURY_CMD_TAG_SET, tag_set(11, 0).val<uint16_t>(MERCURY_ATTR_WEIGHT, 0)); });
    r.expect("weight-too-large", -ERANGE, true,
             [&] { return r.raw(MERCURY_CMD_TAG_SET, tag_set(11, 0).val<uint16_t>(MERCURY_ATTR_WEIGHT, 2000)); });
    r.expect("ttl-too-short", -ERANGE, true,
             [&] { return r.raw(MERCURY_CMD_TAG_SET, tag_set(11, 0).val<uint32_t>(MERCURY_ATTR_TTL_MS, 5)); });
    r.expect("rank-missing", -EINVAL, false,
             [&] { return r.raw(MERCURY_CMD_TAG_SET, Attrs().val<uint32_t>(MERCURY_ATTR_TAG, 11)); });
    r.expect("tag-missing", -EINVAL, false,
             [&] { return r.raw(MERCURY_CMD_TAG_SET, Attrs().val<uint8_t>(MERCURY_ATTR_RANK, 1)); });
    r.expect("tag-wrong-length", -EINVAL, true, [&] {
        return r.raw(MERCURY_CMD_TAG_SET,
                     Attrs().val<uint16_t>(MERCURY_ATTR_TAG, 11).val<uint8_t>(MERCURY_ATTR_RANK, 1));
    });
    r.expect("unknown-attribute", -EINVAL, true,
             [&] { return r.raw(MERCURY_CMD_TAG_SET, tag_set(11, 1).val<uint32_t>(MERCURY_ATTR_MAX + 7, 1)); });
    r.expect("reply-only-attribute", -EINVAL, true, [&] {
        return r.raw(MERCURY_CMD_TAG_SET, tag_set(11, 1).val<uint32_t>(MERCURY_ATTR_EXPIRES_MS, 100));
    });
    r.expect("truncated-attribute", -EINVAL, false, [&] {
        Attrs a;
        const uint32_t tag = 1;
        a.raw(MERCURY_ATTR_TAG, &tag, 4, 64);  // claims 64 more bytes than sent
        return r.raw(MERCURY_CMD_TAG_SET, a);
    });
    r.expect("flow-cookie-and-tuple", -EINVAL, true, [&] {
        Attrs flow = v4_tuple();
        flow.val<uint64_t>(MERCURY_FLOW_ATTR_COOKIE, 77);
        return r.raw(MERCURY_CMD_FLOW_SET, Attrs().nest(MERCURY_ATTR_FLOW, flow).val<uint8_t>(MERCURY_ATTR_RANK, 1));
    });
    r.expect("flow-partial-tuple", -EINVAL, true, [&] {
        Attrs flow = Attrs().val<uint8_t>(MERCURY_FLOW_ATTR_FAMILY, AF_INET).val<uint16_t>(MERCURY_FLOW_ATTR_SPORT, 1);
        return r.raw(MERCURY_CMD_FLOW_SET, Attrs().nest(MERCURY_ATTR_FLOW, flow).val<uint8_t>(MERCURY_ATTR_RANK, 1));
    });
    r.expect("flow-address-length", -EINVAL, true, [&] {
        const uint8_t a16[16] = {0xfd};
        const uint8_t a4[4] = {10, 0, 0, 2};
        Attrs flow = Attrs()
                         .val<uint8_t>(MERCURY_FLOW_ATTR_FAMILY, AF_INET)
                         .raw(MERCURY_FLOW_ATTR_SADDR, a16, 16)
                         .raw(MERCURY_FLOW_ATTR_DADDR, a4, 4)
                         .val<uint16_t>(MERCURY_FLOW_ATTR_SPORT, 1)
                         .val<uint16_t>(MERCURY_FLOW_ATTR_DPORT, 2);
        return r.raw(MERCURY_CMD_FLOW_SET, Attrs().nest(MERCURY_ATTR_FLOW, flow).val<uint8_t>(MERCURY_ATTR_RANK, 1));
    });
    r.expect("flow-bad-family", -EINVAL, true, [&] {
        Attrs flow = v4_tuple();
        Attrs bad;
        bad.val<uint8_t>(MERCURY_FLOW_ATTR_FAMILY, 5);
        // Same tuple, family 5: build by hand so FAMILY comes once.
        const uint8_t a[4] = {10, 0, 0, 1};
        bad.raw(MERCURY_FLOW_ATTR_SADDR, a, 4).raw(MERCURY_FLOW_ATTR_DADDR, a, 4);
        bad.val<uint16_t>(MERCURY_FLOW_ATTR_SPORT, 1).val<uint16_t>(MERCURY_FLOW_ATTR_DPORT, 2);
        return r.raw(MERCURY_CMD_FLOW_SET, Attrs().nest(MERCURY_ATTR_FLOW, bad).val<uint8_t>(MERCURY_ATTR_RANK, 1));
    });
    r.expect("flow-cookie-zero", -ERANGE, true, [&] {
        Attrs flow = Attrs().val<uint64_t>(MERCURY_FLOW_ATTR_COOKIE, 0);
        return r.raw(MERCURY_CMD_FLOW_SET, Attrs().nest(MERCURY_ATTR_FLOW, flow).val<uint8_t>(MERCURY_ATTR_RANK, 1));
    });
    r.expect("params-floor-zero", -ERANGE, true, [&] {
        return r.raw(MERCURY_CMD_PARAMS_SET,
                     Attrs().nest(MERCURY_ATTR_PARAMS, Attrs().val<uint32_t>(MERCURY_PARAM_CWND_FLOOR, 0)));
    });
    r.expect("params-all-or-nothing", -ERANGE, true, [&] {
        // A valid floor next to an invalid hold: neither may be applied.
        Attrs p = Attrs().val<uint32_t>(MERCURY_PARAM_CWND_FLOOR, 7).val<uint32_t>(MERCURY_PARAM_MAX_HOLD_MS, 1);
        return r.raw(MERCURY_CMD_PARAMS_SET, Attrs().nest(MERCURY_ATTR_PARAMS, p));
    });
    r.expect("delete-absent-tag", -ENOENT, true, [&] { return r.nl().del_tag(0xdead); });
    r.expect("unknown-command", -EOPNOTSUPP, false, [&] { return r.raw(MERCURY_CMD_MAX + 5, Attrs()); });

    // A full table: -ENOSPC for a new key, the table as it was, updates still fine.
    {
        mercury::Params orig, small;
        r.nl().get_params(orig);
        r.nl().flush();
        small.max_entries = 3;
        r.nl().set_params(small);
        for (uint32_t t = 100; t < 103; ++t)
            r.nl().set_tag(t, mercury::Priority{1, {}, {}});
        r.expect("table-full", -ENOSPC, true, [&] { return r.nl().set_tag(103, mercury::Priority{1, {}, {}}); });
        const Status update = r.nl().set_tag(101, mercury::Priority{2, {}, {}});
        r.report("table-full-update-existing", update ? "" : "update of an existing key failed: " + update.describe());
        r.nl().flush();
        mercury::Params restore;
        restore.max_entries = orig.max_entries;
        r.nl().set_params(restore);
    }

    // Privilege: mutations need CAP_NET_ADMIN over the netns; reads do not.
    r.expect("unprivileged-set", 0, false,
             [&] { return child_result(in_child(drop_to_nobody, set_tag_4242, -EPERM), "EPERM"); });
    r.expect("foreign-userns-set", 0, false, [&] {
        // Root of a new user namespace has CAP_NET_ADMIN there, not over our netns.
        const auto new_userns = [] {
            if (unshare(CLONE_NEWUSER))
                _exit(97);
        };
        return child_result(in_child(new_userns, set_tag_4242, -EPERM), "EPERM");
    });
    // A read-only command anyone may send, with a malformed attribute: the
    // error reply echoes the attribute's policy (NETLINK_EXT_ACK is on).
    // The kernel log is checked after this suite (no WARN).
    r.expect("unprivileged-policy-echo", 0, false, [&] {
        const auto stats_with_short_rank = [](GenlClient& nl) {
            const uint16_t two_bytes = 3;
            return nl.send_raw(MERCURY_CMD_STATS_GET, Attrs().val<uint16_t>(MERCURY_ATTR_RANK, two_bytes).bytes(),
                               MERCURY_GENL_VERSION);
        };
        return child_result(in_child(drop_to_nobody, stats_with_short_rank, -EINVAL), "EINVAL");
    });
    r.expect("unprivileged-policy-dump", 0, false, [&] {
        const auto dump = [](GenlClient&) {
            const long n = dump_policy();
            if (n < 0)
                return Status{static_cast<int>(n), "policy dump failed"};
            // One message per attribute of every policy: many more than 5.
            return n > 5 ? Status{} : Status{-EIO, "policy dump gave " + std::to_string(n) + " messages"};
        };
        return child_result(in_child(drop_to_nobody, dump, 0), "a policy dump");
    });
    {
        // ...but over a netns it owns, and that netns has a table of its own.
        const int rc = in_child(
            [] {
                if (unshare(CLONE_NEWUSER | CLONE_NEWNET))
                    _exit(97);
            },
            set_tag_4242, 0);
        const auto snap = r.snapshot();
        r.report("own-userns-netns-set",
                 rc != 0 ? "child exit " + std::to_string(rc) + ", want success" :
                 snap.tags != 0 ? "entry leaked into the parent netns" : "");
    }
}

// Random and mutated messages over a raw generic netlink socket, so headers
// can be truncated and lengths can lie: random commands, versions, flags,
// attribute types, lengths and nesting. Returns how many were sent.
class Fuzzer {
public:
    explicit Fuzzer(uint64_t seed) : rng_(seed) {}

    bool open()
    {
        fd_.reset(open_genl_socket());
        if (!fd_)
            return false;
        const int rcvbuf = 1 << 20;
        setsockopt(fd_.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
        family_ = resolve();
        return family_ > 0;
    }
    void send_random(uint32_t seq)
    {
        std::vector<uint8_t> attrs;
        const int n = pick(7);
        for (int i = 0; i < n; ++i)
            add_attr(attrs, pick(4) == 0 ? 2 : 1);
        struct {
            nlmsghdr nlh;
            genlmsghdr genl;
        } hdr{};
        hdr.nlh.nlmsg_type = pick(20) == 0 ? static_cast<uint16_t>(rng_()) : static_cast<uint16_t>(family_);
        hdr.nlh.nlmsg_flags = NLM_F_REQUEST | (pick(2) ? NLM_F_ACK : 0) | (pick(4) == 0 ? NLM_F_DUMP : 0);
        hdr.nlh.nlmsg_seq = seq;
        hdr.genl.cmd = static_cast<uint8_t>(pick(MERCURY_CMD_MAX + 4));
        hdr.genl.version = pick(8) == 0 ? static_cast<uint8_t>(rng_()) : MERCURY_GENL_VERSION;
        std::vector<uint8_t> msg(sizeof(hdr));
        msg.insert(msg.end(), attrs.begin(), attrs.end());
        hdr.nlh.nlmsg_len = static_cast<uint32_t>(msg.size());
        if (pick(12) == 0)  // a length that lies, in either direction
            hdr.nlh.nlmsg_len = static_cast<uint32_t>(pick(2) ? pick(static_cast<int>(msg.size()) + 1)
                                                               : msg.size() + 1 + pick(4096));
        std::memcpy(msg.data(), &hdr, sizeof(hdr));
        if (pick(12) == 0)  // cut anywhere, headers included
            msg.resize(static_cast<size_t>(pick(static_cast<int>(msg.size()) + 1)));
        sockaddr_nl kernel{};
        kernel.nl_family = AF_NETLINK;
        sendto(fd_.get(), msg.data(), msg.size(), 0, reinterpret_cast<const sockaddr*>(&kernel), sizeof(kernel));
        drain();
    }

    // The kernel answers within sendmsg(): read what it queued.
    void drain()
    {
        char buf[65536];
        while (recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT) > 0) {
        }
    }

private:
    int pick(int n) { return n > 0 ? static_cast<int>(rng_() % static_cast<uint64_t>(n)) : 0; }

    void add_attr(std::vector<uint8_t>& out, int depth)
    {
        static const uint16_t lengths[] = {0, 1, 2, 3, 4, 6, 8, 12, 16, 17, 64};
        uint16_t type = static_cast<uint16_t>(pick(MERCURY_ATTR_MAX + 3));
        std::vector<uint8_t> payload;
        if (depth > 0 && pick(3) == 0) {
            type |= 1 << 15;  // NLA_F_NESTED
            const int n = pick(6);
            for (int i = 0; i < n; ++i)
                add_attr(payload, depth - 1);
        } else {
            payload.resize(pick(5) == 0 ? static_cast<size_t>(pick(300)) : lengths[pick(11)]);
            for (auto& b : payload)
                b = pick(4) == 0 ? 0xff : static_cast<uint8_t>(pick(4) == 0 ? rng_() : pick(3));
        }
        uint16_t len = static_cast<uint16_t>(4 + payload.size());
        if (pick(16) == 0)
            len = static_cast<uint16_t>(pick(2) ? pick(4) : len + 1 + pick(200));
        out.push_back(static_cast<uint8_t>(len));
        out.push_back(static_cast<uint8_t>(len >> 8));
        out.push_back(static_cast<uint8_t>(type));
        out.push_back(static_cast<uint8_t>(type >> 8));
        out.insert(out.end(), payload.begin(), payload.end());
        while (out.size() % 4)
            out.push_back(0);
    }

    int resolve()
    {
        if (!send_ctrl_request(fd_.get(), CTRL_CMD_GETFAMILY, 0))
            return -1;
        char buf[8192];
        const ssize_t n = recv(fd_.get(), buf, sizeof(buf), 0);
        const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
        if (n <= 0 || !NLMSG_OK(h, static_cast<size_t>(n)) || h->nlmsg_type != GENL_ID_CTRL)
            return -1;
        const auto* a = reinterpret_cast<const nlattr*>(static_cast<const char*>(NLMSG_DATA(h)) + GENL_HDRLEN);
        int left = static_cast<int>(h->nlmsg_len) - NLMSG_HDRLEN - GENL_HDRLEN;
        while (left >= static_cast<int>(NLA_HDRLEN) && a->nla_len >= NLA_HDRLEN && a->nla_len <= left) {
            if (a->nla_type == CTRL_ATTR_FAMILY_ID) {
                uint16_t id;
                std::memcpy(&id, reinterpret_cast<const char*>(a) + NLA_HDRLEN, sizeof(id));
                return id;
            }
            left -= NLA_ALIGN(a->nla_len);
            a = reinterpret_cast<const nlattr*>(reinterpret_cast<const char*>(a) + NLA_ALIGN(a->nla_len));
        }
        return -1;
    }

    std::mt19937_64 rng_;
    mercury::UniqueFd fd_;
    int family_ = -1;
};

// nl/random-fuzz: @count messages as root, then @count as uid 65534, who
// must change nothing. Afterwards a dump still answers. (The VM checks the
// kernel log after the suite, and unloads the module at the end.)
int fuzz(Runner& r, uint64_t seed, uint32_t count)
{
    Fuzzer root(seed);
    if (!root.open()) {
        r.report("random-fuzz", "cannot open a generic netlink socket or resolve the family");
        return 1;
    }
    for (uint32_t i = 0; i < count; ++i)
        root.send_random(i + 1);
    const Snapshot before = r.snapshot();
    const pid_t pid = fork();
    if (pid == 0) {
        drop_to_nobody();
        Fuzzer nobody(seed ^ 0x9e3779b97f4a7c15ULL);
        if (!nobody.open())
            _exit(2);
        for (uint32_t i = 0; i < count; ++i)
            nobody.send_random(i + 1);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    const Snapshot after = r.snapshot();
    std::vector<mercury::TagEntry> tags;
    const Status dump = r.nl().dump_tags(tags);
    std::string why;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        why = "unprivileged fuzzer exited with " + std::to_string(status);
    else if (!(before == after))
        why = "unprivileged messages changed the table or parameters";
    else if (!dump)
        why = "a tag dump fails afterwards: " + dump.describe();
    r.report("random-fuzz", why,
             std::to_string(2 * count) + " messages (" + std::to_string(count) + " as root, " + std::to_string(count) +
                 " as uid 65534), seed " + std::to_string(seed) + "; a dump still answers (" +
                 std::to_string(tags.size()) + " tags)");
    return r.failed() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv)
{
    std::unique_ptr<GenlClient> nl;
    if (const Status s = GenlClient::open(nl); !s) {
        std::printf("FAIL nl/open: %s\n", s.describe().c_str());
        return 1;
    }
    Runner runner(*nl);
    if (argc >= 2 && std::string(argv[1]) == "fill") {
        // mercury-nltest fill N: N flow entries under made-up cookies (rank
        // 1, 10 min), for memory accounting checks; prints "filled N".
        const unsigned long n = argc >= 3 ? std::strtoul(argv[2], nullptr, 0) : 0;
        if (!n) {
            std::fprintf(stderr, "usage: mercury-nltest fill N\n");
            return 2;
        }
        constexpr uint64_t kFillCookieBase = 1ULL << 62;   // no real socket's
        for (unsigned long i = 0; i < n; ++i)
            if (const Status s = nl->set_flow(mercury::FlowKey::by_cookie(kFillCookieBase + i), {1, {}, 600000u}); !s) {
                std::printf("FAIL nl/fill: entry %lu: %s\n", i, s.describe().c_str());
                return 1;
            }
        std::printf("filled %lu\n", n);
        return 0;
    }
    if (argc >= 2 && std::string(argv[1]) == "fuzz") {
        // mercury-nltest fuzz [SEED [COUNT]]: SEED 0 or none picks one (printed).
        uint64_t seed = argc >= 3 ? std::strtoull(argv[2], nullptr, 0) : 0;
        if (!seed)
            seed = std::random_device{}() | 1;
        const uint32_t count = argc >= 4 ? static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 0)) : 6000;
        return fuzz(runner, seed, count);
    }
    nl->flush();
    run_cases(runner);
    return runner.failed() ? 1 : 0;
}
