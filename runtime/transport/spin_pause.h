// spin_pause.h: SpinPause — what a busy-poll loop does between two polls.
//
// Yielding (std::this_thread::yield(), a sched_yield(2) syscall) on every
// empty poll costs 12 % of the client's cycles in a 32 B latency profile
// when each process has its own core and nothing else to run. SpinPause
// instead issues a CPU pause hint (x86
// `pause`, AArch64 `yield`; the spin-wait hint Intel's optimisation manual
// recommends, as the Linux kernel's cpu_relax() and DPDK's rte_pause() do) and
// yields the core only every kYieldEvery-th call, so a thread the spinner
// waits for on the same core (softrdma's progress thread, a leading caller,
// another process) still runs within a few microseconds.
//
// Not thread-safe: one SpinPause per spinning loop (a local variable).
#ifndef RDMARPC_RUNTIME_TRANSPORT_SPIN_PAUSE_H_
#define RDMARPC_RUNTIME_TRANSPORT_SPIN_PAUSE_H_

#include <cstdint>
#include <thread>

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

// Calls between two sched_yield(2)s by default (--rdmarpc_spin_yield_every).
// One empty poll iteration costs about 0.1-0.3 us here (an ibv_poll_cq under a
// mutex, a clock read), so a thread sharing the core waits at most a few
// microseconds for it.
inline constexpr uint32_t kDefaultSpinYieldEvery = 16;

class SpinPause {
 public:
  // `yield_every`: calls between two yields; 0 and 1 both yield on every
  // call.
  explicit SpinPause(uint32_t yield_every) : yield_every_(yield_every == 0 ? 1 : yield_every) {}

  // One idle iteration: pause, or every yield_every-th call yield the core.
  // Returns true when it yielded.
  bool Pause() {
    if (++calls_ >= yield_every_) {
      calls_ = 0;
      std::this_thread::yield();
      return true;
    }
    CpuRelax();
    return false;
  }

 private:
  const uint32_t yield_every_;
  uint32_t calls_ = 0;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_SPIN_PAUSE_H_
