// server_test_hooks.cc: see server_test_hooks.h.
#include "tests/testing/server_test_hooks.h"

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "runtime/rpc/server_hooks.h"
#include "runtime/transport/transport.h"

namespace rdmarpc {
namespace internal {
namespace {

class TestServerHooks final : public ServerHooks {
 public:
  absl::Duration RequestReadDelay() override {
    absl::MutexLock lock(&mu_);
    if (read_delay_count_ <= 0) return absl::ZeroDuration();
    --read_delay_count_;
    return read_delay_;
  }
  uint16_t ProtocolVersion() override {
    absl::MutexLock lock(&mu_);
    return version_ != 0 ? version_ : kProtocolVersion;
  }
  void SetReadDelay(absl::Duration delay, int count) {
    absl::MutexLock lock(&mu_);
    read_delay_ = delay;
    read_delay_count_ = count;
  }
  void SetVersion(uint16_t version) {
    absl::MutexLock lock(&mu_);
    version_ = version;
  }

 private:
  absl::Mutex mu_;
  absl::Duration read_delay_ ABSL_GUARDED_BY(mu_);
  int read_delay_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint16_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

TestServerHooks& Hooks() {
  static TestServerHooks* const hooks = [] {
    auto* h = new TestServerHooks;
    InstallServerHooks(h);
    return h;
  }();
  return *hooks;
}

// Installed before main, so every server of the test binary asks them.
[[maybe_unused]] const bool installed = (Hooks(), true);

}  // namespace

void SetServerRequestReadDelay(absl::Duration delay, int count) {
  Hooks().SetReadDelay(delay, count);
}

void SetServerProtocolVersionForTest(uint16_t version) { Hooks().SetVersion(version); }

}  // namespace internal
}  // namespace rdmarpc
