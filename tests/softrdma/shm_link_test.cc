// shm_link_test.cc: the same-host link (shm_link.h): that loopback
// connections take it and SOFTRDMA_SHM=0 keeps them on TCP, that large
// SEND / WRITE / READ (moved by process_vm_*) keep the TCP link's semantics,
// a peer killed with SIGKILL, and a two-way stress run with every byte checked.
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/internal.h"
#include "softrdma/shm_link.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// What SOFTRDMA_SHM asks of this run (ctest registers the suite both ways).
bool EnvWantsShm() {
  const char* e = std::getenv("SOFTRDMA_SHM");
  return e == nullptr || std::strcmp(e, "0") != 0;
}

// Sets the switch for the test's scope, then puts back what the env says.
class ShmSwitch {
 public:
  explicit ShmSwitch(bool on) { SetShmEnabled(on); }
  ~ShmSwitch() { SetShmEnabled(EnvWantsShm()); }
};

void Fill(Buffer& b, size_t off, size_t len, uint8_t seed) {
  for (size_t i = 0; i < len; ++i) b.data[off + i] = static_cast<uint8_t>(seed + i * 13);
}
bool Matches(const Buffer& b, size_t off, size_t len, uint8_t seed) {
  for (size_t i = 0; i < len; ++i) {
    if (b.data[off + i] != static_cast<uint8_t>(seed + i * 13)) return false;
  }
  return true;
}

TEST(ShmLink, LoopbackConnectionTakesTheSharedMemoryLink) {
  ShmSwitch on(true);
  ResetStats();
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(QpUsesShm(p.client->qp));
  EXPECT_TRUE(QpUsesShm(p.server->qp));
  const Stats s = GetStats();
  EXPECT_EQ(s.qps_on_shm, 2u);
  EXPECT_EQ(s.qps_on_tcp, 0u);
  EXPECT_EQ(s.shm_fallbacks, 0u);

  // A small SEND with imm through the ring.
  Buffer cb(p.client_pd, 4096, kAll);
  Buffer sb(p.server_pd, 4096, kAll);
  Fill(cb, 0, 100, 7);
  ASSERT_EQ(PostRecv(p.server->qp, 1, sb, 0, 4096), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND_WITH_IMM, 2, cb, 0, 100, htonl(0xabcd)), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 100u);
  EXPECT_EQ(wc.imm_data, htonl(0xabcd));
  EXPECT_TRUE(Matches(sb, 0, 100, 7));
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 2u);
}

TEST(ShmLink, DisabledSwitchKeepsLoopbackOnTcp) {
  ShmSwitch off(false);
  ResetStats();
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(QpUsesShm(p.client->qp));
  EXPECT_FALSE(QpUsesShm(p.server->qp));
  const Stats s = GetStats();
  EXPECT_EQ(s.qps_on_shm, 0u);
  EXPECT_EQ(s.qps_on_tcp, 2u);
  Buffer cb(p.client_pd, 64, kAll);
  Buffer sb(p.server_pd, 64, kAll);
  Fill(cb, 0, 64, 3);
  ASSERT_EQ(PostRecv(p.server->qp, 1, sb, 0, 64), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 2, cb, 0, 64), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(Matches(sb, 0, 64, 3));
}

// Same-host means: the same boot (boot_id) and the same network namespace.
TEST(ShmLink, SameHostNeedsSameBootIdAndNetNamespace) {
  internal::ShmHello me;
  internal::FillHello("/x", &me);
  EXPECT_TRUE(internal::SameHost(me));
  internal::ShmHello other_ns = me;
  other_ns.netns_ino += 1;
  EXPECT_FALSE(internal::SameHost(other_ns));
  internal::ShmHello other_boot = me;
  other_boot.boot_id[0] = other_boot.boot_id[0] == 'a' ? 'b' : 'a';
  EXPECT_FALSE(internal::SameHost(other_boot));
  EXPECT_FALSE(internal::SameHost(internal::ShmHello()));  // a peer that offered nothing
}

