// softrdma_pingpong: round-trip latency and RDMA bandwidth on raw softrdma
// verbs between two processes, both busy-polling, on the link chosen by
// SOFTRDMA_SHM (1: same-host shared memory, 0: TCP). With
// SOFTRDMA_PINGPONG_TD=1 each side makes its QP and CQ in a thread domain
// (ibv_alloc_td, a parent domain, ibv_create_cq_ex single-threaded), as a
// single-threaded program tells a provider it needs no locks.
//
//   softrdma_pingpong [iterations=200000] [payload_bytes=32] [big_bytes=16777216]
//   softrdma_pingpong rate [messages=2000000] [payload_bytes=32]
//
// The process forks: the child is the server (pinned to CPU 1), the parent the
// client (CPU 0). Reports p50/p99/p99.9 of a SEND/RECV round trip (the client
// SENDs inline, the server answers with a SEND of the same size) and GB/s of
// RDMA WRITE and READ of `big_bytes`. `rate` instead streams one-way SENDs
// (64 in flight, every 16th signalled, as a batching sender would) and
// reports messages per second. Not a ctest: speed is measured here, not in
// unit tests.
#include <arpa/inet.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <cstring>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "softrdma/softrdma.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

constexpr int kRecvDepth = 1024;

struct Advert {
  uint64_t addr;
  uint32_t rkey;
};

void Die(const char* what) {
  std::perror(what);
  std::exit(1);
}

void Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);  // best effort
}

rdma_cm_event* WaitEvent(rdma_event_channel* ch, rdma_cm_event_type want) {
  rdma_cm_event* e = nullptr;
  if (softrdma::get_cm_event(ch, &e) != 0) Die("get_cm_event");
  if (e->event != want) {
    std::fprintf(stderr, "unexpected cm event %d (want %d) status %d\n", e->event, want,
                 e->status);
    std::exit(1);
  }
  return e;
}

void MakeQp(rdma_cm_id* id, ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.cap.max_send_wr = 128;
  qa.cap.max_recv_wr = kRecvDepth;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = 64;
  if (softrdma::create_qp(id, pd, &qa) != 0) Die("create_qp");
}

void PostRecv(ibv_qp* qp, ibv_mr* mr, uint64_t addr, uint32_t len) {
  ibv_sge sge{addr, len, mr->lkey};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad;
  if (ibv_post_recv(qp, &wr, &bad) != 0) Die("post_recv");
}

void PostSend(ibv_qp* qp, ibv_wr_opcode op, ibv_mr* mr, uint64_t addr, uint32_t len,
              uint64_t raddr = 0, uint32_t rkey = 0, bool signaled = true, uint64_t wr_id = 0) {
  ibv_sge sge{addr, len, mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = (signaled ? IBV_SEND_SIGNALED : 0) |
                  (op == IBV_WR_SEND && len <= 64 ? IBV_SEND_INLINE : 0);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad;
  if (ibv_post_send(qp, &wr, &bad) != 0) Die("post_send");
}

// The PD for the QP and MRs and the CQ: plain, or in a thread domain.
void MakePdAndCq(ibv_context* ctx, ibv_pd** pd, ibv_cq** cq) {
  ibv_pd* plain = softrdma::alloc_pd(ctx);
  if (plain == nullptr) Die("alloc_pd");
  const char* td_env = std::getenv("SOFTRDMA_PINGPONG_TD");
  if (td_env == nullptr || std::string(td_env) != "1") {
    *pd = plain;
    *cq = softrdma::create_cq(ctx, 4096, nullptr, nullptr, 0);
    if (*cq == nullptr) Die("create_cq");
    return;
  }
  ibv_td_init_attr td_attr = {};
  ibv_td* td = ibv_alloc_td(ctx, &td_attr);
  if (td == nullptr) Die("ibv_alloc_td");
  ibv_parent_domain_init_attr pa = {};
  pa.pd = plain;
  pa.td = td;
  *pd = ibv_alloc_parent_domain(ctx, &pa);
  if (*pd == nullptr) Die("ibv_alloc_parent_domain");
  ibv_cq_init_attr_ex ca = {};
  ca.cqe = 4096;
  ca.wc_flags = IBV_WC_STANDARD_FLAGS;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD | IBV_CQ_INIT_ATTR_MASK_FLAGS;
  ca.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  ca.parent_domain = *pd;
  ibv_cq_ex* cqx = ibv_create_cq_ex(ctx, &ca);
  if (cqx == nullptr) Die("ibv_create_cq_ex");
  *cq = ibv_cq_ex_to_cq(cqx);
}

// Busy-polls until a completion of `opcode` arrives; others are counted.
ibv_wc PollFor(ibv_cq* cq, ibv_wc_opcode opcode) {
  for (;;) {
    ibv_wc wc;
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) Die("poll_cq");
    if (n == 0) continue;
    if (wc.status != IBV_WC_SUCCESS) {
      std::fprintf(stderr, "completion error: status %d, opcode %d\n", wc.status, wc.opcode);
      std::exit(1);
    }
    if (wc.opcode == opcode) return wc;
  }
}

