// ReceiveRing on softrdma: every buffer posted at set-up with one wr_id tag,
// consumed buffers re-posted in batches with one ibv_post_recv, and a
// partial batch released when the loop goes idle.
#include "runtime/transport/receive_ring.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/send_queue.h"
#include "tests/softrdma/test_util.h"

namespace rdmarpc {
namespace internal {
namespace {

using softrdma::testing::Buffer;
using softrdma::testing::ConnectedPair;

class ReceiveRingTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(pair_.ok()); }
  // The client sends `n` messages ("m0", "m1", ...); returns the server's
  // receive completions.
  std::vector<ibv_wc> Receive(int n) {
    Buffer out(pair_.client_pd, 64, IBV_ACCESS_LOCAL_WRITE);
    std::vector<ibv_wc> got;
    for (int i = 0; i < n; ++i) {
      const std::string text = "m" + std::to_string(i);
      std::copy(text.begin(), text.end(), out.data.begin());
      EXPECT_EQ(softrdma::testing::PostSend(pair_.client->qp, IBV_WR_SEND_WITH_IMM, 1, out, 0,
                                            static_cast<uint32_t>(text.size()), 7),
                0);
      ibv_wc wc{};
      EXPECT_TRUE(softrdma::testing::PollOne(pair_.client_cq, &wc));
      EXPECT_TRUE(softrdma::testing::PollOne(pair_.server_cq, &wc));
      got.push_back(wc);
    }
    return got;
  }
  ConnectedPair pair_;
};

TEST_F(ReceiveRingTest, PostsEveryBufferWithTheReceiveTag) {
  ReceiveRing ring;
  ASSERT_TRUE(ring.Create(pair_.server_pd, 8, 256).ok());
  softrdma::ResetStats();
  ASSERT_TRUE(ring.PostAll(pair_.server->qp).ok());
  EXPECT_EQ(softrdma::GetStats().post_recv_calls, 1u);
  EXPECT_EQ(ring.posted(), 8);
  std::set<int> indexes;
  int i = 0;
  for (const ibv_wc& wc : Receive(3)) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(ReceiveRing::IsReceive(wc.wr_id));
    const int idx = ReceiveRing::BufferIndex(wc.wr_id);
    EXPECT_GE(idx, 0);
    EXPECT_LT(idx, 8);
    indexes.insert(idx);
    EXPECT_EQ(ring.data(idx, wc.byte_len), "m" + std::to_string(i++));
    ring.OnCompleted();
  }
  EXPECT_EQ(indexes.size(), 3u);
  EXPECT_EQ(ring.posted(), 5);
}

TEST_F(ReceiveRingTest, SendSequenceNumbersAreNotReceives) {
  EXPECT_FALSE(ReceiveRing::IsReceive(0));
  EXPECT_FALSE(ReceiveRing::IsReceive((uint64_t{1} << 63) - 1));
  EXPECT_TRUE(ReceiveRing::IsReceive(ReceiveRing::kWrIdTag | 5));
  EXPECT_EQ(ReceiveRing::BufferIndex(ReceiveRing::kWrIdTag | 5), 5);
}

TEST_F(ReceiveRingTest, RepostsConsumedBuffersInOneBatch) {
  ReceiveRing ring;
  ASSERT_TRUE(ring.Create(pair_.server_pd, 8, 256).ok());
  ASSERT_TRUE(ring.PostAll(pair_.server->qp).ok());
  ASSERT_EQ(ring.repost_batch(), RepostBatchFor(8));
  ASSERT_EQ(ring.repost_batch(), 2);
  std::vector<ibv_wc> wcs = Receive(2);
  ring.OnCompleted();
  ring.Consumed(ReceiveRing::BufferIndex(wcs[0].wr_id));
  EXPECT_FALSE(ring.RepostDue());
  ring.OnCompleted();
  ring.Consumed(ReceiveRing::BufferIndex(wcs[1].wr_id));
  EXPECT_TRUE(ring.RepostDue());
  softrdma::ResetStats();
  absl::StatusOr<int> n = ring.PostPending(pair_.server->qp);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2);
  EXPECT_EQ(softrdma::GetStats().post_recv_calls, 1u);
  EXPECT_EQ(ring.posted(), 8);
  EXPECT_EQ(ring.pending(), 0);
  EXPECT_FALSE(ring.RepostDue());
  // The re-posted buffers take messages again.
  for (const ibv_wc& wc : Receive(8)) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ring.OnCompleted();
  }
  EXPECT_EQ(ring.posted(), 0);
}

TEST_F(ReceiveRingTest, IdleRepostReleasesAPartialBatch) {
  ReceiveRing ring;
  ASSERT_TRUE(ring.Create(pair_.server_pd, 16, 256).ok());
  ASSERT_TRUE(ring.PostAll(pair_.server->qp).ok());
  ASSERT_EQ(ring.repost_batch(), 4);
  EXPECT_FALSE(ring.RequestIdleRepost());  // nothing held back
  for (const ibv_wc& wc : Receive(3)) {
    ring.OnCompleted();
    ring.Consumed(ReceiveRing::BufferIndex(wc.wr_id));
  }
  EXPECT_FALSE(ring.RepostDue());
  EXPECT_TRUE(ring.RequestIdleRepost());
  EXPECT_TRUE(ring.RepostDue());
  absl::StatusOr<int> n = ring.PostPending(pair_.server->qp);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3);
  EXPECT_FALSE(ring.RepostDue());  // the request is used up
  EXPECT_EQ(ring.posted(), 16);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
