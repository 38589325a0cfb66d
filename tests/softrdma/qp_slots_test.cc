// qp_slots_test.cc: a work request's queue slot stays taken until the user
// polls a CQE that covers it, as on a NIC (mlx5 advances its SQ/RQ tail in
// ibv_poll_cq). An unsignalled send is covered by the next signalled send's
// CQE; a receive by its own CQE. Posting beyond that is ENOMEM.
#include <poll.h>

#include <vector>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

int PostSendFlags(ibv_qp* qp, uint64_t wr_id, const Buffer& buf, int flags) {
  ibv_sge sge{buf.addr(), 8, buf.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = flags;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

// Waits until `cq`, armed before the CQE was made, has a CQE, without
// polling it, through its completion channel.
bool WaitForCqeUnpolled(ibv_cq* cq, ibv_comp_channel* ch) {
  pollfd pfd{ch->fd, POLLIN, 0};
  if (::poll(&pfd, 1, 5000) != 1) return false;
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  if (softrdma::get_cq_event(ch, &ev_cq, &ev_ctx) != 0) return false;
  softrdma::ack_cq_events(ev_cq, 1);
  return ev_cq == cq;
}

TEST(QpSlots, UnsignalledSendsHoldSlotsUntilASignalledCqeIsPolled) {
  PairOptions opt;
  opt.max_send_wr = 4;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 256, kAll);
  Buffer sbuf(p.client_pd, 256, kAll);
  for (int i = 0; i < 16; ++i) ASSERT_EQ(PostRecv(p.server->qp, 100 + i, rbuf, 8 * i, 8), 0);

  // Armed first: an arm after the CQE is pushed would wait for the next one.
  ASSERT_EQ(ibv_req_notify_cq(p.client_cq, 0), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(PostSendFlags(p.client->qp, i, sbuf, 0), 0);
  ASSERT_EQ(PostSendFlags(p.client->qp, 3, sbuf, IBV_SEND_SIGNALED), 0);
  // All four were delivered and acknowledged: the signalled CQE is there.
  ASSERT_TRUE(WaitForCqeUnpolled(p.client_cq, p.client_comp));
  EXPECT_EQ(PostSendFlags(p.client->qp, 4, sbuf, IBV_SEND_SIGNALED), ENOMEM);

  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  // Polling it freed all four slots.
  for (int i = 5; i < 9; ++i) EXPECT_EQ(PostSendFlags(p.client->qp, i, sbuf, 0), 0);
  // Four unsignalled sends and no signalled one: the SQ is full for good, the
  // classic selective-signalling bug, which hardware punishes the same way.
  EXPECT_EQ(PostSendFlags(p.client->qp, 9, sbuf, IBV_SEND_SIGNALED), ENOMEM);
  EXPECT_EQ(Drain(p.server_cq, 200).size(), 8u);
  EXPECT_EQ(PostSendFlags(p.client->qp, 10, sbuf, IBV_SEND_SIGNALED), ENOMEM);
}

TEST(QpSlots, ReceiveSlotIsHeldUntilItsCqeIsPolled) {
  PairOptions opt;
  opt.max_recv_wr = 2;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 256, kAll);
  Buffer sbuf(p.client_pd, 256, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 8), 0);
  ASSERT_EQ(PostRecv(p.server->qp, 2, rbuf, 8, 8), 0);
  ASSERT_EQ(PostSendFlags(p.client->qp, 11, sbuf, IBV_SEND_SIGNALED), 0);
  ASSERT_EQ(PostSendFlags(p.client->qp, 12, sbuf, IBV_SEND_SIGNALED), 0);
  // Both sends completed, so both receives were consumed (their CQEs are
  // pushed before the ACK goes back) but not polled.
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 12u);
  EXPECT_EQ(PostRecv(p.server->qp, 3, rbuf, 16, 8), ENOMEM);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(PostRecv(p.server->qp, 3, rbuf, 16, 8), 0);
  EXPECT_EQ(PostRecv(p.server->qp, 4, rbuf, 24, 8), ENOMEM);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(PostRecv(p.server->qp, 4, rbuf, 24, 8), 0);
}

TEST(QpSlots, FlushCqesFreeTheirSlotsWhenPolled) {
  PairOptions opt;
  opt.max_send_wr = 2;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.client_pd, 256, kAll);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(softrdma::modify_qp(p.client->qp, &attr, IBV_QP_STATE), 0);
  // On an errored QP each WR is flushed with a CQE, signalled or not.
  ASSERT_EQ(PostSendFlags(p.client->qp, 1, sbuf, 0), 0);
  ASSERT_EQ(PostSendFlags(p.client->qp, 2, sbuf, 0), 0);
  EXPECT_EQ(PostSendFlags(p.client->qp, 3, sbuf, 0), ENOMEM);
  std::vector<ibv_wc> wcs = Drain(p.client_cq, 100);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(PostSendFlags(p.client->qp, 3, sbuf, 0), 0);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
