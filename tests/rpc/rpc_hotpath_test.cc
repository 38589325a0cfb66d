// The per-call budget of the hot path, read from
// softrdma's verbs counters and the transport's own counters: after warm-up,
// a small call costs one ibv_post_send per message, one ibv_post_recv per 16
// messages, one signalled send WR in 16, no memory registration and no
// payload copy beyond serialisation. Client and server share this process,
// so each count covers both sides. Exact counts, nothing timed.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gflags/gflags.h"
#include "gtest/gtest.h"
#include "rdmarpc/metrics.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/engine_stats.h"
#include "runtime/transport/send_queue.h"
#include "runtime/transport/transport_stats.h"
#include "tests/rpc/metrics_text.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/test_service.h"

DECLARE_int64(rdmarpc_spin_us);
DECLARE_int32(rdmarpc_spinning_threads);

namespace rdmarpc {
namespace test {
namespace {

// Client and server share this process: their pollers (two server
// workers, the client's loop, a leading caller) outnumber its CPUs, so the
// spinning-slot limit (spin_governor.h) would put some to sleep between
// calls. The counts here are those of processes whose pollers each have a
// core; the slots are read once, at first use, so the limit goes before
// any test runs.
[[maybe_unused]] const bool kNoSpinningLimit = [] {
  FLAGS_rdmarpc_spinning_threads = -1;
  return true;
}();

// Keeps every completion loop spinning for the whole test, so no side goes
// idle between two calls (an idle loop re-posts its held-back receives
// early, which is correct but would make the counts depend on timing).
class SpinForTheTest {
 public:
  SpinForTheTest() : saved_(FLAGS_rdmarpc_spin_us) { FLAGS_rdmarpc_spin_us = 10'000'000; }
  ~SpinForTheTest() { FLAGS_rdmarpc_spin_us = saved_; }

