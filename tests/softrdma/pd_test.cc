// pd_test.cc: a PD cannot be freed while MRs, QPs or SRQs made on it live,
// as ibv_dealloc_pd reports EBUSY on hardware.
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace {

class PdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    ibv_device** list = get_device_list(&n);
    ASSERT_EQ(n, 1);
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

TEST_F(PdTest, DeallocWithLiveMrIsEbusy) {
  ibv_pd* pd = alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  std::vector<char> buf(4096);
  ibv_mr* mr = reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(dealloc_pd(pd), EBUSY);
  ASSERT_EQ(dereg_mr(mr), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
}

TEST_F(PdTest, DeallocWithLiveQpOrSrqIsEbusy) {
  ibv_pd* pd = alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_cq* cq = create_cq(ctx_, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_srq_init_attr sattr{};
  sattr.attr.max_wr = 4;
  sattr.attr.max_sge = 1;
  ibv_srq* srq = create_srq(pd, &sattr);
  ASSERT_NE(srq, nullptr);
  ibv_qp_init_attr qattr{};
  qattr.send_cq = cq;
  qattr.recv_cq = cq;
  qattr.qp_type = IBV_QPT_RC;
  qattr.cap.max_send_wr = 4;
  qattr.cap.max_recv_wr = 4;
  qattr.cap.max_send_sge = 1;
  qattr.cap.max_recv_sge = 1;
  ibv_qp* qp = create_qp(pd, &qattr);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(dealloc_pd(pd), EBUSY);
  ASSERT_EQ(destroy_qp(qp), 0);
  EXPECT_EQ(dealloc_pd(pd), EBUSY);  // the SRQ still lives
  ASSERT_EQ(destroy_srq(srq), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
  EXPECT_EQ(destroy_cq(cq), 0);
}

}  // namespace
}  // namespace softrdma
