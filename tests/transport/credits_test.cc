// CreditWindow: a send never goes without a credit; credits come back.
#include "runtime/transport/credits.h"

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
