// CreditWindow: a send never goes without a credit; credits come back.
#include "runtime/transport/credits.h"
#include "runtime/transport/engine_stats.h"

#include "gtest/gtest.h"
#include "runtime/transport/transport.h"

namespace rdmarpc {
namespace internal {
namespace {

TEST(CreditWindow, NeverSendsWithoutCredit) {
  CreditWindow w(/*peer_recv_depth=*/4, /*local_recv_depth=*/4);
  int sent = 0;
  while (w.CanSendMessage()) {
    w.Consume();
    ++sent;
  }
  // One credit stays in reserve for a credit message.
  EXPECT_EQ(sent, 3);
  EXPECT_EQ(w.available(), 1);
  EXPECT_TRUE(w.CanSendCreditMessage());
  w.Consume();
  EXPECT_FALSE(w.CanSendCreditMessage());
  EXPECT_FALSE(w.CanSendMessage());
  EXPECT_EQ(w.available(), 0);
}

TEST(CreditWindow, ReturnedCreditsAllowMoreSends) {
  CreditWindow w(2, 2);
  w.Consume();
  EXPECT_FALSE(w.CanSendMessage());
  w.OnReturned(3);
  EXPECT_EQ(w.available(), 4);
  EXPECT_TRUE(w.CanSendMessage());
}

TEST(CreditWindow, OwedCreditsAreTakenOnce) {
  CreditWindow w(8, 8);
  w.OnReposted(3);
  w.OnReposted(2);
  EXPECT_EQ(w.owed(), 5);
  EXPECT_EQ(w.TakeOwed(), 5);
  EXPECT_EQ(w.TakeOwed(), 0);
}

TEST(CreditWindow, SharedReceiveQueueReturnsCreditsWhenThePeerMayBeLow) {
  // A ring of 64 (half of it, 32, caps the threshold); in_use -> threshold: in_use - 1 - in_use / 4, at least 2, at most 32.
  const int cases[][2] = {{3, 2}, {4, 2}, {5, 3}, {8, 5}, {16, 11}, {64, 32}, {1000, 32}};
  for (const auto& c : cases) {
    CreditWindow x(8, 64);
    x.SetPeerWindow(c[0]);
    x.OnReposted(c[1] - 1);
    EXPECT_FALSE(x.ShouldSendCreditMessage()) << "in_use " << c[0];
    x.OnReposted(1);
    EXPECT_TRUE(x.ShouldSendCreditMessage()) << "in_use " << c[0];
  }
  // A peer blocked with one credit of in_use means in_use - 1 owed here:
  // always enough for an explicit return from the floor (3) up.
  for (int in_use = 3; in_use <= 200; ++in_use) {
    CreditWindow x(8, 64);
    x.SetPeerWindow(in_use);
    x.OnReposted(in_use - 1);
    EXPECT_TRUE(x.ShouldSendCreditMessage()) << "in_use " << in_use;
  }
}

TEST(CreditWindow, ExplicitReturnAtHalfTheRingButNotForOne) {
  CreditWindow w(8, 8);
  w.OnReposted(3);
  EXPECT_FALSE(w.ShouldSendCreditMessage());
  w.OnReposted(1);
  EXPECT_TRUE(w.ShouldSendCreditMessage());
  CreditWindow tiny(4, 2);
  tiny.OnReposted(1);
  // A single owed credit never triggers a credit message (no ping-pong).
  EXPECT_FALSE(tiny.ShouldSendCreditMessage());
  tiny.OnReposted(1);
  EXPECT_TRUE(tiny.ShouldSendCreditMessage());
}

TEST(CreditWindow, NoCreditMessageWithoutACredit) {
  CreditWindow w(1, 4);
  w.Consume();
  w.OnReposted(4);
  EXPECT_FALSE(w.ShouldSendCreditMessage());
}

// Liveness: a peer blocked from sending (one credit left, its reserve, and
// nothing in flight) means we have re-posted recv_depth - 1 receives whose
// credits we owe; they must go back in a kCredit even if we have nothing else
// to send. That holds from kMinRecvDepth up; with 2 receives it would not
// (threshold 2 > 1 owed), which deadlocked calls whose response went by
// WRITE_WITH_IMM (it carries no credits).
TEST(CreditWindow, BlockedPeerAlwaysGetsItsCreditsBack) {
  for (int depth = kMinRecvDepth; depth <= 128; ++depth) {
    CreditWindow w(/*peer_recv_depth=*/depth, /*local_recv_depth=*/depth);
    w.OnReposted(depth - 1);
    EXPECT_TRUE(w.ShouldSendCreditMessage()) << "recv_depth " << depth;
  }
  CreditWindow two(2, 2);
  two.OnReposted(1);
  EXPECT_FALSE(two.ShouldSendCreditMessage());  // why kMinRecvDepth is 3
}

TEST(CreditStallTimer, CountsEachStallOnceAndItsLength) {
  EngineStats stats;
  CreditStallTimer t;
  t.Update(false, 100, &stats);  // not stalled: nothing
  EXPECT_FALSE(t.stalled());
  t.Update(true, 1'000, &stats);
  t.Update(true, 1'500, &stats);  // the same stall
  EXPECT_TRUE(t.stalled());
  EXPECT_EQ(stats.credit_stalls.Get(), 1);
  EXPECT_EQ(t.total_ns(1'700), 700);  // the stall going on counts
  t.Update(false, 4'000, &stats);
  EXPECT_EQ(stats.credit_stall_ns.Get(), 3'000);
  t.Update(true, 10'000, &stats);
  t.Update(false, 10'250, &stats);
  EXPECT_EQ(stats.credit_stalls.Get(), 2);
  EXPECT_EQ(stats.credit_stall_ns.Get(), 3'250);
  EXPECT_EQ(t.total_ns(99'999), 3'250);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
