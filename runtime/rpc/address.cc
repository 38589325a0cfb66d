// address.cc: see address.h.
#include "runtime/rpc/address.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace rdmarpc {
namespace internal {

absl::StatusOr<ResolvedAddress> ParseHostPort(absl::string_view host_port, bool allow_port_zero) {
  host_port = absl::StripAsciiWhitespace(host_port);
  const size_t colon = host_port.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", host_port, "\" is not host:port"));
  }
  const std::string host(host_port.substr(0, colon));
  const absl::string_view port_text = host_port.substr(colon + 1);
  int port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535 ||
      (port == 0 && !allow_port_zero)) {
    return absl::InvalidArgumentError(
        absl::StrCat("port \"", port_text, "\" in \"", host_port, "\" is not 1..65535"));
  }
  ResolvedAddress r;
  r.addr.sin_family = AF_INET;
  r.addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &r.addr.sin_addr) != 1) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0 || res == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("host \"", host, "\" in \"", host_port, "\" does not resolve: ",
                       gai_strerror(rc)));
    }
    r.addr.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    freeaddrinfo(res);
  }
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &r.addr.sin_addr, buf, sizeof(buf));
  r.name = absl::StrCat(buf, ":", port);
  return r;
}

absl::StatusOr<std::vector<ResolvedAddress>> ParseTarget(absl::string_view target) {
  std::vector<ResolvedAddress> out;
  for (absl::string_view part : absl::StrSplit(target, ',')) {
    absl::StatusOr<ResolvedAddress> a = ParseHostPort(part, /*allow_port_zero=*/false);
    if (!a.ok()) return a.status();
    out.push_back(*a);
  }
  if (out.empty()) return absl::InvalidArgumentError("empty target");
  return out;
}

}  // namespace internal
}  // namespace rdmarpc
