// srq_limit_conformance_test.cc: the SRQ limit event (ibv_modify_srq(3)):
// armed with IBV_SRQ_LIMIT, fired once when the posted receives fall below
// it, then disarmed (query reads 0).
#include "gtest/gtest.h"
#include "tests/conformance/verbs_features_util.h"

namespace rdmarpc {
namespace conformance {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

int PostSrqRecv(ibv_srq* srq, uint64_t wr_id, const Buffer& buf, uint32_t len) {
  ibv_sge sge{buf.addr(), len, buf.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_srq_recv(srq, &wr, &bad);
}

int LimitEvents(const std::vector<ibv_async_event>& evs, ibv_srq* srq) {
  int n = 0;
  for (const auto& e : evs) n += e.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && e.element.srq == srq;
  return n;
}

TEST(SrqLimitConformance, FiresOnceBelowTheLimitThenDisarms) {
  RDMARPC_REQUIRE_DEVICE();
  PairConfig config;
  config.server_srq_wr = 8;
  Pair p(config);
  RDMARPC_REQUIRE_PAIR(p);
  Buffer rbuf(p.server_pd, 64, kAll);
  Buffer src(p.client_pd, 64, kAll);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(PostSrqRecv(p.server_srq, i, rbuf, 64), 0);
  ibv_srq_attr attr{};
  attr.srq_limit = 3;
  ASSERT_EQ(Api().modify_srq(p.server_srq, &attr, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(Api().query_srq(p.server_srq, &attr), 0);
  EXPECT_EQ(attr.srq_limit, 3u);
  ibv_wc wc{};
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 1, src, 0, 8), 0);  // 4 -> 3
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(LimitEvents(TakeQueuedEvents(p.server->verbs), p.server_srq), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 2, src, 0, 8), 0);  // 3 -> 2
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_SRQ_LIMIT_REACHED, &ev));
  EXPECT_EQ(ev.element.srq, p.server_srq);
  Api().ack_async_event(&ev);
  ASSERT_EQ(Api().query_srq(p.server_srq, &attr), 0);
  EXPECT_EQ(attr.srq_limit, 0u);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 3, src, 0, 8), 0);  // 2 -> 1: disarmed
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(LimitEvents(TakeQueuedEvents(p.server->verbs), p.server_srq), 0);
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
