// Many connections on one completion queue: a server with one worker and a
// channel whose pool holds 128 connections on one engine thread, so each
// side's CQ serves 128 same-host QPs. Their peers mark the CQ's table for
// each record (softrdma/shm_hint.h) once they acknowledged its offer, and
// polls look at the marked rings only: every call still completes, over
// every connection, including connections made after others closed (whose
// table slots are reused).
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/transport/engine_stats.h"
#include "runtime/transport/event_loop.h"
#include "runtime/transport/send_queue.h"
#include "softrdma/faults.h"
#include "softrdma/softrdma.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

constexpr int kConnections = 128;

ServerOptions OneWorker() {
  ServerOptions so;
  so.num_workers = 1;
  return so;
}

ChannelOptions Pool(int connections) {
  ChannelOptions co;
  co.pool_size = connections;
  co.engine_threads = 1;
  return co;
}

// One blocking call per slot of the pool (calls take the slots in turn).
// Returns the number that failed.
int CallEachConnection(Channel* channel, int connections, const std::string& tag) {
  int failed = 0;
  for (int i = 0; i < connections; ++i) {
    EchoRequest req;
    req.set_text(absl::StrCat(tag, " ", i));
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(10));
    absl::Status s = Echo(channel, &ctx, req, &resp);
    if (!s.ok() || resp.text() != req.text()) {
      ADD_FAILURE() << tag << " call " << i << ": " << s;
      ++failed;
    }
  }
  return failed;
}

// Keeps `in_flight` async calls going until `calls` ended (each callback,
// on the engine thread, starts its slot's next call); returns how many
// failed or came back wrong.
class AsyncBurst {
 public:
  AsyncBurst(std::shared_ptr<Channel> channel, int in_flight)
      : channel_(std::move(channel)), slots_(static_cast<size_t>(in_flight)) {}

  int Run(int calls) {
    {
      absl::MutexLock l(&mu_);
      target_ = calls;
      started_ = static_cast<int>(slots_.size());
    }
    for (Slot& s : slots_) Start(&s);
    absl::MutexLock l(&mu_);
    const bool done =
        mu_.AwaitWithTimeout(absl::Condition(this, &AsyncBurst::AllEnded), absl::Seconds(60));
    EXPECT_TRUE(done) << ended_ << " of " << calls << " calls ended";
    return failed_;
  }

 private:
  struct Slot {
    std::optional<ClientContext> ctx;
    EchoRequest req;
    EchoResponse resp;
    int n = 0;
  };

  bool AllEnded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended_ == target_; }

  void Start(Slot* s) {
    s->ctx.emplace();
    s->ctx->set_timeout(absl::Seconds(10));
    s->req.set_text(absl::StrCat("burst ", s->n++));
    internal::AsyncUnaryCall(channel_.get(), kEchoMethod, &*s->ctx, s->req, &s->resp,
                             [this, s](absl::Status st) {
                               bool again = false;
                               {
                                 absl::MutexLock l(&mu_);
                                 if (!st.ok() || s->resp.text() != s->req.text()) {
                                   if (failed_++ == 0) ADD_FAILURE() << st;
                                 }
                                 ++ended_;
                                 if (started_ < target_) {
                                   ++started_;
                                   again = true;
                                 }
                               }
                               if (again) Start(s);
                             });
  }

  std::shared_ptr<Channel> channel_;
  std::vector<Slot> slots_;
  absl::Mutex mu_;
  int target_ ABSL_GUARDED_BY(mu_) = 0;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  int ended_ ABSL_GUARDED_BY(mu_) = 0;
  int failed_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(ManyConnections, PeersMarkTheCqTableAndEveryCallCompletes) {
  const softrdma::Stats before = softrdma::GetStats();
  const int64_t resizes_before = internal::SumEngineStats().cq_resizes;
  EchoFixture f(OneWorker(), Pool(kConnections));
  ASSERT_EQ(CallEachConnection(f.channel.get(), kConnections, "first"), 0);
  // 128 connections of recv_depth 64 + kSendQueueDepth CQEs each outgrow a
  // loop's first CQ (kCqDepth, doubled once when it is made): each side's
  // CQ doubled as often as that takes, and every call over every connection
  // completed.
  int64_t depth = 2 * internal::kCqDepth;
  int doublings = 0;
  while (depth < kConnections * (64 + internal::kSendQueueDepth)) {
    depth *= 2;
    ++doublings;
  }
  ASSERT_GT(doublings, 0);
  EXPECT_EQ(internal::SumEngineStats().cq_resizes - resizes_before, 2 * doublings);
  // The offers and acks travel with the first calls' records; a second
  // round carries whatever was still owed.
  ASSERT_EQ(CallEachConnection(f.channel.get(), kConnections, "second"), 0);
  const softrdma::Stats mid = softrdma::GetStats();
  // Both ends of every connection are in this process, and each end's peer
  // now marks for it.
  EXPECT_EQ(mid.shm_marked_qps - before.shm_marked_qps, 2u * kConnections);
  EXPECT_EQ(AsyncBurst(f.channel, 32).Run(20000), 0);
  const softrdma::Stats after = softrdma::GetStats();
  // 20,000 calls: each a request and a response record (plus acks), found
  // by their marks rather than by looking at all 128 rings.
  EXPECT_GE(after.shm_marked_drains - mid.shm_marked_drains, 20000u);
}

