// address.h: the addresses channels dial and servers listen on.
//
// An address is "HOST:PORT": HOST an IPv4 address, a bracketed IPv6 address
// ("[::1]:7000", "[fe80::1%eth0]:7000") or a host name (looked up with
// getaddrinfo, an IPv4 address preferred to an IPv6 one). A channel's static
// target is a comma-separated list of them, plain or with gRPC's address
// schemes (gRPC's doc/naming.md): "ipv4:ADDR:PORT[,ADDR:PORT...]" and
// "ipv6:[ADDR]:PORT[,...]", which take numeric addresses of that family only.
#ifndef RDMARPC_RUNTIME_RPC_ADDRESS_H_
#define RDMARPC_RUNTIME_RPC_ADDRESS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/transport/socket_address.h"

namespace rdmarpc {
namespace internal {

struct ResolvedAddress {
  SocketAddress addr;
  std::string name;  // addr.ToString(): "1.2.3.4:80", "[::1]:80"
};

// Which numeric families an address may be given in, and whether names are
// looked up.
enum class AddressForm { kAny, kIpv4Only, kIpv6Only, kNumeric };

// INVALID_ARGUMENT naming the bad part for a malformed "HOST:PORT", a host
// that does not resolve or an address of the wrong family for `form`; port
// 0 only when `allow_port_zero`.
absl::StatusOr<ResolvedAddress> ParseHostPort(absl::string_view host_port, bool allow_port_zero,
                                              AddressForm form = AddressForm::kAny);
// A static target: a comma-separated list of HOST:PORT, or the same after
// "ipv4:" or "ipv6:" (see above). INVALID_ARGUMENT as ParseHostPort, or for
// an empty list.
absl::StatusOr<std::vector<ResolvedAddress>> ParseTarget(absl::string_view target);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_ADDRESS_H_