// The passive side cannot reach the active one (process_vm_readv EPERM):
// both ends stay on TCP.
TEST(ShmLink, PassiveProbeFailureFallsBackToTcp) {
  ShmSwitch on(true);
  ResetStats();
  internal::FailShmProbesForTesting(0, 1);
  ConnectedPair p;
  internal::FailShmProbesForTesting(0, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(QpUsesShm(p.client->qp));
  EXPECT_FALSE(QpUsesShm(p.server->qp));
  const Stats s = GetStats();
  EXPECT_EQ(s.qps_on_tcp, 2u);
  EXPECT_EQ(s.qps_on_shm, 0u);
  EXPECT_EQ(s.shm_fallbacks, 1u);
  Buffer cb(p.client_pd, 64, kAll);
  Buffer sb(p.server_pd, 64, kAll);
  Fill(cb, 0, 64, 1);
  ASSERT_EQ(PostRecv(p.server->qp, 1, sb, 0, 64), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 2, cb, 0, 64), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(Matches(sb, 0, 64, 1));
}

// The passive side accepted the offer and posts while the link is undecided;
// then the active side's probe fails: RTU says TCP, and the held WR (built
// for the ring, as a remote SGE list) goes out over TCP with its data. (The
// post usually wins the race with RTU; when it does not, the WR is built for
// TCP directly and the test checks the plain fallback.)
TEST(ShmLink, ActiveProbeFailureAfterHeldPostFallsBackToTcp) {
  ShmSwitch on(true);
  ResetStats();
  constexpr size_t kBig = 100000;
  std::unique_ptr<Buffer> sb;
  PairOptions opt;
  opt.after_accept = [&](rdma_cm_id* server, ibv_pd* pd) {
    sb = std::make_unique<Buffer>(pd, kBig, kAll);
    Fill(*sb, 0, kBig, 9);
    EXPECT_EQ(PostSend(server->qp, IBV_WR_SEND, 1, *sb, 0, kBig), 0);
  };
  internal::FailShmProbesForTesting(1, 1);  // the passive probe passes, the active fails
  ConnectedPair p(opt);
  internal::FailShmProbesForTesting(0, 0);
  // The server's MR must go before the pair deallocates its PD.
  struct DropFirst {
    std::unique_ptr<Buffer>& b;
    ~DropFirst() { b.reset(); }
  } drop_first{sb};
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(QpUsesShm(p.client->qp));
  EXPECT_FALSE(QpUsesShm(p.server->qp));
  const Stats s = GetStats();
  EXPECT_EQ(s.qps_on_tcp, 2u);
  EXPECT_EQ(s.shm_fallbacks, 1u);
  Buffer cb(p.client_pd, kBig, kAll);
  ASSERT_EQ(PostRecv(p.client->qp, 2, cb, 0, kBig), 0);  // the SEND waits through RNR
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, kBig);
  EXPECT_TRUE(Matches(cb, 0, kBig, 9));
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 1u);
}

// Large transfers skip the ring: process_vm_readv / process_vm_writev. The
// data and the completions must be those of the TCP link. Runs on whichever
// link the env selects.
TEST(ShmLink, LargeSendWriteReadMoveEveryByte) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(QpUsesShm(p.client->qp), EnvWantsShm());
  constexpr size_t kBig = 3 << 20;  // above kShmInlineMax, several SGEs
  Buffer cb(p.client_pd, 2 * kBig, kAll);
  Buffer sb(p.server_pd, 2 * kBig, kAll);
  ibv_wc wc;

  // SEND from two SGEs into a receive of two SGEs, split elsewhere.
  Fill(cb, 0, kBig, 11);
  ibv_sge ssge[2] = {{cb.addr(), 1000000, cb.mr->lkey},
                     {cb.addr() + 1000000, static_cast<uint32_t>(kBig - 1000000), cb.mr->lkey}};
  ibv_sge rsge[2] = {{sb.addr(), 12345, sb.mr->lkey},
                     {sb.addr() + 12345, static_cast<uint32_t>(kBig), sb.mr->lkey}};
  ibv_recv_wr rwr{};
  rwr.wr_id = 10;
  rwr.sg_list = rsge;
  rwr.num_sge = 2;
  ibv_recv_wr* bad_r = nullptr;
  ASSERT_EQ(ibv_post_recv(p.server->qp, &rwr, &bad_r), 0);
  ibv_send_wr swr{};
  swr.wr_id = 11;
  swr.opcode = IBV_WR_SEND;
  swr.sg_list = ssge;
  swr.num_sge = 2;
  swr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad_s = nullptr;
  ASSERT_EQ(ibv_post_send(p.client->qp, &swr, &bad_s), 0);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, kBig);
  EXPECT_TRUE(Matches(sb, 0, kBig, 11));
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 11u);

  // WRITE into the server's second half.
  Fill(cb, kBig, kBig, 99);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 12, cb, kBig, kBig, 0, sb.addr() + kBig,
                     sb.mr->rkey),
            0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_TRUE(Matches(sb, kBig, kBig, 99));

  // READ it back into the client's first half.
  std::memset(cb.data.data(), 0, kBig);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_READ, 13, cb, 0, kBig, 0, sb.addr() + kBig,
                     sb.mr->rkey),
            0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wc.byte_len, kBig);
  EXPECT_TRUE(Matches(cb, 0, kBig, 99));
}

