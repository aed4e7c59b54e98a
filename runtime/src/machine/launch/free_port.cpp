// pick_free_port (furnace/launch_env.h): `--master-port 0`, as torchrun's standalone mode picks its
// port: bind port 0, ask the kernel which port it gave, close. Another program may take the port
// before rank 0 binds it; on one machine that window is short.
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "furnace/error.h"
#include "furnace/launch_env.h"

namespace furnace {

int pick_free_port(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(address.c_str(), "0", &hints, &found); rc != 0)
    throw Error("--master-addr '" + printable_clipped(address) + "': " + ::gai_strerror(rc));
  std::string why = "no address";
  int port = -1;
  for (const addrinfo* a = found; a && port < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
      port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    else
      why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (port < 0) throw Error("--master-port 0: cannot bind a port on '" + printable_clipped(address) + "': " + why);
  return port;
}

}  // namespace furnace
