// faults_test.cc: the fault-injection knobs of faults.h, each with its exact
// outcome, and the environment-variable form of the knobs (a child process of
// this binary runs FaultsEnvChild.* with the variables set).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "softrdma/faults.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

extern char** environ;

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// Every test leaves the process without knobs set.
class Faults : public ::testing::Test {
 protected:
  void TearDown() override { ResetFaults(); }
};

// Posts `n` signalled SENDs of `len` bytes with wr_ids first_id, first_id+1, ...
void PostSends(ibv_qp* qp, const Buffer& buf, int n, uint32_t len, uint64_t first_id = 1) {
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(PostSend(qp, IBV_WR_SEND, first_id + i, buf, 0, len), 0) << "send " << i;
  }
}

// Collects exactly `n` WCs (or fails after 5 s).
std::vector<ibv_wc> PollN(ibv_cq* cq, int n) {
  std::vector<ibv_wc> out;
  for (int i = 0; i < n; ++i) {
    ibv_wc wc;
    if (!PollOne(cq, &wc)) {
      ADD_FAILURE() << "only " << i << " of " << n << " completions";
      break;
    }
    out.push_back(wc);
  }
  return out;
}

TEST_F(Faults, DroppedConnectionFlushesBothEnds) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 1024, kAll);
  Buffer cbuf(p.client_pd, 1024, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, sbuf, 0, 512), 0);
  ASSERT_EQ(PostRecv(p.client->qp, 2, cbuf, 0, 512), 0);
  ASSERT_EQ(DropConnection(p.client), 0);
  EXPECT_EQ(ExpectEvent(p.client_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  EXPECT_EQ(ExpectEvent(p.server_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  // Sends posted afterwards are flushed too.
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 3, cbuf, 0, 8), 0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(Faults, FailNextRegMr) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  std::vector<char> mem(4096);
  FailNextRegMr(1, ENOMEM);
  EXPECT_EQ(reg_mr(p.client_pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ibv_mr* mr = reg_mr(p.client_pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(dereg_mr(mr), 0);
}

// A context, PD and CQ of our own, without connections.
struct Device {
  Device() {
    ibv_device** list = get_device_list(nullptr);
    ctx = open_device(list[0]);
    free_device_list(list);
    pd = alloc_pd(ctx);
    cq = create_cq(ctx, 16, nullptr, nullptr, 0);
  }
  ~Device() {
    if (cq != nullptr) destroy_cq(cq);
    if (pd != nullptr) dealloc_pd(pd);
    close_device(ctx);
  }
  ibv_qp_init_attr QpAttr() const {
    ibv_qp_init_attr a{};
    a.qp_type = IBV_QPT_RC;
    a.send_cq = cq;
    a.recv_cq = cq;
    a.cap.max_send_wr = 4;
    a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    return a;
  }
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
};

TEST_F(Faults, FailNextEachVerbFailsExactlyCountTimesAndLeavesNothing) {
  Device d;
  ASSERT_NE(d.cq, nullptr);
  const Stats before = GetStats();
  std::vector<char> mem(4096);

  FailNext(FaultOp::kAllocPd, 2, EPERM);
  for (int i = 0; i < 2; ++i) {
    errno = 0;
    EXPECT_EQ(alloc_pd(d.ctx), nullptr);
    EXPECT_EQ(errno, EPERM);
  }
  ibv_pd* pd = alloc_pd(d.ctx);
  ASSERT_NE(pd, nullptr);
  EXPECT_EQ(GetStats().live_pds, before.live_pds + 1);
  EXPECT_EQ(dealloc_pd(pd), 0);

  FailNext(FaultOp::kRegMr, 1, EFAULT);
  errno = 0;
  EXPECT_EQ(reg_mr(d.pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(GetStats().live_mrs, before.live_mrs);

  FailNext(FaultOp::kCreateCq, 1, ENOMEM);
  errno = 0;
  EXPECT_EQ(create_cq(d.ctx, 8, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(GetStats().live_cqs, before.live_cqs);

  // ibv_req_notify_cq returns the errno value, as rdma-core does.
  FailNext(FaultOp::kReqNotifyCq, 1, EIO);
  EXPECT_EQ(ibv_req_notify_cq(d.cq, 0), EIO);
  EXPECT_EQ(ibv_req_notify_cq(d.cq, 0), 0);

  FailNext(FaultOp::kCreateQp, 1, ENOSPC);
  ibv_qp_init_attr qa = d.QpAttr();
  errno = 0;
  EXPECT_EQ(create_qp(d.pd, &qa), nullptr);
  EXPECT_EQ(errno, ENOSPC);
  EXPECT_EQ(GetStats().live_qps, before.live_qps);
  // The CQ and PD took no reference from the failed QP: they go at once.
  ibv_qp* qp = create_qp(d.pd, &qa);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(destroy_qp(qp), 0);

  // Every knob is spent: each call works again.
  ibv_mr* mr = reg_mr(d.pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(dereg_mr(mr), 0);
  ibv_cq* cq = create_cq(d.ctx, 8, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(destroy_cq(cq), 0);
}

TEST_F(Faults, FailNextAfterLetsThatManyCallsThroughFirst) {
  Device d;
  FailNext(FaultOp::kCreateCq, 2, ENOMEM, /*after=*/1);
  ibv_cq* first = create_cq(d.ctx, 4, nullptr, nullptr, 0);
  ASSERT_NE(first, nullptr);
  for (int i = 0; i < 2; ++i) {
    errno = 0;
    EXPECT_EQ(create_cq(d.ctx, 4, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, ENOMEM);
  }
  ibv_cq* last = create_cq(d.ctx, 4, nullptr, nullptr, 0);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(destroy_cq(first), 0);
  EXPECT_EQ(destroy_cq(last), 0);
}

TEST_F(Faults, FailNextCountZeroClears) {
  Device d;
  std::vector<char> mem(4096);
  FailNext(FaultOp::kRegMr, 5, ENOMEM);
  FailNext(FaultOp::kRegMr, 0, 0);
  ibv_mr* mr = reg_mr(d.pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(dereg_mr(mr), 0);
}

TEST_F(Faults, RdmaCreateQpFailsWithTheInjectedErrnoAndFreesItsCqs) {
  rdma_event_channel* ch = create_event_channel();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  dst.sin_port = htons(9);
  ASSERT_EQ(resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), 0);
  ASSERT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
  const Stats before = GetStats();
  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 4;
  qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  FailNext(FaultOp::kCreateQp, 1, ENOMEM);
  errno = 0;
  EXPECT_EQ(softrdma::create_qp(id, nullptr, &qa), -1);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(id->qp, nullptr);
  // rdma_create_qp made (and must have freed) a CQ per queue.
  EXPECT_EQ(GetStats().live_cqs, before.live_cqs);
  EXPECT_EQ(GetStats().live_qps, before.live_qps);
  EXPECT_EQ(destroy_id(id), 0);
  destroy_event_channel(ch);
}

// The link dies right after the 3rd send WR completes: sends 1-3 succeed, 4
// and 5 flush although the peer may have received them, and both ends get
// DISCONNECTED.
TEST_F(Faults, DropAfterWrsEndsTheLinkAfterExactlyNSends) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 4096, kAll);
  Buffer cbuf(p.client_pd, 4096, kAll);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(PostRecv(p.server->qp, 100 + i, sbuf, 0, 512), 0);
  DropAfterWrs(3);
  PostSends(p.client->qp, cbuf, 5, 64);
  std::vector<ibv_wc> wcs = PollN(p.client_cq, 5);
  ASSERT_EQ(wcs.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(wcs[i].wr_id, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(wcs[i].status, i < 3 ? IBV_WC_SUCCESS : IBV_WC_WR_FLUSH_ERR) << "send " << i + 1;
  }
  EXPECT_EQ(ExpectEvent(p.client_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  EXPECT_EQ(ExpectEvent(p.server_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  // The server saw at least the 3 acknowledged sends; all 8 receives ended.
  std::vector<ibv_wc> rx = PollN(p.server_cq, 8);
  ASSERT_EQ(rx.size(), 8u);
  int ok = 0;
  for (const ibv_wc& wc : rx) ok += wc.status == IBV_WC_SUCCESS;
  EXPECT_GE(ok, 3);
  EXPECT_LE(ok, 5);
  for (int i = ok; i < 8; ++i) EXPECT_EQ(rx[i].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_TRUE(Drain(p.client_cq, 50).empty());
}

TEST_F(Faults, DropAfterWrsFiresOnce) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 4096, kAll);
  Buffer cbuf(p.client_pd, 4096, kAll);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(PostRecv(p.server->qp, 100 + i, sbuf, 0, 512), 0);
  DropAfterWrs(1);
  PostSends(p.client->qp, cbuf, 1, 8);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(ExpectEvent(p.client_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  // A second connection is not dropped: the knob disarmed itself.
  ConnectedPair q;
  ASSERT_TRUE(q.ok());
  Buffer qs(q.server_pd, 4096, kAll);
  Buffer qc(q.client_pd, 4096, kAll);
  ASSERT_EQ(PostRecv(q.server->qp, 1, qs, 0, 512), 0);
  ASSERT_EQ(PostRecv(q.server->qp, 2, qs, 0, 512), 0);
  PostSends(q.client->qp, qc, 2, 8);
  std::vector<ibv_wc> wcs = PollN(q.client_cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(NextEvent(q.client_ch, 100), nullptr);
}

// 100-byte sends with a 250-byte budget: the 3rd brings the total to 300.
TEST_F(Faults, DropAfterBytesEndsTheLinkOnTheSendThatCrossesN) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 4096, kAll);
  Buffer cbuf(p.client_pd, 4096, kAll);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(PostRecv(p.server->qp, 100 + i, sbuf, 0, 512), 0);
  DropAfterBytes(250);
  PostSends(p.client->qp, cbuf, 5, 100);
  std::vector<ibv_wc> wcs = PollN(p.client_cq, 5);
  ASSERT_EQ(wcs.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(wcs[i].status, i < 3 ? IBV_WC_SUCCESS : IBV_WC_WR_FLUSH_ERR) << "send " << i + 1;
    EXPECT_EQ(wcs[i].byte_len, i < 3 ? 100u : 100u);
  }
  EXPECT_EQ(ExpectEvent(p.client_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  EXPECT_EQ(ExpectEvent(p.server_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
}

// A 300 ms delay: nothing is pollable for the first 100 ms, the CQE is
// pollable afterwards, and an armed channel fires only once it is.
TEST_F(Faults, DelayCompletionsHidesCqesAndTheirEventUntilDue) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 4096, kAll);
  Buffer cbuf(p.client_pd, 4096, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 7, sbuf, 0, 512), 0);
  DelayCompletions(300000);
  ASSERT_EQ(ibv_req_notify_cq(p.client_cq, 0), 0);
  const absl::Time posted = absl::Now();
  PostSends(p.client->qp, cbuf, 1, 32, 42);
  pollfd pfd{p.client_comp->fd, POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 100), 0) << "event before the CQE is visible";
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(p.client_cq, 1, &wc), 0);
  EXPECT_EQ(ibv_poll_cq(p.server_cq, 1, &wc), 0);
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
  EXPECT_GE(absl::Now() - posted, absl::Milliseconds(300));
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(get_cq_event(p.client_comp, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, p.client_cq);
  ack_cq_events(ev_cq, 1);
  ASSERT_EQ(ibv_poll_cq(p.client_cq, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 42u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.byte_len, 32u);
}

// Arming after the CQE was made but before it is visible still wakes the
// consumer when it appears (poll, arm, sleep must not hang).
TEST_F(Faults, DelayCompletionsArmAfterPushStillFires) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 4096, kAll);
  Buffer cbuf(p.client_pd, 4096, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 7, sbuf, 0, 512), 0);
  DelayCompletions(200000);
  PostSends(p.client->qp, cbuf, 1, 32, 43);
  absl::SleepFor(absl::Milliseconds(50));  // the ACK is in, its CQE invisible
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(p.client_cq, 1, &wc), 0);
  ASSERT_EQ(ibv_req_notify_cq(p.client_cq, 0), 0);
  pollfd pfd{p.client_comp->fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
  ASSERT_EQ(ibv_poll_cq(p.client_cq, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 43u);
}

// A request SEND answered by a reply SEND: with RecvBeforeSend the
// requester's CQ shows the reply's RECV before the request's SEND.
TEST_F(Faults, RecvBeforeSendShowsTheReplyBeforeTheRequestCompletes) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 4096, kAll);
  Buffer cbuf(p.client_pd, 4096, kAll);
  // 300 ms: long enough for the server to answer first, below the requester's
  // transport timeout (8 x 67 ms) that a longer hold would trip.
  RecvBeforeSend(true, /*max_hold_micros=*/300000);
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(PostRecv(p.server->qp, 100 + round, sbuf, 0, 512), 0);
    ASSERT_EQ(PostRecv(p.client->qp, 200 + round, cbuf, 1024, 512), 0);
    ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 1 + round, cbuf, 0, 16), 0);
    ibv_wc wc;
    ASSERT_TRUE(PollOne(p.server_cq, &wc));
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(100 + round));
    ASSERT_EQ(PostSend(p.server->qp, IBV_WR_SEND, 300 + round, sbuf, 0, 24), 0);
    std::vector<ibv_wc> wcs = PollN(p.client_cq, 2);
    ASSERT_EQ(wcs.size(), 2u);
    EXPECT_EQ(wcs[0].opcode, IBV_WC_RECV) << "round " << round;
    EXPECT_EQ(wcs[0].wr_id, static_cast<uint64_t>(200 + round));
    EXPECT_EQ(wcs[0].byte_len, 24u);
    EXPECT_EQ(wcs[1].opcode, IBV_WC_SEND) << "round " << round;
    EXPECT_EQ(wcs[1].wr_id, static_cast<uint64_t>(1 + round));
    EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
    // The server's reply is acknowledged by the same rule: its SEND CQE
    // comes once the hold ends (no request of the client follows).
    ASSERT_TRUE(PollOne(p.server_cq, &wc, 10000));
    EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(300 + round));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  // Each round's request ACK rode behind its reply; the client's ACKs of the
  // replies went at the end of their hold (the test waited for them).
  EXPECT_EQ(AcksSentBehindRequests(), 3u);
}

// Without a reply, a held ACK still goes after max_hold_micros.
TEST_F(Faults, RecvBeforeSendHoldIsBounded) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 4096, kAll);
  Buffer cbuf(p.client_pd, 4096, kAll);
  RecvBeforeSend(true, /*max_hold_micros=*/100000);
  ASSERT_EQ(PostRecv(p.server->qp, 1, sbuf, 0, 512), 0);
  const absl::Time posted = absl::Now();
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 5, cbuf, 0, 16), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_GE(absl::Now() - posted, absl::Milliseconds(100));
}

TEST_F(Faults, MemlockLimitCapsPinnedPagesWithEnomem) {
  Device d;
  const uint64_t base = PinnedBytes();
  SetMemlockLimit(base + (64 << 10));
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &lim), 0);
  EXPECT_EQ(lim.rlim_cur, base + (64 << 10));
  void* mem = std::aligned_alloc(4096, 128 << 10);
  ASSERT_NE(mem, nullptr);
  char* c = static_cast<char*>(mem);
  // 60 KiB page-aligned pins 60 KiB.
  ibv_mr* a = reg_mr(d.pd, c, 60 << 10, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(PinnedBytes(), base + (60 << 10));
  // 1 byte straddling a page boundary pins 2 pages: 68 KiB > 64 KiB.
  errno = 0;
  EXPECT_EQ(reg_mr(d.pd, c + (64 << 10) - 1, 2, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  // One page fits exactly.
  ibv_mr* b = reg_mr(d.pd, c + (64 << 10), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(PinnedBytes(), base + (64 << 10));
  errno = 0;
  EXPECT_EQ(reg_mr(d.pd, c + (100 << 10), 1, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  // Deregistration gives the pages back.
  EXPECT_EQ(dereg_mr(a), 0);
  ibv_mr* e = reg_mr(d.pd, c + (100 << 10), 16 << 10, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(dereg_mr(e), 0);
  EXPECT_EQ(dereg_mr(b), 0);
  EXPECT_EQ(PinnedBytes(), base);
  ClearMemlockLimit();
  rlimit after{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &after), 0);
  EXPECT_NE(after.rlim_cur, base + (64 << 10));
  ibv_mr* big = reg_mr(d.pd, c, 128 << 10, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(dereg_mr(big), 0);
  std::free(mem);
}

// timeout 10 (4.19 ms) and retry_cnt 3: with the peer gone silent the head
// send fails with RETRY_EXC_ERR after 4 periods (16.8 ms), the rest flush,
// the QP is in ERROR, and no DISCONNECTED comes until we disconnect.
TEST_F(Faults, VanishedPeerEndsSendsThroughTheTransportTimeout) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 4096, kAll);
  Buffer cbuf(p.client_pd, 4096, kAll);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(PostRecv(p.server->qp, 100 + i, sbuf, 0, 512), 0);
  TakeErrorCqes();
  ibv_qp_attr a{};
  a.timeout = 10;
  a.retry_cnt = 3;
  ASSERT_EQ(modify_qp(p.client->qp, &a, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT), 0);
  ibv_qp_attr q{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(query_qp(p.client->qp, &q, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT, &qi), 0);
  EXPECT_EQ(q.timeout, 10);
  EXPECT_EQ(q.retry_cnt, 3);
  ASSERT_EQ(VanishPeer(p.client), 0);
  const absl::Time posted = absl::Now();
  PostSends(p.client->qp, cbuf, 3, 64);
  std::vector<ibv_wc> wcs = PollN(p.client_cq, 3);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_GE(absl::Now() - posted, absl::Nanoseconds(4 * 4096 << 10));
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wcs[2].status, IBV_WC_WR_FLUSH_ERR);
  ASSERT_EQ(query_qp(p.client->qp, &q, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(q.qp_state, IBV_QPS_ERR);
  // The device's record of error CQEs says the same.
  std::vector<ErrorCqe> errs = TakeErrorCqes();
  ASSERT_EQ(errs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(errs[i].qp_num, p.client->qp->qp_num);
    EXPECT_EQ(errs[i].wr_id, static_cast<uint64_t>(i + 1));
    EXPECT_FALSE(errs[i].recv);
    EXPECT_EQ(errs[i].status, i == 0 ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR);
  }
  // Nothing reached the server; no side saw a disconnect.
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(p.server_cq, 1, &wc), 0);
  EXPECT_EQ(NextEvent(p.client_ch, 100), nullptr);
  EXPECT_EQ(NextEvent(p.server_ch, 10), nullptr);
  // The application gives up: its own disconnect is reported locally only.
  EXPECT_EQ(softrdma::disconnect(p.client), 0);
  EXPECT_EQ(ExpectEvent(p.client_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  EXPECT_EQ(NextEvent(p.server_ch, 100), nullptr);
}

// Moving the QP to ERROR before the transport timer fires flushes every WR.
TEST_F(Faults, VanishedPeerWrsFlushWhenTheQpIsMovedToError) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer cbuf(p.client_pd, 4096, kAll);
  ASSERT_EQ(VanishPeer(p.client), 0);  // default timeout 14, retry 7: 537 ms
  PostSends(p.client->qp, cbuf, 4, 64);
  EXPECT_TRUE(Drain(p.client_cq, 50).empty());
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(modify_qp(p.client->qp, &a, IBV_QP_STATE), 0);
  std::vector<ibv_wc> wcs = PollN(p.client_cq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(wcs[i].wr_id, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR);
  }
}

// timeout 0 is "infinite" (IB spec): a silent peer never fails the WR.
TEST_F(Faults, TransportTimeoutZeroWaitsForever) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer cbuf(p.client_pd, 4096, kAll);
  ibv_qp_attr a{};
  a.timeout = 0;
  ASSERT_EQ(modify_qp(p.client->qp, &a, IBV_QP_TIMEOUT), 0);
  a.timeout = 32;
  EXPECT_EQ(modify_qp(p.client->qp, &a, IBV_QP_TIMEOUT), EINVAL);
  a.retry_cnt = 8;
  EXPECT_EQ(modify_qp(p.client->qp, &a, IBV_QP_RETRY_CNT), EINVAL);
  ASSERT_EQ(VanishPeer(p.client), 0);
  PostSends(p.client->qp, cbuf, 1, 8);
  EXPECT_TRUE(Drain(p.client_cq, 200).empty());
}

// The first 2 sends go through; the peer vanishes as the 3rd is posted.
TEST_F(Faults, VanishAfterWrsSilencesThePeerFromTheNextPost) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 4096, kAll);
  Buffer cbuf(p.client_pd, 4096, kAll);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(PostRecv(p.server->qp, 100 + i, sbuf, 0, 512), 0);
  ibv_qp_attr a{};
  // 16.8 ms x 3 without progress fails a WR: long enough that a loaded host
  // descheduling the peer's progress thread does not fail the first two
  // (at 1 ms x 3 it did, under ctest -j2 beside other builds).
  a.timeout = 12;
  a.retry_cnt = 2;
  ASSERT_EQ(modify_qp(p.client->qp, &a, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT), 0);
  VanishAfterWrs(2);
  PostSends(p.client->qp, cbuf, 2, 16);
  std::vector<ibv_wc> ok = PollN(p.client_cq, 2);
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(ok[1].status, IBV_WC_SUCCESS);
  PostSends(p.client->qp, cbuf, 2, 16, 3);
  std::vector<ibv_wc> lost = PollN(p.client_cq, 2);
  ASSERT_EQ(lost.size(), 2u);
  EXPECT_EQ(lost[0].wr_id, 3u);
  EXPECT_EQ(lost[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(lost[1].wr_id, 4u);
  EXPECT_EQ(lost[1].status, IBV_WC_WR_FLUSH_ERR);
  std::vector<ibv_wc> rx = Drain(p.server_cq, 50);
  ASSERT_EQ(rx.size(), 2u);  // only the two that went out
  EXPECT_EQ(rx[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rx[1].status, IBV_WC_SUCCESS);
}

// ---- the environment form ------------------------------------------------------

// Runs this test binary's `test` (a FaultsEnvChild test) in a child with
// `env` added to the environment. Returns its wait status.
int RunChild(const std::string& test, const std::vector<std::string>& env) {
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "SOFTRDMA_FAULT", 14) != 0) envs.push_back(*e);
  }
  envs.push_back("SOFTRDMA_FAULTS_CHILD=1");
  for (const std::string& e : env) envs.push_back(e);
  std::vector<char*> envp;
  for (std::string& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string filter = "--gtest_filter=FaultsEnvChild." + test;
  std::string self = "/proc/self/exe";
  char* argv[] = {self.data(), filter.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) return -1;
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

TEST(FaultsEnv, VariablesSetTheKnobsAtFirstUse) {
  const int st = RunChild(
      "FailAndMemlock",
      {"SOFTRDMA_FAULT_FAIL_REG_MR=2:ENOMEM", "SOFTRDMA_FAULT_FAIL_ALLOC_PD=1:13",
       "SOFTRDMA_FAULT_FAIL_CREATE_CQ=1:EINVAL", "SOFTRDMA_FAULT_FAIL_REQ_NOTIFY_CQ=1:EIO",
       "SOFTRDMA_FAULT_FAIL_CREATE_QP=1:ENOSPC:1", "SOFTRDMA_FAULT_MEMLOCK_BYTES=64K"});
  ASSERT_TRUE(WIFEXITED(st)) << "status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST(FaultsEnv, DataPathVariables) {
  const int st = RunChild("DataPath", {"SOFTRDMA_FAULT_DROP_AFTER_WRS=2",
                                       "SOFTRDMA_FAULT_DELAY_COMPLETION_US=1000",
                                       "SOFTRDMA_FAULT_RECV_BEFORE_SEND=0",
                                       "SOFTRDMA_FAULT_DROP_AFTER_BYTES=0",
                                       "SOFTRDMA_FAULT_VANISH_AFTER_WRS=0"});
  ASSERT_TRUE(WIFEXITED(st)) << "status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST(FaultsEnv, DropAfterBytesVariable) {
  const int st = RunChild("DropAfterBytes", {"SOFTRDMA_FAULT_DROP_AFTER_BYTES=40"});
  ASSERT_TRUE(WIFEXITED(st)) << "status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST(FaultsEnv, ReorderAndVanishVariables) {
  const int st = RunChild("ReorderAndVanish", {"SOFTRDMA_FAULT_RECV_BEFORE_SEND=1",
                                               "SOFTRDMA_FAULT_VANISH_AFTER_WRS=2"});
  ASSERT_TRUE(WIFEXITED(st)) << "status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST(FaultsEnv, MalformedValueAborts) {
  const int st = RunChild("FailAndMemlock", {"SOFTRDMA_FAULT_FAIL_REG_MR=lots"});
  ASSERT_TRUE(WIFSIGNALED(st)) << "status " << st;
  EXPECT_EQ(WTERMSIG(st), SIGABRT);
}

// strtoull skips leading white space and takes a sign: " -1" would become
// 2^64 - 1 and silently turn a knob into "never". Only digits are a number.
TEST(FaultsEnv, SignedOrSpacedNumberAborts) {
  for (const char* env : {"SOFTRDMA_FAULT_DROP_AFTER_WRS= -1", "SOFTRDMA_FAULT_MEMLOCK_BYTES=+64K",
                          "SOFTRDMA_FAULT_FAIL_REG_MR=\t2:ENOMEM"}) {
    const int st = RunChild("FailAndMemlock", {env});
    ASSERT_TRUE(WIFSIGNALED(st)) << env << ": status " << st;
    EXPECT_EQ(WTERMSIG(st), SIGABRT) << env;
  }
}

// Run only as children of FaultsEnv (the ctest discovery filters them out).
class FaultsEnvChild : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("SOFTRDMA_FAULTS_CHILD") == nullptr) GTEST_SKIP() << "child only";
  }
};

TEST_F(FaultsEnvChild, FailAndMemlock) {
  ibv_device** list = get_device_list(nullptr);
  ibv_context* ctx = open_device(list[0]);
  free_device_list(list);
  errno = 0;
  EXPECT_EQ(alloc_pd(ctx), nullptr);
  EXPECT_EQ(errno, EACCES);
  ibv_pd* pd = alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  std::vector<char> mem(4096);
  for (int i = 0; i < 2; ++i) {
    errno = 0;
    EXPECT_EQ(reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, ENOMEM);
  }
  errno = 0;
  EXPECT_EQ(create_cq(ctx, 4, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_cq* cq = create_cq(ctx, 4, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(ibv_req_notify_cq(cq, 0), EIO);
  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.cap.max_send_wr = 1;
  qa.cap.max_recv_wr = 1;
  ibv_qp* qp = create_qp(pd, &qa);  // ":1": the first goes through
  ASSERT_NE(qp, nullptr);
  errno = 0;
  EXPECT_EQ(create_qp(pd, &qa), nullptr);
  EXPECT_EQ(errno, ENOSPC);
  EXPECT_EQ(destroy_qp(qp), 0);
  // 64 KiB cap: 64 KiB fits, a page more does not.
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &lim), 0);
  EXPECT_EQ(lim.rlim_cur, 65536u);
  void* big = std::aligned_alloc(4096, 128 << 10);
  ibv_mr* a = reg_mr(pd, big, 64 << 10, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(a, nullptr);
  errno = 0;
  EXPECT_EQ(reg_mr(pd, static_cast<char*>(big) + (64 << 10), 4096, IBV_ACCESS_LOCAL_WRITE),
            nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(dereg_mr(a), 0);
  std::free(big);
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
  close_device(ctx);
}

TEST_F(FaultsEnvChild, DataPath) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 4096, kAll);
  Buffer cbuf(p.client_pd, 4096, kAll);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(PostRecv(p.server->qp, 100 + i, sbuf, 0, 512), 0);
  const absl::Time posted = absl::Now();
  PostSends(p.client->qp, cbuf, 3, 16);
  std::vector<ibv_wc> wcs = PollN(p.client_cq, 3);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_GE(absl::Now() - posted, absl::Milliseconds(1));  // DELAY_COMPLETION_US=1000
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[2].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(ExpectEvent(p.client_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
}
TEST_F(FaultsEnvChild, DropAfterBytes) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 4096, kAll);
  Buffer cbuf(p.client_pd, 4096, kAll);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(PostRecv(p.server->qp, 100 + i, sbuf, 0, 512), 0);
  PostSends(p.client->qp, cbuf, 4, 16);  // 16, 32, 48 >= 40: the 3rd drops it
  std::vector<ibv_wc> wcs = PollN(p.client_cq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(wcs[i].status, i < 3 ? IBV_WC_SUCCESS : IBV_WC_WR_FLUSH_ERR) << i;
  }
  EXPECT_EQ(ExpectEvent(p.client_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
}

// One request / reply with the reply's RECV first, then (3rd post of the
// process) the peer vanishes: the next send ends by the transport timeout.
TEST_F(FaultsEnvChild, ReorderAndVanish) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.server_pd, 4096, kAll);
  Buffer cbuf(p.client_pd, 4096, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 100, sbuf, 0, 512), 0);
  ASSERT_EQ(PostRecv(p.client->qp, 200, cbuf, 1024, 512), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 1, cbuf, 0, 16), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  ASSERT_EQ(PostSend(p.server->qp, IBV_WR_SEND, 300, sbuf, 0, 24), 0);
  std::vector<ibv_wc> wcs = PollN(p.client_cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(wcs[1].opcode, IBV_WC_SEND);
  EXPECT_EQ(wcs[1].wr_id, 1u);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));  // the reply's SEND, after the hold
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ibv_qp_attr a{};
  a.timeout = 8;
  a.retry_cnt = 1;
  ASSERT_EQ(modify_qp(p.client->qp, &a, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 2, cbuf, 0, 16), 0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
