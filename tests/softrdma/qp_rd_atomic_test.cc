// qp_rd_atomic_test.cc: rdma_conn_param.responder_resources becomes the QP's
// max_dest_rd_atomic. A side that accepted with 0 takes no RDMA READ or
// atomic: the NIC NAKs them with "invalid request" and the requester gets
// IBV_WC_REM_INV_REQ_ERR -- the classic result of leaving the field 0.
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

}  // namespace
}  // namespace testing
}  // namespace softrdma