 private:
  int64_t saved_;
};

struct Counts {
  softrdma::Stats verbs;
  internal::TransportStats transport;
};

// The fewest send buffers one registration adds (SendQueue::kFirstSendChunk).
constexpr int64_t SendQueueChunkFloor() { return internal::SendQueue::kFirstSendChunk; }

Counts Snapshot() { return Counts{softrdma::GetStats(), internal::GetTransportStats()}; }
void ResetCounters() {
  softrdma::ResetStats();
  internal::ResetTransportStats();
}

// `calls` blocking 32-byte echoes by one thread, reusing its messages.
// Makes `calls` blocking 32 B echoes one after another; returns how many of
// them took longer than `slow` (e.g. the caller was preempted).
int EchoLoop(Channel* channel, int calls, std::atomic<int>* failures,
             absl::Duration slow = absl::InfiniteDuration()) {
  EchoRequest req;
  req.set_text(std::string(32, 'p'));
  EchoResponse resp;
  int slow_calls = 0;
  for (int i = 0; i < calls; ++i) {
    ClientContext ctx;
    const absl::Time start = absl::Now();
    absl::Status s = Echo(channel, &ctx, req, &resp);
    if (absl::Now() - start > slow) ++slow_calls;
    if (!s.ok() || resp.text() != req.text()) failures->fetch_add(1);
  }
  return slow_calls;
}

constexpr int kWarmUp = 200;
constexpr int kCalls = 1600;  // a multiple of the re-post batch (16)

TEST(HotPath, SmallBlockingCallsMeetTheVerbsBudgetAtConcurrencyOne) {
  SpinForTheTest spin;
  EchoFixture f;
  std::atomic<int> failures{0};
  EchoLoop(f.channel.get(), kWarmUp, &failures);
  ResetCounters();
  EchoLoop(f.channel.get(), kCalls, &failures);
  const Counts c = Snapshot();
  ASSERT_EQ(failures.load(), 0);
  // One SEND_WITH_IMM per request and per response; credits ride in their
  // headers, so no kCredit message is ever needed.
  EXPECT_EQ(c.verbs.send_with_imm, 2u * kCalls);
  EXPECT_EQ(c.transport.send_wrs, 2u * kCalls);
  // Each message (~100 bytes with header and method) fits max_inline_data.
  EXPECT_EQ(c.transport.inline_send_wrs, 2u * kCalls);
  // One doorbell per message.
  EXPECT_EQ(c.verbs.post_send_calls, 2u * kCalls);
  // Receives go back 16 at a time on each side (+1 each for the phase the
  // warm-up left behind).
  EXPECT_LE(c.verbs.post_recv_calls, 2u * kCalls / 16 + 2);
  EXPECT_GE(c.verbs.post_recv_calls, 2u * kCalls / 16 - 2);
  // One signalled send WR in 16 on each side.
  EXPECT_LE(c.transport.signalled_send_wrs, 2u * kCalls / 16 + 2);
  EXPECT_EQ(c.verbs.reg_mr, 0u);
  // Requests are serialised straight into the registered send buffer and
  // responses too: no payload byte is copied by the runtime.
  EXPECT_EQ(c.transport.payload_bytes_copied, 0u);
  EXPECT_EQ(c.verbs.rnr_retries, 0u);
}

// Call metrics (an interceptor on each side) change no verb: the same
// messages, doorbells and registrations as without.
TEST(HotPath, CallMetricsKeepTheVerbsBudget) {
  SpinForTheTest spin;
  ServerOptions so;
  so.enable_metrics = true;
  ChannelOptions co;
  co.enable_metrics = true;
  EchoFixture f(so, co);
  std::atomic<int> failures{0};
  EchoLoop(f.channel.get(), kWarmUp, &failures);
  const Labels ok = With(CallLabels("rdmarpc.test.EchoService", "Echo", "unary"), "grpc_code", "OK");
  const double handled_before =
      MetricValue(RenderMetricsText(), "grpc_server_handled_total", ok).value_or(-1);
  ResetCounters();
  EchoLoop(f.channel.get(), kCalls, &failures);
  const Counts c = Snapshot();
  ASSERT_EQ(failures.load(), 0);
  // The metrics did run: every call counted.
  EXPECT_EQ(MetricValue(RenderMetricsText(), "grpc_server_handled_total", ok).value_or(-1) -
                handled_before,
            kCalls);
  EXPECT_EQ(c.verbs.send_with_imm, 2u * kCalls);
  EXPECT_EQ(c.transport.send_wrs, 2u * kCalls);
  EXPECT_EQ(c.transport.inline_send_wrs, 2u * kCalls);
  EXPECT_EQ(c.verbs.post_send_calls, 2u * kCalls);
  EXPECT_LE(c.verbs.post_recv_calls, 2u * kCalls / 16 + 2);
  EXPECT_LE(c.transport.signalled_send_wrs, 2u * kCalls / 16 + 2);
  EXPECT_EQ(c.verbs.reg_mr, 0u);
  EXPECT_EQ(c.transport.payload_bytes_copied, 0u);
  EXPECT_EQ(c.verbs.rnr_retries, 0u);
}

TEST(HotPath, ThirtyTwoBlockingCallersMeetTheVerbsBudget) {
  SpinForTheTest spin;
  EchoFixture f;
  constexpr int kThreads = 32;
  constexpr int kPerThread = kCalls / kThreads;
  std::atomic<int> failures{0};
  auto run = [&] {
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&] { EchoLoop(f.channel.get(), kPerThread, &failures); });
    }
    for (std::thread& t : threads) t.join();
  };
  // Warmed up at the same concurrency: send buffers are registered in
  // chunks as a connection first needs more of them (send_queue.h).
  run();
  const int64_t capacity_before = internal::SumEngineStats().send_buffers_capacity;
  ResetCounters();
  run();
  const Counts c = Snapshot();
  const int64_t capacity_grown = internal::SumEngineStats().send_buffers_capacity - capacity_before;
  ASSERT_EQ(failures.load(), 0);
  EXPECT_GE(c.verbs.send_with_imm, 2u * kCalls);
  // At most one doorbell per message (several when sends are ready together).
  EXPECT_LE(c.verbs.post_send_calls, c.verbs.send_with_imm);
  EXPECT_LE(c.verbs.post_recv_calls, c.verbs.recv / 16 + 2);
  EXPECT_LE(c.transport.signalled_send_wrs, c.transport.send_wrs / 16 + 2);
  // 32 callers may still reach a new high-water mark of messages in flight
  // on a connection: nothing is registered but the send-buffer chunks that
  // takes (each at least kFirstSendChunk buffers, send_queue.h).
  EXPECT_LE(static_cast<int64_t>(c.verbs.reg_mr) * SendQueueChunkFloor(), capacity_grown);
  EXPECT_EQ(c.transport.payload_bytes_copied, 0u);
  EXPECT_EQ(c.verbs.rnr_retries, 0u);
}

