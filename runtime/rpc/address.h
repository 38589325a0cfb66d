// address.h: "host:port" parsing for channels and servers (IPv4).
#ifndef RDMARPC_RUNTIME_RPC_ADDRESS_H_
#define RDMARPC_RUNTIME_RPC_ADDRESS_H_

#include <netinet/in.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmarpc {
namespace internal {

struct ResolvedAddress {
  sockaddr_in addr{};
  std::string name;  // "ip:port"
};

// INVALID_ARGUMENT naming the bad part for a malformed "host:port" or an
// unknown host; port 0 only when `allow_port_zero`.
absl::StatusOr<ResolvedAddress> ParseHostPort(absl::string_view host_port, bool allow_port_zero);
// Comma-separated list of host:port.
absl::StatusOr<std::vector<ResolvedAddress>> ParseTarget(absl::string_view target);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_ADDRESS_H_
