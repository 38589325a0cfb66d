// Concurrency of the caller-polls completion design: blocking and
// async calls from many threads on one Channel, callbacks run by whichever
// thread polls, deadlines that expire while another thread leads the poller,
// links dropped while callers poll, and keepalive against a slow but live
// server. Exact counts; nothing timed (an ordering between two calls stands
// in for "promptly" where it matters).
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "gflags/gflags.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/softrdma/faults.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/test_service.h"

DECLARE_int64(rdmarpc_spin_us);

namespace rdmarpc {
namespace test {
namespace {

// A blocking echo of `text` (handler sleeps `sleep_ms`) within `timeout`:
// the call's status, or INTERNAL when the response does not carry `text`.
absl::Status EchoText(Channel* channel, const std::string& text,
                      absl::Duration timeout = absl::Seconds(60), int64_t sleep_ms = 0) {
  EchoRequest req;
  req.set_text(text);
  req.set_sleep_ms(sleep_ms);
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(timeout);
  absl::Status s = Echo(channel, &ctx, req, &resp);
  if (s.ok() && resp.text() != text) {
    return absl::InternalError(absl::StrCat("sent '", text, "', got '", resp.text(), "'"));
  }
  return s;
}

// An async echo of `text` whose callback, while `chain` > 0, starts the next
// one (from whichever thread polled the channel: the loop's or a caller
// leading it). Counts each completed call in *ok or *failed and decrements
// *all once the last of the chain has ended.
struct ChainedCall {
  Channel* channel;
  std::string text;
  int chain;
  std::atomic<int>* ok;
  std::atomic<int>* failed;
  absl::BlockingCounter* all;
  EchoRequest req;
  EchoResponse resp;
  ClientContext ctx;

  static void Start(std::unique_ptr<ChainedCall> c) {
    c->req.set_text(c->text);
    c->ctx.set_timeout(absl::Seconds(60));
    ChainedCall* raw = c.release();
    internal::AsyncUnaryCall(raw->channel, kEchoMethod, &raw->ctx, raw->req, &raw->resp,
                             [raw](absl::Status s) {
                               std::unique_ptr<ChainedCall> self(raw);
                               if (s.ok() && self->resp.text() == self->text) {
                                 self->ok->fetch_add(1);
                               } else {
                                 self->failed->fetch_add(1);
                               }
                               if (self->chain == 0) {
                                 self->all->DecrementCount();
                                 return;
                               }
                               auto next = std::make_unique<ChainedCall>();
                               next->channel = self->channel;
                               next->text = absl::StrCat(self->text, "+");
                               next->chain = self->chain - 1;
                               next->ok = self->ok;
                               next->failed = self->failed;
                               next->all = self->all;
                               Start(std::move(next));
                             });
  }
};

// Sets --rdmarpc_spin_us for the loops made while it lives.
class SpinUs {
 public:
  explicit SpinUs(int64_t us) : saved_(FLAGS_rdmarpc_spin_us) { FLAGS_rdmarpc_spin_us = us; }
  ~SpinUs() { FLAGS_rdmarpc_spin_us = saved_; }

