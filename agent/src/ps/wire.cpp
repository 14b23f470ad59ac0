// SPDX-License-Identifier: GPL-2.0
#include "ps/wire.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace mercury::ps {

namespace {

struct MacCtxFree {
    void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
};
using MacCtx = std::unique_ptr<EVP_MAC_CTX, MacCtxFree>;

// An HMAC-SHA256 context keyed with @key (OpenSSL 3's EVP_MAC).
MacCtx keyed_hmac(std::span<const uint8_t> key)
{
    struct MacFree {
        void operator()(EVP_MAC* m) const { EVP_MAC_free(m); }
    };
    static const std::unique_ptr<EVP_MAC, MacFree> mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr));
    MacCtx ctx(mac ? EVP_MAC_CTX_new(mac.get()) : nullptr);
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0), OSSL_PARAM_construct_end()};
    if (!ctx || EVP_MAC_init(ctx.get(), key.data(), key.size(), params) != 1)
        throw std::runtime_error("HMAC-SHA256 failed");
    return ctx;
}

// @ctx's MAC over @parts, in order; @ctx is used up.
std::array<uint8_t, kMacBytes> mac_of(EVP_MAC_CTX* ctx, std::initializer_list<std::span<const uint8_t>> parts)
{
    std::array<uint8_t, kMacBytes> out{};
    size_t len = 0;
    bool ok = ctx != nullptr;
    for (const auto& part : parts)
        ok = ok && EVP_MAC_update(ctx, part.data(), part.size()) == 1;
    if (!ok || EVP_MAC_final(ctx, out.data(), &len, out.size()) != 1 || len != out.size())
        throw std::runtime_error("HMAC-SHA256 failed");
    return out;
}

std::array<uint8_t, kMacBytes> hmac_sha256(std::span<const uint8_t> key,
                                           std::initializer_list<std::span<const uint8_t>> parts)
{
    return mac_of(keyed_hmac(key).get(), parts);
}

std::span<const uint8_t> bytes_of(std::string_view s)
{
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

std::array<uint8_t, kMacBytes> hello_mac(std::string_view secret, Nonce challenge, const Hello& hello,
                                         std::string_view job)
{
    const auto* fields = reinterpret_cast<const uint8_t*>(&hello);
    return hmac_sha256(bytes_of(secret), {bytes_of("mercury-ps hello"), challenge,
                                          std::span<const uint8_t>(fields, offsetof(Hello, mac)), bytes_of(job)});
}

struct FrameMac::Keyed {
    MacCtx ctx;
};

FrameMac::FrameMac(std::string_view secret, Nonce challenge, Nonce worker, Direction direction)
{
    const std::string_view label =
        direction == Direction::kToServer ? "mercury-ps frames to server" : "mercury-ps frames to worker";
    const auto key = hmac_sha256(bytes_of(secret), {bytes_of(label), challenge, worker});
    keyed_ = std::make_unique<Keyed>(Keyed{keyed_hmac(key)});
}

FrameMac::~FrameMac() = default;
FrameMac::FrameMac(FrameMac&& other) noexcept = default;
FrameMac& FrameMac::operator=(FrameMac&& other) noexcept = default;

Tag FrameMac::next(std::span<const uint8_t> header, std::span<const uint8_t> payload)
{
    uint8_t seq[8];
    for (int i = 0; i < 8; ++i)
        seq[i] = static_cast<uint8_t>(seq_ >> (8 * i));
    ++seq_;
    const MacCtx ctx(EVP_MAC_CTX_dup(keyed_->ctx.get()));
    const auto full = mac_of(ctx.get(), {std::span<const uint8_t>(seq), header, payload});
    Tag tag{};
    std::copy_n(full.begin(), tag.size(), tag.begin());
    return tag;
}

bool same_mac(std::span<const uint8_t> a, std::span<const uint8_t> b)
{
    return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string weak_secret(std::string_view secret)
{
    bool seen[256] = {};
    size_t distinct = 0;
    for (unsigned char c : secret)
        distinct += !std::exchange(seen[c], true);
    if (secret.size() >= kMinSecretBytes && distinct >= kMinSecretDistinct)
        return "";
    return "the secret is too weak (" + std::to_string(secret.size()) + " bytes, " + std::to_string(distinct) +
           " different): it needs at least " + std::to_string(kMinSecretBytes) + " bytes of at least " +
           std::to_string(kMinSecretDistinct) + " different values; make one with "
           "`head -c 32 /dev/urandom | base64`";
}

std::string load_secret(const std::string& file)
{
    if (file.empty()) {
        const char* env = std::getenv("MERCURY_PS_SECRET");
        return env ? env : "";
    }
    std::ifstream in(file, std::ios::binary);
    if (!in)
        throw std::runtime_error("cannot read --secret-file " + file);
    std::ostringstream text;
    text << in.rdbuf();
    std::string secret = text.str();
    if (!secret.empty() && secret.back() == '\n')
        secret.pop_back();
    return secret;
}

}  // namespace mercury::ps