TEST(ShmLink, LargeWriteWithWrongRkeyIsRemoteAccessError) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  constexpr size_t kBig = 64 << 10;
  Buffer cb(p.client_pd, kBig, kAll);
  Buffer sb(p.server_pd, kBig, kAll);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 1, cb, 0, kBig, 0, sb.addr(),
                     sb.mr->rkey + 1),
            0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wc.wr_id, 1u);
}

TEST(ShmLink, LargeReadPastTheRegionIsRemoteAccessError) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  constexpr size_t kBig = 64 << 10;
  Buffer cb(p.client_pd, kBig, kAll);
  Buffer sb(p.server_pd, kBig, kAll);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_READ, 1, cb, 0, kBig, 0, sb.addr() + 1,
                     sb.mr->rkey),
            0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
}

TEST(ShmLink, LargeSendIntoShortReceiveIsLengthError) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  constexpr size_t kBig = 64 << 10;
  Buffer cb(p.client_pd, kBig, kAll);
  Buffer sb(p.server_pd, kBig, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 5, sb, 0, kBig - 1), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 6, cb, 0, kBig), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(wc.wr_id, 5u);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(wc.wr_id, 6u);
}

// RNR: a large SEND finding no receive is retried until one is posted, and
// then lands intact (the requester's buffer is read again on the retry).
TEST(ShmLink, LargeSendWaitsThroughRnrAndArrivesIntact) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  constexpr size_t kBig = 100000;
  Buffer cb(p.client_pd, kBig, kAll);
  Buffer sb(p.server_pd, kBig, kAll);
  Fill(cb, 0, kBig, 42);
  const uint64_t rnr_before = GetStats().rnr_retries;
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 1, cb, 0, kBig), 0);
  std::vector<ibv_wc> early = Drain(p.client_cq, 20);
  EXPECT_TRUE(early.empty());
  EXPECT_GT(GetStats().rnr_retries, rnr_before);
  ASSERT_EQ(PostRecv(p.server->qp, 2, sb, 0, kBig), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, kBig);
  EXPECT_TRUE(Matches(sb, 0, kBig, 42));
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

// The server side never polls: its responder work (WRITE, READ) must still
// happen, woken by doorbells on the progress thread.
TEST(ShmLink, ResponderThatNeverPollsStillAnswers) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer cb(p.client_pd, 4096, kAll);
  Buffer sb(p.server_pd, 4096, kAll);
  ibv_wc wc;
  for (int i = 0; i < 50; ++i) {
    Fill(cb, 0, 64, static_cast<uint8_t>(i));
    ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, i, cb, 0, 64, 0, sb.addr() + 1024,
                       sb.mr->rkey),
              0);
    ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_READ, 1000 + i, cb, 2048, 64, 0,
                       sb.addr() + 1024, sb.mr->rkey),
              0);
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(wc.wr_id, 1000u + i);
    ASSERT_TRUE(Matches(cb, 2048, 64, static_cast<uint8_t>(i)));
  }
}

