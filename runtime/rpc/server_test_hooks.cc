// server_test_hooks.cc: see server_test_hooks.h.
#include "runtime/rpc/server_test_hooks.h"

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "runtime/transport/transport.h"

namespace rdmarpc {
namespace internal {
namespace {
absl::Mutex hooks_mu(absl::kConstInit);
absl::Duration read_delay ABSL_GUARDED_BY(hooks_mu);
int read_delay_count ABSL_GUARDED_BY(hooks_mu) = 0;
uint16_t version_override ABSL_GUARDED_BY(hooks_mu) = 0;
}  // namespace

void SetServerRequestReadDelay(absl::Duration delay, int count) {
  absl::MutexLock lock(&hooks_mu);
  read_delay = delay;
  read_delay_count = count;
}

absl::Duration TakeServerRequestReadDelay() {
  absl::MutexLock lock(&hooks_mu);
  if (read_delay_count <= 0) return absl::ZeroDuration();
  --read_delay_count;
  return read_delay;
}

void SetServerProtocolVersionForTest(uint16_t version) {
  absl::MutexLock lock(&hooks_mu);
  version_override = version;
}

uint16_t ServerProtocolVersion() {
  absl::MutexLock lock(&hooks_mu);
  return version_override != 0 ? version_override : kProtocolVersion;
}

}  // namespace internal
}  // namespace rdmarpc
