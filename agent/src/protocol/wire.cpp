// SPDX-License-Identifier: GPL-2.0
#include "protocol/wire.hpp"

#include <sys/socket.h>

#include <cstring>
#include <type_traits>

namespace mercury::proto {

namespace {

class Writer {
public:
    template <typename T>
    void put(T v)
    {
        static_assert(std::is_unsigned_v<T>);
        for (size_t i = 0; i < sizeof(T); ++i)
            out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    }
    void str(const std::string& s)
    {
        const size_t n = std::min(s.size(), kMaxName);
        put<uint16_t>(static_cast<uint16_t>(n));
        out_.insert(out_.end(), s.begin(), s.begin() + static_cast<std::ptrdiff_t>(n));
    }
    void blob(const std::string& s)
    {
        put<uint32_t>(static_cast<uint32_t>(s.size()));
        out_.insert(out_.end(), s.begin(), s.end());
    }
    void bytes(const uint8_t* p, size_t n) { out_.insert(out_.end(), p, p + n); }
    std::vector<uint8_t>& out() { return out_; }

private:
    std::vector<uint8_t> out_;
};

// Reads little-endian fields; any overrun sets failed() and yields zeros.
class Reader {
public:
    explicit Reader(std::span<const uint8_t> in) : in_(in) {}

    template <typename T>
    T get()
    {
        if (!need(sizeof(T)))
            return 0;
        T v = 0;
        for (size_t i = 0; i < sizeof(T); ++i)
            v = static_cast<T>(v | static_cast<T>(static_cast<T>(in_[pos_ + i]) << (8 * i)));
        pos_ += sizeof(T);
        return v;
    }
    std::string str()
    {
        const auto n = get<uint16_t>();
        if (n > kMaxName) {
            failed_ = true;
            return {};
        }
        return take(n);
    }
    std::string blob()
    {
        const auto n = get<uint32_t>();
        return take(n);
    }
    void bytes(uint8_t* p, size_t n)
    {
        // n == 0: p may be an empty vector's null data(); memcpy must not see it.
        if (n && need(n)) {
            std::memcpy(p, in_.data() + pos_, n);
            pos_ += n;
        }
    }
    // A count of items each at least @min_item bytes: rejects counts the
    // remaining input cannot hold, before anything is allocated.
    uint32_t count(size_t min_item, uint32_t limit)
    {
        const auto n = get<uint32_t>();
        if (n > limit || n * min_item > in_.size() - pos_)
            failed_ = true;
        return failed_ ? 0 : n;
    }
    void fail() { failed_ = true; }
    bool ok_and_done() const { return !failed_ && pos_ == in_.size(); }

private:
    bool need(size_t n)
    {
        if (failed_ || in_.size() - pos_ < n) {
            failed_ = true;
            return false;
        }
        return true;
    }
    std::string take(size_t n)
    {
        if (!need(n))
            return {};
        std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
        pos_ += n;
        return s;
    }

    std::span<const uint8_t> in_;
    size_t pos_ = 0;
    bool failed_ = false;
};

void put_endpoint(Writer& w, const Endpoint& ep)
{
    w.bytes(ep.addr.data(), ep.addr_len());
    w.put<uint16_t>(ep.port);
}

Endpoint get_endpoint(Reader& r, int family)
{
    Endpoint ep;
    ep.family = family;
    r.bytes(ep.addr.data(), ep.addr_len());
    ep.port = r.get<uint16_t>();
    return ep;
}

struct BodyWriter {
    Writer& w;