int Server(int port_pipe, size_t payload, size_t big, bool rate) {
  Pin(1);
  rdma_event_channel* ch = softrdma::create_event_channel();
  rdma_cm_id* listener;
  if (softrdma::create_id(ch, &listener, nullptr, RDMA_PS_TCP) != 0) Die("create_id");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (softrdma::bind_addr(listener, reinterpret_cast<sockaddr*>(&addr)) != 0) Die("bind");
  if (softrdma::listen(listener, 1) != 0) Die("listen");
  const uint16_t port = softrdma::get_src_port(listener);
  if (write(port_pipe, &port, sizeof(port)) != sizeof(port)) Die("write port");
  rdma_cm_event* e = WaitEvent(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id* id = e->id;
  softrdma::ack_cm_event(e);
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  MakePdAndCq(id->verbs, &pd, &cq);
  MakeQp(id, pd, cq);
  std::vector<uint8_t> small(4096);
  std::vector<uint8_t> target(big);
  ibv_mr* smr = softrdma::reg_mr(pd, small.data(), small.size(), kAll);
  ibv_mr* bmr = softrdma::reg_mr(pd, target.data(), target.size(), kAll);
  const int depth = rate ? kRecvDepth - 64 : 32;
  for (int i = 0; i < depth; ++i) PostRecv(id->qp, smr, reinterpret_cast<uint64_t>(small.data()), 64);
  Advert adv{reinterpret_cast<uint64_t>(target.data()), bmr->rkey};
  rdma_conn_param cp{};
  cp.private_data = &adv;
  cp.private_data_len = sizeof(adv);
  cp.responder_resources = 16;
  cp.rnr_retry_count = 7;
  if (softrdma::accept(id, &cp) != 0) Die("accept");
  softrdma::ack_cm_event(WaitEvent(ch, RDMA_CM_EVENT_ESTABLISHED));
  if (rate) {
    // Take completions in batches and give the receives back in one chain,
    // as a receiver that keeps up with a stream does.
    bool done = false;
    std::vector<ibv_sge> sges(64);
    std::vector<ibv_recv_wr> wrs(64);
    while (!done) {
      ibv_wc wc[64];
      const int n = ibv_poll_cq(cq, 64, wc);
      if (n < 0) Die("poll_cq");
      int recvs = 0;
      for (int k = 0; k < n; ++k) {
        if (wc[k].status != IBV_WC_SUCCESS) Die("recv completion");
        if (wc[k].opcode != IBV_WC_RECV) continue;
        if (wc[k].byte_len == 1) done = true;
        sges[recvs] = ibv_sge{reinterpret_cast<uint64_t>(small.data()), 64, smr->lkey};
        wrs[recvs] = ibv_recv_wr{};
        wrs[recvs].sg_list = &sges[recvs];
        wrs[recvs].num_sge = 1;
        if (recvs > 0) wrs[recvs - 1].next = &wrs[recvs];
        ++recvs;
      }
      ibv_recv_wr* bad;
      if (recvs > 0 && ibv_post_recv(id->qp, &wrs[0], &bad) != 0) Die("post_recv");
    }
    softrdma::disconnect(id);
    return 0;
  }
  // Echo every message; a 1-byte message means "done".
  for (;;) {
    ibv_wc wc = PollFor(cq, IBV_WC_RECV);
    PostRecv(id->qp, smr, reinterpret_cast<uint64_t>(small.data()), 64);
    if (wc.byte_len == 1) break;
    if (rate) continue;
    PostSend(id->qp, IBV_WR_SEND, smr, reinterpret_cast<uint64_t>(small.data()) + 2048,
             static_cast<uint32_t>(payload));
  }
  softrdma::disconnect(id);
  return 0;
}

double Gbps(size_t bytes, Clock::duration d) {
  return static_cast<double>(bytes) / std::chrono::duration<double>(d).count() / 1e9;
}

int Rate(rdma_cm_id* id, ibv_cq* cq, ibv_mr* smr, uint64_t small_addr, int messages,
         size_t payload) {
  constexpr int kWindow = 64;
  constexpr int kSignalEvery = 16;
  int posted = 0, done = 0;
  const Clock::time_point t0 = Clock::now();
  while (done < messages) {
    while (posted < messages && posted - done < kWindow) {
      const bool signaled = (posted + 1) % kSignalEvery == 0 || posted == messages - 1;
      PostSend(id->qp, IBV_WR_SEND, smr, small_addr + 1024, static_cast<uint32_t>(payload), 0, 0,
               signaled, static_cast<uint64_t>(posted));
      ++posted;
    }
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq, 16, wc);
    if (n < 0) Die("poll_cq");
    for (int k = 0; k < n; ++k) {
      if (wc[k].status != IBV_WC_SUCCESS) {
        std::fprintf(stderr, "completion error: status %d\n", wc[k].status);
        return 1;
      }
      if (wc[k].opcode == IBV_WC_SEND) done = static_cast<int>(wc[k].wr_id) + 1;
    }
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("link=%s payload=%zu one-way SENDs=%d: %.2f M messages/s\n",
              softrdma::QpUsesShm(id->qp) ? "shm" : "tcp", payload, messages,
              messages / s / 1e6);
  return 0;
}

int Client(uint16_t port, int iters, size_t payload, size_t big, bool rate) {
  Pin(0);
  rdma_event_channel* ch = softrdma::create_event_channel();
  rdma_cm_id* id;
  if (softrdma::create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) Die("create_id");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = port;
  if (softrdma::resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000) != 0) {
    Die("resolve_addr");
  }
  softrdma::ack_cm_event(WaitEvent(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
  softrdma::resolve_route(id, 2000);
  softrdma::ack_cm_event(WaitEvent(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  MakePdAndCq(id->verbs, &pd, &cq);
  MakeQp(id, pd, cq);
  std::vector<uint8_t> small(4096);
  std::vector<uint8_t> source(big, 0x5a);
  ibv_mr* smr = softrdma::reg_mr(pd, small.data(), small.size(), kAll);
  ibv_mr* bmr = softrdma::reg_mr(pd, source.data(), source.size(), kAll);
  for (int i = 0; i < 32; ++i) PostRecv(id->qp, smr, reinterpret_cast<uint64_t>(small.data()), 64);
  rdma_conn_param cp{};
  cp.initiator_depth = 16;
  cp.responder_resources = 16;
  cp.rnr_retry_count = 7;
  if (softrdma::connect(id, &cp) != 0) Die("connect");
  rdma_cm_event* e = WaitEvent(ch, RDMA_CM_EVENT_ESTABLISHED);
  Advert adv;
  std::memcpy(&adv, e->param.conn.private_data, sizeof(adv));
  softrdma::ack_cm_event(e);
  const bool shm = softrdma::QpUsesShm(id->qp);

  const uint64_t small_addr = reinterpret_cast<uint64_t>(small.data());
  if (rate) {
    const int rc = Rate(id, cq, smr, small_addr, iters, payload);
    PostSend(id->qp, IBV_WR_SEND, smr, small_addr + 1024, 1);  // "done"
    PollFor(cq, IBV_WC_SEND);
    return rc;
  }
  std::vector<double> rtt_ns;
  rtt_ns.reserve(iters);
  const int warmup = std::min(iters / 10, 10000);
  Clock::time_point all_start;
  for (int i = -warmup; i < iters; ++i) {
    if (i == 0) all_start = Clock::now();
    const Clock::time_point t0 = Clock::now();
    PostSend(id->qp, IBV_WR_SEND, smr, small_addr + 1024, static_cast<uint32_t>(payload));
    PollFor(cq, IBV_WC_RECV);
    const Clock::time_point t1 = Clock::now();
    PostRecv(id->qp, smr, small_addr, 64);
    if (i >= 0) rtt_ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - all_start).count();
  std::sort(rtt_ns.begin(), rtt_ns.end());
  auto pct = [&](double p) { return rtt_ns[static_cast<size_t>(p * (rtt_ns.size() - 1))]; };
  std::printf("link=%s payload=%zu round_trips=%d p50=%.2fus p99=%.2fus p99.9=%.2fus "
              "(%.0f round trips/s)\n",
              shm ? "shm" : "tcp", payload, iters, pct(0.5) / 1e3, pct(0.99) / 1e3,
              pct(0.999) / 1e3, iters / total_s);

  // Bandwidth: one outstanding WR at a time, as a rendezvous transfer does.
  const int reps = 10;
  for (ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ}) {
    const ibv_wc_opcode want = op == IBV_WR_RDMA_WRITE ? IBV_WC_RDMA_WRITE : IBV_WC_RDMA_READ;
    PostSend(id->qp, op, bmr, reinterpret_cast<uint64_t>(source.data()),
             static_cast<uint32_t>(big), adv.addr, adv.rkey);
    PollFor(cq, want);  // warm-up: faults the pages in
    const Clock::time_point t0 = Clock::now();
    for (int r = 0; r < reps; ++r) {
      PostSend(id->qp, op, bmr, reinterpret_cast<uint64_t>(source.data()),
               static_cast<uint32_t>(big), adv.addr, adv.rkey);
      PollFor(cq, want);
    }
    std::printf("link=%s %s %zu bytes x %d: %.2f GB/s\n", shm ? "shm" : "tcp",
                op == IBV_WR_RDMA_WRITE ? "RDMA_WRITE" : "RDMA_READ", big, reps,
                Gbps(big * reps, Clock::now() - t0));
  }
  PostSend(id->qp, IBV_WR_SEND, smr, small_addr + 1024, 1);  // "done"
  PollFor(cq, IBV_WC_SEND);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's libabsl is built with absl::Mutex deadlock detection on, which
  // costs a graph lookup per lock (about 0.35 us a round trip). A Release
  // rdmarpc process turns it off (--rdmarpc_mutex_deadlock_check), so this
  // tool does too, and reports what the data path itself costs;
  // SOFTRDMA_PINGPONG_DEADLOCK_CHECK=1 keeps it on, as in an rdma-core
  // program that links Debian's absl through softrdma.
  const char* dl = std::getenv("SOFTRDMA_PINGPONG_DEADLOCK_CHECK");
  if (dl == nullptr || std::strcmp(dl, "1") != 0) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  const bool rate = argc > 1 && std::strcmp(argv[1], "rate") == 0;
  if (rate) {
    --argc;
    ++argv;
  }
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fprintf(stderr,
                 "usage: softrdma_pingpong [iterations=200000] [payload_bytes=32] "
                 "[big_bytes=16777216]\n"
                 "       softrdma_pingpong rate [messages=2000000] [payload_bytes=32]\n"
                 "SOFTRDMA_SHM=1 (default) same-host link, 0 TCP; server on CPU 1, client on "
                 "CPU 0\n");
    return 2;
  }
  const int iters = argc > 1 ? std::atoi(argv[1]) : (rate ? 2000000 : 200000);
  const size_t payload = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 32;
  const size_t big = rate ? 4096 : (argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 16 << 20);
  if (iters < 1) {
    std::fprintf(stderr, "iterations must be a number of at least 1 (got '%s'); --help\n",
                 argv[1]);
    return 2;
  }
  if (payload < 2 || payload > 64) {
    std::fprintf(stderr, "payload_bytes must be 2..64 (inline SEND)\n");
    return 2;
  }
  int fds[2];
  if (pipe(fds) != 0) Die("pipe");
  pid_t pid = fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    close(fds[0]);
    _exit(Server(fds[1], payload, big, rate));
  }
  close(fds[1]);
  uint16_t port;
  if (read(fds[0], &port, sizeof(port)) != sizeof(port)) Die("read port");
  const int rc = Client(port, iters, payload, big, rate);
  int status = 0;
  waitpid(pid, &status, 0);
  return rc != 0 ? rc : (WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}
