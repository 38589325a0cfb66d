// async_event_test.cc: affiliated async events on the context's async_fd
// (async_events.cc), and destroy waiting for their acknowledgement.
#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "softrdma/faults.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

ibv_qp_state StateOf(ibv_qp* qp) {
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  EXPECT_EQ(query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
  return a.qp_state;
}

// Every event now queued (acked), without waiting.
std::vector<ibv_async_event> TakeQueued(ibv_context* ctx) {
  SetNonBlocking(ctx->async_fd);
  std::vector<ibv_async_event> out;
  ibv_async_event ev{};
  while (get_async_event(ctx, &ev) == 0) {
    out.push_back(ev);
    ack_async_event(&ev);
  }
  return out;
}

int CountFor(const std::vector<ibv_async_event>& evs, ibv_event_type type, ibv_qp* qp) {
  int n = 0;
  for (const auto& e : evs) n += e.event_type == type && e.element.qp == qp;
  return n;
}

TEST(AsyncEvent, CommEstOnceAtThePassiveSidesFirstRequest) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 64, kAll);
  Buffer sbuf(p.client_pd, 64, kAll);
  TakeQueued(p.server->verbs);  // whatever earlier tests left
  for (int i = 0; i < 2; ++i) ASSERT_EQ(PostRecv(p.server->qp, i, rbuf, 0, 64), 0);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, i, sbuf, 0, 8), 0);
  ibv_wc wc{};
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(PollOne(p.server_cq, &wc));
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_COMM_EST, &ev));
  EXPECT_EQ(ev.element.qp, p.server->qp);
  ack_async_event(&ev);
  const auto rest = TakeQueued(p.server->verbs);
  EXPECT_EQ(CountFor(rest, IBV_EVENT_COMM_EST, p.server->qp), 0);  // once only
  EXPECT_EQ(CountFor(rest, IBV_EVENT_COMM_EST, p.client->qp), 0);  // the active side: none
}

TEST(AsyncEvent, RemoteAccessErrorRaisesQpAccessErrAtTheResponder) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  Buffer sbuf(p.client_pd, 64, kAll);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 1, sbuf, 0, 8, 0, target.addr(),
                     target.mr->rkey),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_QP_ACCESS_ERR, &ev));
  EXPECT_EQ(ev.element.qp, p.server->qp);
  ack_async_event(&ev);
  EXPECT_EQ(StateOf(p.server->qp), IBV_QPS_ERR);
  // The requester learnt it from its CQE: no event for the client's QP.
  EXPECT_EQ(CountFor(TakeQueued(p.client->verbs), IBV_EVENT_QP_ACCESS_ERR, p.client->qp), 0);
}

TEST(AsyncEvent, ReadWithoutResponderResourcesRaisesQpReqErr) {
  PairOptions opt;
  opt.server_responder_resources = 0;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 64, kAll);
  Buffer dst(p.client_pd, 64, kAll);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_READ, 1, dst, 0, 8, 0, target.addr(),
                     target.mr->rkey),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_QP_REQ_ERR, &ev));
  EXPECT_EQ(ev.element.qp, p.server->qp);
  ack_async_event(&ev);
}

TEST(AsyncEvent, ShortReceiveIsReportedByItsCqeNotByAnEvent) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 64, kAll);
  Buffer sbuf(p.client_pd, 64, kAll);
  TakeQueued(p.server->verbs);
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 4), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 1, sbuf, 0, 8), 0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  const auto evs = TakeQueued(p.server->verbs);
  EXPECT_EQ(CountFor(evs, IBV_EVENT_QP_REQ_ERR, p.server->qp), 0);
  EXPECT_EQ(CountFor(evs, IBV_EVENT_QP_ACCESS_ERR, p.server->qp), 0);
  EXPECT_EQ(CountFor(evs, IBV_EVENT_QP_FATAL, p.server->qp), 0);
}

TEST(AsyncEvent, BrokenTransportRaisesQpFatalOnBothQps) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(DropConnection(p.client), 0);
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.client->verbs, IBV_EVENT_QP_FATAL, &ev));
  ibv_qp* first = ev.element.qp;
  ack_async_event(&ev);
  ASSERT_TRUE(WaitAsyncEvent(p.client->verbs, IBV_EVENT_QP_FATAL, &ev));
  ibv_qp* second = ev.element.qp;
  ack_async_event(&ev);
  // One context serves both ends here; each QP gets its own event.
  EXPECT_TRUE((first == p.client->qp && second == p.server->qp) ||
              (first == p.server->qp && second == p.client->qp))
      << first << " " << second;
  EXPECT_EQ(StateOf(p.client->qp), IBV_QPS_ERR);
  EXPECT_EQ(ExpectEvent(p.client_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
}

TEST(AsyncEvent, QpOnSrqEnteringErrorRaisesLastWqeReached) {
  PairOptions opt;
  opt.server_srq_wr = 4;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(modify_qp(p.server->qp, &a, IBV_QP_STATE), 0);
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_QP_LAST_WQE_REACHED, &ev));
  EXPECT_EQ(ev.element.qp, p.server->qp);
  ack_async_event(&ev);
  // Once, on entering ERROR; a QP without an SRQ raises none.
  ASSERT_EQ(modify_qp(p.server->qp, &a, IBV_QP_STATE), 0);
  ASSERT_EQ(modify_qp(p.client->qp, &a, IBV_QP_STATE), 0);
  const auto evs = TakeQueued(p.server->verbs);
  EXPECT_EQ(CountFor(evs, IBV_EVENT_QP_LAST_WQE_REACHED, p.server->qp), 0);
  EXPECT_EQ(CountFor(evs, IBV_EVENT_QP_LAST_WQE_REACHED, p.client->qp), 0);
}

