// mw_test.cc: memory windows, type 1 and type 2 (softrdma.h, mw.cc).
#include <cstring>
#include <memory>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

// The MR under a window grants nothing remote itself: every remote access in
// these tests is through the window.
constexpr int kMwMr = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

ibv_mw_bind_info Info(ibv_mr* mr, uint64_t addr, uint64_t length, unsigned int access) {
  ibv_mw_bind_info b{};
  b.mr = mr;
  b.addr = addr;
  b.length = length;
  b.mw_access_flags = access;
  return b;
}

// Type 1: the ibv_bind_mw verb (a verbs.h inline, through the context ops).
int BindType1(ibv_qp* qp, ibv_mw* mw, const ibv_mw_bind_info& info, uint64_t wr_id) {
  ibv_mw_bind bind{};
  bind.wr_id = wr_id;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info = info;
  return ibv_bind_mw(qp, mw, &bind);
}

// Type 2: an IBV_WR_BIND_MW work request.
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

int PostLocalInv(ibv_qp* qp, uint32_t rkey, uint64_t wr_id) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

int PostSendInv(ibv_qp* qp, const Buffer& buf, uint32_t len, uint32_t rkey, uint64_t wr_id) {
  ibv_sge sge{buf.addr(), len, buf.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

// Writes 8 bytes from `src` to `addr` under `rkey` and returns the WC status.
ibv_wc_status Write8(ConnectedPair& p, const Buffer& src, uint64_t addr, uint32_t rkey,
                     uint64_t wr_id) {
  EXPECT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, wr_id, src, 0, 8, 0, addr, rkey), 0);
  ibv_wc wc{};
  EXPECT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, wr_id);
  return wc.status;
}

