// End to end in one process: a generated stub calls a Server over a Channel
// on 127.0.0.1, through softrdma (TCP underneath), one synchronous call at a
// time. 32 B goes eagerly (SEND_WITH_IMM); 1 MiB goes by rendezvous (RDMA
// READ of the request, RDMA WRITE_WITH_IMM of the response).
//
// The server, channel and first connection are set up before the timed loop,
// so each iteration is one call: issue, server handler, response. items/s is
// calls per second (1 / latency per call); bytes/s counts the payload once
// per call (the request; the response carries as much again).
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench_echo.rdmarpc.pb.h"
#include "benchmark/benchmark.h"
#include "loopback_setup.h"
#include "rdmarpc/rdmarpc.h"

namespace rdmarpc {
namespace bench {
namespace {

class EchoImpl final : public BenchEcho::Service {
 public:
  absl::Status Echo(ServerContext*, const EchoRequest& request, EchoResponse* response) override {
    response->set_payload(request.payload());
    return absl::OkStatus();
  }
};

// One Server with EchoImpl on 127.0.0.1:0 and a stub on a Channel to it.
using EchoSetup = LoopbackSetup<EchoImpl, BenchEcho>;

absl::Status CallOnce(BenchEcho::Stub& stub, const EchoRequest& request, EchoResponse* response) {
  ClientContext context;
  return stub.Echo(&context, request, response);
}

void BM_Echo(benchmark::State& state) {
  const size_t payload_bytes = static_cast<size_t>(state.range(0));
  EchoSetup setup;
  absl::Status status = setup.Start();
  if (!status.ok()) {
    state.SkipWithError(status.ToString().c_str());
    return;
  }
  EchoRequest request;
  request.set_payload(std::string(payload_bytes, 'e'));
  EchoResponse response;
  // Untimed first call: connects (rdma_cm handshake) and grows the
  // rendezvous pools, which later calls reuse.
  status = CallOnce(*setup.stub, request, &response);
  if (!status.ok() || response.payload() != request.payload()) {
    state.SkipWithError(absl::StrCat("first call: ", status.ToString()).c_str());
    return;
  }
  for (auto _ : state) {
    status = CallOnce(*setup.stub, request, &response);
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  // Checked once after the loop, not per call, to keep the comparison out of
  // the latency.
  if (status.ok() && response.payload() != request.payload()) {
    state.SkipWithError("the echoed payload differs from the request");
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(payload_bytes));
}
BENCHMARK(BM_Echo)->Arg(32)->Arg(1 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace bench
}  // namespace rdmarpc
