// dist/tcp_store: see furnace/tcp_store.h.
//
// Wire format, both directions little-endian as this host writes it (every peer runs this code):
//   request: op (1 byte: 'S' set, 'G' get, 'A' add, 'W' wait, 'L' set if gone), u32 key length,
//            key, u32 value length, value
//   reply:   'S', 'W', 'L': one byte 1;  'G': u32 length, value;  'A': the sum as i64
// The host answers a get or wait for a key that is not set yet when some set or add sets it, or
// when a client that left a value for it with 'L' disconnects.
#include "furnace/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <string_view>
#include <thread>

#include "furnace/error.h"
#include "furnace/stop_signals.h"  // defines: stop_signal, stop_signal_name

namespace furnace {
namespace {

using Clock = std::chrono::steady_clock;

std::string where(const std::string& addr, int port) {
  return (addr.find(':') != std::string::npos ? "[" + addr + "]" : addr) + ":" + std::to_string(port);
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

// Resolves addr:port (numeric or a host name); throws one line when it cannot.
void resolve(const std::string& addr, int port, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const int rc = getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &out.list);
  FURNACE_CHECK(rc == 0) << "the rendezvous store's address " << where(addr, port) << " (MASTER_ADDR:MASTER_PORT): "
                         << gai_strerror(rc);
}

// A rank waiting for the others gives up at once when asked to stop (Ctrl-C, or the launcher's
// SIGTERM after another rank failed): there is no step to finish yet.
constexpr int kStopPollMs = 100;
void check_not_stopped(const std::string& addr, int port) {
  const int sig = stop_signal();
  FURNACE_CHECK(sig == 0) << "stopped by " << stop_signal_name(sig) << " while waiting for the other ranks at the "
                          << "rendezvous store " << where(addr, port);
}

void put_u32(std::vector<char>& b, uint32_t v) { b.insert(b.end(), reinterpret_cast<char*>(&v), reinterpret_cast<char*>(&v) + 4); }

// Writes all of `data`; false when the peer is gone.
bool send_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    data += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

}  // namespace

// The host's side: one thread polling the listening socket, every client and a wake-up pipe.
// Clients' sockets are non-blocking: a reply the kernel cannot take now waits in the client's
// outbox for POLLOUT, so a client that never reads stalls nobody but itself.
class TcpStoreServer {
 public:
  // Listens on `port` of every interface, as c10d's TCPStore does: MASTER_ADDR names rank 0's host
  // for the clients, and a host name often resolves, on rank 0 itself, to a loopback address
  // (Debian's /etc/hosts maps the machine's name to 127.0.1.1) that other nodes cannot reach.
  // IPv6's wildcard with IPv4-mapped addresses where the host has IPv6, else IPv4's.
  TcpStoreServer(const std::string& addr, int port) {
    std::string last = "no address";
    for (const int family : {AF_INET6, AF_INET}) {
      const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      const int one = 1, zero = 0;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_storage any{};
      socklen_t any_len = 0;
      if (family == AF_INET6) {
        ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        auto* a6 = reinterpret_cast<sockaddr_in6*>(&any);
        a6->sin6_family = AF_INET6;
        a6->sin6_addr = in6addr_any;
        a6->sin6_port = htons(static_cast<uint16_t>(port));
        any_len = sizeof(sockaddr_in6);
      } else {
        auto* a4 = reinterpret_cast<sockaddr_in*>(&any);
        a4->sin_family = AF_INET;
        a4->sin_addr.s_addr = htonl(INADDR_ANY);
        a4->sin_port = htons(static_cast<uint16_t>(port));
        any_len = sizeof(sockaddr_in);
      }
      if (::bind(fd, reinterpret_cast<sockaddr*>(&any), any_len) == 0 && ::listen(fd, 1024) == 0) {
        listen_fd_ = fd;
        sockaddr_storage bound{};
        socklen_t len = sizeof bound;
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
        port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                  : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
        break;
      }
      last = std::strerror(errno);
      ::close(fd);
      if (last.find("in use") != std::string::npos) break;  // IPv4 would find the same port taken
    }
    FURNACE_CHECK(listen_fd_ >= 0) << "cannot host the rendezvous store (rank 0's) on port " << port << " (MASTER_PORT; "
                                   << "the ranks look for it at " << where(addr, port) << "): " << last
                                   << (last.find("in use") != std::string::npos
                                           ? " (another job's store? pick another MASTER_PORT)"
                                           : "");
    FURNACE_CHECK(::pipe2(wake_, O_CLOEXEC) == 0) << "TCPStore: pipe: " << std::strerror(errno);
    thread_ = std::thread([this] { serve(); });
  }

