// device_test.cc: the device, its attributes, PDs and MR keys.
#include <cstring>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace {

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    ibv_device** list = get_device_list(&n);
    ASSERT_EQ(n, 1);
    ASSERT_NE(list, nullptr);
    EXPECT_EQ(list[1], nullptr);
    EXPECT_STREQ(get_device_name(list[0]), "softrdma0");
    ctx_ = open_device(list[0]);
    free_device_list(list);
    ASSERT_NE(ctx_, nullptr);
  }
  void TearDown() override {
    if (ctx_ != nullptr) {
      EXPECT_EQ(close_device(ctx_), 0);
    }
  }
  ibv_context* ctx_ = nullptr;
};

TEST_F(DeviceTest, ReportsOneActiveEthernetPortAndLimits) {
  ibv_device_attr a;
  ASSERT_EQ(query_device(ctx_, &a), 0);
  EXPECT_EQ(a.phys_port_cnt, 1);
  EXPECT_EQ(a.max_qp_wr, 32768);
  EXPECT_EQ(a.max_srq_wr, 32767);
  EXPECT_EQ(a.max_sge, 16);
  EXPECT_EQ(a.max_cqe, 4194303);
  EXPECT_EQ(a.max_qp_rd_atom, 16);
  EXPECT_GE(a.max_mr_size, 1ull << 40);
  ibv_port_attr pa;
  ASSERT_EQ(query_port(ctx_, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(query_port(ctx_, 2, &pa), EINVAL);
  ibv_gid gid;
  ASSERT_EQ(query_gid(ctx_, 1, 0, &gid), 0);
  EXPECT_EQ(gid.raw[10], 0xff);
  EXPECT_EQ(query_gid(ctx_, 1, 1, &gid), -1);
  EXPECT_GE(ctx_->async_fd, 0);
  // The data-path inlines of verbs.h dispatch through these.
  EXPECT_NE(ctx_->ops.post_send, nullptr);
  EXPECT_NE(ctx_->ops.post_recv, nullptr);
  EXPECT_NE(ctx_->ops.poll_cq, nullptr);
  EXPECT_NE(ctx_->ops.req_notify_cq, nullptr);
}

TEST_F(DeviceTest, MrKeysAreDistinctAndNeverReused) {
  ibv_pd* pd = alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  std::vector<char> mem(1 << 16);
  std::set<uint32_t> keys;
  for (int i = 0; i < 100; ++i) {
    ibv_mr* mr = reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    EXPECT_NE(mr->lkey, mr->rkey);
    EXPECT_TRUE(keys.insert(mr->lkey).second);
    EXPECT_TRUE(keys.insert(mr->rkey).second);
    EXPECT_EQ(mr->addr, mem.data());
    EXPECT_EQ(mr->length, mem.size());
    ASSERT_EQ(dereg_mr(mr), 0);  // freed keys must not come back
  }
  EXPECT_EQ(keys.size(), 200u);
  // Remote write without local write is invalid (IB spec).
  EXPECT_EQ(reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(dealloc_pd(pd), 0);
}

TEST_F(DeviceTest, OnlyRcQpsAreSupported) {
  ibv_pd* pd = alloc_pd(ctx_);
  ibv_cq* cq = create_cq(ctx_, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr qa{};
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.cap.max_send_wr = 4;
  qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.qp_type = IBV_QPT_UD;
  EXPECT_EQ(create_qp(pd, &qa), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_inline_data = 257;
  EXPECT_EQ(create_qp(pd, &qa), nullptr);
  EXPECT_EQ(errno, EINVAL);
  qa.cap.max_inline_data = 256;
  ibv_qp* qp = create_qp(pd, &qa);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp->state, IBV_QPS_RESET);
  EXPECT_EQ(qa.cap.max_inline_data, 256u);
  // A QP not in RTS refuses sends.
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  EXPECT_EQ(destroy_cq(cq), EBUSY);  // still used by the QP
  EXPECT_EQ(destroy_qp(qp), 0);
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
}

}  // namespace
}  // namespace softrdma
