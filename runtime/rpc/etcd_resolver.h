// etcd_resolver.h: the built-in "etcd" resolver and the registration of a
// server under an etcd prefix (ServerOptions::register_target).
//
// Target: "etcd://HOST:PORT[,HOST:PORT...]/PREFIX" (etcd_client.h). A server
// registers its address as the key PREFIX/ADDRESS (value ADDRESS) with a
// lease of ServerOptions::register_ttl that it keeps alive, so a server that
// dies leaves the list when the lease expires; Shutdown revokes the lease
// before it drains. The resolver reads every key under PREFIX/ and then
// watches the prefix, reading it again at each change (and every
// ResolverArgs::refresh_interval regardless); after a failure it retries
// with gRPC's connection backoff, capped at 5 s.
#ifndef RDMARPC_RUNTIME_RPC_ETCD_RESOLVER_H_
#define RDMARPC_RUNTIME_RPC_ETCD_RESOLVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rdmarpc/resolver.h"
#include "runtime/rpc/etcd_client.h"

namespace rdmarpc {
namespace internal {

std::shared_ptr<ResolverFactory> MakeEtcdResolverFactory();

// A server's registration: started by Server::Start, ended (the key
// deleted) by Deregister or the destructor.
class EtcdRegistration {
 public:
  // Puts PREFIX/`address` under a fresh lease of `ttl` (whole seconds, at
  // least 1) and keeps the lease alive every ttl/3 from its own thread; a
  // lease that expired anyway (etcd unreachable for longer than ttl) is
  // granted again and the key put again. INVALID_ARGUMENT for a malformed
  // target; UNAVAILABLE when etcd does not answer.
  static absl::StatusOr<std::unique_ptr<EtcdRegistration>> Start(absl::string_view target,
                                                                 std::string address,
                                                                 absl::Duration ttl);
  ~EtcdRegistration();
  // Revokes the lease (the key goes with it) and stops the keepalives.
  // Idempotent; any thread.
  void Deregister();

 private:
  EtcdRegistration(EtcdTarget target, std::string address, int64_t ttl_seconds);
  absl::Status Register();
  void KeepAliveLoop();

  const EtcdTarget target_;
  const std::string address_;
  const int64_t ttl_seconds_;
  EtcdClient client_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_ETCD_RESOLVER_H_
