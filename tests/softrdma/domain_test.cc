// domain_test.cc: thread domains, parent domains and extended CQs, through the
// verbs.h inlines a program calls (ibv_alloc_td, ibv_alloc_parent_domain,
// ibv_create_cq_ex, ibv_start_poll, ...), as on mlx5.
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "softrdma/faults.h"
#include "softrdma/internal.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace {

using testing::Buffer;
using testing::ConnectedPair;
using testing::PairOptions;
using testing::PollOne;

class DomainTest : public testing::SoftDeviceTest {};

TEST_F(DomainTest, ParentDomainKeepsItsPdAndTdBusyUntilFreed) {
  ibv_pd* pd = alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_td_init_attr td_attr = {};
  ibv_td* td = ibv_alloc_td(ctx_, &td_attr);
  ASSERT_NE(td, nullptr);
  EXPECT_EQ(td->context, ctx_);
  ibv_parent_domain_init_attr pa = {};
  pa.pd = pd;
  pa.td = td;
  ibv_pd* parent = ibv_alloc_parent_domain(ctx_, &pa);
  ASSERT_NE(parent, nullptr);
  EXPECT_NE(parent, pd);
  EXPECT_EQ(parent->context, ctx_);
  EXPECT_EQ(dealloc_pd(pd), EBUSY);
  EXPECT_EQ(ibv_dealloc_td(td), EBUSY);

  // A QP, an SRQ and an MR on the parent domain keep it busy in turn.
  ibv_cq* cq = create_cq(ctx_, 8, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr qa = testing::RcAttr(cq);
  ibv_qp* qp = create_qp(parent, &qa);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp->pd, parent);
  EXPECT_EQ(dealloc_pd(parent), EBUSY);
  EXPECT_EQ(destroy_qp(qp), 0);
  ibv_srq_init_attr sa = {};
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  ibv_srq* srq = create_srq(parent, &sa);
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(dealloc_pd(parent), EBUSY);
  EXPECT_EQ(destroy_srq(srq), 0);
  char bytes[64];
  ibv_mr* mr = reg_mr(parent, bytes, sizeof(bytes), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->pd, parent);
  EXPECT_EQ(dealloc_pd(parent), EBUSY);
  EXPECT_EQ(dereg_mr(mr), 0);
  ibv_cq_init_attr_ex ca = {};
  ca.cqe = 8;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  ca.parent_domain = parent;
  ibv_cq_ex* cqx = ibv_create_cq_ex(ctx_, &ca);
  ASSERT_NE(cqx, nullptr);
  EXPECT_EQ(dealloc_pd(parent), EBUSY);  // as on mlx5: the CQ holds it
  EXPECT_EQ(destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);

  EXPECT_EQ(dealloc_pd(parent), 0);
  EXPECT_EQ(ibv_dealloc_td(td), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
  EXPECT_EQ(destroy_cq(cq), 0);
}

TEST_F(DomainTest, BadAttributesAreRefused) {
  ibv_td_init_attr td_attr = {};
  td_attr.comp_mask = 1;
  errno = 0;
  EXPECT_EQ(ibv_alloc_td(ctx_, &td_attr), nullptr);
  EXPECT_EQ(errno, EINVAL);

  ibv_pd* pd = alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_parent_domain_init_attr pa = {};
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx_, &pa), nullptr);  // no pd
  EXPECT_EQ(errno, EINVAL);
  pa.pd = pd;
  pa.comp_mask = 1u << 7;
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx_, &pa), nullptr);  // unknown mask bit
  EXPECT_EQ(errno, EINVAL);
  pa.comp_mask = 0;
  ibv_pd* parent = ibv_alloc_parent_domain(ctx_, &pa);  // no thread domain
  ASSERT_NE(parent, nullptr);
  ibv_parent_domain_init_attr nested = {};
  nested.pd = parent;
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx_, &nested), nullptr);  // a parent's parent
  EXPECT_EQ(errno, EINVAL);

  ibv_cq_init_attr_ex ca = {};
  ca.cqe = 8;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  ca.parent_domain = pd;  // a protection domain, not a parent domain
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &ca), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ca.comp_mask = 0;
  ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &ca), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ca.wc_flags = 0;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  ca.flags = 1u << 5;  // unknown, as mlx5
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &ca), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ca.flags = 0;
  ca.cqe = 0;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &ca), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ca.cqe = 8;
  ca.comp_vector = static_cast<uint32_t>(ctx_->num_comp_vectors);
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &ca), nullptr);
  EXPECT_EQ(errno, EINVAL);

  EXPECT_EQ(dealloc_pd(parent), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
}

