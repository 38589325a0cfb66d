// The per-call cost of interceptors (rdmarpc/interceptor.h).
//
//   BM_ClientInterceptorHooks/N, BM_ServerInterceptorHooks/N: the CPU cost a
//     unary call pays on one side for N trivial interceptors, without the
//     network: making the chain and its N interceptors (the allocations),
//     then the hooks a unary call runs (client: PRE_SEND_INITIAL_METADATA,
//     PRE_SEND_MESSAGE, POST_RECV_INITIAL_METADATA, POST_RECV_MESSAGE,
//     POST_RECV_STATUS; server: POST_RECV_INITIAL_METADATA,
//     POST_RECV_MESSAGE, PRE_SEND_INITIAL_METADATA, PRE_SEND_MESSAGE,
//     PRE_SEND_STATUS), then deleting them. N = 0 is the branch a channel or
//     server without interceptors takes (an empty vector: no chain at all).
//   BM_EchoWithInterceptors/N: BM_Echo/32's end-to-end synchronous call with
//     N trivial interceptors on the client and N on the server.
//
// The trivial interceptor counts the hooks it saw (one add), so that the
// compiler keeps the calls.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench_echo.rdmarpc.pb.h"
#include "benchmark/benchmark.h"
#include "echo_loop.h"
#include "hook_loops.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/rpc/interceptor_chain.h"

namespace rdmarpc {
namespace bench {
namespace {

using experimental::InterceptorBatchMethods;

class Counting final : public experimental::Interceptor {
 public:
  explicit Counting(size_t* hooks) : hooks_(hooks) {}
  void Intercept(InterceptorBatchMethods*) override { ++*hooks_; }

 private:
  size_t* hooks_;
};

class CountingFactory final : public experimental::ClientInterceptorFactoryInterface,
                              public experimental::ServerInterceptorFactoryInterface {
 public:
  experimental::Interceptor* CreateClientInterceptor(experimental::ClientRpcInfo*) override {
    return new Counting(&hooks_);
  }
  experimental::Interceptor* CreateServerInterceptor(experimental::ServerRpcInfo*) override {
    return new Counting(&hooks_);
  }
  size_t hooks() const { return hooks_; }

 private:
  size_t hooks_ = 0;  // one thread per benchmark; the echo's are serialised by the call
};

constexpr char kMethod[] = "/rdmarpc.bench.BenchEcho/Echo";

void BM_ClientInterceptorHooks(benchmark::State& state) {
  auto factory = std::make_shared<CountingFactory>();
  internal::InterceptorChain::ClientFactories factories(static_cast<size_t>(state.range(0)),
                                                        factory);
  RunClientHooks(state, factories, kMethod);
  state.counters["hooks_per_call"] =
      state.iterations() == 0 ? 0 : static_cast<double>(factory->hooks()) / state.iterations();
}
BENCHMARK(BM_ClientInterceptorHooks)->Arg(0)->Arg(1)->Arg(3);

void BM_ServerInterceptorHooks(benchmark::State& state) {
  auto factory = std::make_shared<CountingFactory>();
  internal::InterceptorChain::ServerFactories factories(static_cast<size_t>(state.range(0)),
                                                        factory);
  ServerContext context;
  RunServerHooks(state, factories, &context);
  state.counters["hooks_per_call"] =
      state.iterations() == 0 ? 0 : static_cast<double>(factory->hooks()) / state.iterations();
}
BENCHMARK(BM_ServerInterceptorHooks)->Arg(0)->Arg(1)->Arg(3);

void BM_EchoWithInterceptors(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  auto factory = std::make_shared<CountingFactory>();
  ServerOptions so;
  ChannelOptions co;
  for (size_t i = 0; i < n; ++i) {
    so.interceptor_creators.push_back(factory);
    co.interceptor_creators.push_back(factory);
  }
  RunEchoLoop(state, so, co);
}
BENCHMARK(BM_EchoWithInterceptors)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace bench
}  // namespace rdmarpc
