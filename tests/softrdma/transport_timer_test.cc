// transport_timer_test.cc: the transport (local ACK) timer fires only when the
// peer stops answering, not while a large transfer is moving, nor while the
// peer process is stopped (a NIC answers for a stopped process), nor while a
// passive peer has yet to handle the RTU (a NIC answers from RTR on).
//
// The requester is a second process (this binary re-executed with a filter
// that runs only TransportTimerChild.Reader, as fork_test.cc does), so its
// timer runs on its own progress thread while the parent's responder copies.
// The child connects with its own QP and sets a short timer in the RTR->RTS
// transition (timeout 12: 16.8 ms, retry_cnt 2: fails after ~50 ms of
// silence), then RDMA READs a 256 MiB region the parent advertised. Copying
// 256 MiB takes far longer than 50 ms (a NIC would send response packets all
// along): the READ must still complete, byte-exact.
#include <arpa/inet.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "softrdma/progress_thread.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
constexpr char kPortEnv[] = "SOFTRDMA_TIMER_TEST_PORT";
constexpr size_t kBytes = size_t{256} << 20;
constexpr size_t kMiB = size_t{1} << 20;

struct Advert {
  uint64_t addr;
  uint32_t rkey;
};

// The region's contents: each MiB its own byte, and each 4 KiB page starts
// with its offset, so a misplaced or missing piece shows.
void Fill(uint8_t* p, size_t n) {
  for (size_t mib = 0; mib < n / kMiB; ++mib) {
    std::memset(p + mib * kMiB, static_cast<int>((mib * 7 + 3) & 0xff), kMiB);
  }
  for (size_t off = 0; off < n; off += 4096) std::memcpy(p + off, &off, sizeof(off));
}

int MoveTo(rdma_cm_id* id, ibv_qp* qp, ibv_qp_state state, uint8_t timeout = 0,
           uint8_t retry_cnt = 0) {
  ibv_qp_attr a{};
  a.qp_state = state;
  int mask = 0;
  if (init_qp_attr(id, &a, &mask) != 0) return -errno;
  if (state == IBV_QPS_RTS) {
    a.timeout = timeout;
    a.retry_cnt = retry_cnt;
  }
  return softrdma::modify_qp(qp, &a, mask);
}