// The server polls its CQ for a while (producers then skip doorbells) and
// stops without req_notify_cq: the watchdog must notice and drain in its place.
TEST(ShmLink, PollerThatStopsWithoutArmingIsCoveredByTheWatchdog) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer cb(p.client_pd, 4096, kAll);
  Buffer sb(p.server_pd, 4096, kAll);
  Fill(sb, 0, 64, 77);
  EXPECT_TRUE(Drain(p.server_cq, 5).empty());  // polls, then never again
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_READ, i, cb, 0, 64, 0, sb.addr(), sb.mr->rkey),
              0);
    ibv_wc wc;
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(Matches(cb, 0, 64, 77));
  }
}

// The usual sleeper: poll, req_notify_cq, poll again, block in get_cq_event.
// The peer's SEND must wake it (a doorbell on the shm link).
TEST(ShmLink, SleepingConsumerIsWokenThroughItsCompletionChannel) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer cb(p.client_pd, 4096, kAll);
  Buffer sb(p.server_pd, 4096, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, sb, 0, 64), 0);
  const uint64_t doorbells_before = GetStats().shm_doorbells;
  ibv_wc wc;
  ASSERT_EQ(ibv_poll_cq(p.server_cq, 1, &wc), 0);
  ASSERT_EQ(ibv_req_notify_cq(p.server_cq, 0), 0);
  ASSERT_EQ(ibv_poll_cq(p.server_cq, 1, &wc), 0);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    Fill(cb, 0, 40, 5);
    PostSend(p.client->qp, IBV_WR_SEND, 2, cb, 0, 40);
  });
  // server_comp is blocking unless a test made it non-blocking; wait with poll().
  pollfd pfd{p.server_comp->fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(get_cq_event(p.server_comp, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, p.server_cq);
  ack_cq_events(ev_cq, 1);
  ASSERT_EQ(ibv_poll_cq(p.server_cq, 1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 40u);
  EXPECT_TRUE(Matches(sb, 0, 40, 5));
  sender.join();
  EXPECT_EQ(QpUsesShm(p.client->qp), EnvWantsShm());
  if (EnvWantsShm()) {
    EXPECT_GT(GetStats().shm_doorbells, doorbells_before);
  }
}

// One ibv_post_send list is one doorbell batch (ShmLink::BeginBatch): its
// eight records cost the posting thread one publish (one fence) and, with
// the consumer asleep, one doorbell; eight posts of one WR cost eight
// publishes. Both ways every message arrives, in order, with its bytes.
TEST(ShmLink, PostListIsOnePublishAndOneDoorbell) {
  ShmSwitch on(true);
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(QpUsesShm(p.client->qp));
  constexpr int kN = 8;
  constexpr uint32_t kLen = 64;
  Buffer cb(p.client_pd, 2 * kN * kLen, kAll);
  Buffer sb(p.server_pd, 2 * kN * kLen, kAll);
  for (int i = 0; i < 2 * kN; ++i) {
    ASSERT_EQ(PostRecv(p.server->qp, 100 + i, sb, i * kLen, kLen), 0);
    Fill(cb, i * kLen, kLen, static_cast<uint8_t>(i * 17));
  }
  ibv_sge sges[2 * kN];
  ibv_send_wr wrs[2 * kN];
  for (int i = 0; i < 2 * kN; ++i) {
    sges[i] = ibv_sge{cb.addr() + i * kLen, kLen, cb.mr->lkey};
    wrs[i] = ibv_send_wr{};
    wrs[i].wr_id = static_cast<uint64_t>(i);
    wrs[i].sg_list = &sges[i];
    wrs[i].num_sge = 1;
    wrs[i].opcode = IBV_WR_SEND;
    wrs[i].send_flags = i == kN - 1 || i == 2 * kN - 1 ? IBV_SEND_SIGNALED : 0;
    wrs[i].next = i < kN - 1 ? &wrs[i + 1] : nullptr;  // the first kN are one list
  }
  auto receive_all = [&](int first) {
    for (int i = first; i < first + kN; ++i) {
      ibv_wc wc;
      ASSERT_TRUE(PollOne(p.server_cq, &wc)) << "receive " << i;
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      EXPECT_EQ(wc.wr_id, 100u + i);
      EXPECT_EQ(wc.byte_len, kLen);
      EXPECT_TRUE(Matches(sb, i * kLen, kLen, static_cast<uint8_t>(i * 17))) << "message " << i;
    }
    ibv_wc wc;
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(first + kN - 1));
  };
  // This thread's counters: the progress threads count on their own.
  internal::Counters& mine = internal::Stat();

  // The server's CQ asleep (poll, arm, poll), so the list needs a doorbell.
  ibv_wc wc;
  ASSERT_EQ(ibv_poll_cq(p.server_cq, 1, &wc), 0);
  ASSERT_EQ(ibv_req_notify_cq(p.server_cq, 0), 0);
  ASSERT_EQ(ibv_poll_cq(p.server_cq, 1, &wc), 0);
  uint64_t publishes = mine.shm_publishes.load();
  const uint64_t doorbells = mine.shm_doorbells.load();
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.client->qp, &wrs[0], &bad), 0);
  EXPECT_EQ(mine.shm_publishes.load() - publishes, 1u);
  EXPECT_EQ(mine.shm_doorbells.load() - doorbells, 1u);
  receive_all(0);

  publishes = mine.shm_publishes.load();
  for (int i = kN; i < 2 * kN; ++i) ASSERT_EQ(ibv_post_send(p.client->qp, &wrs[i], &bad), 0);
  EXPECT_EQ(mine.shm_publishes.load() - publishes, static_cast<uint64_t>(kN));
  receive_all(kN);
}

