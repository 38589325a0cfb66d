// srq_test.cc: shared receive queues.
#include <cstring>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

int PostSrqRecv(ibv_srq* srq, uint64_t wr_id, const Buffer& buf, size_t off, uint32_t len) {
  ibv_sge sge{buf.addr() + off, len, buf.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_srq_recv(srq, &wr, &bad);  // the verbs.h inline, through ops
}

TEST(Srq, SendsConsumeSharedReceivesInOrder) {
  PairOptions opt;
  opt.server_srq_wr = 4;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 256, kAll);
  Buffer sbuf(p.client_pd, 256, kAll);
  std::memcpy(sbuf.data.data(), "abcdefgh", 8);
  ASSERT_EQ(PostSrqRecv(p.server_srq, 10, rbuf, 0, 64), 0);
  ASSERT_EQ(PostSrqRecv(p.server_srq, 11, rbuf, 64, 64), 0);
  // A QP on an SRQ takes no receives of its own.
  EXPECT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 8), EINVAL);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 1, sbuf, 0, 8), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND_WITH_IMM, 2, sbuf, 4, 4, 77), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 10u);
  EXPECT_EQ(wc.byte_len, 8u);
  EXPECT_EQ(wc.qp_num, p.server->qp->qp_num);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 11u);
  EXPECT_EQ(wc.imm_data, 77u);
  EXPECT_EQ(std::memcmp(rbuf.data.data(), "abcdefgh", 8), 0);
  EXPECT_EQ(std::memcmp(&rbuf.data[64], "efgh", 4), 0);
}

TEST(Srq, OverflowIsEnomemAndLimitEventFires) {
  PairOptions opt;
  opt.server_srq_wr = 2;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 256, kAll);
  Buffer sbuf(p.client_pd, 256, kAll);
  ASSERT_EQ(PostSrqRecv(p.server_srq, 1, rbuf, 0, 64), 0);
  ASSERT_EQ(PostSrqRecv(p.server_srq, 2, rbuf, 64, 64), 0);
  EXPECT_EQ(PostSrqRecv(p.server_srq, 3, rbuf, 128, 64), ENOMEM);
  ibv_srq_attr attr{};
  attr.srq_limit = 2;
  ASSERT_EQ(modify_srq(p.server_srq, &attr, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 1, sbuf, 0, 8), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_SRQ_LIMIT_REACHED, &ev));
  EXPECT_EQ(ev.element.srq, p.server_srq);
  ack_async_event(&ev);  // destroy_srq waits for it
  ASSERT_EQ(query_srq(p.server_srq, &attr), 0);
  EXPECT_EQ(attr.srq_limit, 0u);  // disarmed after firing
  EXPECT_EQ(attr.max_wr, 2u);
  EXPECT_EQ(destroy_srq(p.server_srq), EBUSY);  // the QP still uses it
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