// A client loop whose leading callers did all the work goes to sleep with
// its CQ unarmed even though its connection's keepalive timer is pending: an
// armed CQ marks softrdma's same-host rings' consumer asleep, and the server
// then rang a TCP doorbell (and woke the client's loop thread) for every
// response. The server's loop spins throughout (its spin is read when it
// is made); the client's loop idles after 1 us, so before this was fixed
// hundreds of the calls below rang a doorbell (444 of 1600 under ASan).
TEST(HotPath, ClientLoopIdleBetweenBlockingCallsCostsTheServerNoDoorbell) {
  ResetCounters();  // qps_on_shm below counts this test's QPs only
  const int64_t saved = FLAGS_rdmarpc_spin_us;
  FLAGS_rdmarpc_spin_us = 10'000'000;
  EchoService service;
  Server server{ServerOptions()};
  ASSERT_TRUE(server.AddService(&service).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  FLAGS_rdmarpc_spin_us = 1;
  auto channel = CreateChannel(absl::StrCat("127.0.0.1:", server.port()), ChannelOptions());
  FLAGS_rdmarpc_spin_us = saved;
  ASSERT_TRUE(channel.ok()) << channel.status();
  std::atomic<int> failures{0};
  EchoLoop(channel->get(), kWarmUp, &failures);
  // Every QP of this test is on the same-host link.
  ASSERT_GT(softrdma::GetStats().qps_on_shm, 0u);
  ASSERT_EQ(softrdma::GetStats().qps_on_tcp, 0u);
  ResetCounters();
  // Calls slower than softrdma's watchdog (1 ms without a poll marks the
  // poller asleep): the caller was preempted, and such a call may cost a
  // doorbell each way.
  const int slow_calls = EchoLoop(channel->get(), kCalls, &failures, absl::Milliseconds(1));
  const Counts c = Snapshot();
  ASSERT_EQ(failures.load(), 0);
  EXPECT_EQ(c.verbs.send_with_imm, 2u * kCalls);
  // Not exactly 0: a preempted caller (ASan, a loaded host) can also be
  // marked asleep between two calls; each such gap costs one doorbell.
  // Measured under ASan: 0 alone, 43 while the whole suite ran (ctest -j2);
  // 444 with the old arming, which rang on fast calls too.
  EXPECT_LE(c.verbs.shm_doorbells, kCalls / 8u + 2u * static_cast<unsigned>(slow_calls))
      << slow_calls << " calls took over 1 ms";
  channel->reset();
  server.Shutdown();
  server.Wait();
}

TEST(HotPath, AsyncRequestIsTheOnlyPayloadCopy) {
  // An async request must be serialised before AsyncUnaryCall returns (the
  // caller may free it), so its bytes are copied once into the send buffer;
  // the response is still serialised in place on the server.
  SpinForTheTest spin;
  EchoFixture f;
  EchoRequest req;
  req.set_text(std::string(32, 'a'));
  const size_t request_bytes = req.ByteSizeLong();
  ASSERT_EQ(request_bytes, 34u);
  std::atomic<int> failures{0};
  EchoLoop(f.channel.get(), 8, &failures);  // connects the pool: registers its rings
  ASSERT_EQ(failures.load(), 0);
  auto ten_async_calls = [&] {
    for (int i = 0; i < 10; ++i) {
      EchoResponse resp;
      ClientContext ctx;
      absl::Notification done;
      absl::Status status;
      internal::AsyncUnaryCall(f.channel.get(), kEchoMethod, &ctx, req, &resp, [&](absl::Status s) {
        status = s;
        done.Notify();
      });
      done.WaitForNotification();
      ASSERT_TRUE(status.ok()) << status;
      ASSERT_EQ(resp.text(), req.text());
    }
  };
  // Warmed up with the same calls: a connection registers send buffers
  // when it first keeps more out than it has (send_queue.h).
  ten_async_calls();
  ResetCounters();
  ten_async_calls();
  EXPECT_EQ(internal::GetTransportStats().payload_bytes_copied, 10 * request_bytes);
  EXPECT_EQ(softrdma::GetStats().reg_mr, 0u);
}

// Receives held back for a batch must never starve the peer of credits:
// small rings, many callers, every call completes.
void ManyCallersOnSmallRings(int recv_depth) {
  ServerOptions so;
  so.recv_depth = recv_depth;
  ChannelOptions co;
  co.recv_depth = recv_depth;
  EchoFixture f(so, co);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) threads.emplace_back([&] { EchoLoop(f.channel.get(), 100, &failures); });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(f.service.calls(), 1600);
  EXPECT_EQ(softrdma::GetStats().rnr_retries, 0u);
}