ibv_qp_state StateOf(ibv_qp* qp) {
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  EXPECT_EQ(query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
  return a.qp_state;
}

TEST(MemoryWindow, QueryDeviceReportsWindows) {
  ibv_device** list = get_device_list(nullptr);
  ibv_context* ctx = open_device(list[0]);
  free_device_list(list);
  ibv_device_attr a{};
  ASSERT_EQ(query_device(ctx, &a), 0);
  EXPECT_EQ(a.max_mw, 1 << 20);
  EXPECT_EQ(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW, IBV_DEVICE_MEM_WINDOW);
  EXPECT_EQ(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  EXPECT_EQ(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A, 0u);
  EXPECT_EQ(close_device(ctx), 0);
}

TEST(MemoryWindow, AllocRejectsUnknownTypeAndPinsPd) {
  ibv_device** list = get_device_list(nullptr);
  ibv_context* ctx = open_device(list[0]);
  free_device_list(list);
  ibv_pd* pd = alloc_pd(ctx);
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd, static_cast<ibv_mw_type>(3)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  EXPECT_EQ(mw->pd, pd);
  EXPECT_EQ(mw->context, ctx);
  EXPECT_EQ(mw->type, IBV_MW_TYPE_2);
  EXPECT_EQ(dealloc_pd(pd), EBUSY);  // a live window holds its PD
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
  EXPECT_EQ(close_device(ctx), 0);
}

TEST(MemoryWindow, Type1BindCompletesInSqAndGrantsOnlyItsRange) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 256, kMwMr);
  Buffer src(p.client_pd, 64, kAll);
  std::memcpy(src.data.data(), "windowed", 8);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const uint32_t before = mw->rkey;
  ASSERT_EQ(BindType1(p.server->qp, mw, Info(target.mr, target.addr() + 64, 64,
                                             IBV_ACCESS_REMOTE_WRITE), 7),
            0);
  EXPECT_EQ(mw->rkey, ibv_inc_rkey(before));
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.qp_num, p.server->qp->qp_num);
  // Inside the window: lands.
  EXPECT_EQ(Write8(p, src, target.addr() + 64 + 56, mw->rkey, 1), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(&target.data[120], "windowed", 8), 0);
  // The MR's own rkey grants no remote write, the window's range ends at 128.
  EXPECT_EQ(Write8(p, src, target.addr() + 124, mw->rkey, 2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(StateOf(p.client->qp), IBV_QPS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST(MemoryWindow, Type1ReadNeedsRemoteReadInTheBind) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 128, kMwMr);
  Buffer dst(p.client_pd, 64, kAll);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(BindType1(p.server->qp, mw, Info(target.mr, target.addr(), 128,
                                             IBV_ACCESS_REMOTE_WRITE), 1),
            0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_READ, 9, dst, 0, 8, 0, target.addr(), mw->rkey),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST(MemoryWindow, Type1BindOnMrWithoutMwBindIsEinvalAndPostsNothing) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer plain(p.server_pd, 128, kAll);  // no IBV_ACCESS_MW_BIND
  Buffer bindable(p.server_pd, 128, IBV_ACCESS_MW_BIND);  // no local write
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const uint32_t before = mw->rkey;
  EXPECT_EQ(BindType1(p.server->qp, mw, Info(plain.mr, plain.addr(), 64,
                                             IBV_ACCESS_REMOTE_READ), 1),
            EINVAL);
  // Beyond the MR.
  EXPECT_EQ(BindType1(p.server->qp, mw, Info(bindable.mr, bindable.addr() + 64, 65,
                                             IBV_ACCESS_REMOTE_READ), 2),
            EINVAL);
  // Remote write through a window needs local write on the MR.
  EXPECT_EQ(BindType1(p.server->qp, mw, Info(bindable.mr, bindable.addr(), 64,
                                             IBV_ACCESS_REMOTE_WRITE), 3),
            EINVAL);
  EXPECT_EQ(mw->rkey, before);
  EXPECT_TRUE(Drain(p.server_cq, 50).empty());
  EXPECT_EQ(StateOf(p.server->qp), IBV_QPS_RTS);
  // A type-2 window is not bound with the verb (verbs.h refuses it).
  ibv_mw* mw2 = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_2);
  EXPECT_EQ(BindType1(p.server->qp, mw2, Info(bindable.mr, bindable.addr(), 64,
                                              IBV_ACCESS_REMOTE_READ), 4),
            EINVAL);
  EXPECT_EQ(ibv_dealloc_mw(mw2), 0);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST(MemoryWindow, Type1UnbindRetiresTheRkey) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 128, kMwMr);
  Buffer src(p.client_pd, 64, kAll);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(BindType1(p.server->qp, mw, Info(target.mr, target.addr(), 128,
                                             IBV_ACCESS_REMOTE_WRITE), 1),
            0);
  const uint32_t bound_rkey = mw->rkey;
  EXPECT_EQ(Write8(p, src, target.addr(), bound_rkey, 1), IBV_WC_SUCCESS);
  ASSERT_EQ(BindType1(p.server->qp, mw, Info(nullptr, 0, 0, 0), 2), 0);  // unbind
  EXPECT_EQ(mw->rkey, ibv_inc_rkey(bound_rkey));
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(Write8(p, src, target.addr(), bound_rkey, 2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST(MemoryWindow, Type1RebindMovesTheWindowAndItsRkey) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 128, kMwMr);
  Buffer src(p.client_pd, 64, kAll);
  std::memcpy(src.data.data(), "rebound!", 8);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(BindType1(p.server->qp, mw, Info(target.mr, target.addr(), 64,
                                             IBV_ACCESS_REMOTE_WRITE), 1),
            0);
  const uint32_t first = mw->rkey;
  ASSERT_EQ(BindType1(p.server->qp, mw, Info(target.mr, target.addr() + 64, 64,
                                             IBV_ACCESS_REMOTE_WRITE), 2),
            0);
  EXPECT_EQ(mw->rkey, ibv_inc_rkey(first));
  EXPECT_EQ(Write8(p, src, target.addr() + 64, mw->rkey, 1), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(&target.data[64], "rebound!", 8), 0);
  // The first binding's rkey died with the rebind.
  EXPECT_EQ(Write8(p, src, target.addr(), first, 2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST(MemoryWindow, DeallocatedWindowsRkeyIsRemoteAccessError) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 128, kMwMr);
  Buffer src(p.client_pd, 64, kAll);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(BindType1(p.server->qp, mw, Info(target.mr, target.addr(), 128,
                                             IBV_ACCESS_REMOTE_WRITE), 1),
            0);
  const uint32_t rkey = mw->rkey;
  ASSERT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(Write8(p, src, target.addr(), rkey, 1), IBV_WC_REM_ACCESS_ERR);
}

TEST(MemoryWindow, DeregisteringTheMrEndsTheBinding) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer src(p.client_pd, 64, kAll);
  std::vector<uint8_t> mem(128);
  ibv_mr* mr = reg_mr(p.server_pd, mem.data(), mem.size(), kMwMr);
  ASSERT_NE(mr, nullptr);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_1);
  ASSERT_EQ(BindType1(p.server->qp, mw, Info(mr, reinterpret_cast<uint64_t>(mem.data()), 128,
                                             IBV_ACCESS_REMOTE_WRITE), 1),
            0);
  ASSERT_EQ(dereg_mr(mr), 0);
  EXPECT_EQ(Write8(p, src, reinterpret_cast<uint64_t>(mem.data()), mw->rkey, 1),
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST(MemoryWindow, Type2BindWrThenLocalInvalidate) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 128, kMwMr);
  Buffer src(p.client_pd, 64, kAll);
  std::memcpy(src.data.data(), "type-two", 8);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  // The caller picks the low 8 bits of the new rkey; the upper 24 stay.
  const uint32_t rkey = (mw->rkey & 0xffffff00u) | 0x5a;
  ASSERT_EQ(PostBindType2(p.server->qp, mw, rkey,
                          Info(target.mr, target.addr(), 128,
                               IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ),
                          11),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wc.wr_id, 11u);
  EXPECT_EQ(mw->rkey, rkey);
  EXPECT_EQ(Write8(p, src, target.addr() + 8, rkey, 1), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(&target.data[8], "type-two", 8), 0);
  ASSERT_EQ(PostLocalInv(p.server->qp, rkey, 12), 0);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(wc.wr_id, 12u);
  EXPECT_EQ(Write8(p, src, target.addr() + 8, rkey, 2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST(MemoryWindow, Type2BindOfABoundWindowIsMwBindErr) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 128, kMwMr);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const ibv_mw_bind_info info = Info(target.mr, target.addr(), 64, IBV_ACCESS_REMOTE_READ);
  const uint32_t first = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(PostBindType2(p.server->qp, mw, first, info, 1), 0);
  ASSERT_EQ(PostBindType2(p.server->qp, mw, ibv_inc_rkey(first), info, 2), 0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR);
  EXPECT_EQ(StateOf(p.server->qp), IBV_QPS_ERR);
  EXPECT_EQ(mw->rkey, first);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST(MemoryWindow, Type2BindMustKeepTheWindowsIndex) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 128, kMwMr);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(PostBindType2(p.server->qp, mw, mw->rkey ^ 0x100u,
                          Info(target.mr, target.addr(), 64, IBV_ACCESS_REMOTE_READ), 1),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST(MemoryWindow, Type2BindOnMrWithoutMwBindIsMwBindErr) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer plain(p.server_pd, 128, kAll);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_2);
  ASSERT_EQ(PostBindType2(p.server->qp, mw, ibv_inc_rkey(mw->rkey),
                          Info(plain.mr, plain.addr(), 64, IBV_ACCESS_REMOTE_READ), 5),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR);
  EXPECT_EQ(StateOf(p.server->qp), IBV_QPS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST(MemoryWindow, Type2WindowWorksOnlyThroughItsQp) {
  PairOptions opt;
  ConnectedPair bound(opt);
  ASSERT_TRUE(bound.ok());
  opt.shared_server_pd = bound.server_pd;  // the other QP is on the window's PD
  ConnectedPair other(opt);
  ASSERT_TRUE(other.ok());
  Buffer target(bound.server_pd, 128, kMwMr);
  Buffer src_bound(bound.client_pd, 64, kAll);
  Buffer src_other(other.client_pd, 64, kAll);
  ibv_mw* mw = ibv_alloc_mw(bound.server_pd, IBV_MW_TYPE_2);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(PostBindType2(bound.server->qp, mw, rkey,
                          Info(target.mr, target.addr(), 128, IBV_ACCESS_REMOTE_WRITE), 1),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(bound.server_cq, &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(Write8(bound, src_bound, target.addr(), rkey, 1), IBV_WC_SUCCESS);
  EXPECT_EQ(Write8(other, src_other, target.addr(), rkey, 2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(StateOf(other.client->qp), IBV_QPS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST(MemoryWindow, SendWithInvalidateFreesTheWindowAtTheResponder) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 128, kMwMr);
  Buffer rbuf(p.server_pd, 64, kAll);
  Buffer src(p.client_pd, 64, kAll);
  std::memcpy(src.data.data(), "done", 4);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_2);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(PostBindType2(p.server->qp, mw, rkey,
                          Info(target.mr, target.addr(), 128, IBV_ACCESS_REMOTE_WRITE), 1),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(PostRecv(p.server->qp, 40, rbuf, 0, 64), 0);
  ASSERT_EQ(PostSendInv(p.client->qp, src, 4, rkey, 41), 0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 41u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 40u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 4u);
  EXPECT_EQ(wc.wc_flags & (IBV_WC_WITH_INV | IBV_WC_WITH_IMM), IBV_WC_WITH_INV);
  EXPECT_EQ(wc.invalidated_rkey, rkey);
  EXPECT_EQ(std::memcmp(rbuf.data.data(), "done", 4), 0);
  EXPECT_EQ(Write8(p, src, target.addr(), rkey, 2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

// Above kShmInlineMax (16 KiB) the same-host link does not carry the payload
// in its ring but lets the responder read the requester's SGEs: the request
// must still be a SEND that invalidates, not become something else.
TEST(MemoryWindow, SendWithInvalidateLargerThanTheShmRingCopyFreesTheWindow) {
  constexpr uint32_t kLen = 20000;  // > 16384
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 128, kMwMr);
  Buffer rbuf(p.server_pd, 32768, kAll);
  Buffer src(p.client_pd, kLen, kAll);
  for (uint32_t i = 0; i < kLen; ++i) src.data[i] = static_cast<uint8_t>(i * 7 + 1);
  ibv_mw* mw = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(PostBindType2(p.server->qp, mw, rkey,
                          Info(target.mr, target.addr(), 128, IBV_ACCESS_REMOTE_WRITE), 1),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(PostRecv(p.server->qp, 50, rbuf, 0, 32768), 0);
  ASSERT_EQ(PostSendInv(p.client->qp, src, kLen, rkey, 51), 0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 51u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 50u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, kLen);
  EXPECT_EQ(wc.wc_flags & (IBV_WC_WITH_INV | IBV_WC_WITH_IMM), IBV_WC_WITH_INV);
  EXPECT_EQ(wc.invalidated_rkey, rkey);
  EXPECT_EQ(std::memcmp(rbuf.data.data(), src.data.data(), kLen), 0);
  EXPECT_EQ(Write8(p, src, target.addr(), rkey, 2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST(MemoryWindow, SendWithInvalidateOfNoWindowIsRemoteInvalidRequest) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 64, kAll);
  Buffer src(p.client_pd, 64, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 50, rbuf, 0, 64), 0);
  // An MR's rkey cannot be invalidated (it is no window).
  ASSERT_EQ(PostSendInv(p.client->qp, src, 4, rbuf.mr->rkey, 51), 0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 51u);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 50u);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(StateOf(p.server->qp), IBV_QPS_ERR);
}

TEST(MemoryWindow, LocalInvalidateOfAnMrRkeyIsLocalQpOperationError) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 64, kAll);
  ibv_mw* mw1 = ibv_alloc_mw(p.server_pd, IBV_MW_TYPE_1);
  ASSERT_EQ(PostLocalInv(p.server->qp, target.mr->rkey, 3), 0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(wc.status, IBV_WC_LOC_QP_OP_ERR);
  EXPECT_EQ(StateOf(p.server->qp), IBV_QPS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw1), 0);
}

TEST(MemoryWindow, LocalOpsCompleteInSqOrderBehindASend) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.client_pd, 128, kMwMr);
  Buffer sbuf(p.client_pd, 64, kAll);
  Buffer rbuf(p.server_pd, 64, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 64), 0);
  ibv_mw* mw = ibv_alloc_mw(p.client_pd, IBV_MW_TYPE_2);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 100, sbuf, 0, 8), 0);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(PostBindType2(p.client->qp, mw, rkey,
                          Info(target.mr, target.addr(), 64, IBV_ACCESS_REMOTE_READ), 101),
            0);
  ASSERT_EQ(PostLocalInv(p.client->qp, rkey, 102), 0);
  ibv_wc wc{};
  for (uint64_t id : {100u, 101u, 102u}) {
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    EXPECT_EQ(wc.wr_id, id);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

// Holds the client's SQ: its SEND finds no receive at the server, whose
// min_rnr_timer (31: 491.52 ms) the requester then waits before sending again.
void HoldClientSqBehindRnr(ConnectedPair& p, const Buffer& sbuf) {
  ibv_qp_attr a{};
  a.min_rnr_timer = 31;
  ASSERT_EQ(modify_qp(p.server->qp, &a, IBV_QP_MIN_RNR_TIMER), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 100, sbuf, 0, 8), 0);
  ASSERT_TRUE(Drain(p.client_cq, 20).empty());  // the NAK came; the SEND waits
}

TEST(MemoryWindow, WindowDeallocatedBeforeItsBindsTurnFailsTheBindNotTheProcess) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.client_pd, 128, kMwMr);
  Buffer sbuf(p.client_pd, 64, kAll);
  Buffer rbuf(p.server_pd, 64, kAll);
  HoldClientSqBehindRnr(p, sbuf);
  ibv_mw* mw = ibv_alloc_mw(p.client_pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(PostBindType2(p.client->qp, mw, ibv_inc_rkey(mw->rkey),
                          Info(target.mr, target.addr(), 64, IBV_ACCESS_REMOTE_WRITE), 101),
            0);
  // A user error on a NIC too; softrdma must not touch the freed window.
  ASSERT_EQ(ibv_dealloc_mw(mw), 0);
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 64), 0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 100u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 101u);
  EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR);
  EXPECT_EQ(StateOf(p.client->qp), IBV_QPS_ERR);
}