  ~TcpStoreServer() {
    const char b = 0;
    (void)!::write(wake_[1], &b, 1);
    thread_.join();
    for (auto& [fd, c] : clients_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  int port() const { return port_; }

 private:
  // Replies a client has not read that the host keeps for it. A client of ours has one request in
  // flight: more than two of the largest replies means it sends without reading; it is dropped.
  static constexpr size_t kMaxUnreadBytes = 2 * (size_t{kStoreMaxValueBytes} + 4);

  struct Client {
    std::vector<char> in;   // a request's bytes so far
    std::vector<char> out;  // replies the socket has not taken yet
    bool dead = false;      // dropped at the end of this round of the poll loop
    std::vector<std::pair<std::string, std::vector<char>>> if_gone;  // 'L': set when it disconnects
  };
  struct Waiter {
    int fd;
    char op;
  };

  void serve() {
    for (;;) {
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (auto& [fd, c] : clients_)
        fds.push_back({fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          clients_[fd] = Client{};
        }
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents & POLLOUT) flush(fds[i].fd);
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(fds[i].fd);
      }
      drop_dead();
    }
  }

  // Closes every client marked dead; what a dropped client left with 'L' is set now, which may
  // answer (and, failing, mark dead) others in turn.
  void drop_dead() {
    for (;;) {
      auto it = std::find_if(clients_.begin(), clients_.end(), [](const auto& kv) { return kv.second.dead; });
      if (it == clients_.end()) return;
      const int fd = it->first;
      std::vector<std::pair<std::string, std::vector<char>>> if_gone = std::move(it->second.if_gone);
      ::close(fd);
      clients_.erase(it);
      for (auto& [key, list] : waiters_)
        list.erase(std::remove_if(list.begin(), list.end(), [fd](const Waiter& w) { return w.fd == fd; }), list.end());
      for (auto& [key, value] : if_gone)
        if (!data_.count(key)) {
          data_[key] = std::move(value);
          wake(key);
        }
    }
  }

  void read_from(int fd) {
    Client& c = clients_.at(fd);
    if (c.dead) return;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      c.dead = true;
      return;
    }
    std::vector<char>& in = c.in;
    in.insert(in.end(), buf, buf + n);
    // Every complete request in the buffer; a malformed or oversized one ends the client as soon
    // as its first bytes show it (the rest is never waited for).
    while (!in.empty() && !c.dead) {
      const char op = in[0];
      if (std::string_view("SGAWL").find(op) == std::string_view::npos) {
        c.dead = true;  // not a client of ours
        return;
      }
      if (in.size() < 5) return;
      uint32_t klen, vlen;
      std::memcpy(&klen, in.data() + 1, 4);
      if (klen > kStoreMaxKeyBytes) {
        c.dead = true;
        return;
      }
      if (in.size() < 9 + size_t{klen}) return;
      std::memcpy(&vlen, in.data() + 5 + klen, 4);
      if (vlen > kStoreMaxValueBytes) {
        c.dead = true;
        return;
      }
      const size_t total = 9 + size_t{klen} + vlen;
      if (in.size() < total) return;
      std::string key(in.data() + 5, klen);
      std::vector<char> value(in.begin() + 9 + klen, in.begin() + static_cast<std::ptrdiff_t>(total));
      in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(total));
      if (!handle(fd, op, key, std::move(value))) c.dead = true;
    }
  }

