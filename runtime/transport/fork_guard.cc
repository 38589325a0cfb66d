// fork_guard.cc: see fork_guard.h.
#include "runtime/transport/fork_guard.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

#include "absl/strings/str_cat.h"

namespace rdmarpc {
namespace internal {

namespace {
std::atomic<uint64_t> g_generation{0};
void AtForkChild() { g_generation.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

uint64_t ForkGeneration() {
  static const bool registered = [] {
    ::pthread_atfork(nullptr, nullptr, &AtForkChild);
    return true;
  }();
  (void)registered;
  return g_generation.load(std::memory_order_relaxed);
}

absl::Status InheritedAcrossFork(absl::string_view what, int owner_pid) {
  return absl::FailedPreconditionError(absl::StrCat(
      what, " was made by process ", owner_pid, " and cannot be used in its forked child ",
      ::getpid(),
      " (its engine threads and RDMA resources stay with the parent); make a new one in "
      "the child after exec"));
}

}  // namespace internal
}  // namespace rdmarpc
