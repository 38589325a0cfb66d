// async_event_conformance_test.cc: affiliated async events (IB spec 11.6.3;
// ibv_get_async_event(3)) through the verbs table, on softrdma or a NIC.
#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "tests/conformance/verbs_features_util.h"

namespace rdmarpc {
namespace conformance {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

class AsyncEventConformance : public ::testing::Test {
 protected:
  void SetUp() override { RDMARPC_REQUIRE_DEVICE(); }
};

TEST_F(AsyncEventConformance, RemoteAccessViolationRaisesQpAccessErrAtTheResponder) {
  Pair p;
  RDMARPC_REQUIRE_PAIR(p);
  Buffer target(p.server_pd, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  Buffer src(p.client_pd, 64, kAll);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 1, src, 0, 8, target.addr(),
                     target.mr->rkey),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_QP_ACCESS_ERR, &ev));
  EXPECT_EQ(ev.element.qp, p.server->qp);
  Api().ack_async_event(&ev);
  EXPECT_EQ(StateOf(p.server->qp), IBV_QPS_ERR);
}

TEST_F(AsyncEventConformance, SrqQpEnteringErrorRaisesLastWqeReached) {
  PairConfig config;
  config.server_srq_wr = 4;
  Pair p(config);
  RDMARPC_REQUIRE_PAIR(p);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(Api().modify_qp(p.server->qp, &a, IBV_QP_STATE), 0);
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_QP_LAST_WQE_REACHED, &ev));
  EXPECT_EQ(ev.element.qp, p.server->qp);
  Api().ack_async_event(&ev);
}

TEST_F(AsyncEventConformance, DestroyQpWaitsForTheAckOfItsEvent) {
  PairConfig config;
  config.server_srq_wr = 4;
  Pair p(config);
  RDMARPC_REQUIRE_PAIR(p);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(Api().modify_qp(p.server->qp, &a, IBV_QP_STATE), 0);
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_QP_LAST_WQE_REACHED, &ev));
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    Api().destroy_qp(p.server);  // rdma_destroy_qp -> ibv_destroy_qp
    destroyed = true;
  });
  // destroy must not return before the ack however long we wait (rdma-core
  // waits for events_completed); 200 ms lets a broken one return.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(destroyed.load());
  Api().ack_async_event(&ev);
  destroyer.join();
  EXPECT_TRUE(destroyed.load());
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