// A CQ with at most kScanAllRingsUpTo same-host rings looks at each on every
// poll and takes no mark from its table; one with more finds records by
// their marks. One CQ grows from 1 ring past kScanAllRingsUpTo, and at each
// size every message of every QP arrives, to a polling consumer and to one
// asleep on its completion channel (whose sleep takes the marks the scans
// left, for the QPs added since).
TEST(ShmLink, FewRingsAreScannedAndManyAreFoundByTheirMarks) {
  ShmSwitch on(true);
  constexpr uint32_t kLen = 64;
  constexpr size_t kMost = internal::kScanAllRingsUpTo + 4;
  PairOptions opt;
  opt.cqe = 1024;
  ConnectedPair first(opt);
  ASSERT_TRUE(first.ok());
  opt.shared_server_cq = first.server_cq;
  opt.shared_server_pd = first.server_pd;
  std::vector<std::unique_ptr<ConnectedPair>> more;  // destroyed before `first`
  std::vector<ConnectedPair*> pairs = {&first};
  Buffer sb(first.server_pd, kMost * kLen, kAll);
  std::vector<std::unique_ptr<Buffer>> cbs;
  cbs.push_back(std::make_unique<Buffer>(first.client_pd, kLen, kAll));
  int seq = 0;
  // One message from every client; the server's CQ gets them all, each in
  // its QP's slice of `sb`.
  auto round = [&](bool asleep) {
    ++seq;
    const size_t rings = pairs.size();
    for (size_t i = 0; i < rings; ++i) {
      ASSERT_EQ(PostRecv(pairs[i]->server->qp, 1000 * seq + i, sb, i * kLen, kLen), 0);
      Fill(*cbs[i], 0, kLen, static_cast<uint8_t>(seq * 31 + i));
    }
    ibv_wc wc;
    if (asleep) {
      ASSERT_EQ(ibv_poll_cq(first.server_cq, 1, &wc), 0);
      ASSERT_EQ(ibv_req_notify_cq(first.server_cq, 0), 0);
      ASSERT_EQ(ibv_poll_cq(first.server_cq, 1, &wc), 0);
    }
    for (size_t i = 0; i < rings; ++i) {
      ASSERT_EQ(PostSend(pairs[i]->client->qp, IBV_WR_SEND, i, *cbs[i], 0, kLen), 0);
    }
    if (asleep) {
      pollfd pfd{first.server_comp->fd, POLLIN, 0};
      ASSERT_EQ(::poll(&pfd, 1, 5000), 1) << "no completion event";
      ibv_cq* ev_cq = nullptr;
      void* ev_ctx = nullptr;
      ASSERT_EQ(get_cq_event(first.server_comp, &ev_cq, &ev_ctx), 0);
      ack_cq_events(ev_cq, 1);
    }
    std::vector<bool> seen(rings, false);
    for (size_t n = 0; n < rings; ++n) {
      ASSERT_TRUE(PollOne(first.server_cq, &wc)) << "after " << n << " receives";
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
      const uint64_t i = wc.wr_id - 1000 * seq;
      ASSERT_LT(i, rings);
      EXPECT_FALSE(seen[i]);
      seen[i] = true;
      EXPECT_EQ(wc.byte_len, kLen);
      EXPECT_TRUE(Matches(sb, i * kLen, kLen, static_cast<uint8_t>(seq * 31 + i))) << i;
    }
    for (size_t i = 0; i < rings; ++i) {
      ASSERT_TRUE(PollOne(pairs[i]->client_cq, &wc));
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    }
  };
  for (const size_t rings : {size_t{1}, internal::kScanAllRingsUpTo,
                             internal::kScanAllRingsUpTo + 1, kMost}) {
    SCOPED_TRACE(::testing::Message() << rings << " rings on the server's CQ");
    while (pairs.size() < rings) {
      more.push_back(std::make_unique<ConnectedPair>(opt));
      ASSERT_TRUE(more.back()->ok());
      ASSERT_TRUE(QpUsesShm(more.back()->server->qp));
      pairs.push_back(more.back().get());
      cbs.push_back(std::make_unique<Buffer>(more.back()->client_pd, kLen, kAll));
      // The new QP's first message arrives while the CQ sleeps.
      round(true);
    }
    // The slot offers and their acks travel with the first records.
    round(false);
    round(false);
    // Marks taken by this thread's polls, and by every thread: a CQ left
    // unpolled for kWatchdogMicros (a client's between its PollOnes, the
    // server's on a loaded machine) is drained by its watchdog on the
    // progress thread, which takes marks as a sleeping CQ does.
    const uint64_t before_own = internal::Stat().shm_marked_drains;
    const uint64_t before_all = GetStats().shm_marked_drains;
    round(false);
    const uint64_t polled_here = internal::Stat().shm_marked_drains - before_own;
    const uint64_t polled_all = GetStats().shm_marked_drains - before_all;
    round(true);
    if (rings <= internal::kScanAllRingsUpTo) {
      EXPECT_EQ(polled_here, 0u) << "a scanning CQ took marks while polling";
    } else {
      EXPECT_GE(polled_all, rings) << "a CQ past the scan limit did not use its marks";
    }
  }
}

