// SPDX-License-Identifier: GPL-2.0
#include "ps/wire.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace mercury::ps {

std::array<uint8_t, kMacBytes> hello_mac(std::string_view secret, std::span<const uint8_t, kNonceBytes> nonce,
                                         const Hello& hello, std::string_view job)
{
    std::vector<uint8_t> message(nonce.begin(), nonce.end());
    const auto* fields = reinterpret_cast<const uint8_t*>(&hello);
    message.insert(message.end(), fields, fields + offsetof(Hello, mac));
    message.insert(message.end(), job.begin(), job.end());
    std::array<uint8_t, kMacBytes> mac{};
    unsigned int len = 0;
    if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), message.data(), message.size(),
              mac.data(), &len) || len != mac.size())
        throw std::runtime_error("HMAC-SHA256 failed");
    return mac;
}

bool same_mac(std::span<const uint8_t, kMacBytes> a, std::span<const uint8_t, kMacBytes> b)
{
    return CRYPTO_memcmp(a.data(), b.data(), kMacBytes) == 0;
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
