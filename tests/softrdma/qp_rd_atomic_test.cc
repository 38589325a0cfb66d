// qp_rd_atomic_test.cc: rdma_conn_param.responder_resources becomes the QP's
// max_dest_rd_atomic. A side that accepted with 0 takes no RDMA READ or
// atomic: the NIC NAKs them with "invalid request" and the requester gets
// IBV_WC_REM_INV_REQ_ERR -- the classic result of leaving the field 0. The
// requester keeps at most its max_rd_atomic (the peer's responder_resources)
// READs / atomics out.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

TEST(QpRdAtomic, ReadFromAPeerWithoutResponderResourcesIsRemInvReqErr) {
  PairOptions opt;
  opt.server_responder_resources = 0;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer remote(p.server_pd, 64, kAll);
  Buffer local(p.client_pd, 64, kAll);
  // WRITEs need no responder resources.
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 1, local, 0, 8, 0, remote.addr(),
                     remote.mr->rkey),
            0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_READ, 2, local, 0, 8, 0, remote.addr(),
                     remote.mr->rkey),
            0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
  ibv_qp_attr attr;
  ibv_qp_init_attr init;
  ASSERT_EQ(query_qp(p.server->qp, &attr, IBV_QP_MAX_DEST_RD_ATOMIC, &init), 0);
  EXPECT_EQ(attr.max_dest_rd_atomic, 0);
}

TEST(QpRdAtomic, ReadWorksWithResponderResources) {
  ConnectedPair p;  // accepted with responder_resources 4
  ASSERT_TRUE(p.ok());
  Buffer remote(p.server_pd, 64, kAll);
  Buffer local(p.client_pd, 64, kAll);
  remote.data[0] = 0x77;
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_READ, 2, local, 0, 8, 0, remote.addr(),
                     remote.mr->rkey),
            0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(local.data[0], 0x77);
  ibv_qp_attr attr;
  ibv_qp_init_attr init;
  ASSERT_EQ(query_qp(p.server->qp, &attr, IBV_QP_MAX_DEST_RD_ATOMIC, &init), 0);
  EXPECT_EQ(attr.max_dest_rd_atomic, 4);
}

