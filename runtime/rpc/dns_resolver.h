// dns_resolver.h: the built-in "dns" resolver, on c-ares.
//
// Target: "dns:[//AUTHORITY/]NAME:PORT" (gRPC's doc/naming.md). AUTHORITY is
// the DNS server to ask, "IP[:PORT]" or "[IPV6][:PORT]" (port 53 by
// default); without it the system's resolv.conf servers are asked, after
// /etc/hosts. NAME is looked up for both A and AAAA records; a numeric NAME
// is its own answer. PORT is required (rdmarpc has no default port).
//
// Each resolver runs one thread: it resolves at once, then again every
// ResolverArgs::refresh_interval, after RequestReresolution (at most once a
// second), and after a failed lookup with gRPC's connection backoff (1 s
// growing 1.6 times up to the refresh interval). It reports a list only
// when it differs from the last one reported.
#ifndef RDMARPC_RUNTIME_RPC_DNS_RESOLVER_H_
#define RDMARPC_RUNTIME_RPC_DNS_RESOLVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rdmarpc/resolver.h"

namespace rdmarpc {
namespace internal {

struct DnsTarget {
  std::string authority;  // "127.0.0.1:5353", "[::1]:53"; empty: the system's servers
  std::string name;       // what is looked up
  uint16_t port = 0;      // given to every address found
};

// INVALID_ARGUMENT naming the bad part.
absl::StatusOr<DnsTarget> ParseDnsTarget(absl::string_view target);

std::shared_ptr<ResolverFactory> MakeDnsResolverFactory();

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_DNS_RESOLVER_H_
