// qp_zero_length_test.cc: zero-length SGEs and messages. Verbs allow an SGE
// of length 0 (mlx5 skips it when building the WQE; its address and lkey are
// never looked at), and a SEND of 0 bytes that only carries imm_data.
#include <arpa/inet.h>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

TEST(QpZeroLength, EmptySgeWithNullAddressIsSkipped) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 64, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 64), 0);
  for (int flags : {0, static_cast<int>(IBV_SEND_INLINE)}) {
    ibv_sge sge{0, 0, 0};  // no buffer at all
    ibv_send_wr wr{};
    wr.wr_id = 7;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htonl(42);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED | flags;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(p.client->qp, &wr, &bad), 0);
    ibv_wc wc;
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(PollOne(p.server_cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 0u);
    EXPECT_EQ(wc.imm_data, htonl(42));
    ASSERT_EQ(PostRecv(p.server->qp, 2, rbuf, 0, 64), 0);
  }
}

TEST(QpZeroLength, ReceiveWithALeadingEmptySgeScattersIntoTheNextOne) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 64, kAll);
  Buffer sbuf(p.client_pd, 64, kAll);
  for (size_t i = 0; i < 16; ++i) sbuf.data[i] = static_cast<uint8_t>(i + 1);
  ibv_sge sges[2] = {{0, 0, 0}, {rbuf.addr(), 64, rbuf.mr->lkey}};
  ibv_recv_wr rwr{};
  rwr.wr_id = 3;
  rwr.sg_list = sges;
  rwr.num_sge = 2;
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(ibv_post_recv(p.server->qp, &rwr, &rbad), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 4, sbuf, 0, 16), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 16u);
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(rbuf.data[i], i + 1) << i;
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