// max_rd_atomic as a NIC keeps it: the requester has at most that many READs
// / atomics out; the rest wait in the SQ (and the WRs behind them) until an
// answer frees a slot, and everything completes in order.
TEST(QpRdAtomic, RequesterKeepsNoMoreThanItsMaxRdAtomicOut) {
  ConnectedPair p;  // the server accepted with responder_resources 4
  ASSERT_TRUE(p.ok());
  ibv_qp_attr attr;
  ibv_qp_init_attr init;
  ASSERT_EQ(query_qp(p.client->qp, &attr, IBV_QP_MAX_QP_RD_ATOMIC, &init), 0);
  ASSERT_EQ(attr.max_rd_atomic, 4);
  constexpr int kReads = 10;
  Buffer remote(p.server_pd, kReads * 64 + 16, kAll);
  Buffer local(p.client_pd, kReads * 64 + 16, kAll);
  Buffer sbuf(p.client_pd, 8, kAll);
  Buffer rbuf(p.server_pd, 8, kAll);
  for (size_t i = 0; i < remote.data.size(); ++i) remote.data[i] = static_cast<uint8_t>(i + 3);
  uint64_t counter = 40;
  std::memcpy(&remote.data[kReads * 64], &counter, 8);
  ASSERT_EQ(PostRecv(p.server->qp, 9, rbuf, 0, 8), 0);
  // One chain, posted under one hold of the QP: the first four go out, and
  // no answer can be taken in before the rest are queued behind them.
  std::vector<ibv_sge> sges(kReads + 3);
  std::vector<ibv_send_wr> wrs(kReads + 3);
  for (int i = 0; i < kReads + 3; ++i) {
    ibv_send_wr& wr = wrs[i];
    ibv_sge& sge = sges[i];
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.next = i + 1 < kReads + 3 ? &wrs[i + 1] : nullptr;
    if (i < kReads) {
      sge = {local.addr() + i * 64, 64, local.mr->lkey};
      wr.wr_id = 10 + i;
      wr.opcode = IBV_WR_RDMA_READ;
      wr.wr.rdma.remote_addr = remote.addr() + i * 64;
      wr.wr.rdma.rkey = remote.mr->rkey;
    } else if (i < kReads + 2) {
      sge = {local.addr() + kReads * 64 + 8 * (i - kReads), 8, local.mr->lkey};
      wr.wr_id = 30 + (i - kReads);
      wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
      wr.wr.atomic.remote_addr = remote.addr() + kReads * 64;
      wr.wr.atomic.rkey = remote.mr->rkey;
      wr.wr.atomic.compare_add = 2;
    } else {
      // A SEND behind them goes out after them.
      sge = {sbuf.addr(), 8, sbuf.mr->lkey};
      wr.wr_id = 40;
      wr.opcode = IBV_WR_SEND;
    }
  }
  ResetStats();
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.client->qp, wrs.data(), &bad), 0);
  std::vector<uint64_t> ids;
  for (int i = 0; i < kReads + 3; ++i) {
    ibv_wc wc;
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
    ids.push_back(wc.wr_id);
  }
  std::vector<uint64_t> want;
  for (int i = 0; i < kReads; ++i) want.push_back(10 + i);
  want.insert(want.end(), {30, 31, 40});
  EXPECT_EQ(ids, want);
  EXPECT_EQ(std::memcmp(local.data.data(), remote.data.data(), kReads * 64), 0);
  uint64_t first = 0;
  uint64_t second = 0;
  std::memcpy(&first, &local.data[kReads * 64], 8);
  std::memcpy(&second, &local.data[kReads * 64 + 8], 8);
  EXPECT_EQ(first, 40u);
  EXPECT_EQ(second, 42u);
  const Stats s = GetStats();
  EXPECT_EQ(s.max_rd_atomic_out, 4u);
  EXPECT_GE(s.rd_atomic_waits, 1u);
  ibv_wc recv;
  ASSERT_TRUE(PollOne(p.server_cq, &recv));
  EXPECT_EQ(recv.wr_id, 9u);
  EXPECT_EQ(recv.byte_len, 8u);
}

// WRs waiting for a READ slot when the QP is drained
// (SQD) must go out once it is back in RTS.
TEST(QpRdAtomic, WaitingReadGoesOutAfterSqdToRts) {
  ConnectedPair p;  // client max_rd_atomic 4
  ASSERT_TRUE(p.ok());
  constexpr int kReads = 5;
  Buffer remote(p.server_pd, kReads * 64, kAll);
  Buffer local(p.client_pd, kReads * 64, kAll);
  std::vector<ibv_sge> sges(kReads);
  std::vector<ibv_send_wr> wrs(kReads);
  for (int i = 0; i < kReads; ++i) {
    ibv_send_wr& wr = wrs[i];
    sges[i] = {local.addr() + i * 64, 64, local.mr->lkey};
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sges[i];
    wr.num_sge = 1;
    wr.next = i + 1 < kReads ? &wrs[i + 1] : nullptr;
    wr.wr_id = 10 + i;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.wr.rdma.remote_addr = remote.addr() + i * 64;
    wr.wr.rdma.rkey = remote.mr->rkey;
  }
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.client->qp, wrs.data(), &bad), 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_SQD;
  ASSERT_EQ(modify_qp(p.client->qp, &a, IBV_QP_STATE), 0);
  ibv_wc wc;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  if (PollOne(p.client_cq, &wc, 300)) GTEST_SKIP() << "5th READ went out before SQD";
  a.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(modify_qp(p.client->qp, &a, IBV_QP_STATE), 0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc, 3000)) << "the waiting READ never went out";
  EXPECT_EQ(wc.wr_id, 14u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