// A peer killed with SIGKILL: its TCP socket closing is the death signal.
// The survivor flushes its outstanding receives and gets DISCONNECTED.
TEST(ShmLink, PeerKilledWithSigkillFlushesAndDisconnects) {
  ConnectedPair warmup;  // the parent's progress thread runs before fork, as in ForkTest
  ASSERT_TRUE(warmup.ok());
  rdma_event_channel* ch = create_event_channel();
  SetNonBlocking(ch->fd);
  rdma_cm_id* listener = ListenOnLoopback(ch, 4);
  ASSERT_NE(listener, nullptr);
  const uint16_t port = get_src_port(listener);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: connect, SEND one message, report, then wait to be killed.
    close(ready[0]);
    rdma_event_channel* cch = create_event_channel();
    rdma_cm_id* id = nullptr;
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    dst.sin_port = port;
    if (create_id(cch, &id, nullptr, RDMA_PS_TCP) != 0) _exit(1);
    if (resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000) != 0) _exit(2);
    if (ExpectEvent(cch, RDMA_CM_EVENT_ADDR_RESOLVED) != 0) _exit(3);
    if (resolve_route(id, 2000) != 0 || ExpectEvent(cch, RDMA_CM_EVENT_ROUTE_RESOLVED) != 0) {
      _exit(4);
    }
    ibv_pd* pd = alloc_pd(id->verbs);
    ibv_cq* cq = create_cq(id->verbs, 64, nullptr, nullptr, 0);
    ibv_qp_init_attr qa{};
    qa.qp_type = IBV_QPT_RC;
    qa.send_cq = cq;
    qa.recv_cq = cq;
    qa.cap = {8, 8, 1, 1, 64};
    if (create_qp(id, pd, &qa) != 0) _exit(5);
    rdma_conn_param cp{};
    cp.rnr_retry_count = 7;
    if (softrdma::connect(id, &cp) != 0) _exit(6);
    if (ExpectEvent(cch, RDMA_CM_EVENT_ESTABLISHED) != 0) _exit(7);
    Buffer buf(pd, 64, kAll);
    std::memcpy(buf.data.data(), "alive", 5);
    if (PostSend(id->qp, IBV_WR_SEND, 1, buf, 0, 5) != 0) _exit(8);
    ibv_wc wc;
    if (!PollOne(cq, &wc, 10000) || wc.status != IBV_WC_SUCCESS) _exit(9);
    const char uses = QpUsesShm(id->qp) ? 's' : 't';
    if (write(ready[1], &uses, 1) != 1) _exit(10);
    for (;;) pause();
  }
  close(ready[1]);

  rdma_event_channel* sch = ch;
  rdma_cm_event* e = NextEvent(sch, 20000);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->event, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id* server = e->id;
  ack_cm_event(e);
  ibv_pd* pd = alloc_pd(server->verbs);
  ibv_cq* cq = create_cq(server->verbs, 64, nullptr, nullptr, 0);
  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.cap = {8, 8, 1, 1, 64};
  ASSERT_EQ(create_qp(server, pd, &qa), 0);
  {
    Buffer rb(pd, 3 * 64, kAll);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(PostRecv(server->qp, 100 + i, rb, i * 64, 64), 0);
    rdma_conn_param ap{};
    ap.rnr_retry_count = 7;
    ASSERT_EQ(softrdma::accept(server, &ap), 0);
    EXPECT_EQ(ExpectEvent(sch, RDMA_CM_EVENT_ESTABLISHED, 10000), 0);
    ibv_wc wc;
    ASSERT_TRUE(PollOne(cq, &wc, 10000));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 100u);
    EXPECT_EQ(std::memcmp(rb.data.data(), "alive", 5), 0);
    char uses = 0;
    ASSERT_EQ(read(ready[0], &uses, 1), 1);
    EXPECT_EQ(uses, EnvWantsShm() ? 's' : 't');
    EXPECT_EQ(QpUsesShm(server->qp), EnvWantsShm());

    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(ExpectEvent(sch, RDMA_CM_EVENT_DISCONNECTED, 10000), 0);
    std::vector<ibv_wc> flushed = Drain(cq, 200);
    ASSERT_EQ(flushed.size(), 2u);
    EXPECT_EQ(flushed[0].wr_id, 101u);
    EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(flushed[1].wr_id, 102u);
    EXPECT_EQ(flushed[1].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_FALSE(QpUsesShm(server->qp));
  }
  close(ready[0]);
  destroy_qp(server);
  destroy_id(server);
  destroy_id(listener);
  destroy_cq(cq);
  dealloc_pd(pd);
  destroy_event_channel(ch);
}

