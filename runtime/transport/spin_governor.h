// spin_governor.h: when a completion loop busy-polls and when it sleeps.
//
// Busy-polling a CQ saves the wake-up of a thread that sleeps on its
// completion channel (an epoll_wait return, a futex wake: 5-50 µs on a busy
// host) at the price of a core for as long as it spins. Two things decide
// whether that pays, and each has a class here:
//
//  * SpinSlots (process-wide): at most one spinning thread per CPU the
//    process may run on. A spinner sharing its core with another spinner
//    of the same process takes time from the very thread it may be waiting
//    for (a leading caller from the loop thread, a server worker from the
//    handler it posted to), so a poller that finds every slot taken sleeps
//    instead. The count is sched_getaffinity(2)'s CPUs at first use, or
//    --rdmarpc_spinning_threads. A slot is taken when a poller starts to
//    spin and given back when it sleeps or hands the poller over, not per
//    message: a busy loop keeps its slot.
//  * AdaptiveSpin (per loop): how long a wait for calls in flight is spun
//    before sleeping, learnt from the loop's recent such waits, as glibc's
//    adaptive mutex learns its spin count from recent spins (nptl's
//    PTHREAD_MUTEX_ADAPTIVE_NP: an average moved 1/8 towards each sample).
//    A wait runs from the loop running out of work, with calls in flight,
//    to the work that ended it, spun or slept through. While the average
//    is at most kSpinPaysBelow the budget is kSpinHeadroom times it (room
//    for the tail); above, spinning through the waits would cost more CPU
//    than a wake-up costs latency, and the budget drops to the loop's idle
//    window (--rdmarpc_spin_us), which still catches every fast answer. So
//    a client loop behind a slow handler spins 50 µs per wait, not the
//    2 ms kMaxInFlightSpin allows. Waits with nothing in flight (a server
//    between requests) keep the idle window: re-posting receives and
//    arming the CQ at every sleep cost more than spinning that long. A
//    caller leading its own synchronous call keeps the 2 ms bound: it is
//    blocked on that call anyway, and handing its wait to the loop thread
//    costs a wake-up each way (measured: no gain in bench/run.sh's latency
//    runs, a higher p99).
//
// Threads: SpinSlots from any thread; an AdaptiveSpin only from its loop's
// poller holder.
#ifndef RDMARPC_RUNTIME_TRANSPORT_SPIN_GOVERNOR_H_
#define RDMARPC_RUNTIME_TRANSPORT_SPIN_GOVERNOR_H_

#include <algorithm>
#include <atomic>

#include "absl/time/time.h"

namespace rdmarpc {
namespace internal {

class SpinSlots {
 public:
  // `capacity` < 1 means no limit.
  explicit SpinSlots(int capacity) : capacity_(capacity) {}
  SpinSlots(const SpinSlots&) = delete;
  SpinSlots& operator=(const SpinSlots&) = delete;

  // This process's slots: --rdmarpc_spinning_threads, or (when that is 0)
  // the CPUs of this process's affinity mask when first called; -1: no
  // limit.
  static SpinSlots& Process();

  // True when a slot was free (and is now the caller's until Release).
  bool TryAcquire() {
    if (capacity_ < 1) return true;
    int n = in_use_.load(std::memory_order_relaxed);
    while (n < capacity_) {
      if (in_use_.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel)) return true;
    }
    return false;
  }
  // Gives back a slot TryAcquire returned true for.
  void Release() {
    if (capacity_ >= 1) in_use_.fetch_sub(1, std::memory_order_acq_rel);
  }
  int capacity() const { return capacity_; }
  int in_use() const { return in_use_.load(std::memory_order_relaxed); }

 private:
  const int capacity_;
  std::atomic<int> in_use_{0};
};

// Holds one SpinSlots slot, or none; single-threaded (a poller's local).
class SpinSlot {
 public:
  explicit SpinSlot(SpinSlots* slots) : slots_(slots) {}
  SpinSlot(const SpinSlot&) = delete;
  SpinSlot& operator=(const SpinSlot&) = delete;
  ~SpinSlot() { Release(); }
  // True when held now (taken before, or taken by this call).
  bool Acquire() { return held_ || (held_ = slots_->TryAcquire()); }
  void Release() {
    if (held_) slots_->Release();
    held_ = false;
  }
  bool held() const { return held_; }

 private:
  SpinSlots* const slots_;
  bool held_ = false;
};

// An average wait above this makes a loop spin only its idle window. A
// sleep and its wake-up cost 5-50 µs here (an epoll_wait return, a peer's
// doorbell, re-posted receives); spinning through waits of 250 µs costs
// 5-50x that in CPU. Chosen, not measured to be optimal: 100 µs made the
// sanitizer build's ~100 µs round trips sleep on every call
// (rpc_hotpath_test's verbs budget went from 0.2 to 1.7 ibv_post_recv per
// call).
inline constexpr absl::Duration kSpinPaysBelow = absl::Microseconds(250);
// The budget is this many times the average wait (room for the tail of
// the waits, whose average is far below their p99: 32 B calls here have a
// p99 4-6x their p50, bench/HISTORY.md).
inline constexpr int kSpinHeadroom = 16;

class AdaptiveSpin {
 public:
  // `floor`: the loop's idle window, the least a wait is spun; `cap`: the
  // most (kMaxInFlightSpin). Both 0 when spinning is off.
  AdaptiveSpin(absl::Duration floor, absl::Duration cap)
      : floor_(std::min(floor, cap)), cap_(cap) {}

  // How long a wait with calls in flight is spun now: `cap` until the first
  // wait was seen.
  absl::Duration in_flight_budget() const {
    if (!seen_) return cap_;
    if (average_ > kSpinPaysBelow) return floor_;
    return std::clamp(average_ * kSpinHeadroom, floor_, cap_);
  }
  // A wait with calls in flight lasted `waited` (spun or slept through; a
  // lower bound when the spinner gave up). Samples count up to twice
  // kSpinPaysBelow, so one long stall is forgotten within a few calls.
  void OnInFlightWait(absl::Duration waited) {
    const absl::Duration sample = std::min(waited, 2 * kSpinPaysBelow);
    average_ = seen_ ? average_ + (sample - average_) / 8 : sample;
    seen_ = true;
  }
  absl::Duration average_wait() const { return average_; }

 private:
  const absl::Duration floor_;
  const absl::Duration cap_;
  absl::Duration average_ = absl::ZeroDuration();
  bool seen_ = false;  // a wait was seen
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_SPIN_GOVERNOR_H_
