// qp_type_conformance_test.cc: QP types. A NIC makes UC and UD QPs; softrdma
// documents that it makes RC only and refuses the others with EOPNOTSUPP.
// Either way the answer is exact: a QP of the type asked for, or EOPNOTSUPP.
#include <cerrno>
#include <cstring>

#include "gtest/gtest.h"
#include "tests/conformance/verbs_features_util.h"

namespace rdmarpc {
namespace conformance {
namespace {

class QpTypeConformance : public ::testing::TestWithParam<ibv_qp_type> {
 protected:
  void SetUp() override { RDMARPC_REQUIRE_DEVICE(); }
};

TEST_P(QpTypeConformance, CreatesThatTypeOrRefusesWithEopnotsupp) {
  int n = 0;
  ibv_device** list = Api().get_device_list(&n);
  ibv_context* ctx = Api().open_device(list[0]);
  Api().free_device_list(list);
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = Api().alloc_pd(ctx);
  ibv_cq* cq = Api().create_cq(ctx, 16, nullptr, nullptr, 0);
  ASSERT_NE(pd, nullptr);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.cap.max_send_wr = 4;
  a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.qp_type = GetParam();
  errno = 0;
  ibv_qp* qp = Api().create_verbs_qp(pd, &a);
  if (IsSoft()) {
    EXPECT_EQ(qp, nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
  } else if (qp == nullptr) {
    EXPECT_EQ(errno, EOPNOTSUPP) << std::strerror(errno);
  } else {
    EXPECT_EQ(qp->qp_type, GetParam());
  }
  if (qp != nullptr) {
    EXPECT_EQ(Api().destroy_verbs_qp(qp), 0);
  }
  // RC with the same attributes always works.
  a.qp_type = IBV_QPT_RC;
  qp = Api().create_verbs_qp(pd, &a);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  EXPECT_EQ(qp->qp_type, IBV_QPT_RC);
  EXPECT_EQ(Api().destroy_verbs_qp(qp), 0);
  EXPECT_EQ(Api().destroy_cq(cq), 0);
  EXPECT_EQ(Api().dealloc_pd(pd), 0);
  Api().close_device(ctx);
}

INSTANTIATE_TEST_SUITE_P(Types, QpTypeConformance, ::testing::Values(IBV_QPT_UC, IBV_QPT_UD),
                         [](const ::testing::TestParamInfo<ibv_qp_type>& info) {
                           return info.param == IBV_QPT_UC ? std::string("UC") : std::string("UD");
                         });

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