 private:
  int64_t saved_;
};

void MixedLoad(int recv_depth, int64_t spin_us = 50) {
  SpinUs spin(spin_us);
  ServerOptions so;
  so.recv_depth = recv_depth;
  ChannelOptions co;
  co.recv_depth = recv_depth;
  EchoFixture f(so, co);
  constexpr int kThreads = 6;
  constexpr int kRounds = 60;
  constexpr int kChain = 2;  // each async call is followed by 2 more
  std::atomic<int> blocking_ok{0}, blocking_failed{0}, async_ok{0}, async_failed{0};
  absl::BlockingCounter chains(kThreads * kRounds);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        auto c = std::make_unique<ChainedCall>();
        c->channel = f.channel.get();
        c->text = absl::StrCat("a", t, ".", r);
        c->chain = kChain;
        c->ok = &async_ok;
        c->failed = &async_failed;
        c->all = &chains;
        ChainedCall::Start(std::move(c));
        absl::Status s = EchoText(f.channel.get(), absl::StrCat("b", t, ".", r));
        if (s.ok()) {
          blocking_ok.fetch_add(1);
        } else {
          blocking_failed.fetch_add(1);
          ADD_FAILURE() << s;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  chains.Wait();
  EXPECT_EQ(blocking_failed.load(), 0);
  EXPECT_EQ(async_failed.load(), 0);
  EXPECT_EQ(blocking_ok.load(), kThreads * kRounds);
  EXPECT_EQ(async_ok.load(), kThreads * kRounds * (kChain + 1));
  EXPECT_EQ(f.service.calls(), kThreads * kRounds * (kChain + 2));
}

TEST(Concurrency, BlockingAndChainedAsyncCallsFromSixThreadsOnOneChannel) { MixedLoad(64); }
TEST(Concurrency, BlockingAndChainedAsyncCallsOverThreeReceives) { MixedLoad(3); }
TEST(Concurrency, BlockingAndChainedAsyncCallsOverFourReceives) { MixedLoad(4); }
// Spin 0: every wait sleeps on the completion channel; a leader hands the
// poller back after one empty poll.
TEST(Concurrency, BlockingAndChainedAsyncCallsOverThreeReceivesNeverSpinning) {
  MixedLoad(3, 0);
}
TEST(Concurrency, BlockingAndChainedAsyncCallsNeverSpinning) { MixedLoad(64, 0); }

TEST(Concurrency, DeadlineOfAFollowerFiresWhileAnotherCallerLeads) {
  EchoFixture f;
  std::atomic<bool> long_call_done{false};
  absl::Notification long_call_sent;
  std::thread leader([&] {
    long_call_sent.Notify();
    absl::Status s = EchoText(f.channel.get(), "long", absl::Seconds(60), /*sleep_ms=*/1500);
    EXPECT_TRUE(s.ok()) << s;
    long_call_done.store(true);
  });
  long_call_sent.WaitForNotification();
  absl::Status s = EchoText(f.channel.get(), "short", absl::Milliseconds(50), /*sleep_ms=*/1000);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  // Its deadline did not wait for the other caller's call to end.
  EXPECT_FALSE(long_call_done.load());
  leader.join();
}

TEST(Concurrency, LinkDroppedWhileEightCallersPollFailsOnlyUnavailableThenRecovers) {
  // One connection, with a slow call on it while the link drops: the drop
  // cannot land between calls, so at least that call fails.
  ChannelOptions co;
  co.pool_size = 1;
  EchoFixture f(ServerOptions(), co);
  ASSERT_TRUE(EchoText(f.channel.get(), "warm").ok());
  absl::Status slow_status;
  std::thread slow([&] {
    slow_status = EchoText(f.channel.get(), "slow", absl::Seconds(60), /*sleep_ms=*/5000);
  });
  while (f.service.calls() < 2) absl::SleepFor(absl::Milliseconds(1));
  softrdma::DropAfterWrs(300);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 80;
  std::atomic<int> ok{0}, unavailable{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        absl::Status s = EchoText(f.channel.get(), absl::StrCat(t, ".", i));
        if (s.ok()) {
          ok.fetch_add(1);
        } else if (s.code() == absl::StatusCode::kUnavailable) {
          unavailable.fetch_add(1);
        } else {
          other.fetch_add(1);
          ADD_FAILURE() << s;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  slow.join();
  softrdma::ResetFaults();
  EXPECT_EQ(slow_status.code(), absl::StatusCode::kUnavailable) << slow_status;
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ok.load() + unavailable.load(), kThreads * kPerThread);
  // The pool replaced the dropped connection.
  absl::Status s = EchoText(f.channel.get(), "after");
  EXPECT_TRUE(s.ok()) << s;
}

TEST(Concurrency, KeepaliveLeavesAHandlerSleepingThreeSecondsAlive) {
  // Default keepalive_interval (1 s): two or three probes go out while the
  // handler sleeps; a live peer acknowledges each.
  EchoFixture f;
  std::atomic<int> async_ok{0};
  absl::Notification async_done;
  EchoRequest areq;
  areq.set_text("async-slow");
  areq.set_sleep_ms(3000);
  EchoResponse aresp;
  ClientContext actx;
  actx.set_timeout(absl::Seconds(60));
  internal::AsyncUnaryCall(f.channel.get(), kEchoMethod, &actx, areq, &aresp,
                           [&](absl::Status s) {
                             EXPECT_TRUE(s.ok()) << s;
                             if (s.ok() && aresp.text() == "async-slow") async_ok.fetch_add(1);
                             async_done.Notify();
                           });
  absl::Status s = EchoText(f.channel.get(), "slow", absl::Seconds(60), /*sleep_ms=*/3000);
  EXPECT_TRUE(s.ok()) << s;
  async_done.WaitForNotification();
  EXPECT_EQ(async_ok.load(), 1);
  EXPECT_EQ(f.service.calls(), 2);
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