    void operator()(const Hello& m)
    {
        w.str(m.job);
        w.put(m.worker_rank);
        w.put(m.pid);
    }
    void operator()(const HelloAck& m) { w.put(m.session); }
    void operator()(const Model& m)
    {
        w.put<uint32_t>(static_cast<uint32_t>(m.layers.size()));
        for (const auto& l : m.layers) {
            w.str(l.name);
            w.put(l.param_bytes);
        }
    }
    void operator()(const Timings& m)
    {
        w.put(m.iteration);
        w.put<uint32_t>(static_cast<uint32_t>(m.forward_us.size()));
        for (size_t i = 0; i < m.forward_us.size(); ++i) {
            w.put(m.forward_us[i]);
            w.put(i < m.backward_us.size() ? m.backward_us[i] : 0u);
        }
    }
    void operator()(const Register& m)
    {
        w.put(m.layer);
        w.put(static_cast<uint8_t>(m.kind));
        if (m.kind == ConnKind::kCookie) {
            w.put<uint64_t>(m.flow.cookie.value_or(0));
        } else if (m.kind == ConnKind::kTuple) {
            w.put(static_cast<uint8_t>(m.flow.local.family));
            put_endpoint(w, m.flow.local);
            put_endpoint(w, m.flow.remote);
        }
    }
    void operator()(const Iteration& m) { w.put(m.iteration); }
    void operator()(const StatusRequest& m) { w.put(static_cast<uint8_t>(m.format)); }
    void operator()(const StatusReply& m) { w.blob(m.document); }
    void operator()(const Error& m)
    {
        w.put(m.code);
        w.str(m.message);
    }
    void operator()(const RegisterLane& m)
    {
        w.put(m.lane);
        w.put(m.lanes);
    }
    void operator()(const SubscribeRanks&) {}
    void operator()(const Ranks& m)
    {
        w.put(m.generation);
        w.put<uint8_t>(m.datapath ? 1 : 0);
        w.put<uint32_t>(static_cast<uint32_t>(m.ranks.size()));
        w.bytes(m.ranks.data(), m.ranks.size());
    }
    void operator()(const JobWeight& m)
    {
        w.str(m.job);
        w.put(m.weight);
    }
};

Message decode_body(Type type, Reader& r)
{
    switch (type) {
    case Type::Hello: {
        Hello m;
        m.job = r.str();
        m.worker_rank = r.get<uint32_t>();
        m.pid = r.get<uint32_t>();
        return m;
    }
    case Type::HelloAck:
        return HelloAck{r.get<uint32_t>()};
    case Type::Model: {
        Model m;
        const auto n = r.count(2 + 8, kMaxLayers);
        m.layers.reserve(n);
        for (uint32_t i = 0; i < n; ++i) {
            Layer l;
            l.name = r.str();
            l.param_bytes = r.get<uint64_t>();
            m.layers.push_back(std::move(l));
        }
        return m;
    }
    case Type::Timings: {
        Timings m;
        m.iteration = r.get<uint64_t>();
        const auto n = r.count(8, kMaxLayers);
        m.forward_us.reserve(n);
        m.backward_us.reserve(n);
        for (uint32_t i = 0; i < n; ++i) {
            m.forward_us.push_back(r.get<uint32_t>());
            m.backward_us.push_back(r.get<uint32_t>());
        }
        return m;
    }
    case Type::Register: {
        Register m;
        m.layer = r.get<uint32_t>();
        m.kind = static_cast<ConnKind>(r.get<uint8_t>());
        if (m.kind == ConnKind::kCookie) {
            m.flow = FlowKey::by_cookie(r.get<uint64_t>());
        } else if (m.kind == ConnKind::kTuple) {
            const int family = r.get<uint8_t>();
            if (family != AF_INET && family != AF_INET6) {
                r.fail();
                return m;
            }
            const Endpoint local = get_endpoint(r, family);
            const Endpoint remote = get_endpoint(r, family);
            m.flow = *FlowKey::by_tuple(local, remote);
        } else if (m.kind != ConnKind::kPassedFd) {
            r.fail();
        }
        return m;
    }
    case Type::Iteration:
        return Iteration{r.get<uint64_t>()};
    case Type::StatusRequest: {
        const auto format = r.get<uint8_t>();
        if (format > static_cast<uint8_t>(StatusFormat::kText))
            r.fail();
        return StatusRequest{static_cast<StatusFormat>(format)};
    }
    case Type::StatusReply:
        return StatusReply{r.blob()};
    case Type::Error: {
        Error m;
        m.code = r.get<uint32_t>();
        m.message = r.str();
        return m;
    }
    case Type::RegisterLane: {
        RegisterLane m;
        m.lane = r.get<uint8_t>();
        m.lanes = r.get<uint8_t>();
        if (m.lanes == 0 || m.lanes > kMaxLanes || m.lane >= m.lanes)
            r.fail();
        return m;
    }
    case Type::SubscribeRanks:
        return SubscribeRanks{};
    case Type::Ranks: {
        Ranks m;
        m.generation = r.get<uint32_t>();
        const auto datapath = r.get<uint8_t>();
        if (datapath > 1)
            r.fail();
        m.datapath = datapath == 1;
        const auto n = r.count(1, kMaxLayers);
        m.ranks.resize(n);
        r.bytes(m.ranks.data(), n);
        for (const uint8_t rank : m.ranks)
            if (rank >= MERCURY_NUM_RANKS)
                r.fail();
        return m;
    }
    case Type::JobWeight: {
        JobWeight m;
        m.job = r.str();
        m.weight = r.get<uint16_t>();
        if (m.job.empty() || m.weight == 0 || m.weight > kMaxJobWeight)
            r.fail();
        return m;
    }
    }
    r.fail();
    return Error{};
}

}  // namespace

std::vector<uint8_t> encode(const Message& msg)
{
    Writer w;
    w.put<uint32_t>(0);  // body length, patched below
    w.put<uint8_t>(kVersion);
    w.put<uint8_t>(static_cast<uint8_t>(msg.index() + 1));
    w.put<uint16_t>(0);
    std::visit(BodyWriter{w}, msg);
    auto& out = w.out();
    const auto body = static_cast<uint32_t>(out.size() - kHeaderSize);
    for (size_t i = 0; i < 4; ++i)
        out[i] = static_cast<uint8_t>(body >> (8 * i));
    return std::move(out);
}

Decoded decode(std::span<const uint8_t> input)
{
    Decoded d;
    if (input.size() < kHeaderSize)
        return d;
    Reader header(input.first(kHeaderSize));
    const auto body_len = header.get<uint32_t>();
    const auto version = header.get<uint8_t>();
    const auto type = header.get<uint8_t>();
    // Reject what can never become valid before waiting for more bytes.
    if (version != kVersion) {
        d.status = DecodeStatus::kBadVersion;
        return d;
    }
    if (type < static_cast<uint8_t>(Type::Hello) || type > static_cast<uint8_t>(Type::JobWeight)) {
        d.status = DecodeStatus::kUnknownType;
        return d;
    }
    if (body_len > kMaxBody) {
        d.status = DecodeStatus::kOversized;
        return d;
    }
    if (input.size() - kHeaderSize < body_len)
        return d;

    Reader body(input.subspan(kHeaderSize, body_len));
    d.message = decode_body(static_cast<Type>(type), body);
    if (!body.ok_and_done()) {
        d.status = DecodeStatus::kMalformed;
        return d;
    }
    d.status = DecodeStatus::kOk;
    d.consumed = kHeaderSize + body_len;
    return d;
}

const char* describe(DecodeStatus status)
{
    switch (status) {
    case DecodeStatus::kOk: return "ok";
    case DecodeStatus::kNeedMore: return "incomplete frame";
    case DecodeStatus::kBadVersion: return "unsupported protocol version";
    case DecodeStatus::kUnknownType: return "unknown message type";
    case DecodeStatus::kOversized: return "frame larger than 1 MiB";
    case DecodeStatus::kMalformed: return "malformed message body";
    }
    return "?";
}

}  // namespace mercury::proto
