// keys_test.cc: lkeys and rkeys (device.cc's key table): random, distinct,
// never reused, and a guessed or stale rkey fails remotely.
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

TEST(Keys, DistinctNeverReusedAndNotDerivable) {
  ibv_device** list = get_device_list(nullptr);
  ibv_context* ctx = open_device(list[0]);
  free_device_list(list);
  ibv_pd* pd = alloc_pd(ctx);
  std::vector<uint8_t> mem(64);
  std::set<uint32_t> seen;
  std::set<uint32_t> deltas;
  constexpr int kRounds = 500;
  for (int i = 0; i < kRounds; ++i) {
    ibv_mr* mr = reg_mr(pd, mem.data(), mem.size(), kAll);
    ASSERT_NE(mr, nullptr);
    EXPECT_NE(mr->lkey, mr->rkey);
    EXPECT_TRUE(seen.insert(mr->lkey).second) << "lkey reused: " << mr->lkey;
    EXPECT_TRUE(seen.insert(mr->rkey).second) << "rkey reused: " << mr->rkey;
    deltas.insert(mr->rkey - mr->lkey);
    ASSERT_EQ(dereg_mr(mr), 0);  // freed keys are never handed out again
  }
  // A fixed relation (rkey = lkey + c, a counter) would give one delta.
  EXPECT_GT(deltas.size(), static_cast<size_t>(kRounds - 5));
  // Window rkeys own their 24-bit index: no MR key shares it.
  std::set<uint32_t> indexes;
  for (uint32_t k : seen) indexes.insert(k >> 8);
  for (int i = 0; i < 50; ++i) {
    ibv_mw* mw = ibv_alloc_mw(pd, i % 2 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2);
    ASSERT_NE(mw, nullptr);
    EXPECT_TRUE(indexes.insert(mw->rkey >> 8).second) << "window index reused: " << mw->rkey;
    ASSERT_EQ(ibv_dealloc_mw(mw), 0);
  }
  EXPECT_EQ(dealloc_pd(pd), 0);
  EXPECT_EQ(close_device(ctx), 0);
}

TEST(Keys, StaleRkeyIsRemoteAccessError) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer src(p.client_pd, 64, kAll);
  std::vector<uint8_t> mem(64);
  ibv_mr* mr = reg_mr(p.server_pd, mem.data(), mem.size(), kAll);
  ASSERT_NE(mr, nullptr);
  const uint32_t stale = mr->rkey;
  ASSERT_EQ(dereg_mr(mr), 0);
  // The same memory registered again gets a new rkey; the old one stays dead.
  ibv_mr* again = reg_mr(p.server_pd, mem.data(), mem.size(), kAll);
  ASSERT_NE(again, nullptr);
  EXPECT_NE(again->rkey, stale);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 1, src, 0, 8, 0,
                     reinterpret_cast<uint64_t>(mem.data()), stale),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(dereg_mr(again), 0);
}

TEST(Keys, GuessedRkeyNeighboursAreRemoteAccessErrors) {
  // rkey +/- 1 (what a counter-based device would have issued next) and the
  // MR's lkey used as an rkey all fail.
  for (int variant = 0; variant < 3; ++variant) {
    ConnectedPair p;
    ASSERT_TRUE(p.ok());
    Buffer target(p.server_pd, 64, kAll);
    Buffer src(p.client_pd, 64, kAll);
    const uint32_t guess = variant == 0   ? target.mr->rkey + 1
                           : variant == 1 ? target.mr->rkey - 1
                                          : target.mr->lkey;
    ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 1, src, 0, 8, 0, target.addr(), guess),
              0);
    ibv_wc wc{};
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << "variant " << variant;
  }
}

TEST(Keys, RkeyIsNoLkey) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer src(p.client_pd, 64, kAll);
  ibv_sge sge{src.addr(), 8, src.mr->rkey};  // the rkey where the lkey belongs
  ibv_send_wr wr{};
  wr.wr_id = 5;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.client->qp, &wr, &bad), 0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
