// resolver_registry.cc: see resolver_registry.h.
#include "runtime/rpc/resolver_registry.h"

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "runtime/rpc/dns_resolver.h"
#include "runtime/rpc/etcd_resolver.h"

namespace rdmarpc {
namespace internal {
namespace {

struct Registry {
  absl::Mutex mu;
  absl::flat_hash_map<std::string, std::shared_ptr<ResolverFactory>> by_scheme ABSL_GUARDED_BY(mu);
};

// Never destroyed: channels may be made and destroyed during exit.
Registry& Registered() {
  static Registry* const registry = [] {
    auto* r = new Registry;
    absl::MutexLock lock(&r->mu);
    for (std::shared_ptr<ResolverFactory> f :
         {MakeDnsResolverFactory(), MakeEtcdResolverFactory()}) {
      r->by_scheme.emplace(f->scheme(), std::move(f));
    }
    return r;
  }();
  return *registry;
}

// RFC 3986: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
bool ValidScheme(absl::string_view s) {
  if (s.empty() || !absl::ascii_isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace

std::shared_ptr<ResolverFactory> FindResolverFactory(absl::string_view target) {
  const size_t colon = target.find(':');
  if (colon == absl::string_view::npos) return nullptr;
  const std::string scheme = absl::AsciiStrToLower(target.substr(0, colon));
  Registry& r = Registered();
  absl::MutexLock lock(&r.mu);
  auto it = r.by_scheme.find(scheme);
  return it == r.by_scheme.end() ? nullptr : it->second;
}

}  // namespace internal

absl::Status RegisterResolverFactory(std::unique_ptr<ResolverFactory> factory) {
  if (factory == nullptr)
    return absl::InvalidArgumentError("RegisterResolverFactory: null factory");
  const std::string scheme = factory->scheme();
  if (!internal::ValidScheme(scheme)) {
    return absl::InvalidArgumentError(
        absl::StrCat("resolver scheme \"", scheme,
                     "\" is not a URI scheme (a letter, then letters, digits, '+', '-', '.')"));
  }
  const std::string lower = absl::AsciiStrToLower(scheme);
  if (lower == "ipv4" || lower == "ipv6") {
    return absl::InvalidArgumentError(
        absl::StrCat("resolver scheme \"", scheme, "\" is taken by static address lists"));
  }
  internal::Registry& r = internal::Registered();
  absl::MutexLock lock(&r.mu);
  r.by_scheme[lower] = std::shared_ptr<ResolverFactory>(std::move(factory));
  return absl::OkStatus();
}

}  // namespace rdmarpc
