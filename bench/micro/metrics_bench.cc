// The per-call cost of call metrics (rdmarpc/metrics.h), and of a scrape.
//
//   BM_ClientMetricsHooks, BM_ServerMetricsHooks: what one side of a unary
//     call pays for the metrics interceptor alone, without the network: the
//     chain and the interceptor (allocations), the method's registry lookup,
//     the five hooks of a unary call (started, one message each way, the
//     code and the histogram), deleting them. Compare with
//     BM_*InterceptorHooks/1 (interceptor_bench.cc), a trivial interceptor
//     on the same path.
//   BM_EchoWithMetrics/M: BM_Echo/32's synchronous call end to end with
//     metrics off (M = 0) and on both sides (M = 1).
//   BM_RenderMetricsText/N: one /metrics body with N methods' series
//     registered (what a scrape costs the process).
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench_echo.rdmarpc.pb.h"
#include "benchmark/benchmark.h"
#include "echo_loop.h"
#include "hook_loops.h"
#include "rdmarpc/metrics.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/rpc/context_access.h"
#include "runtime/rpc/interceptor_chain.h"
#include "runtime/rpc/metrics.h"

namespace rdmarpc {
namespace bench {
namespace {

const std::string kMethod = "/rdmarpc.bench.BenchEcho/Echo";

void BM_ClientMetricsHooks(benchmark::State& state) {
  internal::InterceptorChain::ClientFactories factories{ClientMetricsInterceptorFactory()};
  RunClientHooks(state, factories, kMethod);
}
BENCHMARK(BM_ClientMetricsHooks);

void BM_ServerMetricsHooks(benchmark::State& state) {
  internal::InterceptorChain::ServerFactories factories{ServerMetricsInterceptorFactory()};
  const std::string peer = "127.0.0.1:1";
  ServerContext context;
  internal::ServerContextAccess::Init(&context, &kMethod, &peer, absl::InfiniteFuture(), nullptr);
  RunServerHooks(state, factories, &context);
}
BENCHMARK(BM_ServerMetricsHooks);

void BM_EchoWithMetrics(benchmark::State& state) {
  ServerOptions so;
  ChannelOptions co;
  so.enable_metrics = co.enable_metrics = state.range(0) != 0;
  RunEchoLoop(state, so, co);
}
BENCHMARK(BM_EchoWithMetrics)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_RenderMetricsText(benchmark::State& state) {
  for (int i = 0; i < state.range(0); ++i) {
    internal::InitializeServerMethodMetrics(absl::StrCat("/bench.Render/M", i),
                                            internal::RpcKind::kUnary);
  }
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text = RenderMetricsText();
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_RenderMetricsText)->Arg(10)->Arg(100)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace bench
}  // namespace rdmarpc