// A CQ made by create_cq_ex outside any thread domain may be polled by
// several threads: start_poll holds it until end_poll, or not at all when
// it fails (the user then calls no end_poll).
TEST_F(DomainTest, AnExtendedCqOutsideADomainIsFreeAgainAfterAFailedStartPoll) {
  ibv_cq_init_attr_ex ca = {};
  ca.cqe = 8;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
  ibv_cq_ex* cqx = ibv_create_cq_ex(ctx_, &ca);
  ASSERT_NE(cqx, nullptr);
  ibv_poll_cq_attr attr = {};
  EXPECT_EQ(ibv_start_poll(cqx, &attr), ENOENT);
  std::thread other([&] { EXPECT_EQ(ibv_start_poll(cqx, &attr), ENOENT); });
  other.join();  // would wait forever on a lock the failure kept
  EXPECT_EQ(ibv_start_poll(cqx, &attr), ENOENT);
  EXPECT_EQ(destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
}

struct DomainPairOptions {
  bool plain_cq = false;   // the server's CQ is a plain one, outside the domain
  bool channel = false;    // the server's CQ has a completion channel
  uint64_t wc_flags = 0;   // of the extended CQ
};

// A pair whose server end is in a thread domain: a thread domain, a PD and a
// parent domain naming both, the server QP on the parent domain and its CQ
// made by ibv_create_cq_ex single-threaded on it. Freed in reverse order,
// each free checked.
struct DomainPair {
  explicit DomainPair(const DomainPairOptions& o = DomainPairOptions()) {
    first = std::make_unique<ConnectedPair>();  // a PD of the rdma_cm context
    if (!first->ok()) return;
    ibv_context* ctx = first->server_pd->context;
    ibv_td_init_attr td_attr = {};
    td = ibv_alloc_td(ctx, &td_attr);
    pd = alloc_pd(ctx);
    ibv_parent_domain_init_attr pa = {};
    pa.pd = pd;
    pa.td = td;
    parent = ibv_alloc_parent_domain(ctx, &pa);
    if (parent == nullptr) return;
    if (o.channel) channel = create_comp_channel(ctx);
    ibv_cq_init_attr_ex ca = {};
    ca.cqe = 64;
    ca.channel = channel;
    ca.wc_flags = o.wc_flags;
    ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD | IBV_CQ_INIT_ATTR_MASK_FLAGS;
    ca.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
    ca.parent_domain = parent;
    if (o.plain_cq) {
      cq = create_cq(ctx, 64, nullptr, channel, 0);
    } else if ((cqx = ibv_create_cq_ex(ctx, &ca)) != nullptr) {
      cq = ibv_cq_ex_to_cq(cqx);
    }
    if (cq == nullptr) return;
    PairOptions opt;
    opt.shared_server_pd = parent;
    opt.shared_server_cq = cq;
    pair = std::make_unique<ConnectedPair>(opt);
  }
  ~DomainPair() {
    pair.reset();
    if (cq != nullptr) {
      EXPECT_EQ(destroy_cq(cq), 0);
    }
    if (channel != nullptr) {
      EXPECT_EQ(destroy_comp_channel(channel), 0);
    }
    if (parent != nullptr) {
      EXPECT_EQ(dealloc_pd(parent), 0);
    }
    if (pd != nullptr) {
      EXPECT_EQ(dealloc_pd(pd), 0);
    }
    if (td != nullptr) {
      EXPECT_EQ(ibv_dealloc_td(td), 0);
    }
  }
  bool ok() const { return pair != nullptr && pair->ok(); }

  std::unique_ptr<ConnectedPair> first;
  ibv_td* td = nullptr;
  ibv_pd* pd = nullptr;
  ibv_pd* parent = nullptr;
  ibv_comp_channel* channel = nullptr;
  ibv_cq_ex* cqx = nullptr;  // null for a plain CQ
  ibv_cq* cq = nullptr;
  std::unique_ptr<ConnectedPair> pair;
};

// An extended CQ outside any thread domain is one poller's from a successful
// start_poll to its end_poll: another thread's start_poll waits, and
// destroy_cq meanwhile is EBUSY.
TEST(ExtendedCq, APollOutsideADomainHoldsTheCqUntilEndPoll) {
  ConnectedPair first;  // a PD of the rdma_cm context
  ASSERT_TRUE(first.ok());
  ibv_context* ctx = first.server_pd->context;
  ibv_pd* pd = alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  ibv_cq_init_attr_ex ca = {};
  ca.cqe = 16;
  ibv_cq_ex* cqx = ibv_create_cq_ex(ctx, &ca);
  ASSERT_NE(cqx, nullptr);
  ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  auto p = std::make_unique<ConnectedPair>([&] {
    PairOptions opt;
    opt.shared_server_pd = pd;
    opt.shared_server_cq = cq;
    return opt;
  }());
  ASSERT_TRUE(p->ok());
  auto target = std::make_unique<Buffer>(pd, 4096, IBV_ACCESS_LOCAL_WRITE);
  Buffer source(p->client_pd, 4096, IBV_ACCESS_LOCAL_WRITE);
  for (uint64_t i = 1; i <= 3; ++i) {
    ASSERT_EQ(testing::PostRecv(p->server->qp, i, *target, 0, 64), 0);
    ASSERT_EQ(testing::PostSend(p->client->qp, IBV_WR_SEND, i, source, 0, 64), 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // all three in the ring
  ibv_poll_cq_attr attr = {};
  int rc = ENOENT;
  for (int i = 0; i < 5000000 && rc == ENOENT; ++i) rc = ibv_start_poll(cqx, &attr);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(cqx->wr_id, 1u);
  std::atomic<bool> returned{false};
  uint64_t other_wr_id = 0;
  int other_rc = -1;
  std::thread other([&] {
    ibv_poll_cq_attr a = {};
    other_rc = ibv_start_poll(cqx, &a);
    if (other_rc == 0) {
      other_wr_id = cqx->wr_id;
      ibv_end_poll(cqx);
    }
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(returned.load()) << "a second poller went in before end_poll";
  ibv_end_poll(cqx);
  other.join();
  EXPECT_EQ(other_rc, 0);
  EXPECT_EQ(other_wr_id, 2u);
  p.reset();  // no QP on the CQ now; the third CQE stays
  ASSERT_EQ(ibv_start_poll(cqx, &attr), 0);
  EXPECT_EQ(cqx->wr_id, 3u);
  EXPECT_EQ(destroy_cq(cq), EBUSY);  // between start_poll and end_poll
  ibv_end_poll(cqx);
  EXPECT_EQ(destroy_cq(cq), 0);
  target.reset();
  EXPECT_EQ(dealloc_pd(pd), 0);
}

// A CQ made with IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN and room for 2: each of 4
// signalled SENDs' completions is polled or dropped, at least one dropped,
// poll_cq never fails, no IBV_EVENT_CQ_ERR comes, the dropped WRs'
// send-queue slots are free again (4 more SENDs post on a 4-deep SQ) and the
// CQ still delivers.
TEST(ExtendedCq, IgnoreOverrunDropsWhatFindsNoRoomAndKeepsTheCq) {
  ConnectedPair first;
  ASSERT_TRUE(first.ok());
  ibv_context* ctx = first.server_pd->context;
  ibv_pd* pd = alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  ibv_cq_init_attr_ex ca = {};
  ca.cqe = 2;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  ca.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  ibv_cq_ex* cqx = ibv_create_cq_ex(ctx, &ca);
  ASSERT_NE(cqx, nullptr);
  ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  {
    PairOptions opt;
    opt.shared_server_pd = pd;
    opt.shared_server_cq = cq;
    opt.max_send_wr = 4;
    ConnectedPair p(opt);
    ASSERT_TRUE(p.ok());
    Buffer source(pd, 4096, IBV_ACCESS_LOCAL_WRITE);
    Buffer landing(p.client_pd, 4096, IBV_ACCESS_LOCAL_WRITE);
    auto round = [&](uint64_t base) {
      for (uint64_t i = 0; i < 4; ++i) {
        ASSERT_EQ(testing::PostRecv(p.client->qp, base + i, landing, 0, 64), 0);
      }
      for (uint64_t i = 0; i < 4; ++i) {
        ASSERT_EQ(testing::PostSend(p.server->qp, IBV_WR_SEND, base + i, source, 0, 64), 0);
      }
      // The client's four receives complete: every SEND was acknowledged.
      for (int i = 0; i < 4; ++i) {
        ibv_wc wc;
        ASSERT_TRUE(PollOne(p.client_cq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      }
    };
    // CQEs dropped so far. On the same-host link the four completions are
    // made by the first poll, 2 kept and 2 dropped; on the TCP link the
    // progress thread makes them as ACKs arrive, so a poll in between may
    // keep a third.
    auto dropped = [&] {
      internal::SoftCq* c = internal::ToSoft(cq);
      internal::DomainLock l(&c->mu);
      return c->dropped;
    };
    round(10);
    std::vector<ibv_wc> got = testing::Drain(cq, 200);
    ASSERT_GE(got.size(), 2u);
    EXPECT_EQ(got.size() + dropped(), 4u);  // each completion kept or dropped
    EXPECT_GE(dropped(), 1u);
    EXPECT_EQ(got[0].wr_id, 10u);
    for (const ibv_wc& wc : got) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ibv_wc extra;
    EXPECT_EQ(ibv_poll_cq(cq, 1, &extra), 0);  // not -EIO: the CQ is not in error
    const uint64_t dropped_first = dropped();
    round(20);  // the dropped WRs' slots were given back: 4 more post
    got = testing::Drain(cq, 200);
    ASSERT_GE(got.size(), 2u);
    EXPECT_EQ(got.size() + dropped() - dropped_first, 4u);
    EXPECT_EQ(got[0].wr_id, 20u);
    ibv_async_event ev;
    EXPECT_FALSE(testing::WaitAsyncEvent(ctx, IBV_EVENT_CQ_ERR, &ev, 100));
  }
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
}

// The server end lives in a thread domain: its QP on a parent domain, its CQ
// made by ibv_create_cq_ex single-threaded on that parent domain and read with
// the extended poll functions; its buffer is registered on the plain PD the
// parent domain stands for, and the client writes into it by rkey.
TEST(ThreadDomain, AQpAndCqInAThreadDomainCarryWritesAndSends) {
  DomainPairOptions o;
  o.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM;
  DomainPair d(o);
  ASSERT_TRUE(d.ok());
  ibv_cq_ex* cqx = d.cqx;
  ibv_cq* cq = d.cq;
  EXPECT_EQ(cqx->read_src_qp, nullptr);  // not asked for
  {
    ConnectedPair& p = *d.pair;
    EXPECT_EQ(p.server->qp->pd, d.parent);
    Buffer target(d.pd, 256, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    Buffer source(p.client_pd, 256, IBV_ACCESS_LOCAL_WRITE);
    for (size_t i = 0; i < 256; ++i) source.data[i] = static_cast<uint8_t>(i * 7);

    ibv_poll_cq_attr poll_attr = {};
    EXPECT_EQ(ibv_start_poll(cqx, &poll_attr), ENOENT);  // nothing yet

    ASSERT_EQ(testing::PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 1, source, 0, 128, 0,
                                target.addr(), target.mr->rkey),
              0);
    ibv_wc wc;
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(target.data.data(), source.data.data(), 128), 0);

    ASSERT_EQ(testing::PostRecv(p.server->qp, 77, target, 128, 128), 0);
    ASSERT_EQ(testing::PostSend(p.client->qp, IBV_WR_SEND_WITH_IMM, 2, source, 128, 100,
                                htonl(0xabcd1234)),
              0);
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    int rc = ENOENT;
    for (int i = 0; i < 5000000 && rc == ENOENT; ++i) rc = ibv_start_poll(cqx, &poll_attr);
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(cqx->status, IBV_WC_SUCCESS);
    EXPECT_EQ(cqx->wr_id, 77u);
    EXPECT_EQ(ibv_wc_read_opcode(cqx), IBV_WC_RECV);
    EXPECT_EQ(ibv_wc_read_byte_len(cqx), 100u);
    EXPECT_EQ(ibv_wc_read_imm_data(cqx), htonl(0xabcd1234));
    EXPECT_EQ(ibv_wc_read_qp_num(cqx), p.server->qp->qp_num);
    EXPECT_EQ(ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_IMM, static_cast<unsigned>(IBV_WC_WITH_IMM));
    EXPECT_EQ(ibv_next_poll(cqx), ENOENT);
    ibv_end_poll(cqx);
    EXPECT_EQ(std::memcmp(target.data.data() + 128, source.data.data() + 128, 100), 0);

    // The server's QP on the parent domain sends from the buffer of the
    // plain PD: the two count as one protection domain.
    Buffer landing(p.client_pd, 64, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_EQ(testing::PostRecv(p.client->qp, 5, landing, 0, 64), 0);
    ASSERT_EQ(testing::PostSend(p.server->qp, IBV_WR_SEND, 9, target, 0, 64), 0);
    ASSERT_TRUE(PollOne(cq, &wc));  // ibv_poll_cq on the extended CQ
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 9u);
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 64u);
    EXPECT_EQ(std::memcmp(landing.data.data(), source.data.data(), 64), 0);
  }
}

// Three SENDs from the domain's QP to a peer gone silent, under timeout 10
// (4.19 ms) and retry_cnt 3.
void SendIntoSilence(DomainPair& d, Buffer& buf) {
  ibv_qp_attr a{};
  a.timeout = 10;
  a.retry_cnt = 3;
  ASSERT_EQ(modify_qp(d.pair->server->qp, &a, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT), 0);
  ASSERT_EQ(VanishPeer(d.pair->server), 0);
  for (uint64_t i = 1; i <= 3; ++i) {
    ASSERT_EQ(testing::PostSend(d.pair->server->qp, IBV_WR_SEND, i, buf, 0, 64), 0);
  }
}

// Polls `cq` until `n` WCs arrived or 5 s passed; returns what arrived.
std::vector<ibv_wc> PollUpTo(ibv_cq* cq, size_t n) {
  std::vector<ibv_wc> wcs;
  const absl::Time start = absl::Now();
  while (wcs.size() < n && absl::Now() - start < absl::Seconds(5)) {
    ibv_wc wc;
    if (ibv_poll_cq(cq, 1, &wc) == 1) wcs.push_back(wc);
  }
  return wcs;
}

// SendIntoSilence's three SENDs as a silent peer ends them: the head one
// RETRY_EXC_ERR, the other two flushed.
void ExpectRetryExceededThenFlushes(const std::vector<ibv_wc>& wcs) {
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wcs[2].status, IBV_WC_WR_FLUSH_ERR);
}

// The QP's transport timer runs in the owner's polls: the head SEND fails
// RETRY_EXC_ERR after its 4 periods, the others flush.
TEST(ThreadDomain, ASilentPeerFailsTheSendsOfAPollingOwner) {
  DomainPair d;
  ASSERT_TRUE(d.ok());
  if (!internal::ToSoft(d.td)->fast) {
    GTEST_SKIP() << "no MEMBARRIER_CMD_PRIVATE_EXPEDITED: the domain is one mutex";
  }
  Buffer buf(d.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
  const Stats before = GetStats();
  const absl::Time posted = absl::Now();
  SendIntoSilence(d, buf);
  ExpectRetryExceededThenFlushes(PollUpTo(d.cq, 3));
  EXPECT_GE(absl::Now() - posted, absl::Nanoseconds(4 * 4096 << 10));
  // 4 periods: at least the last ran in this thread's poll (a period whose
  // 10 ms grace ran out while this thread was descheduled may have run on
  // the progress thread).
  const Stats after = GetStats();
  EXPECT_GE(after.owner_timers - before.owner_timers, 1u);
  EXPECT_EQ(after.owner_timers - before.owner_timers + after.grace_timers - before.grace_timers,
            4u);
}

// An owner that stops polling does not stop the timer: the progress thread
// runs what waited kOwnerTimerGrace (10 ms) for the owner, and the QP is in
// ERROR before the owner polls again.
TEST(ThreadDomain, ASilentPeerFailsTheSendsWhileTheOwnerDoesNotPoll) {
  DomainPair d;
  ASSERT_TRUE(d.ok());
  if (!internal::ToSoft(d.td)->fast) {
    GTEST_SKIP() << "no MEMBARRIER_CMD_PRIVATE_EXPEDITED: the domain is one mutex";
  }
  Buffer buf(d.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
  const Stats before = GetStats();
  SendIntoSilence(d, buf);
  ibv_qp_attr q{};
  ibv_qp_init_attr qi{};
  const absl::Time start = absl::Now();
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(query_qp(d.pair->server->qp, &q, IBV_QP_STATE, &qi), 0);  // polls nothing
  } while (q.qp_state != IBV_QPS_ERR && absl::Now() - start < absl::Seconds(5));
  EXPECT_EQ(q.qp_state, IBV_QPS_ERR);
  const Stats after = GetStats();
  EXPECT_EQ(after.grace_timers - before.grace_timers, 4u);
  EXPECT_EQ(after.owner_timers - before.owner_timers, 0u);
  std::vector<ibv_wc> wcs(4);
  wcs.resize(static_cast<size_t>(std::max(0, ibv_poll_cq(d.cq, 4, wcs.data()))));
  ExpectRetryExceededThenFlushes(wcs);  // all three there at the first poll
}

// An owner asleep on its channel (its CQ armed) does not make the timer wait
// for its next poll: the progress thread runs each period at once, and the
// sends fail after 4 periods as they do for a polling owner.
TEST(ThreadDomain, ASilentPeerFailsTheSendsOfASleepingOwnerWithoutGrace) {
  DomainPairOptions o;
  o.channel = true;
  DomainPair d(o);
  ASSERT_TRUE(d.ok());
  if (!internal::ToSoft(d.td)->fast) {
    GTEST_SKIP() << "no MEMBARRIER_CMD_PRIVATE_EXPEDITED: the domain is one mutex";
  }
  Buffer buf(d.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
  const Stats before = GetStats();
  ASSERT_EQ(ibv_req_notify_cq(d.cq, 0), 0);
  SendIntoSilence(d, buf);
  pollfd pfd{d.channel->fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);  // asleep until the error CQE
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(get_cq_event(d.channel, &ev_cq, &ev_ctx), 0);
  ack_cq_events(ev_cq, 1);
  const Stats woken = GetStats();
  EXPECT_EQ(woken.grace_timers - before.grace_timers, 0u);
  EXPECT_EQ(woken.owner_timers - before.owner_timers, 0u);
  ExpectRetryExceededThenFlushes(PollUpTo(d.cq, 3));
}

// A QP of a thread domain whose CQ is outside it: nobody polls a CQ of the
// domain, so its transport timers run on the progress thread at once, none
// waits for an owner.
TEST(ThreadDomain, AQpWhoseCqIsOutsideTheDomainRunsItsTimersAtOnce) {
  DomainPairOptions o;
  o.plain_cq = true;
  DomainPair d(o);
  ASSERT_TRUE(d.ok());
  Buffer buf(d.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
  const Stats before = GetStats();
  SendIntoSilence(d, buf);
  ExpectRetryExceededThenFlushes(PollUpTo(d.cq, 3));
  const Stats after = GetStats();
  EXPECT_EQ(after.owner_timers - before.owner_timers, 0u);
  EXPECT_EQ(after.grace_timers - before.grace_timers, 0u);
}

// A QP held past destroy_qp (by a timer or a frame in flight) keeps its
// thread domain alive after the user freed it: locking it then is safe.
TEST(ThreadDomain, AQpHeldPastItsDestroyOutlivesTheFreedDomainSafely) {
  DomainPair d;
  ASSERT_TRUE(d.ok());
  std::shared_ptr<internal::SoftQp> held = internal::FindQp(d.pair->server->qp->qp_num);
  ASSERT_NE(held, nullptr);
  d.pair.reset();  // destroys the QP
  ASSERT_EQ(destroy_cq(d.cq), 0);
  d.cq = nullptr;
  ASSERT_EQ(dealloc_pd(d.parent), 0);
  d.parent = nullptr;
  ASSERT_EQ(ibv_dealloc_td(d.td), 0);
  d.td = nullptr;
  {
    internal::DomainLock l(&held->mu);  // a visitor of the freed domain
    EXPECT_EQ(held->state, IBV_QPS_ERR);
  }
  held.reset();  // the last hold frees the domain
}

// The owner's sleep and wake-up (arm, event, ack) and its posts and polls
// enter the domain the owner's way: only the doorbells that wake it visit.
TEST(ThreadDomain, AnOwnerThatSleepsOnItsChannelIsVisitedOnlyByDoorbells) {
  DomainPairOptions o;
  o.channel = true;
  DomainPair d(o);
  ASSERT_TRUE(d.ok());
  if (!internal::ToSoft(d.td)->fast) {
    GTEST_SKIP() << "no MEMBARRIER_CMD_PRIVATE_EXPEDITED: the domain is one mutex";
  }
  ibv_comp_channel* channel = d.channel;
  ibv_cq* cq = d.cq;
  {
    ConnectedPair& p = *d.pair;
    Buffer target(d.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
    Buffer source(p.client_pd, 4096, IBV_ACCESS_LOCAL_WRITE);
    const Stats before = GetStats();
    for (uint64_t i = 0; i < 20; ++i) {
      ASSERT_EQ(testing::PostRecv(p.server->qp, i, target, 0, 64), 0);
      ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
      ASSERT_EQ(testing::PostSend(p.client->qp, IBV_WR_SEND, i, source, 0, 64), 0);
      ibv_cq* ev_cq = nullptr;
      void* ev_ctx = nullptr;
      ASSERT_EQ(get_cq_event(channel, &ev_cq, &ev_ctx), 0);
      EXPECT_EQ(ev_cq, cq);
      ack_cq_events(ev_cq, 1);
      ibv_wc wc;
      ASSERT_TRUE(PollOne(cq, &wc));
      EXPECT_EQ(wc.wr_id, i);
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      ASSERT_TRUE(PollOne(p.client_cq, &wc));
    }
    EXPECT_EQ(cq->comp_events_completed, 20u);
    // Each message finds the owner asleep, so its doorbell reaches the QP
    // through the progress thread, a visitor: 20, plus a transport timer
    // run after its grace now and then. The owner's own verbs (arm, ack,
    // post, poll) add none, so fewer than two per message.
    const uint64_t visits = GetStats().domain_visits - before.domain_visits;
    EXPECT_GE(visits, 20u);
    EXPECT_LT(visits, 30u);
  }
}

// A plain PD's MR does not serve a QP of another protection domain's parent.
TEST(ThreadDomain, AnMrOfAnotherProtectionDomainIsAProtectionError) {
  ConnectedPair first;
  ASSERT_TRUE(first.ok());
  ibv_context* ctx = first.server_pd->context;
  ibv_pd* pd = alloc_pd(ctx);
  ibv_pd* other = alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  ASSERT_NE(other, nullptr);
  ibv_parent_domain_init_attr pa = {};
  pa.pd = pd;
  ibv_pd* parent = ibv_alloc_parent_domain(ctx, &pa);
  ASSERT_NE(parent, nullptr);
  {
    PairOptions opt;
    opt.shared_server_pd = parent;
    ConnectedPair p(opt);
    ASSERT_TRUE(p.ok());
    Buffer foreign(other, 64, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_EQ(testing::PostSend(p.server->qp, IBV_WR_SEND, 3, foreign, 0, 64), 0);
    ibv_wc wc;
    ASSERT_TRUE(PollOne(p.server_cq, &wc));
    EXPECT_EQ(wc.wr_id, 3u);
    EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
  }
  EXPECT_EQ(dealloc_pd(parent), 0);
  EXPECT_EQ(dealloc_pd(other), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
}

}  // namespace
}  // namespace softrdma
