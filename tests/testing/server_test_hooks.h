// server_test_hooks.h: knobs tests turn on every server in the process,
// through the product's ServerHooks seam (runtime/rpc/server_hooks.h).
// Linking this library installs the hooks before main.
#ifndef RDMARPC_TESTS_TESTING_SERVER_TEST_HOOKS_H_
#define RDMARPC_TESTS_TESTING_SERVER_TEST_HOOKS_H_

#include <cstdint>

#include "absl/time/time.h"

namespace rdmarpc {
namespace internal {

// The next `count` rendezvous requests any server receives have the RDMA
// READ of their payload posted `delay` later. count 0 turns it off.
void SetServerRequestReadDelay(absl::Duration delay, int count);

// The protocol version servers accept and announce (0 = the real
// kProtocolVersion). Lets a test see a client meet a newer server.
void SetServerProtocolVersionForTest(uint16_t version);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_TESTING_SERVER_TEST_HOOKS_H_
