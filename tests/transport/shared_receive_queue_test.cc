// SharedReceiveQueue on softrdma: the credits each connection gets on a
// worker's SRQ (floor, fair share of the extras, starved shares served
// first after a re-post, credits back on Detach), the invariant that no
// more credits are out than receives are posted, and the device's limit.
// Receives are simulated (OnCompleted + Consumed, as a completion does);
// the receives the SRQ posts stay posted on softrdma's SRQ.
#include "runtime/transport/shared_receive_queue.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/event_loop.h"
#include "tests/softrdma/test_util.h"

namespace rdmarpc {
namespace internal {
namespace {

using softrdma::testing::ConnectedPair;

class SharedReceiveQueueTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(pair_.ok()); }

  std::unique_ptr<SharedReceiveQueue> Make(int extra, int min_credits, int max_credits,
                                           size_t buffer_bytes = 256) {
    SharedReceiveQueue::Options o;
    o.buffer_bytes = buffer_bytes;
    o.extra_buffers = extra;
    o.min_credits = min_credits;
    o.max_credits = max_credits;
    absl::StatusOr<std::unique_ptr<SharedReceiveQueue>> q =
        SharedReceiveQueue::Create(pair_.server_pd, o, &loop_, &stats_);
    EXPECT_TRUE(q.ok()) << q.status();
    return q.ok() ? std::move(*q) : nullptr;
  }
  // One message of `share`'s peer arrives in buffer `index`. Returns
  // OnMessage's grant.
  static int Receive(SharedReceiveQueue* q, SrqShare* share, int index) {
    q->OnCompleted();
    q->Consumed(index);
    const int granted = q->OnMessage(share);
    EXPECT_GE(q->free_credits(), 0) << "more credits out than receives posted";
    return granted;
  }

