// Completion dispatch on the client: what happens between ibv_poll_cq
// handing the loop a response's ibv_wc and the call's `done` having run,
// minus the verbs themselves.
//
// Real runtime code on the measured path: DecodeImm of the wc's imm_data
// (runtime/transport/header.h), the call reached through its ResponseSink
// (as Connection::OnRecvCompletion does once it found the slot,
// call_slots.cc), and ClientCall::OnResponse → Finish (runtime/rpc/channel.cc):
// parse the response protobuf, run `done`, delete the call. The loop's
// qp_num → Connection lookup is the same container the EventLoop uses
// (absl::flat_hash_map<uint32_t, ...>, event_loop.h), holding the
// sink directly.
//
//   BM_CompletionDispatch/async      `done` as an async caller's callback
//   BM_CompletionDispatch/blocking   `done` as BlockingUnaryCall's: store the
//                                    status, Notify (nobody waiting yet)
//   BM_CompletionHandoff             the blocking case across threads: a
//                                    real EventLoop thread dispatches, the caller
//                                    sleeps in WaitForNotification; one
//                                    iteration = Post to the loop + dispatch
//                                    + wake the caller (two thread wake-ups)
//
// Each iteration also allocates the ClientCall (AsyncUnaryCall does, and
// Finish deletes it); BM_ClientCallNewDelete is that share alone.
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "bench_echo.pb.h"
#include "benchmark/benchmark.h"
#include "runtime/rpc/channel_impl.h"
#include "runtime/transport/event_loop.h"
#include "runtime/transport/header.h"

namespace rdmarpc {
namespace internal {
namespace {

constexpr uint32_t kQpNum = 0x1234;
constexpr uint16_t kSlot = 7;
constexpr uint16_t kGeneration = 0x2a;

// The wc of an eager response to slot kSlot, as ibv_poll_cq returns it.
ibv_wc ResponseWc() {
  ibv_wc wc = {};
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RECV;
  wc.wc_flags = IBV_WC_WITH_IMM;
  wc.qp_num = kQpNum;
  Imm imm;
  imm.kind = MsgKind::kResponse;
  imm.generation = kGeneration;
  imm.slot = kSlot;
  wc.imm_data = htonl(EncodeImm(imm));
  wc.byte_len = 64;
  return wc;
}

// The serialised 32 B echo response the call parses.
std::string ResponseBytes() {
  bench::EchoResponse response;
  response.set_payload(std::string(32, 'r'));
  return response.SerializeAsString();
}

// One dispatch: wc → sink → ClientCall::OnResponse. Returns false when the
// imm or the lookup did not find the call (never, here).
bool Dispatch(const ibv_wc& wc, absl::flat_hash_map<uint32_t, ResponseSink*>& qp_map,
              absl::string_view payload) {
  absl::StatusOr<Imm> imm = DecodeImm(ntohl(wc.imm_data));
  if (!imm.ok() || imm->kind != MsgKind::kResponse || imm->slot != kSlot) return false;
  auto it = qp_map.find(wc.qp_num);
  if (it == qp_map.end()) return false;
  it->second->OnResponse(absl::StatusCode::kOk, "", payload);
  return true;
}

void BM_CompletionDispatch(benchmark::State& state) {
  const bool blocking = state.range(0) == 1;
  const ibv_wc wc = ResponseWc();
  const std::string payload = ResponseBytes();
  bench::EchoResponse response;
  absl::flat_hash_map<uint32_t, ResponseSink*> qp_map;
  for (uint32_t q = 0; q < 64; ++q) qp_map[kQpNum + q] = nullptr;  // a few connections
  int64_t completed = 0;
  for (auto _ : state) {
    auto* call = new ClientCall();  // deleted by Finish
    call->method = "/rdmarpc.bench.BenchEcho/Echo";
    call->response = &response;
    absl::Notification finished;
    absl::Status result;
    if (blocking) {
      call->done = [&finished, &result](absl::Status s) {
        result = std::move(s);
        finished.Notify();
      };
    } else {
      call->done = [&completed](absl::Status s) { completed += s.ok() ? 1 : 0; };
    }
    qp_map[kQpNum] = call;
    if (!Dispatch(wc, qp_map, payload)) {
      state.SkipWithError("dispatch did not find the call");
      delete call;
      break;
    }
    benchmark::DoNotOptimize(response);
  }
  if (response.payload().size() != 32) state.SkipWithError("response did not parse");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CompletionDispatch)->ArgName("blocking")->Arg(0)->Arg(1);

void BM_ClientCallNewDelete(benchmark::State& state) {
  bench::EchoResponse response;
  for (auto _ : state) {
    auto* call = new ClientCall();
    call->method = "/rdmarpc.bench.BenchEcho/Echo";
    call->response = &response;
    call->done = [](absl::Status) {};
    benchmark::DoNotOptimize(call);
    delete call;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ClientCallNewDelete);

void BM_CompletionHandoff(benchmark::State& state) {
  EventLoop loop("bench-loop");
  absl::Status started = loop.Start();
  if (!started.ok()) {
    state.SkipWithError(started.ToString().c_str());
    return;
  }
  const ibv_wc wc = ResponseWc();
  const std::string payload = ResponseBytes();
  bench::EchoResponse response;
  // Loop-thread state, touched only by posted tasks.
  auto qp_map = std::make_unique<absl::flat_hash_map<uint32_t, ResponseSink*>>();
  bool lost = false;
  for (auto _ : state) {
    absl::Notification finished;
    absl::Status result;
    auto* call = new ClientCall();
    call->method = "/rdmarpc.bench.BenchEcho/Echo";
    call->response = &response;
    call->done = [&finished, &result](absl::Status s) {
      result = std::move(s);
      finished.Notify();
    };
    loop.Post([&, call] {
      (*qp_map)[kQpNum] = call;
      if (!Dispatch(wc, *qp_map, payload)) {
        lost = true;
        call->OnFailure(absl::InternalError("lost"));
      }
    });
    finished.WaitForNotification();
    if (!result.ok() || lost) {
      state.SkipWithError("dispatch failed");
      break;
    }
  }
  loop.Stop();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CompletionHandoff)->UseRealTime();

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