int PostSrqRecv(ibv_srq* srq, uint64_t wr_id, const Buffer& buf, uint32_t len) {
  ibv_sge sge{buf.addr(), len, buf.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_srq_recv(srq, &wr, &bad);
}

int CountSrqLimit(const std::vector<ibv_async_event>& evs, ibv_srq* srq) {
  int n = 0;
  for (const auto& e : evs) n += e.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && e.element.srq == srq;
  return n;
}

TEST(AsyncEvent, SrqLimitFiresOnceWhenReceivesFallBelowIt) {
  PairOptions opt;
  opt.server_srq_wr = 8;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 64, kAll);
  Buffer sbuf(p.client_pd, 64, kAll);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(PostSrqRecv(p.server_srq, i, rbuf, 64), 0);
  ibv_srq_attr attr{};
  attr.srq_limit = 3;
  ASSERT_EQ(modify_srq(p.server_srq, &attr, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(query_srq(p.server_srq, &attr), 0);
  EXPECT_EQ(attr.srq_limit, 3u);
  ibv_wc wc{};
  // 4 -> 3 posted: not below the limit.
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 1, sbuf, 0, 8), 0);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(CountSrqLimit(TakeQueued(p.server->verbs), p.server_srq), 0);
  // 3 -> 2: below; the event names the SRQ and the limit disarms.
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 2, sbuf, 0, 8), 0);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_SRQ_LIMIT_REACHED, &ev));
  EXPECT_EQ(ev.element.srq, p.server_srq);
  ack_async_event(&ev);
  ASSERT_EQ(query_srq(p.server_srq, &attr), 0);
  EXPECT_EQ(attr.srq_limit, 0u);
  EXPECT_EQ(attr.max_wr, 8u);
  // 2 -> 1: disarmed, no second event.
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 3, sbuf, 0, 8), 0);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(CountSrqLimit(TakeQueued(p.server->verbs), p.server_srq), 0);
  // A limit above max_wr is refused.
  attr.srq_limit = 9;
  EXPECT_EQ(modify_srq(p.server_srq, &attr, IBV_SRQ_LIMIT), EINVAL);
}

TEST(AsyncEvent, DestroyQpWaitsUntilItsEventIsAcked) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 64, IBV_ACCESS_LOCAL_WRITE);
  Buffer sbuf(p.client_pd, 64, kAll);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 1, sbuf, 0, 8, 0, target.addr(),
                     target.mr->rkey),
            0);
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_QP_ACCESS_ERR, &ev));
  ASSERT_EQ(ev.element.qp, p.server->qp);
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    destroy_qp(p.server);  // rdma_destroy_qp
    destroyed = true;
  });
  // Not a timing assertion: destroy must not return before the ack, however
  // long we wait; 200 ms gives a broken implementation ample time to.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(destroyed.load());
  ack_async_event(&ev);
  destroyer.join();
  EXPECT_TRUE(destroyed.load());
  EXPECT_EQ(p.server->qp, nullptr);
}

TEST(AsyncEvent, DestroySrqWaitsUntilItsEventIsAcked) {
  PairOptions opt;
  opt.server_srq_wr = 4;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 64, kAll);
  Buffer sbuf(p.client_pd, 64, kAll);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(PostSrqRecv(p.server_srq, i, rbuf, 64), 0);
  ibv_srq_attr attr{};
  attr.srq_limit = 2;
  ASSERT_EQ(modify_srq(p.server_srq, &attr, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 1, sbuf, 0, 8), 0);
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_SRQ_LIMIT_REACHED, &ev));
  ASSERT_EQ(ev.element.srq, p.server_srq);
  destroy_qp(p.server);  // the SRQ's only QP: now destroy_srq may proceed
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    EXPECT_EQ(destroy_srq(p.server_srq), 0);
    destroyed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // see DestroyQp... above
  EXPECT_FALSE(destroyed.load());
  ack_async_event(&ev);
  destroyer.join();
  EXPECT_TRUE(destroyed.load());
  p.server_srq = nullptr;  // destroyed here, not by the pair
}

TEST(AsyncEvent, DestroyCqWaitsUntilItsCqErrIsAcked) {
  PairOptions opt;
  opt.cqe = 2;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 64, kAll);
  Buffer sbuf(p.client_pd, 64, kAll);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(PostRecv(p.server->qp, i, rbuf, 0, 64), 0);
  for (int i = 0; i < 3; ++i) {
    ibv_sge sge{sbuf.addr(), 8, sbuf.mr->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;  // unsignalled: only the server's CQ overruns
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(p.client->qp, &wr, &bad), 0);
  }
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_CQ_ERR, &ev));
  ASSERT_EQ(ev.element.cq, p.server_cq);
  destroy_qp(p.server);  // the CQ's only QP
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    EXPECT_EQ(destroy_cq(p.server_cq), 0);
    destroyed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // as DestroyQp... above
  EXPECT_FALSE(destroyed.load());
  ack_async_event(&ev);
  destroyer.join();
  EXPECT_TRUE(destroyed.load());
  p.server_cq = nullptr;  // destroyed here, not by the pair
}

TEST(AsyncEvent, EventsNotYetReadDieWithTheirQp) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 64, IBV_ACCESS_LOCAL_WRITE);
  Buffer sbuf(p.client_pd, 64, kAll);
  TakeQueued(p.server->verbs);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 1, sbuf, 0, 8, 0, target.addr(),
                     target.mr->rkey),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.client_cq, &wc));  // the NAK came, so the event is queued
  ibv_qp* gone = p.server->qp;
  destroy_qp(p.server);  // returns: nobody holds an unacked event
  EXPECT_EQ(CountFor(TakeQueued(p.client->verbs), IBV_EVENT_QP_ACCESS_ERR, gone), 0);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
