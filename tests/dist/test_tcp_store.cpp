// The rendezvous store's host against clients that are not ours, each a raw socket on 127.0.0.1
// connecting to MASTER_PORT: garbage (an HTTP request), a huge key or value length, a client that
// asks and never reads. Each is dropped (its connection closed) and a well-behaved TcpStore client
// is answered throughout, well within its timeout. Also: a client refuses to send a key or value
// over the limits, and a value left with set_if_gone answers a waiting get when its client
// disconnects. The store's ordinary use and the Gloo group: test_gloo_group.cpp.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "furnace/error.h"
#include "furnace/tcp_store.h"
#include "support/loopback.h"  // defines: kLoopback, seconds_since, bytes, text

namespace furnace {
namespace {

using ::testing::HasSubstr;
using test_support::bytes;
using test_support::Clock;
using test_support::kLoopback;
using test_support::seconds_since;
using test_support::text;
using std::chrono::milliseconds;

// A blocking TCP socket to the store, speaking whatever the test writes.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, kLoopback, &a.sin_addr);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  }
  ~RawClient() { ::close(fd_); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void send(const std::string& data) {
    EXPECT_EQ(::send(fd_, data.data(), data.size(), MSG_NOSIGNAL), static_cast<ssize_t>(data.size()));
  }
  // True when the host closes the connection within `seconds` (what it sent before is read and
  // thrown away).
  bool closed_within(double seconds) {
    const auto t0 = Clock::now();
    char buf[65536];
    while (seconds_since(t0) < seconds) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;  // EOF, or a reset for the bytes it never read
    }
    return false;
  }

 private:
  int fd_ = -1;
};

std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
// A request as TcpStore writes it (tcp_store.cpp's wire format).
std::string request(char op, const std::string& key, const std::string& value) {
  return std::string(1, op) + u32(static_cast<uint32_t>(key.size())) + key +
         u32(static_cast<uint32_t>(value.size())) + value;
}

// A well-behaved client's set, add and get, each well within its timeout.
void expect_served(TcpStore& client, const std::string& tag) {
  const auto t0 = Clock::now();
  client.set("ok/" + tag, bytes("fine"));
  EXPECT_EQ(text(client.get("ok/" + tag)), "fine");
  EXPECT_EQ(client.add("count/" + tag, 1), 1);
  EXPECT_LT(seconds_since(t0), 2.0) << tag;
}

TEST(TcpStoreGuards, GarbageIsDroppedAndTheOthersAreServed) {
  TcpStore host(kLoopback, 0, /*host=*/true, milliseconds(5000));
  TcpStore client(kLoopback, host.port(), /*host=*/false, milliseconds(5000));
  // An HTTP request starts with 'G', the get opcode: its "length" ("ET /") is ~790 MB.
  RawClient http(host.port());
  http.send("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  RawClient binary(host.port());
  binary.send(std::string("\x16\x03\x01\x02\x00", 5));  // a TLS hello: no opcode of ours
  expect_served(client, "garbage");
  EXPECT_TRUE(http.closed_within(2.0)) << "the host kept waiting for the rest of a 790 MB key";
  EXPECT_TRUE(binary.closed_within(2.0));
  expect_served(client, "after");
}

TEST(TcpStoreGuards, AHugeLengthIsDroppedWithoutWaitingForItsBytes) {
  TcpStore host(kLoopback, 0, /*host=*/true, milliseconds(5000));
  TcpStore client(kLoopback, host.port(), /*host=*/false, milliseconds(5000));
  RawClient huge_key(host.port());
  huge_key.send("S" + u32(0xFFFFFFF0u) + "some of the key");
  RawClient huge_value(host.port());
  huge_value.send("S" + u32(1) + "k" + u32(kStoreMaxValueBytes + 1) + "some of the value");
  RawClient bad_add(host.port());
  bad_add.send(request('A', "n", "not eight bytes"));  // an add's value is an i64
  expect_served(client, "huge");
  EXPECT_TRUE(huge_key.closed_within(2.0));
  EXPECT_TRUE(huge_value.closed_within(2.0));
  EXPECT_TRUE(bad_add.closed_within(2.0));
  // Exactly the limits are fine.
  client.set(std::string(kStoreMaxKeyBytes, 'k'), std::vector<char>(kStoreMaxValueBytes, 'v'));
  EXPECT_EQ(client.get(std::string(kStoreMaxKeyBytes, 'k')).size(), size_t{kStoreMaxValueBytes});
}

TEST(TcpStoreGuards, AClientThatNeverReadsStallsNobody) {
  TcpStore host(kLoopback, 0, /*host=*/true, milliseconds(5000));
  TcpStore client(kLoopback, host.port(), /*host=*/false, milliseconds(5000));
  client.set("big", std::vector<char>(kStoreMaxValueBytes, 'x'));
  // 64 gets of 1 MiB asked at once and never read: far more than the sockets' buffers hold.
  RawClient deaf(host.port());
  std::string asks;
  for (int i = 0; i < 64; ++i) asks += request('G', "big", "");
  deaf.send(asks);
  std::this_thread::sleep_for(milliseconds(200));  // the host has answered what it could
  expect_served(client, "deaf");
  EXPECT_EQ(client.get("big").size(), size_t{kStoreMaxValueBytes});
  EXPECT_TRUE(deaf.closed_within(5.0)) << "the host kept the unread replies";
}

TEST(TcpStoreGuards, AClientRefusesAKeyOrValueOverTheLimits) {
  TcpStore host(kLoopback, 0, /*host=*/true, milliseconds(5000));
  EXPECT_THAT([&] { host.set("k", std::vector<char>(kStoreMaxValueBytes + 1)); },
              ::testing::ThrowsMessage<Error>(HasSubstr("values of at most 1048576 bytes")));
  EXPECT_THAT([&] { host.set(std::string(kStoreMaxKeyBytes + 1, 'k'), {}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("keys of at most 4096 bytes")));
  expect_served(host, "still");  // nothing was sent: the connection is fine
}

TEST(TcpStoreGuards, AValueLeftForWhenAClientIsGoneAnswersTheWaitingGet) {
  TcpStore host(kLoopback, 0, /*host=*/true, milliseconds(20000));
  auto leaving = std::make_unique<TcpStore>(kLoopback, host.port(), /*host=*/false, milliseconds(20000));
  leaving->set_if_gone("report", bytes("gone"));
  leaving->set_if_gone("kept", bytes("gone"));
  leaving->set("kept", bytes("set before it left"));
  std::thread leave([&] {
    std::this_thread::sleep_for(milliseconds(300));  // the host's get is waiting
    leaving.reset();                                 // the process ends: its connection closes
  });
  const auto t0 = Clock::now();
  EXPECT_EQ(text(host.get("report")), "gone");
  EXPECT_LT(seconds_since(t0), 5.0) << "the get waited for its 20 s timeout";
  leave.join();
  EXPECT_EQ(text(host.get("kept")), "set before it left");
}

}  // namespace
}  // namespace furnace
