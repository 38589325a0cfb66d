// server_test_hooks.h: knobs tests turn on the server's transport. Not for
// production use.
#ifndef RDMARPC_RUNTIME_RPC_SERVER_TEST_HOOKS_H_
#define RDMARPC_RUNTIME_RPC_SERVER_TEST_HOOKS_H_

#include <cstdint>

#include "absl/time/time.h"

namespace rdmarpc {
namespace internal {

// Process-wide: the next `count` rendezvous requests any server receives have
// the RDMA READ of their payload posted `delay` later, by a timer on the
// worker (the worker keeps serving meanwhile). count 0 turns it off.
void SetServerRequestReadDelay(absl::Duration delay, int count);
// Consumes one delayed READ: the delay to apply now, or zero.
absl::Duration TakeServerRequestReadDelay();

// Process-wide: the protocol version servers accept and announce (0 = the
// real kProtocolVersion). Lets a test see a client meet a newer server.
void SetServerProtocolVersionForTest(uint16_t version);
uint16_t ServerProtocolVersion();

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_SERVER_TEST_HOOKS_H_