// The child's side: a non-blocking event channel and an id on it with the
// parent's 127.0.0.1:`port` resolved (address and route).
void ResolveParent(int port, rdma_event_channel** ch, rdma_cm_id** id) {
  *ch = create_event_channel();
  SetNonBlocking((*ch)->fd);
  ASSERT_EQ(create_id(*ch, id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(resolve_addr(*id, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000), 0);
  ASSERT_EQ(ExpectEvent(*ch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
  ASSERT_EQ(resolve_route(*id, 2000), 0);
  ASSERT_EQ(ExpectEvent(*ch, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
}

// The parent's side: listens on 127.0.0.1, starts this binary as a child
// that runs only `child_test` (it connects to the port in kPortEnv), takes
// the child's CONNECT_REQUEST and gives the new id a QP (rdma_create_qp) on a
// PD and CQ of its own. The test accepts. The destructor frees it all.
struct ParentSide {
  void Start(const char* child_test) {
    ch = create_event_channel();
    SetNonBlocking(ch->fd);
    listener = ListenOnLoopback(ch, 4);
    ASSERT_NE(listener, nullptr);
    const std::string port = std::to_string(ntohs(get_src_port(listener)));
    const std::string filter = std::string("--gtest_filter=") + child_test;
    pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      setenv(kPortEnv, port.c_str(), 1);
      execl("/proc/self/exe", "softrdma_test", filter.c_str(), nullptr);
      _exit(127);
    }
    rdma_cm_event* e = NextEvent(ch, 20000);
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->event, RDMA_CM_EVENT_CONNECT_REQUEST);
    server = e->id;
    ack_cm_event(e);
    pd = alloc_pd(server->verbs);
    cq = create_cq(server->verbs, 16, nullptr, nullptr, 0);
    ibv_qp_init_attr qa = RcAttr(cq, 4);
    ASSERT_EQ(create_qp(server, pd, &qa), 0);
  }
  // Waits up to `seconds` for the child to exit (then kills it); its wait
  // status.
  int WaitChild(int seconds) {
    int status = 0;
    pid_t got = 0;
    for (int i = 0; i < seconds * 10 && got == 0; ++i) {
      got = waitpid(pid, &status, WNOHANG);
      if (got == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (got == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "child did not finish in " << seconds << " s";
    }
    pid = -1;
    return status;
  }
  ~ParentSide() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (server != nullptr) {
      destroy_qp(server);
      destroy_id(server);
    }
    if (listener != nullptr) destroy_id(listener);
    if (cq != nullptr) destroy_cq(cq);
    if (pd != nullptr) dealloc_pd(pd);
    if (ch != nullptr) destroy_event_channel(ch);
  }

  rdma_event_channel* ch = nullptr;
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* server = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  pid_t pid = -1;
};

// A child's side with rdma_cm's own QP: the parent resolved (ResolveParent),
// a PD, a CQ and an RC QP of `max_recv` receives on the id. The destructor
// frees it all; the caller connects.
struct ChildSide {
  void Start(uint32_t max_recv) {
    const char* port = std::getenv(kPortEnv);
    ASSERT_NE(port, nullptr);
    ASSERT_NO_FATAL_FAILURE(ResolveParent(std::atoi(port), &ch, &id));
    pd = alloc_pd(id->verbs);
    cq = create_cq(id->verbs, 16, nullptr, nullptr, 0);
    ibv_qp_init_attr qa = RcAttr(cq, max_recv);
    ASSERT_EQ(create_qp(id, pd, &qa), 0);
  }
  ~ChildSide() {
    if (id != nullptr && id->qp != nullptr) destroy_qp(id);
    if (id != nullptr) destroy_id(id);
    if (cq != nullptr) destroy_cq(cq);
    if (pd != nullptr) dealloc_pd(pd);
    if (ch != nullptr) destroy_event_channel(ch);
  }

  rdma_event_channel* ch = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
};

// Runs only inside the child process.
TEST(TransportTimerChild, Reader) {
  const char* port = std::getenv(kPortEnv);
  if (port == nullptr) GTEST_SKIP() << "runs only as TransportTimer's child";
  rdma_event_channel* ch = nullptr;
  rdma_cm_id* id = nullptr;
  ASSERT_NO_FATAL_FAILURE(ResolveParent(std::atoi(port), &ch, &id));
  ibv_pd* pd = alloc_pd(id->verbs);
  ibv_cq* cq = create_cq(id->verbs, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr qa = RcAttr(cq, 4);
  ibv_qp* qp = softrdma::create_qp(pd, &qa);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(MoveTo(id, qp, IBV_QPS_INIT), 0);
  rdma_conn_param cp{};
  cp.qp_num = qp->qp_num;
  cp.initiator_depth = 1;
  cp.responder_resources = 1;
  cp.retry_count = 2;
  cp.rnr_retry_count = 7;
  ASSERT_EQ(softrdma::connect(id, &cp), 0);
  rdma_cm_event* e = NextEvent(ch, 10000);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->event, RDMA_CM_EVENT_CONNECT_RESPONSE);
  ASSERT_EQ(e->param.conn.private_data_len >= sizeof(Advert), true);
  Advert adv;
  std::memcpy(&adv, e->param.conn.private_data, sizeof(adv));
  ack_cm_event(e);
  ASSERT_EQ(MoveTo(id, qp, IBV_QPS_INIT), 0);
  ASSERT_EQ(MoveTo(id, qp, IBV_QPS_RTR), 0);
  ASSERT_EQ(MoveTo(id, qp, IBV_QPS_RTS, /*timeout=*/12, /*retry_cnt=*/2), 0);
  ASSERT_EQ(establish(id), 0);
  {
    Buffer dst(pd, kBytes, kAll);
    ASSERT_EQ(PostSend(qp, IBV_WR_RDMA_READ, 1, dst, 0, static_cast<uint32_t>(kBytes), 0,
                       adv.addr, adv.rkey),
              0);
    ibv_wc wc;
    ASSERT_TRUE(PollOne(cq, &wc, 40000));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);  // 12: IBV_WC_RETRY_EXC_ERR
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
    std::vector<uint8_t> want(kBytes);
    Fill(want.data(), kBytes);
    size_t bad = 0;
    for (size_t off = 0; off < kBytes; off += kMiB) {
      if (std::memcmp(dst.data.data() + off, want.data() + off, kMiB) != 0) ++bad;
    }
    EXPECT_EQ(bad, 0u) << "MiB chunks that differ";
  }
  disconnect(id);
  softrdma::destroy_qp(qp);
  destroy_id(id);
  destroy_cq(cq);
  dealloc_pd(pd);
  destroy_event_channel(ch);
}

// Runs only inside the child process: connects, then receives until a
// 3-byte "bye" comes (exit status 0), busy-polling, for at most 60 s.
TEST(TransportTimerChild, Receiver) {
  if (std::getenv(kPortEnv) == nullptr) GTEST_SKIP() << "runs only as TransportTimer's child";
  ChildSide c;
  ASSERT_NO_FATAL_FAILURE(c.Start(8));
  rdma_event_channel* ch = c.ch;
  rdma_cm_id* id = c.id;
  ibv_cq* cq = c.cq;
  {
    Buffer buf(c.pd, 8 * 64, kAll);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(PostRecv(id->qp, i, buf, i * 64, 64), 0);
    rdma_conn_param cp{};
    cp.retry_count = 2;  // the parent's sends give up after 3 silent periods
    cp.rnr_retry_count = 7;
    ASSERT_EQ(softrdma::connect(id, &cp), 0);
    ASSERT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_ESTABLISHED, 10000), 0);
    bool bye = false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!bye && std::chrono::steady_clock::now() < until) {
      ibv_wc wc{};
      if (ibv_poll_cq(cq, 1, &wc) != 1) continue;
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
      ASSERT_EQ(wc.opcode, IBV_WC_RECV);
      const size_t slot = static_cast<size_t>(wc.wr_id);
      bye = wc.byte_len == 3 && std::memcmp(buf.data.data() + slot * 64, "bye", 3) == 0;
      ASSERT_EQ(PostRecv(id->qp, wc.wr_id, buf, slot * 64, 64), 0);
    }
    EXPECT_TRUE(bye);
    disconnect(id);
  }
}

// Runs only inside the child process: connects with a transport timer of
// 3 silent periods (rdma_cm's default 67 ms each), SENDs "hello" as soon as
// it is ESTABLISHED, expects it to complete with success, and waits for the
// parent to disconnect.
TEST(TransportTimerChild, Sender) {
  if (std::getenv(kPortEnv) == nullptr) GTEST_SKIP() << "runs only as TransportTimer's child";
  ChildSide c;
  ASSERT_NO_FATAL_FAILURE(c.Start(1));
  rdma_event_channel* ch = c.ch;
  rdma_cm_id* id = c.id;
  ibv_cq* cq = c.cq;
  {
    Buffer buf(c.pd, 64, kAll);
    std::memcpy(buf.data.data(), "hello", 5);
    rdma_conn_param cp{};
    cp.retry_count = 2;
    cp.rnr_retry_count = 7;
    ASSERT_EQ(softrdma::connect(id, &cp), 0);
    ASSERT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_ESTABLISHED, 10000), 0);
    ASSERT_EQ(PostSend(id->qp, IBV_WR_SEND, 7, buf, 0, 5), 0);
    ibv_wc wc{};
    ASSERT_TRUE(PollOne(cq, &wc, 10000));
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);  // 12: IBV_WC_RETRY_EXC_ERR
    // The parent disconnects once it has checked its side.
    EXPECT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_DISCONNECTED, 20000), 0);
  }
}

