// address.cc: see address.h.
#include "runtime/rpc/address.h"

#include <netdb.h>

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace rdmarpc {
namespace internal {
namespace {

// getaddrinfo for `host` in `family`; nullopt when it has no such address.
std::optional<SocketAddress> LookUp(const std::string& host, int family, uint16_t port, int* rc) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  *rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (*rc != 0 || res == nullptr) return std::nullopt;
  std::optional<SocketAddress> a = SocketAddress::FromSockaddr(res->ai_addr);
  freeaddrinfo(res);
  if (a) a->set_port(port);
  return a;
}

}  // namespace

absl::StatusOr<ResolvedAddress> ParseHostPort(absl::string_view host_port, bool allow_port_zero,
                                              AddressForm form) {
  host_port = absl::StripAsciiWhitespace(host_port);
  absl::string_view host;
  absl::string_view port_text;
  bool bracketed = false;
  if (absl::StartsWith(host_port, "[")) {
    const size_t close = host_port.find(']');
    if (close == absl::string_view::npos || close + 1 >= host_port.size() ||
        host_port[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("address \"", host_port, "\" is not [IPV6]:PORT"));
    }
    host = host_port.substr(1, close - 1);
    port_text = host_port.substr(close + 2);
    bracketed = true;
  } else {
    const size_t colon = host_port.rfind(':');
    if (colon == absl::string_view::npos || colon == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("address \"", host_port, "\" is not HOST:PORT"));
    }
    host = host_port.substr(0, colon);
    port_text = host_port.substr(colon + 1);
    if (absl::StrContains(host, ':')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "address \"", host_port, "\": an IPv6 address takes brackets, as [", host, "]:PORT"));
    }
  }
  int port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535 ||
      (port == 0 && !allow_port_zero)) {
    return absl::InvalidArgumentError(absl::StrCat("port \"", port_text, "\" in \"", host_port,
                                                   "\" is not ",
                                                   allow_port_zero ? "0..65535" : "1..65535"));
  }
  std::optional<SocketAddress> addr = SocketAddress::FromIp(host, static_cast<uint16_t>(port));
  if (addr && bracketed != addr->is_ipv6()) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", host_port, "\": brackets are for IPv6 addresses only"));
  }
  if (!addr && bracketed) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", host, "\" in \"", host_port, "\" is not an IPv6 address"));
  }
  if (form == AddressForm::kNumeric && !addr) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", host_port, "\" is not a numeric IPV4:PORT or [IPV6]:PORT"));
  }
  if (form == AddressForm::kIpv4Only || form == AddressForm::kIpv6Only) {
    const bool want_v6 = form == AddressForm::kIpv6Only;
    if (!addr || addr->is_ipv6() != want_v6) {
      return absl::InvalidArgumentError(absl::StrCat("\"", host_port, "\" is not ",
                                                     want_v6 ? "[IPV6]:PORT" : "IPV4:PORT",
                                                     " with a numeric address"));
    }
  }
  if (!addr) {
    const std::string name(host);
    int rc = 0;
    addr = LookUp(name, AF_INET, static_cast<uint16_t>(port), &rc);
    if (!addr) {
      int rc6 = 0;
      addr = LookUp(name, AF_INET6, static_cast<uint16_t>(port), &rc6);
    }
    if (!addr) {
      return absl::InvalidArgumentError(absl::StrCat("host \"", name, "\" in \"", host_port,
                                                     "\" does not resolve: ", gai_strerror(rc)));
    }
  }
  ResolvedAddress r;
  r.addr = *addr;
  r.name = addr->ToString();
  return r;
}

absl::StatusOr<std::vector<ResolvedAddress>> ParseTarget(absl::string_view target) {
  // "SCHEME://..." with a scheme no resolver serves (channel.cc asked the
  // registry first).
  if (const size_t sep = target.find("://"); sep != absl::string_view::npos && sep > 0) {
    const absl::string_view scheme = target.substr(0, sep);
    bool is_scheme = absl::ascii_isalpha(static_cast<unsigned char>(scheme[0]));
    for (char c : scheme) {
      is_scheme = is_scheme && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '+' ||
                                c == '-' || c == '.');
    }
    if (is_scheme) {
      return absl::InvalidArgumentError(absl::StrCat(
          "target \"", target, "\": no resolver for scheme \"", scheme,
          "\" (built in: dns, etcd, and ipv4:/ipv6: address lists; "
          "rdmarpc::RegisterResolverFactory adds others)"));
    }
  }
  AddressForm form = AddressForm::kAny;
  absl::string_view list = target;
  if (absl::ConsumePrefix(&list, "ipv4:")) {
    form = AddressForm::kIpv4Only;
  } else if (absl::ConsumePrefix(&list, "ipv6:")) {
    form = AddressForm::kIpv6Only;
  }
  std::vector<ResolvedAddress> out;
  if (absl::StripAsciiWhitespace(list).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("target \"", target, "\" names no address"));
  }
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    absl::StatusOr<ResolvedAddress> a = ParseHostPort(part, /*allow_port_zero=*/false, form);
    if (!a.ok()) return a.status();
    out.push_back(*a);
  }
  return out;
}

}  // namespace internal
}  // namespace rdmarpc
