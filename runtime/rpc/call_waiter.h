// call_waiter.h: how a synchronous caller waits for its call without a lock
// on the fast path.
//
// The call is completed by whichever thread holds the loop's poller. When
// that is the caller itself (it led the loop, see event_loop.h),
// Notify is one atomic exchange and Wait returns at once. Only a caller that
// must sleep (another thread polls for it) uses the futex: the classic
// three-state futex event (Drepper, "Futexes Are Tricky", 2011).
#ifndef RDMARPC_RUNTIME_RPC_CALL_WAITER_H_
#define RDMARPC_RUNTIME_RPC_CALL_WAITER_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>

namespace rdmarpc {
namespace internal {

class CallWaiter {
 public:
  // Any thread, once. The waiter may return (and free this object) as soon
  // as the exchange is done; nothing after it touches `this` but the wake.
  void Notify() {
    if (state_.exchange(kDone, std::memory_order_acq_rel) == kSleeping) {
      syscall(SYS_futex, reinterpret_cast<int*>(&state_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
              nullptr, 0);
    }
  }
  bool done() const { return state_.load(std::memory_order_acquire) == kDone; }
  // The waiting thread: returns once Notify ran.
  void Wait() {
    int expected = kPending;
    // Fails only when Notify already ran (state is kDone): then no sleep.
    state_.compare_exchange_strong(expected, kSleeping, std::memory_order_acq_rel);
    while (state_.load(std::memory_order_acquire) == kSleeping) {
      syscall(SYS_futex, reinterpret_cast<int*>(&state_), FUTEX_WAIT_PRIVATE, kSleeping, nullptr,
              nullptr, 0);
    }
  }

 private:
  static constexpr int kPending = 0;
  static constexpr int kDone = 1;
  static constexpr int kSleeping = 2;
  std::atomic<int> state_{kPending};
  static_assert(sizeof(std::atomic<int>) == sizeof(int), "futex word");
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_CALL_WAITER_H_