  ConnectedPair pair_;
  EventLoop loop_{"srq-test"};
  EngineStats stats_;
};

TEST_F(SharedReceiveQueueTest, PostsItsBuffersAndGivesEachConnectionItsFloor) {
  std::unique_ptr<SharedReceiveQueue> q = Make(/*extra=*/300, 4, 64);
  ASSERT_NE(q, nullptr);
  // 300 round up to whole slabs of 256.
  EXPECT_EQ(q->capacity(), 512);
  EXPECT_EQ(q->posted(), 512);
  EXPECT_EQ(q->registered_bytes(), 512u * 256);
  SrqShare a;
  absl::StatusOr<int> initial = q->Attach(&a);
  ASSERT_TRUE(initial.ok()) << initial.status();
  EXPECT_EQ(*initial, 4);
  EXPECT_EQ(a.in_use, 4);
  EXPECT_EQ(q->attached(), 1);
  EXPECT_EQ(q->free_credits(), 508);
  // Every receive's wr_id carries the SRQ tag, which a ring's does not.
  EXPECT_TRUE(SharedReceiveQueue::IsReceive(SharedReceiveQueue::kWrIdTag | 7));
  EXPECT_EQ(SharedReceiveQueue::BufferIndex(SharedReceiveQueue::kWrIdTag | 7), 7);
  EXPECT_FALSE(SharedReceiveQueue::IsReceive((uint64_t{1} << 63) | 7));
  EXPECT_FALSE(SharedReceiveQueue::IsReceive(7));
  q->Detach(&a);
}

TEST_F(SharedReceiveQueueTest, APipeliningPeerGrowsToItsCap) {
  std::unique_ptr<SharedReceiveQueue> q = Make(256, 4, 64);
  ASSERT_NE(q, nullptr);
  SrqShare a;
  ASSERT_TRUE(q->Attach(&a).ok());
  // Two come back per message spent until the cap.
  int owed = 0;
  for (int i = 0; i < 200; ++i) {
    const int granted = Receive(q.get(), &a, i % 256);
    EXPECT_EQ(granted, i < 60 ? 2 : 1) << i;
    owed += granted;
    if (i % 16 == 15) {
      ASSERT_TRUE(q->PostPending().ok());
    }
  }
  EXPECT_EQ(a.in_use, 64);  // max_credits
  EXPECT_EQ(q->borrowers(), 1);
  EXPECT_EQ(q->FairCap(a), 64);
  EXPECT_EQ(owed, 200 + 60);
  q->Detach(&a);
  EXPECT_EQ(q->borrowers(), 0);
  q->OnCqDrained();
  q->OnCqDrained();
  EXPECT_EQ(q->free_credits(), q->posted());
}

TEST_F(SharedReceiveQueueTest, BorrowersShareTheExtrasFairly) {
  // Room for 2 floors + 256: 512 buffers, so 504 extras; no per-connection
  // cap below that.
  std::unique_ptr<SharedReceiveQueue> q = Make(256, 4, 10000);
  ASSERT_NE(q, nullptr);
  SrqShare a;
  SrqShare b;
  ASSERT_TRUE(q->Attach(&a).ok());
  ASSERT_TRUE(q->Attach(&b).ok());
  ASSERT_EQ(q->capacity(), 512);
  int idx = 0;
  auto send = [&](SrqShare* s) {
    Receive(q.get(), s, idx++ % 512);
    if (idx % 16 == 0) {
      ASSERT_TRUE(q->PostPending().ok());
    }
  };
  // A alone takes every extra it may, 4 + 504, but for the receives
  // consumed and not re-posted yet (up to a batch of 16), which back no
  // credit.
  for (int i = 0; i < 2000; ++i) send(&a);
  EXPECT_LE(a.in_use, 508);
  EXPECT_GE(a.in_use, 508 - 16);
  // B starts sending: refused extras at its floor, it claims its share, so A gets less
  // back than it spends until both hold about half of the extras; B never
  // gets more than its half. "About": up to a re-post batch (16) of
  // receives is consumed and not re-posted yet, and backs no credit.
  for (int i = 0; i < 4000; ++i) {
    send(&a);
    send(&b);
    ASSERT_LE(b.in_use, 4 + 504 / 2);
  }
  EXPECT_LE(a.in_use, 4 + 252);
  EXPECT_GE(a.in_use, 4 + 252 - 16);
  EXPECT_LE(b.in_use, 4 + 252);
  EXPECT_GE(b.in_use, 4 + 252 - 16);
  EXPECT_EQ(q->borrowers(), 2);
  q->Detach(&a);
  q->Detach(&b);
}

TEST_F(SharedReceiveQueueTest, AStarvedFloorIsServedAtTheRepost) {
  std::unique_ptr<SharedReceiveQueue> q = Make(256, 4, 10000);
  ASSERT_NE(q, nullptr);
  struct Counted : SrqShare {
    int granted_later = 0;
  };
  Counted a;
  Counted b;
  a.on_granted =
      b.on_granted = [](SrqShare* s, int n) { static_cast<Counted*>(s)->granted_later += n; };
  ASSERT_TRUE(q->Attach(&a).ok());
  ASSERT_TRUE(q->Attach(&b).ok());
  // A spends without a re-post until every posted receive backs a credit.
  int idx = 0;
  while (q->free_credits() > 0) Receive(q.get(), &a, idx++);
  // B's message then gets no credit back: it is below its floor.
  EXPECT_EQ(Receive(q.get(), &b, idx++), 0);
  EXPECT_EQ(b.in_use, 3);
  EXPECT_TRUE(b.starved);
  EXPECT_EQ(q->starved(), 1);
  EXPECT_TRUE(q->RepostDue());
  // The re-post serves it before anyone else borrows again.
  ASSERT_TRUE(q->PostPending().ok());
  EXPECT_EQ(b.in_use, 4);
  EXPECT_FALSE(b.starved);
  EXPECT_EQ(b.granted_later, 1);
  EXPECT_EQ(a.granted_later, 0);
  EXPECT_EQ(q->starved(), 0);
  q->Detach(&a);
  q->Detach(&b);
}

TEST_F(SharedReceiveQueueTest, AStarvedShareThatRegainsItsFloorIsOwedNothingAtTheRepost) {
  std::unique_ptr<SharedReceiveQueue> q = Make(256, 4, 10000);
  ASSERT_NE(q, nullptr);
  struct Counted : SrqShare {
    int granted_later = 0;
  };
  Counted a;
  Counted b;
  Counted c;
  a.on_granted = b.on_granted =
      c.on_granted = [](SrqShare* s, int n) { static_cast<Counted*>(s)->granted_later += n; };
  ASSERT_TRUE(q->Attach(&a).ok());
  ASSERT_TRUE(q->Attach(&b).ok());
  ASSERT_TRUE(q->Attach(&c).ok());
  int idx = 0;
  while (q->free_credits() > 0) Receive(q.get(), &a, idx++);
  EXPECT_EQ(Receive(q.get(), &b, idx++), 0);
  ASSERT_TRUE(b.starved);
  // C goes: its credits come free, and B's next messages take B over its
  // floor by itself.
  q->Detach(&c);
  q->OnCqDrained();
  q->OnCqDrained();
  // 3 - 1 + 2 = 4, then 4 - 1 + 2 = 5: each message spends one, gets two.
  EXPECT_EQ(Receive(q.get(), &b, idx++), 2);
  EXPECT_EQ(Receive(q.get(), &b, idx++), 2);
  EXPECT_EQ(b.in_use, 5);
  EXPECT_FALSE(b.starved);
  EXPECT_EQ(q->starved(), 0);
  // The re-post owes B nothing and takes nothing from it: it holds the 5
  // it was granted.
  ASSERT_TRUE(q->PostPending().ok());
  EXPECT_EQ(b.granted_later, 0);
  EXPECT_EQ(b.in_use, 5);
  q->Detach(&a);
  q->Detach(&b);
}

TEST_F(SharedReceiveQueueTest, AMessageBeyondTheCreditsIsAProtocolError) {
  std::unique_ptr<SharedReceiveQueue> q = Make(256, 4, 10000);
  ASSERT_NE(q, nullptr);
  SrqShare a;
  SrqShare b;
  ASSERT_TRUE(q->Attach(&a).ok());
  ASSERT_TRUE(q->Attach(&b).ok());
  int idx = 0;
  while (q->free_credits() > 0) Receive(q.get(), &a, idx++);
  // With nothing re-posted B gets nothing back: after its 4 credits a
  // fifth message was sent without one.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Receive(q.get(), &b, idx++), 0);
  EXPECT_EQ(b.in_use, 0);
  q->OnCompleted();
  q->Consumed(idx++);
  EXPECT_EQ(q->OnMessage(&b), -1);
  q->Detach(&a);
  q->Detach(&b);
}

TEST_F(SharedReceiveQueueTest, DetachGivesTheCreditsBackAndGrowthStays) {
  std::unique_ptr<SharedReceiveQueue> q = Make(256, 4, 64);
  ASSERT_NE(q, nullptr);
  std::vector<SrqShare> shares(100);
  for (SrqShare& s : shares) ASSERT_TRUE(q->Attach(&s).ok());
  // 100 floors + 256 shared: two more slabs.
  EXPECT_EQ(q->capacity(), 768);
  EXPECT_EQ(q->posted(), 768);
  EXPECT_EQ(q->free_credits(), 768 - 400);
  for (SrqShare& s : shares) q->Detach(&s);
  EXPECT_EQ(q->attached(), 0);
  // Their completions may still wait in the CQ: the credits keep backing
  // them until a poll that began after Detach found the CQ empty.
  EXPECT_EQ(q->free_credits(), 768 - 400);
  q->OnCqDrained();
  EXPECT_EQ(q->free_credits(), 768 - 400);
  q->OnCqDrained();
  EXPECT_EQ(q->free_credits(), 768);
  EXPECT_EQ(q->capacity(), 768);  // registered memory is kept
}

TEST_F(SharedReceiveQueueTest, OrphanedReceivesComeBack) {
  std::unique_ptr<SharedReceiveQueue> q = Make(256, 4, 64);
  ASSERT_NE(q, nullptr);
  q->Orphaned(3);
  q->Orphaned(4);
  EXPECT_EQ(q->posted(), 254);
  EXPECT_FALSE(q->RepostDue());  // fewer than a batch
  EXPECT_TRUE(q->RequestIdleRepost());
  EXPECT_FALSE(q->RequestIdleRepost());  // one connection schedules it
  EXPECT_TRUE(q->RepostDue());
  absl::StatusOr<int> n = q->PostPending();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);
  EXPECT_EQ(q->posted(), 256);
}

