// hook_loops.h: the timed loops of the interceptor-cost benchmarks
// (interceptor_bench.cc, metrics_bench.cc): per iteration, the interceptor
// chain of one unary call made from `factories` and the five hooks such a
// call runs on that side, with a 32 B message each way, then the chain's
// end. An empty `factories` is what a channel or server without
// interceptors does: nothing.
#ifndef RDMARPC_BENCH_MICRO_HOOK_LOOPS_H_
#define RDMARPC_BENCH_MICRO_HOOK_LOOPS_H_

#include "absl/strings/string_view.h"
#include "benchmark/benchmark.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/rpc/interceptor_chain.h"

namespace rdmarpc {
namespace bench {

// Client side of calls to `method` (a fresh ClientContext each).
void RunClientHooks(benchmark::State& state,
                    const internal::InterceptorChain::ClientFactories& factories,
                    absl::string_view method);
// Server side, in `context` (which names the method).
void RunServerHooks(benchmark::State& state,
                    const internal::InterceptorChain::ServerFactories& factories,
                    ServerContext* context);

}  // namespace bench
}  // namespace rdmarpc

#endif  // RDMARPC_BENCH_MICRO_HOOK_LOOPS_H_
