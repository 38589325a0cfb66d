// spin_pause.h: SpinPause — what a busy-poll loop does between two polls.
//
// Yielding (std::this_thread::yield(), a sched_yield(2) syscall) on every
// empty poll costs 12 % of the client's cycles in a 32 B latency profile
// when each process has its own core and nothing else to run. SpinPause
// instead issues a CPU pause hint (x86
// `pause`, AArch64 `yield`; the spin-wait hint Intel's optimisation manual
// recommends, as the Linux kernel's cpu_relax() and DPDK's rte_pause() do) and
// yields the core only every yield_every-th call, so a thread the spinner
// waits for on the same core (softrdma's progress thread, a leading caller,
// another process) still runs within a few microseconds.
//
// The interval adapts to whether anyone else wants the core. A yield that
// comes back within kQuietYieldNanos found no other thread to run (a
// sched_yield with nothing else runnable took 0.42 us on the 2-vCPU VM of
// bench/README.md, where a server spinning on a core of its own spent 25 % of
// its cycles in such yields, and a message that arrives during one waits
// for it to end): the next interval is twice as long, up to kMaxYieldEvery
// calls. A yield that took longer (another thread ran) brings the interval
// back to yield_every. So a spinner alone on its core yields about every
// 20 us, and one that shares it every yield_every polls, as before.
//
// Not thread-safe: one SpinPause per spinning loop (a local variable).
#ifndef RDMARPC_RUNTIME_TRANSPORT_SPIN_PAUSE_H_
#define RDMARPC_RUNTIME_TRANSPORT_SPIN_PAUSE_H_

#include <algorithm>
#include <cstdint>
#include <thread>

#include "absl/time/clock.h"

namespace rdmarpc {
namespace internal {

// A CPU spin-wait hint; a compiler barrier where the architecture has none.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  asm volatile("" ::: "memory");
#endif
}

// Calls between two sched_yield(2)s by default (--rdmarpc_spin_yield_every)
// while other threads want the core. One empty poll iteration costs about
// 0.1-0.3 us here (an ibv_poll_cq, a pause), so a thread sharing the core
// waits at most a few microseconds for it.
inline constexpr uint32_t kDefaultSpinYieldEvery = 16;
// The longest interval, in calls, that quiet yields stretch it to: about
// 20 us of polling at 0.08 us a call. Our own choice; a yield then costs
// 2 % of the spin.
inline constexpr uint32_t kMaxYieldEvery = 256;
// A yield back within this many ns found no other thread to run. Our own
// choice: about five times an idle sched_yield on the VM above; a
// context switch to another thread and back takes longer.
inline constexpr int64_t kQuietYieldNanos = 2000;

// sched_yield(2); returns the ns it took.
inline int64_t TimedYield() {
  const int64_t start = absl::GetCurrentTimeNanos();
  std::this_thread::yield();
  return absl::GetCurrentTimeNanos() - start;
}

class SpinPause {
 public:
  // `yield_every`: calls between two yields while the core is wanted; 0 and
  // 1 both yield on every call and do not stretch the interval. `yield`
  // gives the core up and returns how long it was away, in ns (tests pass
  // their own).
  explicit SpinPause(uint32_t yield_every, int64_t (*yield)() = &TimedYield)
      : yield_every_(yield_every == 0 ? 1 : yield_every),
        max_every_(yield_every_ <= 1 ? 1 : std::max(yield_every_, kMaxYieldEvery)),
        every_(yield_every_),
        yield_(yield) {}

  // One idle iteration: pause, or at the end of an interval yield the core.
  // Returns true when it yielded.
  bool Pause() {
    if (++calls_ >= every_) {
      calls_ = 0;
      every_ = yield_() < kQuietYieldNanos ? std::min(every_ * 2, max_every_) : yield_every_;
      return true;
    }
    CpuRelax();
    return false;
  }
  // Calls until the next yield, counted from the last one.
  uint32_t interval() const { return every_; }

 private:
  const uint32_t yield_every_;
  const uint32_t max_every_;
  uint32_t every_;
  int64_t (*const yield_)();
  uint32_t calls_ = 0;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_SPIN_PAUSE_H_
