// server_hooks.h: the seam through which tests change how servers behave
// (LevelDB's EnvWrapper idea). The product only asks an installed hooks
// object, if any: one atomic pointer load per connection request and per
// rendezvous request, no lock. The test library tests/testing/ installs
// one; production code never does.
#ifndef RDMARPC_RUNTIME_RPC_SERVER_HOOKS_H_
#define RDMARPC_RUNTIME_RPC_SERVER_HOOKS_H_

#include <cstdint>

#include "absl/time/time.h"

namespace rdmarpc {
namespace internal {

class ServerHooks {
 public:
  virtual ~ServerHooks() = default;
  // Asked once per rendezvous request a server receives: a positive result
  // delays posting its RDMA READ by that much (timer; the worker keeps
  // serving meanwhile).
  virtual absl::Duration RequestReadDelay() = 0;
  // The protocol version servers accept and announce.
  virtual uint16_t ProtocolVersion() = 0;
};

// Process-wide; `hooks` must outlive every server. nullptr removes them.
void InstallServerHooks(ServerHooks* hooks);
ServerHooks* InstalledServerHooks();

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_SERVER_HOOKS_H_