// A NIC's responder acknowledges from RTR on, before the connection's RTU
// arrives. softrdma's passive side starts polling a same-host ring only when
// its progress thread handles the RTU, which at thousands of connections
// being set up at once may come long after; the requester's transport timer
// does not count that wait. Here the parent's progress thread is held for
// 1 s (five times the child's 3 x 67 ms) from before the accept, so the
// child's SEND waits in the ring the parent does not poll yet; it completes
// once the parent catches up.
TEST(TransportTimer, PassiveSideLateWithTheRtuIsNotASilentLink) {
  const char* shm_env = std::getenv("SOFTRDMA_SHM");
  if (shm_env != nullptr && std::strcmp(shm_env, "0") == 0) {
    GTEST_SKIP() << "the TCP link's responder is the progress thread itself";
  }
  ParentSide p;
  ASSERT_NO_FATAL_FAILURE(p.Start("TransportTimerChild.Sender"));
  Buffer buf(p.pd, 64, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, buf, 0, 64), 0);
  // Shared with the closure, which outlives this test if an assertion
  // returns early (it then waits out its 10 s bound).
  auto held = std::make_shared<absl::Notification>();
  auto release = std::make_shared<absl::Notification>();
  internal::ProgressThread::Get().RunAfter(absl::ZeroDuration(), [held, release] {
    held->Notify();
    release->WaitForNotificationWithTimeout(absl::Seconds(10));
  });
  ASSERT_TRUE(held->WaitForNotificationWithTimeout(absl::Seconds(10)));
  const absl::Time accepted = absl::Now();
  rdma_conn_param ap{};
  const int accepted_rc = softrdma::accept(p.server, &ap);
  absl::SleepFor(absl::Seconds(1));
  release->Notify();
  ASSERT_EQ(accepted_rc, 0);
  ASSERT_EQ(ExpectEvent(p.ch, RDMA_CM_EVENT_ESTABLISHED, 10000), 0);
  EXPECT_GE(absl::Now() - accepted, absl::Milliseconds(1000));
  ASSERT_TRUE(QpUsesShm(p.server->qp));
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.cq, &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data.data()), 5), "hello");
  EXPECT_EQ(softrdma::disconnect(p.server), 0);
  const int status = p.WaitChild(30);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's SEND failed (see its output above)";
}

