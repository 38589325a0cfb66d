// reactor_gate.h: when a reactor's OnDone may run.
//
// gRPC's callback rule: OnDone runs once, after the call ended, every
// operation the reactor started has reacted, and every hold was removed. The
// gate counts those as one number: 1 for "the call has not ended", plus one
// per operation started and not reacted yet, plus one per hold. Whoever takes
// it to zero runs OnDone; nobody touches the reactor after that.
#ifndef RDMARPC_RUNTIME_RPC_REACTOR_GATE_H_
#define RDMARPC_RUNTIME_RPC_REACTOR_GATE_H_

#include <atomic>

namespace rdmarpc {
namespace internal {

class ReactorGate {
 public:
  // An operation started or a hold taken (any thread, before OnDone).
  void Add(int n = 1) { count_.fetch_add(n, std::memory_order_relaxed); }
  // An operation reacted, a hold was removed, or the call ended (once).
  // True when that was the last: the caller runs OnDone.
  bool Release() { return count_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

 private:
  std::atomic<int> count_{1};
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_REACTOR_GATE_H_
