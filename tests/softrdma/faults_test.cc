// faults_test.cc: the fault-injection knobs of faults.h.
#include <cerrno>
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/faults.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

TEST(Faults, DroppedConnectionFlushesBothEnds) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 1024, kAll);
  Buffer cbuf(p.client_pd, 1024, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, sbuf, 0, 512), 0);
  ASSERT_EQ(PostRecv(p.client->qp, 2, cbuf, 0, 512), 0);
  ASSERT_EQ(DropConnection(p.client), 0);
  EXPECT_EQ(ExpectEvent(p.client_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  EXPECT_EQ(ExpectEvent(p.server_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  // Sends posted afterwards are flushed too.
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 3, cbuf, 0, 8), 0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
}

TEST(Faults, FailNextRegMr) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  std::vector<char> mem(4096);
  FailNextRegMr(1, ENOMEM);
  EXPECT_EQ(reg_mr(p.client_pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ibv_mr* mr = reg_mr(p.client_pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(dereg_mr(mr), 0);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
