// cq_test.cc: completion queues and completion channels.
#include <poll.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "softrdma/faults.h"
#include "softrdma/internal.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

TEST(CompletionChannel, FdBecomesReadableAfterArmAndCompletion) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  SetNonBlocking(p.server_comp->fd);
  Buffer rbuf(p.server_pd, 64, kAll);
  Buffer sbuf(p.client_pd, 64, kAll);
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  EXPECT_EQ(get_cq_event(p.server_comp, &cq, &ctx), -1);
  EXPECT_EQ(errno, EAGAIN);
  ASSERT_EQ(ibv_req_notify_cq(p.server_cq, 0), 0);
  pollfd pfd{p.server_comp->fd, POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 0), 0);  // nothing yet
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 64), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 2, sbuf, 0, 8), 0);
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
  EXPECT_TRUE(pfd.revents & POLLIN);
  ASSERT_EQ(get_cq_event(p.server_comp, &cq, &ctx), 0);
  EXPECT_EQ(cq, p.server_cq);
  ack_cq_events(cq, 1);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  // Not re-armed: a second completion raises no event.
  ASSERT_EQ(PostRecv(p.server->qp, 3, rbuf, 0, 64), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 4, sbuf, 0, 8), 0);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(::poll(&pfd, 1, 0), 0);
  EXPECT_EQ(get_cq_event(p.server_comp, &cq, &ctx), -1);
  EXPECT_EQ(errno, EAGAIN);
}

// Posts `n` receives on the server (wr_id first + i) and `n` unsignalled
// SENDs from the client into them, so only the server's CQ gets CQEs.
void SendUnsignalled(ConnectedPair& p, Buffer& rbuf, Buffer& sbuf, int first, int n) {
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(PostRecv(p.server->qp, static_cast<uint64_t>(first + i), rbuf,
                       static_cast<uint64_t>((first + i) * 8), 8),
              0);
  }
  for (int i = 0; i < n; ++i) {
    ibv_sge sge{sbuf.addr(), 8, sbuf.mr->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(p.client->qp, &wr, &bad), 0);
  }
}

TEST(CompletionQueue, OverrunIsAnErrorNotASilentDrop) {
  PairOptions opt;
  opt.cqe = 2;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 256, kAll);
  Buffer sbuf(p.client_pd, 256, kAll);
  SendUnsignalled(p, rbuf, sbuf, 0, 3);  // only the server's CQ fills up
  // The third receive completion finds the CQ full: the CQ enters error.
  ibv_async_event ev{};
  ASSERT_TRUE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_CQ_ERR, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.element.cq, p.server_cq);
  ack_async_event(&ev);
  ibv_wc wc[4];
  EXPECT_EQ(ibv_poll_cq(p.server_cq, 4, wc), 2);
  EXPECT_LT(ibv_poll_cq(p.server_cq, 4, wc), 0);
}

TEST(CompletionQueue, SizeLimits) {
  ibv_device** list = get_device_list(nullptr);
  ibv_context* ctx = open_device(list[0]);
  free_device_list(list);
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(create_cq(ctx, 0, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(create_cq(ctx, 4194304, nullptr, nullptr, 0), nullptr);  // max_cqe + 1
  EXPECT_EQ(errno, EINVAL);
  ibv_comp_channel* ch = create_comp_channel(ctx);
  ibv_cq* cq = create_cq(ctx, 65536, &ch, ch, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(cq->cqe, 65536);
  EXPECT_EQ(cq->cq_context, &ch);
  EXPECT_EQ(destroy_comp_channel(ch), EBUSY);  // a CQ still uses it
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(cq, 1, &wc), 0);
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(destroy_comp_channel(ch), 0);
  EXPECT_EQ(close_device(ctx), 0);
}

TEST(CompletionQueue, ResizeKeepsUnpolledCqesInOrderAndMakesRoom) {
  PairOptions opt;
  opt.cqe = 2;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 256, kAll);
  Buffer sbuf(p.client_pd, 256, kAll);
  SendUnsignalled(p, rbuf, sbuf, 0, 2);
  // Wait until both receive CQEs are in (without polling them).
  for (int i = 0; i < 5000 && internal::ToSoft(p.server_cq)->ready.load() < 2; ++i) {
    usleep(1000);
    ibv_req_notify_cq(p.server_cq, 0);  // drains the same-host ring
  }
  ASSERT_EQ(internal::ToSoft(p.server_cq)->ready.load(), 2u);
  EXPECT_EQ(resize_cq(p.server_cq, 1), EINVAL);  // fewer than it holds
  EXPECT_EQ(p.server_cq->cqe, 2);
  ASSERT_EQ(resize_cq(p.server_cq, 6), 0);
  EXPECT_EQ(p.server_cq->cqe, 6);
  // Four more fit beside the two kept; a CQ of 2 would have overrun.
  SendUnsignalled(p, rbuf, sbuf, 2, 4);
  ibv_wc wc[8];
  int got = 0;
  for (int i = 0; i < 5000 && got < 6; ++i) {
    const int n = ibv_poll_cq(p.server_cq, 8 - got, wc + got);
    ASSERT_GE(n, 0) << "CQ in error";
    got += n;
    if (got < 6) usleep(1000);
  }
  ASSERT_EQ(got, 6);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(wc[i].wr_id, static_cast<uint64_t>(i));
    EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
  }
  ibv_async_event ev{};
  EXPECT_FALSE(WaitAsyncEvent(p.server->verbs, IBV_EVENT_CQ_ERR, &ev, 50));
}

TEST(CompletionQueue, ResizeRefusesBadSizesAndInjectedFailures) {
  ibv_device** list = get_device_list(nullptr);
  ibv_context* ctx = open_device(list[0]);
  free_device_list(list);
  ASSERT_NE(ctx, nullptr);
  ibv_cq* cq = create_cq(ctx, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(resize_cq(cq, 0), EINVAL);
  EXPECT_EQ(resize_cq(cq, 4194304), EINVAL);  // max_cqe + 1
  EXPECT_EQ(resize_cq(nullptr, 16), EINVAL);
  FailNext(FaultOp::kResizeCq, 1, ENOMEM);
  EXPECT_EQ(resize_cq(cq, 64), ENOMEM);
  EXPECT_EQ(cq->cqe, 16);
  EXPECT_EQ(resize_cq(cq, 64), 0);  // the knob fired once
  EXPECT_EQ(cq->cqe, 64);
  EXPECT_EQ(resize_cq(cq, 8), 0);  // shrinking an empty CQ is allowed
  EXPECT_EQ(cq->cqe, 8);
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(close_device(ctx), 0);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
