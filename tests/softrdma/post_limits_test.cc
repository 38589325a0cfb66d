// post_limits_test.cc: post_send / post_recv / post_srq_recv refuse exactly
// what the QP's and SRQ's caps (as query_qp / query_srq report them) exclude,
// with *bad_wr at the first refused WR and nothing from it on posted.
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;

ibv_qp_cap CapsOf(ibv_qp* qp) {
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  EXPECT_EQ(query_qp(qp, &a, IBV_QP_CAP, &ia), 0);
  return ia.cap;
}

// A chain of `n` signalled SENDs of `len` bytes each from one SGE.
struct SendChain {
  SendChain(const Buffer& buf, int n, uint32_t len) : sge(n), wr(n) {
    for (int i = 0; i < n; ++i) {
      sge[i] = {buf.addr(), len, buf.mr->lkey};
      wr[i].wr_id = 100 + i;
      wr[i].opcode = IBV_WR_SEND;
      wr[i].send_flags = IBV_SEND_SIGNALED;
      wr[i].sg_list = &sge[i];
      wr[i].num_sge = 1;
      wr[i].next = i + 1 < n ? &wr[i + 1] : nullptr;
    }
  }
  std::vector<ibv_sge> sge;
  std::vector<ibv_send_wr> wr;
};

TEST(PostLimits, SgeOverMaxSendSgeStopsTheChainThere) {
  PairOptions opt;
  opt.max_sge = 3;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(CapsOf(p.client->qp).max_send_sge, 3u);
  Buffer sbuf(p.client_pd, 64, kAll);
  Buffer rbuf(p.server_pd, 256, kAll);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(PostRecv(p.server->qp, i, rbuf, i * 64, 64), 0);
  SendChain c(sbuf, 3, 8);
  std::vector<ibv_sge> four(4, ibv_sge{sbuf.addr(), 2, sbuf.mr->lkey});
  c.wr[1].sg_list = four.data();
  c.wr[1].num_sge = 4;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(p.client->qp, c.wr.data(), &bad), EINVAL);
  EXPECT_EQ(bad, &c.wr[1]);
  // Exactly the first was posted.
  const std::vector<ibv_wc> wcs = Drain(p.client_cq, 200);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 100u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  // max_send_sge itself is fine.
  c.wr[1].num_sge = 3;
  c.wr[1].next = nullptr;
  EXPECT_EQ(ibv_post_send(p.client->qp, &c.wr[1], &bad), 0);
}

TEST(PostLimits, InlineRoomIsAtLeastTheSgeListsAsOnRxe) {
  PairOptions opt;
  opt.max_inline = 0;
  opt.max_sge = 4;  // 4 x 16-byte SGEs
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(CapsOf(p.client->qp).max_inline_data, 64u);
}

TEST(PostLimits, InlineUpToMaxInlineDataOnly) {
  PairOptions opt;
  opt.max_inline = 32;
  opt.max_sge = 2;  // 2 SGEs' room (32 bytes) grants no more inline than asked
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(CapsOf(p.client->qp).max_inline_data, 32u);
  Buffer sbuf(p.client_pd, 64, kAll);
  Buffer rbuf(p.server_pd, 256, kAll);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(PostRecv(p.server->qp, i, rbuf, i * 64, 64), 0);
  SendChain c(sbuf, 2, 32);
  for (auto& w : c.wr) w.send_flags |= IBV_SEND_INLINE;
  c.sge[1].length = 33;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(p.client->qp, c.wr.data(), &bad), EINVAL);
  EXPECT_EQ(bad, &c.wr[1]);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.byte_len, 32u);
  EXPECT_TRUE(Drain(p.server_cq, 100).empty());
}

TEST(PostLimits, InlineOnReadAtomicOrLocalOperationIsEinval) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer buf(p.client_pd, 64, kAll);
  Buffer target(p.server_pd, 64, kAll);
  ibv_sge sge{buf.addr(), 8, buf.mr->lkey};
  for (ibv_wr_opcode op : {IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_LOCAL_INV}) {
    ibv_send_wr wr{};
    wr.opcode = op;
    wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = target.addr();
    wr.wr.rdma.rkey = target.mr->rkey;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(p.client->qp, &wr, &bad), EINVAL) << "opcode " << op;
    EXPECT_EQ(bad, &wr);
  }
  EXPECT_TRUE(Drain(p.client_cq, 50).empty());
}

TEST(PostLimits, RecvSgeOverMaxRecvSgeIsEinval) {
  PairOptions opt;
  opt.max_sge = 2;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(CapsOf(p.server->qp).max_recv_sge, 2u);
  Buffer rbuf(p.server_pd, 64, kAll);
  std::vector<ibv_sge> sge(3, ibv_sge{rbuf.addr(), 8, rbuf.mr->lkey});
  ibv_recv_wr wr[2] = {};
  wr[0].wr_id = 1;
  wr[0].sg_list = sge.data();
  wr[0].num_sge = 2;
  wr[0].next = &wr[1];
  wr[1].wr_id = 2;
  wr[1].sg_list = sge.data();
  wr[1].num_sge = 3;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_recv(p.server->qp, wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr[1]);
}

TEST(PostLimits, SrqRefusesSgeOverItsMaxSgeAndWrsOverItsMaxWr) {
  PairOptions opt;
  opt.server_srq_wr = 2;
  opt.max_sge = 1;  // the SRQ's max_sge too
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  ibv_srq_attr attr{};
  ASSERT_EQ(query_srq(p.server_srq, &attr), 0);
  EXPECT_EQ(attr.max_wr, 2u);
  EXPECT_EQ(attr.max_sge, 1u);
  Buffer rbuf(p.server_pd, 64, kAll);
  ibv_sge sge[2] = {{rbuf.addr(), 8, rbuf.mr->lkey}, {rbuf.addr() + 8, 8, rbuf.mr->lkey}};
  ibv_recv_wr wr[3] = {};
  for (int i = 0; i < 3; ++i) {
    wr[i].wr_id = i;
    wr[i].sg_list = sge;
    wr[i].num_sge = 1;
    wr[i].next = i < 2 ? &wr[i + 1] : nullptr;
  }
  wr[1].num_sge = 2;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(p.server_srq, wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr[1]);
  wr[1].num_sge = 1;
  EXPECT_EQ(ibv_post_srq_recv(p.server_srq, &wr[1], &bad), ENOMEM);  // 1 + 2 > max_wr 2
  EXPECT_EQ(bad, &wr[2]);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
