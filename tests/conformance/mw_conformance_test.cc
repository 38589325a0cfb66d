// mw_conformance_test.cc: memory windows as a NIC implements them (IB spec
// 10.6.7; ibv_alloc_mw(3), ibv_bind_mw(3), ibv_post_send(3)), through the
// verbs table: the same assertions hold on softrdma and on rdma-core.
#include <cstring>

#include "absl/time/clock.h"

#include "gtest/gtest.h"
#include "tests/conformance/verbs_features_util.h"

namespace rdmarpc {
namespace conformance {
namespace {

constexpr int kMwMr = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

class MwConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    RDMARPC_REQUIRE_DEVICE();
    int n = 0;
    ibv_device** list = Api().get_device_list(&n);
    ibv_context* ctx = Api().open_device(list[0]);
    Api().free_device_list(list);
    ASSERT_NE(ctx, nullptr);
    ibv_device_attr a{};
    ASSERT_EQ(Api().query_device(ctx, &a), 0);
    Api().close_device(ctx);
    if (!(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW) || a.max_mw == 0) {
      GTEST_SKIP() << "device reports no memory windows (IBV_DEVICE_MEM_WINDOW, max_mw "
                   << a.max_mw << ")";
    }
    type2_ = (a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0;
  }
  bool type2_ = false;
};

ibv_mw_bind_info Info(ibv_mr* mr, uint64_t addr, uint64_t length, unsigned int access) {
  ibv_mw_bind_info b{};
  b.mr = mr;
  b.addr = addr;
  b.length = length;
  b.mw_access_flags = access;
  return b;
}

int PostBindType2(ibv_qp* qp, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& info,
                  uint64_t wr_id) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info = info;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

ibv_wc_status Write8(Pair& p, const Buffer& src, uint64_t addr, uint32_t rkey, uint64_t wr_id) {
  EXPECT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, wr_id, src, 0, 8, addr, rkey), 0);
  ibv_wc wc{};
  EXPECT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, wr_id);
  return wc.status;
}

