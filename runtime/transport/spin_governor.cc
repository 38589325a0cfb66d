#include "runtime/transport/spin_governor.h"

#include <sched.h>

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
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
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
