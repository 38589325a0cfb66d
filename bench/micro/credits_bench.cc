// Credit accounting (runtime/transport/credits.h) as one loop thread does it
// per message: check, consume, piggy-back owed credits, take returned ones.
#include "benchmark/benchmark.h"
#include "runtime/transport/credits.h"

namespace rdmarpc {
namespace internal {
namespace {

// One request/response exchange seen from one side: send a message (check
// and consume a credit, put owed credits in its header), then receive the
// reply (credit returned in its header, one receive re-posted and owed).
void BM_CreditWindowRoundTrip(benchmark::State& state) {
  CreditWindow window(/*peer_recv_depth=*/64, /*local_recv_depth=*/64);
  for (auto _ : state) {
    if (window.CanSendMessage()) {
      window.Consume();
      uint16_t owed = window.TakeOwed();
      benchmark::DoNotOptimize(owed);
    }
    window.OnReturned(1);
    window.OnReposted(1);
    bool explicit_return = window.ShouldSendCreditMessage();
    benchmark::DoNotOptimize(explicit_return);
  }
  if (window.available() != 64) {
    state.SkipWithError("credits leaked: the window should be back at 64");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CreditWindowRoundTrip);

// One-sided traffic: the window drains to the reserve, then one returned
// batch refills it (the explicit kCredit path), per state.range(0) messages.
void BM_CreditWindowDrainRefill(benchmark::State& state) {
  const int depth = static_cast<int>(state.range(0));
  CreditWindow window(depth, depth);
  for (auto _ : state) {
    int sent = 0;
    while (window.CanSendMessage()) {
      window.Consume();
      ++sent;
    }
    window.OnReturned(sent);
    benchmark::DoNotOptimize(sent);
  }
  state.SetItemsProcessed(state.iterations() * (depth - 1));
}
BENCHMARK(BM_CreditWindowDrainRefill)->Arg(16)->Arg(64)->Arg(256);

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