// A producer whose consumer keeps up goes back to its ring's start once it
// is kRingRewindAt bytes in (shm_link.h), so a lightly used connection
// touches a few pages of its ring, not all of them; every message still
// arrives intact and in order across the rewinds.
TEST(ShmLink, RingOfAConsumerThatKeepsUpRewindsToItsStart) {
  if (!EnvWantsShm()) GTEST_SKIP() << "SOFTRDMA_SHM=0: no same-host link";
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(QpUsesShm(p.client->qp));
  Buffer cb(p.client_pd, 4096, kAll);
  Buffer sb(p.server_pd, 4096, kAll);
  ResetStats();
  // 2000 SENDs of 200 bytes one at a time: ~450 KB of records (frame and
  // ACK), nearly a whole ring's worth in each direction without rewinds.
  constexpr int kMessages = 2000;
  constexpr uint32_t kBytes = 200;
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_EQ(PostRecv(p.server->qp, i, sb, 0, kBytes), 0);
    Fill(cb, 0, kBytes, static_cast<uint8_t>(i));
    ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, i, cb, 0, kBytes), 0);
    ibv_wc wc;
    ASSERT_TRUE(PollOne(p.server_cq, &wc)) << "message " << i;
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(wc.wr_id, static_cast<uint64_t>(i));
    ASSERT_EQ(wc.byte_len, kBytes);
    ASSERT_TRUE(Matches(sb, 0, kBytes, static_cast<uint8_t>(i))) << "message " << i;
    ASSERT_TRUE(PollOne(p.client_cq, &wc)) << "message " << i;
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(wc.wr_id, static_cast<uint64_t>(i));
  }
  // The SEND ring's records (each > kBytes) pass kRingRewindAt every
  // ~40 messages at the most, so at least kMessages * kBytes /
  // (kRingRewindAt + kRewindCheckEvery) rewinds: 32 here.
  const uint64_t least =
      kMessages * kBytes / (internal::kRingRewindAt + internal::kRewindCheckEvery);
  EXPECT_GE(GetStats().shm_ring_rewinds, least);
}