  // False for a request no client of ours sends.
  bool handle(int fd, char op, const std::string& key, std::vector<char> value) {
    switch (op) {
      case 'S':
        data_[key] = std::move(value);
        wake(key);
        reply_ack(fd);
        return true;
      case 'A': {
        int64_t sum = 0, delta = 0;
        if (value.size() != 8) return false;
        std::memcpy(&delta, value.data(), 8);
        auto it = data_.find(key);
        if (it != data_.end() && it->second.size() == 8) std::memcpy(&sum, it->second.data(), 8);
        sum += delta;
        data_[key].assign(reinterpret_cast<char*>(&sum), reinterpret_cast<char*>(&sum) + 8);
        wake(key);
        send_to(fd, reinterpret_cast<char*>(&sum), 8);
        return true;
      }
      case 'L':
        clients_.at(fd).if_gone.emplace_back(key, std::move(value));
        reply_ack(fd);
        return true;
      case 'G':
      case 'W':
        if (data_.count(key))
          answer(fd, op, key);
        else
          waiters_[key].push_back({fd, op});
        return true;
      default:
        return false;
    }
  }

  void reply_ack(int fd) {
    const char one = 1;
    send_to(fd, &one, 1);
  }

  void answer(int fd, char op, const std::string& key) {
    if (op == 'W') return reply_ack(fd);
    const std::vector<char>& v = data_[key];
    std::vector<char> out;
    put_u32(out, static_cast<uint32_t>(v.size()));
    out.insert(out.end(), v.begin(), v.end());
    send_to(fd, out.data(), out.size());
  }

  // Queues `data` for the client and sends what its socket takes now, never waiting: a client
  // whose unread replies pass kMaxUnreadBytes, or whose socket fails, is marked dead.
  void send_to(int fd, const char* data, size_t n) {
    Client& c = clients_.at(fd);
    if (c.dead) return;
    c.out.insert(c.out.end(), data, data + n);
    flush(fd);
    if (c.out.size() > kMaxUnreadBytes) c.dead = true;
  }

  void flush(int fd) {
    Client& c = clients_.at(fd);
    size_t sent = 0;
    while (!c.dead && sent < c.out.size()) {
      const ssize_t k = ::send(fd, c.out.data() + sent, c.out.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;  // POLLOUT says when to go on
      if (k <= 0) c.dead = true;
      else sent += static_cast<size_t>(k);
    }
    c.out.erase(c.out.begin(), c.out.begin() + static_cast<std::ptrdiff_t>(sent));
  }

  void wake(const std::string& key) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) return;
    std::vector<Waiter> list = std::move(it->second);
    waiters_.erase(it);
    for (const Waiter& w : list) answer(w.fd, w.op, key);
  }

  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::map<int, Client> clients_;
  std::map<std::string, std::vector<char>> data_;
  std::map<std::string, std::vector<Waiter>> waiters_;
  std::thread thread_;
};

TcpStore::TcpStore(std::string addr, int port, bool host, std::chrono::milliseconds timeout)
    : addr_(std::move(addr)), port_(port), timeout_(timeout) {
  FURNACE_CHECK(timeout.count() > 0) << "the rendezvous timeout must be positive";
  FURNACE_CHECK(port >= (host ? 0 : 1) && port <= 65535)
      << "MASTER_PORT " << port << " is not a TCP port (1 .. 65535)";
  if (host) {
    server_ = std::make_unique<TcpStoreServer>(addr_, port_);
    port_ = server_->port();
  }
  // Connect, retrying while nobody listens yet: rank 0 may start after the others.
  const Clock::time_point deadline = Clock::now() + timeout_;
  std::string last = "no address";
  while (fd_ < 0) {
    AddrInfo ai;
    resolve(addr_, port_, false, ai);
    for (addrinfo* a = ai.list; a && fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) continue;
      int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
      if (rc < 0 && errno == EINPROGRESS) {
        // The connection in flight, in slices (a stop signal ends the wait), until the deadline.
        do {
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
          pollfd p{fd, POLLOUT, 0};
          rc = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left.count(), 1, kStopPollMs)));
          if (rc == 0 && stop_signal() != 0) {
            ::close(fd);
            check_not_stopped(addr_, port_);
          }
        } while ((rc == 0 || (rc < 0 && errno == EINTR)) && Clock::now() < deadline);
        int err = 0;
        socklen_t len = sizeof err;
        if (rc == 1) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = rc == 1 && err == 0 ? 0 : -1;
        errno = rc == 0 ? 0 : (err ? err : ETIMEDOUT);
      }
      if (rc == 0) {
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fd_ = fd;
      } else {
        last = std::strerror(errno);
        ::close(fd);
      }
    }
    if (fd_ >= 0) break;
    check_not_stopped(addr_, port_);
    FURNACE_CHECK(Clock::now() < deadline)
        << "cannot reach the rendezvous store at " << where(addr_, port_) << " (MASTER_ADDR:MASTER_PORT) within "
        << timeout_.count() / 1000.0 << " s: " << last
        << "; is rank 0 running, with the same MASTER_ADDR and MASTER_PORT as this rank?";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