// A passive side whose QP leaves the link before the RTU (ERROR or RESET
// right after rdma_accept) will never answer: its silence counts, and the
// requester's SEND fails RETRY_EXC_ERR after its retry_cnt + 1 periods, as
// with a NIC whose peer QP is in ERROR.
void ExpectRetryExceededWhenThePassiveQpGoesTo(ibv_qp_state state) {
  PairOptions o;
  o.after_accept = [state](rdma_cm_id* server, ibv_pd*) {
    ibv_qp_attr a{};
    a.qp_state = state;
    ASSERT_EQ(softrdma::modify_qp(server->qp, &a, IBV_QP_STATE), 0);
  };
  ConnectedPair p(o);
  ASSERT_TRUE(p.ok());
  Buffer buf(p.client_pd, 64, kAll);
  ibv_qp_attr a{};
  a.timeout = 10;  // 4.2 ms
  a.retry_cnt = 3;
  ASSERT_EQ(softrdma::modify_qp(p.client->qp, &a, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT), 0);
  const absl::Time posted = absl::Now();
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 1, buf, 0, 16), 0);
  ibv_wc wc{};
  // Well before PeerNotAttachedLocked's 5 s grace.
  ASSERT_TRUE(PollOne(p.client_cq, &wc, 3000)) << "no completion in 3 s";
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_GE(absl::Now() - posted, absl::Microseconds(4 * 4194));
}