// A device without ibv_resize_cq (EOPNOTSUPP): each loop finds out when it
// makes its CQ and makes it kCqDepthWithoutResize entries big at once, so
// far more connections than the first CQ would hold work, with no resize.
TEST(ManyConnections, ADeviceThatCannotResizeCqsGetsFullSizeCqsAtOnce) {
  constexpr int kMore = 20;  // 20 x (64 + 256) CQEs: past 4,096, within 64 Ki
  static_assert(kMore * (64 + internal::kSendQueueDepth) > 2 * internal::kCqDepth);
  static_assert(kMore * (64 + internal::kSendQueueDepth) <= internal::kCqDepthWithoutResize);
  const int64_t resizes_before = internal::SumEngineStats().cq_resizes;
  softrdma::FailNext(softrdma::FaultOp::kResizeCq, 1000, EOPNOTSUPP);
  {
    EchoFixture f(OneWorker(), Pool(kMore));
    EXPECT_EQ(CallEachConnection(f.channel.get(), kMore, "fixed"), 0);
  }
  softrdma::FailNext(softrdma::FaultOp::kResizeCq, 0, 0);
  EXPECT_EQ(internal::SumEngineStats().cq_resizes - resizes_before, 0);
}

// Loops with more than EventLoop::kLeanConnections connections keep each
// connection's first chunk of send buffers (SendQueue::set_lean): calls
// taken in turn, one at a time, over 128 connections register nothing more
// on either side, where each connection would otherwise grow to
// kSignalEvery buffers.
TEST(ManyConnections, CallsInTurnKeepEachConnectionsFirstSendBuffers) {
  static_assert(kConnections > static_cast<int>(internal::EventLoop::kLeanConnections));
  const int64_t capacity_before = internal::SumEngineStats().send_buffers_capacity;
  EchoFixture f(OneWorker(), Pool(kConnections));
  ASSERT_EQ(CallEachConnection(f.channel.get(), kConnections, "first"), 0);
  const int64_t capacity_open = internal::SumEngineStats().send_buffers_capacity;
  // Client and server end of each connection, kFirstSendChunk each.
  EXPECT_EQ(capacity_open - capacity_before,
            2 * kConnections * internal::SendQueue::kFirstSendChunk);
  for (int round = 0; round < 20; ++round) {
    ASSERT_EQ(CallEachConnection(f.channel.get(), kConnections, absl::StrCat("round ", round)), 0);
  }
  EXPECT_EQ(internal::SumEngineStats().send_buffers_capacity, capacity_open);
}

TEST(ManyConnections, ConnectionsMadeAfterOthersClosedReuseSlotsAndWork) {
  ServerOptions so = OneWorker();
  EchoService service;
  Server server(so);
  ASSERT_TRUE(server.AddService(&service).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const std::string address = absl::StrCat("127.0.0.1:", server.port());
  for (int round = 0; round < 3; ++round) {
    auto channel = CreateChannel(address, Pool(kConnections / 2));
    ASSERT_TRUE(channel.ok()) << channel.status();
    ASSERT_EQ(CallEachConnection(channel->get(), kConnections / 2, absl::StrCat("round ", round)),
              0);
    EXPECT_EQ(AsyncBurst(*channel, 16).Run(2000), 0) << "round " << round;
  }
  server.Shutdown(absl::Seconds(1));
  server.Wait();
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
