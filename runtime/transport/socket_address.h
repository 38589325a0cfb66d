// socket_address.h: an IPv4 or IPv6 socket address (address and port), as
// rdma_cm takes it (rdma_resolve_addr, rdma_bind_addr) and as the runtime
// names peers in logs and statuses.
//
// A plain value; any thread.
#ifndef RDMARPC_RUNTIME_TRANSPORT_SOCKET_ADDRESS_H_
#define RDMARPC_RUNTIME_TRANSPORT_SOCKET_ADDRESS_H_

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace rdmarpc {
namespace internal {

class SocketAddress {
 public:
  SocketAddress() = default;
  // A copy of `sa` when it is AF_INET or AF_INET6; nullopt otherwise
  // (nullptr, another family).
  static std::optional<SocketAddress> FromSockaddr(const sockaddr* sa);
  // A numeric address: an IPv4 dotted quad or an IPv6 address without
  // brackets ("::1", "fe80::1%lo" with a scope). nullopt when `ip` is
  // neither.
  static std::optional<SocketAddress> FromIp(absl::string_view ip, uint16_t port);

  int family() const { return storage_.ss_family; }  // AF_INET, AF_INET6 (AF_UNSPEC: empty)
  bool is_ipv6() const { return family() == AF_INET6; }
  // Host byte order.
  uint16_t port() const;
  void set_port(uint16_t port);
  // For rdma_cm and sockets: valid while this object lives. rdma_cm's verbs
  // take a non-const sockaddr*; they do not write through it.
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage_); }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t length() const;
  // "1.2.3.4" or "::1" (no brackets, no port).
  std::string IpString() const;
  // "1.2.3.4:80" or "[::1]:80": the form targets and listen addresses take.
  std::string ToString() const;

  friend bool operator==(const SocketAddress& a, const SocketAddress& b);
  friend bool operator!=(const SocketAddress& a, const SocketAddress& b) { return !(a == b); }

 private:
  sockaddr_storage storage_{};
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_SOCKET_ADDRESS_H_