std::vector<char> TcpStore::call(char op, const std::string& key, const std::vector<char>& value,
                                 std::chrono::milliseconds timeout) {
  FURNACE_CHECK(fd_ >= 0) << "the rendezvous store at " << where(addr_, port_) << " is no longer usable";
  FURNACE_CHECK(key.size() <= kStoreMaxKeyBytes && value.size() <= kStoreMaxValueBytes)
      << "the rendezvous store takes keys of at most " << kStoreMaxKeyBytes << " bytes and values of at most "
      << kStoreMaxValueBytes << " bytes; key '" << key.substr(0, 64) << "' (" << key.size() << " bytes) with a value of "
      << value.size() << " bytes is not one";
  std::vector<char> req{op};
  put_u32(req, static_cast<uint32_t>(key.size()));
  req.insert(req.end(), key.begin(), key.end());
  put_u32(req, static_cast<uint32_t>(value.size()));
  req.insert(req.end(), value.begin(), value.end());
  auto broken = [&](const std::string& why) {
    ::close(fd_);
    fd_ = -1;  // a late reply would be taken for the next call's
    FURNACE_FAIL() << "the rendezvous store at " << where(addr_, port_) << ": " << why;
  };
  if (!send_all(fd_, req.data(), req.size())) broken("the store's host closed the connection (rank 0 ended?)");
  const Clock::time_point deadline = Clock::now() + timeout;
  std::vector<char> in;
  auto need = [&](size_t n) {
    while (in.size() < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd_, POLLIN, 0};
      const int rc = left > 0 ? ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kStopPollMs))) : 0;
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0 && left > kStopPollMs) {
        if (stop_signal() != 0) {
          ::close(fd_);
          fd_ = -1;
          check_not_stopped(addr_, port_);
        }
        continue;
      }
      if (rc == 0)
        broken("waited " + std::to_string(timeout.count()) + " ms for key '" + key +
               "' (a rank that never arrived?)");
      char buf[65536];
      const ssize_t k = ::recv(fd_, buf, sizeof buf, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) broken("the store's host closed the connection (rank 0 ended?)");
      in.insert(in.end(), buf, buf + k);
    }
  };
  if (op == 'G') {
    need(4);
    uint32_t n;
    std::memcpy(&n, in.data(), 4);
    if (n > kStoreMaxValueBytes) broken("a reply of " + std::to_string(n) + " bytes is not the store's");
    need(4 + size_t{n});
    return std::vector<char>(in.begin() + 4, in.begin() + 4 + n);
  }
  need(op == 'A' ? 8 : 1);
  return in;
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) { call('S', key, value, timeout_); }

void TcpStore::set_if_gone(const std::string& key, const std::vector<char>& value) {
  call('L', key, value, timeout_);
}

std::vector<char> TcpStore::get(const std::string& key) { return call('G', key, {}, timeout_); }

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::vector<char> v(reinterpret_cast<char*>(&delta), reinterpret_cast<char*>(&delta) + 8);
  std::vector<char> r = call('A', key, v, timeout_);
  int64_t sum;
  std::memcpy(&sum, r.data(), 8);
  return sum;
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (const std::string& k : keys) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    call('W', k, {}, std::max(left, std::chrono::milliseconds(1)));
  }
}

}  // namespace furnace
