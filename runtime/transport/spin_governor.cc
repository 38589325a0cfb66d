#include "runtime/transport/spin_governor.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include "gflags/gflags.h"

DEFINE_int32(rdmarpc_spinning_threads, 0,
             "Most rdmarpc completion loops (and callers driving their own calls) of this "
             "process that busy-poll at once; a loop that finds them all spinning sleeps on "
             "its completion channel instead. 0 = one per CPU this process may run on "
             "(sched_getaffinity, read at first use); -1 = no limit. See spin_governor.h.");

namespace rdmarpc {
namespace internal {
namespace {

int AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  // EINVAL on a host with more CPUs than a cpu_set_t holds (1024): every
  // online CPU then.
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return std::max(1u, std::thread::hardware_concurrency());
  }
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace

SpinSlots& SpinSlots::Process() {
  static SpinSlots* const slots = [] {
    const int flag = FLAGS_rdmarpc_spinning_threads;
    return new SpinSlots(flag == 0 ? AffinityCpus() : flag);
  }();
  return *slots;
}

}  // namespace internal
}  // namespace rdmarpc
