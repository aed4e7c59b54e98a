// furnace/tcp_store.h: c10d's TCPStore, the key-value store through which the ranks of a job
// find each other (the rendezvous): rank 0 hosts it at MASTER_ADDR:MASTER_PORT, every rank
// (rank 0 too) is a client. Values are bytes; get() and wait() block until the key is set or the
// timeout passes. Gloo exchanges its listening addresses through it, NCCL its unique id.
//
// Errors are one line naming the address: a client that cannot connect keeps trying until the
// timeout (rank 0 may start last), then says so; a host that cannot listen says why at once.
// The wire format is this project's own (c10d's is not a public contract): a request is an
// opcode, a key and a value, each length-prefixed; see tcp_store.cpp.
//
// The host serves whoever connects to MASTER_PORT, so it guards itself against a client that is
// not one of ours (a port scanner, a stray HTTP request, a program that never reads): a request
// with an unknown opcode or a key or value over the limits below closes that client's connection,
// replies go out without blocking and a client that lets them pile up unread is dropped; the
// other clients are served throughout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace furnace {

// What one request may carry. Keys are short names ("furnace/report/3", Gloo's "gloo/rank_3").
// Values are tiny: a rank's report is ~300 bytes, NCCL's unique id 128, Gloo's full-mesh
// addresses ~150 bytes per rank, so 1 MiB holds a job of several thousand ranks. A longer length
// on the wire is not one of our clients: the host drops it; a client asked to send one refuses.
inline constexpr uint32_t kStoreMaxKeyBytes = 4096;
inline constexpr uint32_t kStoreMaxValueBytes = 1u << 20;

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
  // Leaves `value` for `key` in case this client's connection closes (its process ended) while
  // `key` is still unset: a get() waiting for it then returns `value` at once instead of waiting
  // for the timeout. A key set before the connection closes keeps its value.
  void set_if_gone(const std::string& key, const std::vector<char>& value);
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
