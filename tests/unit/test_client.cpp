// SPDX-License-Identifier: GPL-2.0
// libmercury's one way to select a congestion control: set, read back, say why not.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <mercury/client.hpp>

namespace {

struct Socket {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ~Socket() { ::close(fd); }
};

}  // namespace

TEST_CASE("set_congestion_control sets it and reads it back", "[client]")
{
    Socket s;
    REQUIRE(s.fd >= 0);
    CHECK(mercury::set_congestion_control(s.fd, "reno").empty());   // built into every kernel
    CHECK(mercury::congestion_control(s.fd) == "reno");
}

TEST_CASE("set_congestion_control says why it did not take and changes nothing", "[client]")
{
    Socket s;
    REQUIRE(mercury::set_congestion_control(s.fd, "reno").empty());
    CHECK(mercury::set_congestion_control(s.fd, "no-such-cc") ==
          "cannot set congestion control no-such-cc: No such file or directory");
    CHECK(mercury::set_congestion_control(s.fd, "") == "bad congestion control name \"\"");
    CHECK(mercury::set_congestion_control(s.fd, "sixteen-chars-cc") == "bad congestion control name \"sixteen-chars-cc\"");
    CHECK(mercury::congestion_control(s.fd) == "reno");
    CHECK(mercury::set_congestion_control(-1, "reno") == "not a socket: -1");
    CHECK(mercury::congestion_control(-1) == "?");
}

TEST_CASE("the C calls refuse bad arguments", "[client]")
{
    Socket s;
    char small[8];
    CHECK(mercury_congestion_control(s.fd, small, sizeof(small)) == MERCURY_E_INVAL);
    CHECK(mercury_congestion_control(s.fd, nullptr, 16) == MERCURY_E_INVAL);
    CHECK(mercury_set_congestion_control(s.fd, nullptr) == MERCURY_E_INVAL);
    const int udp = ::socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(mercury_set_congestion_control(udp, "reno") == MERCURY_E_CC);   // not TCP: the kernel says so
    ::close(udp);
}