TEST(TransportTimer, PassiveQpInErrorBeforeTheRtuFailsTheRequester) {
  ExpectRetryExceededWhenThePassiveQpGoesTo(IBV_QPS_ERR);
}

TEST(TransportTimer, PassiveQpResetBeforeTheRtuFailsTheRequester) {
  ExpectRetryExceededWhenThePassiveQpGoesTo(IBV_QPS_RESET);
}

// A NIC acknowledges for a stopped process, so a requester whose peer process
// is stopped (SIGSTOP, a debugger) for longer than its transport timeout
// waits, and its send completes once the peer runs again; softrdma does the
// same on the same-host link, where it knows the peer process (the TCP
// link counts such silence as a timeout: see qp.cc, PeerProcessStalledLocked).
TEST(TransportTimer, StoppedPeerProcessIsNotASilentLink) {
  ParentSide p;
  ASSERT_NO_FATAL_FAILURE(p.Start("TransportTimerChild.Receiver"));
  Buffer buf(p.pd, 64, kAll);
  std::memcpy(buf.data.data(), "onetwobye", 9);
  rdma_conn_param ap{};
  ASSERT_EQ(softrdma::accept(p.server, &ap), 0);
  ASSERT_EQ(ExpectEvent(p.ch, RDMA_CM_EVENT_ESTABLISHED, 10000), 0);
  const bool shm = QpUsesShm(p.server->qp);
  ibv_wc wc{};
  ASSERT_EQ(PostSend(p.server->qp, IBV_WR_SEND, 1, buf, 0, 3), 0);
  ASSERT_TRUE(PollOne(p.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  if (shm) {
    int status = 0;
    ASSERT_EQ(kill(p.pid, SIGSTOP), 0);
    ASSERT_EQ(waitpid(p.pid, &status, WUNTRACED), p.pid);
    ASSERT_TRUE(WIFSTOPPED(status));
    // Five times the 3 x 67 ms the timer allows a silent peer.
    ASSERT_EQ(PostSend(p.server->qp, IBV_WR_SEND, 2, buf, 3, 3), 0);
    EXPECT_FALSE(PollOne(p.cq, &wc, 1000)) << "completed while the peer was stopped: status "
                                           << wc.status;
    ASSERT_EQ(kill(p.pid, SIGCONT), 0);
    ASSERT_TRUE(PollOne(p.cq, &wc));
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);  // 12: IBV_WC_RETRY_EXC_ERR
  }
  ASSERT_EQ(PostSend(p.server->qp, IBV_WR_SEND, 3, buf, 6, 3), 0);
  ASSERT_TRUE(PollOne(p.cq, &wc));
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  const int status = p.WaitChild(30);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child failed (see its output above)";
  if (!shm) GTEST_SKIP() << "the TCP link does not know the peer process";
}

TEST(TransportTimer, LargeReadByAnotherProcessDoesNotTimeOut) {
  ParentSide p;
  ASSERT_NO_FATAL_FAILURE(p.Start("TransportTimerChild.Reader"));
  int status = 0;
  {
    Buffer region(p.pd, kBytes, kAll);
    Fill(region.data.data(), kBytes);
    Advert adv{region.addr(), region.mr->rkey};
    rdma_conn_param ap{};
    ap.private_data = &adv;
    ap.private_data_len = sizeof(adv);
    ap.responder_resources = 1;
    ap.initiator_depth = 1;
    ASSERT_EQ(softrdma::accept(p.server, &ap), 0);
    EXPECT_EQ(ExpectEvent(p.ch, RDMA_CM_EVENT_ESTABLISHED, 10000), 0);
    // The parent only serves (its progress thread answers the READ) until the
    // child is done.
    status = p.WaitChild(50);
  }
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's READ failed (see its output above)";
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