// Both ends send at once, each from its own busy-polling thread, message sizes
// crossing kShmInlineMax (ring and process_vm), every byte checked.
TEST(ShmLink, StressBothWaysWithEveryByteChecked) {
  PairOptions opt;
  opt.max_send_wr = 128;
  opt.max_recv_wr = 128;
  opt.max_sge = 1;
  opt.cqe = 1024;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  constexpr int kMessages = 4000;
  constexpr int kWindow = 32;  // sends ahead of what the peer sent us
  constexpr int kSlots = 2 * kWindow + 8;
  constexpr size_t kSlot = 20000;
  auto size_of = [](int i) { return static_cast<uint32_t>(1 + (i * 7919) % 19000); };

  auto run = [&](ibv_qp* qp, ibv_cq* cq, ibv_pd* pd, uint8_t my_seed, uint8_t peer_seed,
                 int* failures) {
    Buffer send_buf(pd, kSlots * kSlot, kAll);
    Buffer recv_buf(pd, kSlots * kSlot, kAll);
    for (int i = 0; i < kSlots; ++i) {
      if (PostRecv(qp, i, recv_buf, i * kSlot, kSlot) != 0) ++*failures;
    }
    int sent = 0, send_done = 0, received = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (send_done < kMessages || received < kMessages) {
      if (std::chrono::steady_clock::now() > deadline) {
        ++*failures;  // the other side stopped (its failures say why)
        return;
      }
      while (sent < kMessages && sent < received + kWindow && sent - send_done < kWindow) {
        const size_t off = (sent % kSlots) * kSlot;
        for (uint32_t b = 0; b < size_of(sent); ++b) {
          send_buf.data[off + b] = static_cast<uint8_t>(my_seed + sent + b);
        }
        if (PostSend(qp, IBV_WR_SEND, sent, send_buf, off, size_of(sent)) != 0) {
          ++*failures;
          return;
        }
        ++sent;
      }
      ibv_wc wc[16];
      int n = ibv_poll_cq(cq, 16, wc);
      for (int k = 0; k < n; ++k) {
        if (wc[k].status != IBV_WC_SUCCESS) {
          ++*failures;
          return;
        }
        if (wc[k].opcode == IBV_WC_SEND) {
          ++send_done;
          continue;
        }
        // Receives complete in order: this is message `received`.
        const size_t off = wc[k].wr_id * kSlot;
        if (wc[k].byte_len != size_of(received)) ++*failures;
        for (uint32_t b = 0; b < wc[k].byte_len; ++b) {
          if (recv_buf.data[off + b] != static_cast<uint8_t>(peer_seed + received + b)) {
            ++*failures;
            break;
          }
        }
        ++received;
        if (PostRecv(qp, wc[k].wr_id, recv_buf, off, kSlot) != 0) ++*failures;
      }
    }
  };
  int client_failures = 0, server_failures = 0;
  std::thread server([&] {
    run(p.server->qp, p.server_cq, p.server_pd, 200, 17, &server_failures);
  });
  run(p.client->qp, p.client_cq, p.client_pd, 17, 200, &client_failures);
  server.join();
  EXPECT_EQ(client_failures, 0);
  EXPECT_EQ(server_failures, 0);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
