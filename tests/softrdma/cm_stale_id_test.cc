// cm_stale_id_test.cc: rdma_cm calls on an id that is not alive.
//
// Regression test for the "misaligned SoftCmId*" report: perftest 4.5+0.17
// retries a rejected rdma_connect (-R) with cm ids from an array its cleanup
// already freed, so softrdma was handed garbage (0x12e, 0x13c, ...) and
// dereferenced it. Every call now checks the id against the live ids first and
// fails with EINVAL, without touching the pointer.
#include <arpa/inet.h>
#include <errno.h>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

void ExpectEinvalEverywhere(rdma_cm_id* id) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sockaddr* a = reinterpret_cast<sockaddr*>(&addr);
  errno = 0;
  EXPECT_EQ(resolve_addr(id, nullptr, a, 1000), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(resolve_route(id, 1000), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(bind_addr(id, a), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(softrdma::listen(id, 1), -1);
  EXPECT_EQ(errno, EINVAL);
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  errno = 0;
  EXPECT_EQ(create_qp(id, nullptr, &attr), -1);
  EXPECT_EQ(errno, EINVAL);
  rdma_conn_param cp{};
  errno = 0;
  EXPECT_EQ(softrdma::connect(id, &cp), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(softrdma::accept(id, &cp), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(reject(id, nullptr, 0), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(disconnect(id), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(destroy_id(id), -1);
  EXPECT_EQ(errno, EINVAL);
  destroy_qp(id);  // void: must simply not touch it
}

TEST(CmStaleId, CallsOnADestroyedIdFailWithEinval) {
  rdma_event_channel* ch = create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(destroy_id(id), 0);
  ExpectEinvalEverywhere(id);  // the pointer is only compared, never read
  destroy_event_channel(ch);
}

TEST(CmStaleId, CallsOnAWildPointerFailWithEinval) {
  // The value UBSan reported for perftest's freed cm id.
  ExpectEinvalEverywhere(reinterpret_cast<rdma_cm_id*>(0x13c));
}

TEST(CmStaleId, DestroyedChannelIsRefusedAndDestroyingItAgainIsIgnored) {
  rdma_event_channel* ch = create_event_channel();
  ASSERT_NE(ch, nullptr);
  destroy_event_channel(ch);
  rdma_cm_id* id = nullptr;
  errno = 0;
  EXPECT_EQ(create_id(ch, &id, nullptr, RDMA_PS_TCP), -1);
  EXPECT_EQ(errno, EINVAL);
  rdma_cm_event* e = nullptr;
  errno = 0;
  EXPECT_EQ(get_cm_event(ch, &e), -1);
  EXPECT_EQ(errno, EINVAL);
  destroy_event_channel(ch);  // perftest 4.5 does this after a rejected connect
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
