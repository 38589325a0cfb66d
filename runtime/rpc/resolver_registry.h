// resolver_registry.h: the resolver factories by scheme (rdmarpc/resolver.h
// is the public side), with the built-in "dns" and "etcd".
#ifndef RDMARPC_RUNTIME_RPC_RESOLVER_REGISTRY_H_
#define RDMARPC_RUNTIME_RPC_RESOLVER_REGISTRY_H_

#include <memory>

#include "absl/strings/string_view.h"
#include "rdmarpc/resolver.h"

namespace rdmarpc {
namespace internal {

// The factory of `target`'s scheme (the text before its first ':'), or
// nullptr when no factory has that scheme (a static address list). Any
// thread.
std::shared_ptr<ResolverFactory> FindResolverFactory(absl::string_view target);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_RESOLVER_REGISTRY_H_
