// cq_test.cc: completion queues and completion channels.
#include <poll.h>
#include <unistd.h>

#include "gtest/gtest.h"
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

TEST(CompletionQueue, OverrunIsAnErrorNotASilentDrop) {
  PairOptions opt;
  opt.cqe = 2;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 256, kAll);
  Buffer sbuf(p.client_pd, 256, kAll);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(PostRecv(p.server->qp, i, rbuf, i * 8, 8), 0);
  for (int i = 0; i < 3; ++i) {
    ibv_sge sge{sbuf.addr(), 8, sbuf.mr->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;  // unsignalled: only the server's CQ fills up
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(p.client->qp, &wr, &bad), 0);
  }
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
  EXPECT_EQ(create_cq(ctx, 65537, nullptr, nullptr, 0), nullptr);
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

}  // namespace
}  // namespace testing
}  // namespace softrdma