TEST(MemoryWindow, MrDeregisteredBeforeTheBindsTurnFailsTheBind) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  auto target = std::make_unique<Buffer>(p.client_pd, 128, kMwMr);
  Buffer sbuf(p.client_pd, 64, kAll);
  Buffer rbuf(p.server_pd, 64, kAll);
  ibv_mw* mw = ibv_alloc_mw(p.client_pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  HoldClientSqBehindRnr(p, sbuf);
  // Valid at post: the verb takes it (0) and the handle's rkey moves on.
  const uint32_t before = mw->rkey;
  ASSERT_EQ(BindType1(p.client->qp, mw,
                      Info(target->mr, target->addr(), 64, IBV_ACCESS_REMOTE_WRITE), 101),
            0);
  EXPECT_EQ(mw->rkey, ibv_inc_rkey(before));
  target.reset();  // deregisters the MR before the bind's turn
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 64), 0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 100u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 101u);
  EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

// A bind on an RTS QP that no connection backs (moved to RTS by hand) needs
// no transport: it completes.
TEST(MemoryWindow, BindOnAnRtsQpWithoutATransportCompletes) {
  ibv_device** list = get_device_list(nullptr);
  ibv_context* ctx = open_device(list[0]);
  free_device_list(list);
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = alloc_pd(ctx);
  ibv_cq* cq = create_cq(ctx, 64, nullptr, nullptr, 0);
  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.cap.max_send_wr = 8;
  qa.cap.max_recv_wr = 8;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  ibv_qp* qp = create_qp(pd, &qa);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = 1;
  a.ah_attr.port_num = 1;
  ASSERT_EQ(modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  ASSERT_EQ(modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
            0);
  {
    Buffer target(pd, 256, kMwMr);
    ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
    ASSERT_NE(mw, nullptr);
    ASSERT_EQ(BindType1(qp, mw, Info(target.mr, target.addr(), 64, IBV_ACCESS_REMOTE_WRITE), 7), 0);
    ibv_wc wc{};
    EXPECT_TRUE(PollOne(cq, &wc, 1000)) << "the bind never completed";
    destroy_qp(qp);
    EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  }
  destroy_cq(cq);
  dealloc_pd(pd);
  close_device(ctx);
}

// RNR rewind over a READ, a carried-out bind and a READ that
// waits for the one slot; all complete in order, the bind once.
TEST(MemoryWindow, RnrRewindOverReadsAndABind) {
  PairOptions opt;
  opt.server_responder_resources = 1;  // the client's max_rd_atomic
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer target(p.client_pd, 128, kMwMr);
  Buffer sbuf(p.client_pd, 64, kAll);
  Buffer local(p.client_pd, 256, kAll);
  Buffer remote(p.server_pd, 256, kAll);
  Buffer rbuf(p.server_pd, 64, kAll);
  for (int i = 0; i < 256; ++i) remote.data[i] = static_cast<uint8_t>(i);
  ibv_mw* mw = ibv_alloc_mw(p.client_pd, IBV_MW_TYPE_2);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  for (int round = 0; round < 2; ++round) {
    ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 100, sbuf, 0, 8), 0);  // RNR NAK
    ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_READ, 101, local, 0, 64, 0, remote.addr(),
                       remote.mr->rkey), 0);
    if (round == 0) {
      ASSERT_EQ(PostBindType2(p.client->qp, mw, rkey,
                              Info(target.mr, target.addr(), 64, IBV_ACCESS_REMOTE_READ), 102), 0);
    } else {
      ASSERT_EQ(PostLocalInv(p.client->qp, rkey, 102), 0);
    }
    ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_READ, 103, local, 64, 64, 0, remote.addr() + 64,
                       remote.mr->rkey), 0);
    absl::SleepFor(absl::Milliseconds(5));
    ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 64), 0);
    ibv_wc wc{};
    for (uint64_t id : {100u, 101u, 102u, 103u}) {
      ASSERT_TRUE(PollOne(p.client_cq, &wc)) << id;
      EXPECT_EQ(wc.wr_id, id);
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << id << " round " << round;
    }
    ASSERT_TRUE(PollOne(p.server_cq, &wc));
    EXPECT_EQ(std::memcmp(local.data.data(), remote.data.data(), 128), 0);
  }
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
