// Stub call overhead: a generated BenchEcho::Stub calling through a loopback
// "transport" that answers at once (loopback_unary_call.cc), so the time is
// the stub, the ClientContext and protobuf serialisation of the request and
// parsing of the response — what a call costs before and after any verbs.
//
//   BM_StubBlockingCall/N   stub->Echo(&context, request, &response)
//   BM_StubAsyncCall/N      stub->async()->Echo(..., done), done run inline
//
// N = payload bytes. items/s = calls/s; bytes/s counts the payload once.
// Built as its own binary (rdmarpc_stub_bench) because the loopback defines
// the runtime's call entry points and so cannot link with the runtime.
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "bench_echo.pb.h"
#include "bench_echo.rdmarpc.pb.h"
#include "benchmark/benchmark.h"
#include "rdmarpc/client_context.h"

namespace rdmarpc {
namespace bench {
namespace {

void BM_StubBlockingCall(benchmark::State& state) {
  const size_t payload_bytes = static_cast<size_t>(state.range(0));
  // No Channel: the loopback never looks at it.
  std::unique_ptr<BenchEcho::Stub> stub = BenchEcho::NewStub(nullptr);
  EchoRequest request;
  request.set_payload(std::string(payload_bytes, 'q'));
  EchoResponse response;
  for (auto _ : state) {
    ClientContext context;
    absl::Status status = stub->Echo(&context, request, &response);
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  if (response.payload() != request.payload()) state.SkipWithError("echo mismatch");
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(payload_bytes));
}
BENCHMARK(BM_StubBlockingCall)->Arg(32)->Arg(4096)->Arg(65536);

void BM_StubAsyncCall(benchmark::State& state) {
  const size_t payload_bytes = static_cast<size_t>(state.range(0));
  std::unique_ptr<BenchEcho::Stub> stub = BenchEcho::NewStub(nullptr);
  EchoRequest request;
  request.set_payload(std::string(payload_bytes, 'q'));
  EchoResponse response;
  int64_t ok_calls = 0;
  for (auto _ : state) {
    ClientContext context;
    stub->async()->Echo(&context, request, &response,
                        [&ok_calls](absl::Status status) { ok_calls += status.ok() ? 1 : 0; });
  }
  if (ok_calls != static_cast<int64_t>(state.iterations()) ||
      response.payload() != request.payload()) {
    state.SkipWithError("a call failed or the echo did not match");
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(payload_bytes));
}
BENCHMARK(BM_StubAsyncCall)->Arg(32)->Arg(4096)->Arg(65536);

}  // namespace
}  // namespace bench
}  // namespace rdmarpc