TEST_F(MwConformance, Type1BindGrantsItsRangeOnly) {
  Pair p;
  RDMARPC_REQUIRE_PAIR(p);
  Buffer target(p.server_pd, 256, kMwMr);
  Buffer src(p.client_pd, 64, kAll);
  std::memcpy(src.data.data(), "windowed", 8);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr) << std::strerror(errno);
  const uint32_t before = mw->rkey;
  ibv_mw_bind bind{};
  bind.wr_id = 7;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info = Info(target.mr, target.addr() + 64, 64, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(ibv_bind_mw(p.server->qp, mw, &bind), 0);
  EXPECT_EQ(mw->rkey, ibv_inc_rkey(before));
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(Write8(p, src, target.addr() + 64, mw->rkey, 1), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(&target.data[64], "windowed", 8), 0);
  EXPECT_EQ(Write8(p, src, target.addr() + 124, mw->rkey, 2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(StateOf(p.client->qp), IBV_QPS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST_F(MwConformance, Type2BindAndLocalInvalidate) {
  if (!type2_) GTEST_SKIP() << "device reports no type 2B windows";
  Pair p;
  RDMARPC_REQUIRE_PAIR(p);
  Buffer target(p.server_pd, 128, kMwMr);
  Buffer src(p.client_pd, 64, kAll);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr) << std::strerror(errno);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(PostBindType2(p.server->qp, mw, rkey,
                          Info(target.mr, target.addr(), 128, IBV_ACCESS_REMOTE_WRITE), 11),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(Write8(p, src, target.addr(), rkey, 1), IBV_WC_SUCCESS);
  ibv_send_wr inv{};
  inv.wr_id = 12;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.server->qp, &inv, &bad), 0);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(wc.wr_id, 12u);
  EXPECT_EQ(Write8(p, src, target.addr(), rkey, 2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST_F(MwConformance, SendWithInvalidateReportsTheRkey) {
  if (!type2_) GTEST_SKIP() << "device reports no type 2B windows";
  Pair p;
  RDMARPC_REQUIRE_PAIR(p);
  Buffer target(p.server_pd, 128, kMwMr);
  Buffer rbuf(p.server_pd, 64, kAll);
  Buffer src(p.client_pd, 64, kAll);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(PostBindType2(p.server->qp, mw, rkey,
                          Info(target.mr, target.addr(), 128, IBV_ACCESS_REMOTE_WRITE), 1),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(PostRecv(p.server->qp, 40, rbuf, 0, 64), 0);
  ibv_sge sge{src.addr(), 4, src.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 41;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.client->qp, &wr, &bad), 0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 40u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 4u);
  EXPECT_EQ(wc.wc_flags & IBV_WC_WITH_INV, IBV_WC_WITH_INV);
  EXPECT_EQ(wc.invalidated_rkey, rkey);
  EXPECT_EQ(Write8(p, src, target.addr(), rkey, 2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

// A bind or invalidate is a work request like any other: it takes effect
// when the send queue reaches it, not at post (IB spec 10.6.7.2: "Bind
// Memory Window ... operations are executed in order with other WRs on the
// send queue"). To hold the server's SQ, its SEND goes to a client QP with no
// receive posted: the RNR NAK makes the requester wait the client's
// min_rnr_timer (31: 491.52 ms; rnr_retry 7 retries forever) before sending
// anything again, and the WRs posted behind it wait too.
void HoldServerSqBehindRnr(Pair& p, const Buffer& src) {
  ibv_qp_attr a{};
  a.min_rnr_timer = 31;
  ASSERT_EQ(Api().modify_qp(p.client->qp, &a, IBV_QP_MIN_RNR_TIMER), 0);
  ASSERT_EQ(PostSend(p.server->qp, IBV_WR_SEND, 100, src, 0, 8), 0);
  // The NAK comes back within microseconds; 20 ms leaves ~470 ms of wait.
  absl::SleepFor(absl::Milliseconds(20));
}

TEST_F(MwConformance, Type1BindPostedBehindAWaitingSendIsNotInEffectYet) {
  Pair p;
  RDMARPC_REQUIRE_PAIR(p);
  Buffer target(p.server_pd, 128, kMwMr);
  Buffer server_src(p.server_pd, 64, kAll);
  Buffer src(p.client_pd, 64, kAll);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr) << std::strerror(errno);
  const uint32_t before = mw->rkey;
  HoldServerSqBehindRnr(p, server_src);
  ibv_mw_bind bind{};
  bind.wr_id = 101;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info = Info(target.mr, target.addr(), 128, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(ibv_bind_mw(p.server->qp, mw, &bind), 0);
  // The handle shows the new rkey at once; the window answers to it only
  // once the SEND before the bind has gone.
  EXPECT_EQ(mw->rkey, ibv_inc_rkey(before));
  EXPECT_EQ(Write8(p, src, target.addr(), mw->rkey, 1), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST_F(MwConformance, Type1BindCompletesAfterTheSendBeforeItAndThenWorks) {
  Pair p;
  RDMARPC_REQUIRE_PAIR(p);
  Buffer target(p.server_pd, 128, kMwMr);
  Buffer server_src(p.server_pd, 64, kAll);
  Buffer src(p.client_pd, 64, kAll);
  Buffer client_rbuf(p.client_pd, 64, kAll);
  std::memcpy(server_src.data.data(), "sendsend", 8);
  std::memcpy(src.data.data(), "afterbnd", 8);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr) << std::strerror(errno);
  HoldServerSqBehindRnr(p, server_src);
  ibv_mw_bind bind{};
  bind.wr_id = 101;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info = Info(target.mr, target.addr(), 128, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(ibv_bind_mw(p.server->qp, mw, &bind), 0);
  // Nothing completes while the SEND waits: completions come in SQ order.
  EXPECT_TRUE(Drain(p.server_cq, 100).empty());
  ASSERT_EQ(PostRecv(p.client->qp, 200, client_rbuf, 0, 64), 0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 100u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 101u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 200u);
  EXPECT_EQ(wc.byte_len, 8u);
  EXPECT_EQ(std::memcmp(client_rbuf.data.data(), "sendsend", 8), 0);
  EXPECT_EQ(Write8(p, src, target.addr() + 8, mw->rkey, 2), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(&target.data[8], "afterbnd", 8), 0);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST_F(MwConformance, LocalInvalidatePostedBehindAWaitingSendLeavesTheWindowUsable) {
  if (!type2_) GTEST_SKIP() << "device reports no type 2B windows";
  Pair p;
  RDMARPC_REQUIRE_PAIR(p);
  Buffer target(p.server_pd, 128, kMwMr);
  Buffer server_src(p.server_pd, 64, kAll);
  Buffer src(p.client_pd, 64, kAll);
  Buffer client_rbuf(p.client_pd, 64, kAll);
  std::memcpy(src.data.data(), "stillok!", 8);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr) << std::strerror(errno);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(PostBindType2(p.server->qp, mw, rkey,
                          Info(target.mr, target.addr(), 128, IBV_ACCESS_REMOTE_WRITE), 11),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  HoldServerSqBehindRnr(p, server_src);
  ibv_send_wr inv{};
  inv.wr_id = 12;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.server->qp, &inv, &bad), 0);
  // The invalidate waits behind the SEND: the window still takes the WRITE.
  EXPECT_EQ(Write8(p, src, target.addr(), rkey, 1), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(target.data.data(), "stillok!", 8), 0);
  // Once the SEND has its receive, the SEND and then the invalidate complete,
  // and the window is gone.
  ASSERT_EQ(PostRecv(p.client->qp, 200, client_rbuf, 0, 64), 0);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 100u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 12u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 200u);
  EXPECT_EQ(Write8(p, src, target.addr(), rkey, 2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST_F(MwConformance, DeallocPdWithALiveWindowIsEbusy) {
  int n = 0;
  ibv_device** list = Api().get_device_list(&n);
  ibv_context* ctx = Api().open_device(list[0]);
  Api().free_device_list(list);
  ibv_pd* pd = Api().alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  EXPECT_EQ(Api().dealloc_pd(pd), EBUSY);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(Api().dealloc_pd(pd), 0);
  Api().close_device(ctx);
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
