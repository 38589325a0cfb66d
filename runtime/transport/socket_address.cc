// socket_address.cc: see socket_address.h.
#include "runtime/transport/socket_address.h"

#include <arpa/inet.h>
#include <net/if.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace rdmarpc {
namespace internal {

std::optional<SocketAddress> SocketAddress::FromSockaddr(const sockaddr* sa) {
  if (sa == nullptr) return std::nullopt;
  SocketAddress a;
  if (sa->sa_family == AF_INET) {
    std::memcpy(&a.storage_, sa, sizeof(sockaddr_in));
  } else if (sa->sa_family == AF_INET6) {
    std::memcpy(&a.storage_, sa, sizeof(sockaddr_in6));
  } else {
    return std::nullopt;
  }
  return a;
}

std::optional<SocketAddress> SocketAddress::FromIp(absl::string_view ip, uint16_t port) {
  const std::string text(ip);
  SocketAddress a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage_);
  if (inet_pton(AF_INET, text.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return a;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage_);
  std::string host = text;
  const size_t percent = text.find('%');
  if (percent != std::string::npos) {
    // A link-local address names its interface: "fe80::1%eth0" (RFC 4007).
    const std::string scope = text.substr(percent + 1);
    host = text.substr(0, percent);
    unsigned index = if_nametoindex(scope.c_str());
    if (index == 0) {
      char* end = nullptr;
      const unsigned long n = std::strtoul(scope.c_str(), &end, 10);
      if (scope.empty() || *end != '\0') return std::nullopt;
      index = static_cast<unsigned>(n);
    }
    v6->sin6_scope_id = index;
  }
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) != 1) return std::nullopt;
  v6->sin6_family = AF_INET6;
  v6->sin6_port = htons(port);
  return a;
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  }
  return 0;
}

void SocketAddress::set_port(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage_)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage_)->sin6_port = htons(port);
}

socklen_t SocketAddress::length() const {
  if (family() == AF_INET) return sizeof(sockaddr_in);
  if (family() == AF_INET6) return sizeof(sockaddr_in6);
  return 0;
}

std::string SocketAddress::IpString() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, buf,
              sizeof(buf));
    return buf;
  }
  if (family() == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&storage_);
    inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof(buf));
    if (v6->sin6_scope_id == 0) return buf;
    char name[IF_NAMESIZE] = {};
    if (if_indextoname(v6->sin6_scope_id, name) != nullptr) return absl::StrCat(buf, "%", name);
    return absl::StrCat(buf, "%", v6->sin6_scope_id);
  }
  return "";
}

std::string SocketAddress::ToString() const {
  if (family() == AF_INET6) return absl::StrCat("[", IpString(), "]:", port());
  return absl::StrCat(IpString(), ":", port());
}

bool operator==(const SocketAddress& a, const SocketAddress& b) {
  if (a.family() != b.family()) return false;
  if (a.family() == AF_INET) {
    const auto* x = reinterpret_cast<const sockaddr_in*>(&a.storage_);
    const auto* y = reinterpret_cast<const sockaddr_in*>(&b.storage_);
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  if (a.family() == AF_INET6) {
    const auto* x = reinterpret_cast<const sockaddr_in6*>(&a.storage_);
    const auto* y = reinterpret_cast<const sockaddr_in6*>(&b.storage_);
    return x->sin6_port == y->sin6_port && x->sin6_scope_id == y->sin6_scope_id &&
           std::memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return true;
}

}  // namespace internal
}  // namespace rdmarpc