TEST(HotPath, SixteenCallersOnEightReceivesNeverDeadlock) { ManyCallersOnSmallRings(8); }
TEST(HotPath, SixteenCallersOnThreeReceivesNeverDeadlock) { ManyCallersOnSmallRings(3); }
TEST(HotPath, SixteenCallersOnSeventeenReceivesNeverDeadlock) { ManyCallersOnSmallRings(17); }

TEST(HotPath, CallbackRunByALeadingCallerRefusesABlockingCall) {
  // The async call's response comes after the loop thread stopped
  // spinning (the handler sleeps 50 ms > kMaxInFlightSpin), so the blocking
  // call below finds the poller free, leads, and dispatches the async
  // completion on this thread. From there, a blocking call on the same
  // channel must still fail FAILED_PRECONDITION, not hang.
  EchoFixture f;
  EchoRequest warm;
  warm.set_text("warm");
  EchoResponse warm_resp;
  ClientContext warm_ctx;
  ASSERT_TRUE(Echo(f.channel.get(), &warm_ctx, warm, &warm_resp).ok());
  EchoRequest slow;
  slow.set_text("slow");
  slow.set_sleep_ms(50);
  EchoResponse slow_resp;
  ClientContext slow_ctx;
  absl::Notification done;
  absl::Status inner;
  std::thread::id callback_thread;
  internal::AsyncUnaryCall(f.channel.get(), kEchoMethod, &slow_ctx, slow, &slow_resp,
                           [&](absl::Status s) {
                             EXPECT_TRUE(s.ok()) << s;
                             callback_thread = std::this_thread::get_id();
                             EchoRequest r;
                             r.set_text("inner");
                             EchoResponse resp;
                             ClientContext ctx;
                             inner = Echo(f.channel.get(), &ctx, r, &resp);
                             done.Notify();
                           });
  EchoRequest outer;
  outer.set_text("outer");
  outer.set_sleep_ms(100);
  EchoResponse outer_resp;
  ClientContext outer_ctx;
  ASSERT_TRUE(Echo(f.channel.get(), &outer_ctx, outer, &outer_resp).ok());
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(inner.code(), absl::StatusCode::kFailedPrecondition) << inner;
  // Which thread ran it is the scheduler's choice; both must refuse.
  RecordProperty("dispatched_by_leading_caller",
                 callback_thread == std::this_thread::get_id() ? "yes" : "no");
}

TEST(HotPath, LeadingCallerStopsAtItsDeadlineAndHandsTheLoopBack) {
  EchoFixture f;
  EchoRequest slow;
  slow.set_text("slow");
  slow.set_sleep_ms(400);
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Milliseconds(50));
  absl::Status s = Echo(f.channel.get(), &ctx, slow, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  // The next call (no deadline) still gets its answer: the poller was handed
  // back and the late response to the first call is dropped.
  EchoRequest next;
  next.set_text("next");
  ClientContext ctx2;
  ctx2.set_timeout(absl::Seconds(10));
  s = Echo(f.channel.get(), &ctx2, next, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.text(), "next");
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
