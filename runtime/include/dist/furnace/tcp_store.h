// furnace/tcp_store.h: c10d's TCPStore, the key-value store through which the ranks of a job
// find each other (the rendezvous): rank 0 hosts it at MASTER_ADDR:MASTER_PORT, every rank
// (rank 0 too) is a client. Values are bytes; get() and wait() block until the key is set or the
// timeout passes. Gloo exchanges its listening addresses through it, NCCL its unique id.
//
// Errors are one line naming the address: a client that cannot connect keeps trying until the
// timeout (rank 0 may start last), then says so; a host that cannot listen says why at once.
// The wire format is this project's own (c10d's is not a public contract): a request is an
// opcode, a key and a value, each length-prefixed; see tcp_store.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace furnace {

class TcpStoreServer;  // tcp_store.cpp: the host's listening thread

class TcpStore {
 public:
  // host: listen on `port` of every interface (0 picks a free port: see port()), as c10d does, and
  // serve until destroyed; `addr` is where the clients find it. Every
  // TcpStore connects as a client. `timeout` bounds connecting and every blocking call.
  TcpStore(std::string addr, int port, bool host, std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  // Blocks until `key` is set (or the timeout).
  std::vector<char> get(const std::string& key);
  // Adds `delta` to the integer at `key` (0 when unset) and returns the sum.
  int64_t add(const std::string& key, int64_t delta);
  // Blocks until every key is set (or `timeout`, defaulting to the store's).
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  const std::string& addr() const { return addr_; }
  int port() const { return port_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  std::vector<char> call(char op, const std::string& key, const std::vector<char>& value,
                         std::chrono::milliseconds timeout);

  std::string addr_;
  int port_ = 0;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<TcpStoreServer> server_;
  int fd_ = -1;
};

}  // namespace furnace