TEST_F(SharedReceiveQueueTest, TheDevicesMaxSrqWrBoundsTheConnections) {
  // softrdma's max_srq_wr is 32767, so at most 127 whole slabs of 256
  // (32512): 32000 shared leave room for 128 floors of 4.
  std::unique_ptr<SharedReceiveQueue> q = Make(32000, 4, 64, /*buffer_bytes=*/64);
  ASSERT_NE(q, nullptr);
  std::vector<SrqShare> shares(200);
  int attached = 0;
  absl::Status last;
  for (SrqShare& s : shares) {
    absl::StatusOr<int> r = q->Attach(&s);
    if (!r.ok()) {
      last = r.status();
      break;
    }
    ++attached;
  }
  EXPECT_EQ(attached, 128);
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  EXPECT_NE(last.message().find("max_srq_wr"), absl::string_view::npos) << last;
  EXPECT_EQ(q->capacity(), 32512);
  for (int i = 0; i < attached; ++i) q->Detach(&shares[i]);
}

TEST_F(SharedReceiveQueueTest, AFloorPastMaxSrqWrIsRefusedWithoutRegisteringMore) {
  // Floors of 20,000: one fits in softrdma's 32767, two do not (40,001).
  std::unique_ptr<SharedReceiveQueue> q = Make(1, 20000, 20000, /*buffer_bytes=*/64);
  ASSERT_NE(q, nullptr);
  SrqShare a;
  SrqShare b;
  ASSERT_TRUE(q->Attach(&a).ok());
  EXPECT_EQ(q->capacity(), 20224);  // 79 slabs of 256
  const absl::StatusOr<int> r = q->Attach(&b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "shared receive queue full: 40001 receives needed, at most 32512 fit (the device's "
            "max_srq_wr 32767 in slabs of 256); it holds 1 connection x 20000 srq_min_credits + "
            "1 srq_shared_buffers: lower those, or spread the connections over more loops "
            "(ChannelOptions::engine_threads, ServerOptions::num_workers)");
  EXPECT_EQ(q->capacity(), 20224);  // nothing registered for the refusal
  EXPECT_EQ(q->attached(), 1);
  q->Detach(&a);
}

TEST_F(SharedReceiveQueueTest, RejectsOptionsThatCouldDeadlock) {
  SharedReceiveQueue::Options o;
  o.min_credits = 2;  // below kMinRecvDepth
  absl::StatusOr<std::unique_ptr<SharedReceiveQueue>> q =
      SharedReceiveQueue::Create(pair_.server_pd, o, &loop_, &stats_);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(q.status().message().find("min_credits 2"), absl::string_view::npos) << q.status();
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
