// qp_type_test.cc: softrdma makes RC QPs only; UC and UD are EOPNOTSUPP.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

class QpType : public ::testing::TestWithParam<ibv_qp_type> {};

TEST_P(QpType, CreateQpRefusesWithEopnotsupp) {
  ibv_device** list = get_device_list(nullptr);
  ibv_context* ctx = open_device(list[0]);
  free_device_list(list);
  ibv_pd* pd = alloc_pd(ctx);
  ibv_cq* cq = create_cq(ctx, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.cap.max_send_wr = 4;
  a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.qp_type = GetParam();
  const int64_t live_before = GetStats().live_qps;
  errno = 0;
  EXPECT_EQ(create_qp(pd, &a), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(GetStats().live_qps, live_before);
  a.qp_type = IBV_QPT_RC;  // the same attributes as RC work
  ibv_qp* qp = create_qp(pd, &a);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp->qp_type, IBV_QPT_RC);
  EXPECT_EQ(destroy_qp(qp), 0);
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
  EXPECT_EQ(close_device(ctx), 0);
}

TEST_P(QpType, RdmaCreateQpRefusesWithEopnotsupp) {
  rdma_event_channel* ch = create_event_channel();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  dst.sin_port = htons(9);
  ASSERT_EQ(resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), 0);
  ASSERT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
  ibv_qp_init_attr a{};
  a.cap.max_send_wr = 4;
  a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.qp_type = GetParam();
  errno = 0;
  EXPECT_EQ(softrdma::create_qp(id, nullptr, &a), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(id->qp, nullptr);
  EXPECT_EQ(destroy_id(id), 0);
  destroy_event_channel(ch);
}

INSTANTIATE_TEST_SUITE_P(UnreliableTypes, QpType, ::testing::Values(IBV_QPT_UC, IBV_QPT_UD),
                         [](const ::testing::TestParamInfo<ibv_qp_type>& info) {
                           return info.param == IBV_QPT_UC ? std::string("UC") : std::string("UD");
                         });

}  // namespace
}  // namespace testing
}  // namespace softrdma
