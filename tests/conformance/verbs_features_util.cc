#include "tests/conformance/verbs_features_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "gtest/gtest.h"

namespace rdmarpc {
namespace conformance {
namespace {

// The provider the runtime's binding chose: --rdmarpc_provider, whose
// default comes from $RDMARPC_PROVIDER (conformance_main parses the flags).
const internal::VerbsApi* Choose() { return &internal::Verbs(); }

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

bool WaitReadable(int fd, std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(left.count())) > 0;
}

// The next cm event within 5 s, acked; its type (or -1) and status.
int NextCmEvent(rdma_event_channel* ch, rdma_cm_id** id, int* status) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  if (!WaitReadable(ch->fd, deadline)) return -1;
  rdma_cm_event* e = nullptr;
  if (Api().get_cm_event(ch, &e) != 0) return -1;
  const int type = e->event;
  if (id != nullptr) *id = e->id;
  if (status != nullptr) *status = e->status;
  Api().ack_cm_event(e);
  return type;
}

std::string ConformanceAddr() {
  const char* env = std::getenv("CONFORMANCE_ADDR");
  return env != nullptr && env[0] != '\0' ? env : "127.0.0.1";
}

}  // namespace

const internal::VerbsApi& Api() {
  static const internal::VerbsApi* api = Choose();
  return *api;
}

bool IsSoft() { return std::strcmp(Api().provider_name, "soft") == 0; }

std::string NoDeviceReason() {
  int n = 0;
  ibv_device** list = Api().get_device_list(&n);
  if (list != nullptr) Api().free_device_list(list);
  if (list == nullptr || n == 0) {
    return std::string("provider ") + Api().provider_name +
           " has no RDMA device on this machine (set RDMARPC_PROVIDER=soft to use softrdma)";
  }
  return "";
}

bool WaitAsyncEvent(ibv_context* ctx, ibv_event_type type, ibv_async_event* out,
                    int timeout_ms) {
  SetNonBlocking(ctx->async_fd);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    ibv_async_event ev{};
    if (Api().get_async_event(ctx, &ev) == 0) {
      if (ev.event_type == type) {
        *out = ev;
        return true;
      }
      Api().ack_async_event(&ev);
      continue;
    }
    if (!WaitReadable(ctx->async_fd, deadline)) return false;
  }
}

std::vector<ibv_async_event> TakeQueuedEvents(ibv_context* ctx) {
  SetNonBlocking(ctx->async_fd);
  std::vector<ibv_async_event> out;
  ibv_async_event ev{};
  while (Api().get_async_event(ctx, &ev) == 0) {
    out.push_back(ev);
    Api().ack_async_event(&ev);
  }
  return out;
}

bool PollOne(ibv_cq* cq, ibv_wc* wc, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const int n = ibv_poll_cq(cq, 1, wc);
    if (n == 1) return true;
    if (n < 0 || std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

std::vector<ibv_wc> Drain(ibv_cq* cq, int timeout_ms) {
  std::vector<ibv_wc> out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq, 16, wc);
    for (int i = 0; i < n; ++i) out.push_back(wc[i]);
    if (n <= 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return out;
}

bool Pair::Fail(const std::string& what) {
  error_ = what + ": " + std::strerror(errno);
  return false;
}

Pair::Pair(const PairConfig& config) {
  const internal::VerbsApi& v = Api();
  server_ch = v.create_event_channel();
  client_ch = v.create_event_channel();
  if (server_ch == nullptr || client_ch == nullptr) {
    Fail("rdma_create_event_channel");
    return;
  }
  if (v.create_id(server_ch, &listener, nullptr, RDMA_PS_TCP) != 0) {
    Fail("rdma_create_id");
    return;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, ConformanceAddr().c_str(), &addr.sin_addr) != 1) {
    error_ = "CONFORMANCE_ADDR is not an IPv4 address: " + ConformanceAddr();
    return;
  }
  if (v.bind_addr(listener, reinterpret_cast<sockaddr*>(&addr)) != 0) {
    Fail("rdma_bind_addr " + ConformanceAddr());
    return;
  }
  if (v.listen(listener, 4) != 0) {
    Fail("rdma_listen");
    return;
  }
  addr.sin_port = v.get_src_port(listener);
  if (v.create_id(client_ch, &client, nullptr, RDMA_PS_TCP) != 0) {
    Fail("rdma_create_id");
    return;
  }
  if (v.resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000) != 0 ||
      NextCmEvent(client_ch, nullptr, nullptr) != RDMA_CM_EVENT_ADDR_RESOLVED) {
    Fail("rdma_resolve_addr");
    return;
  }
  if (v.resolve_route(client, 2000) != 0 ||
      NextCmEvent(client_ch, nullptr, nullptr) != RDMA_CM_EVENT_ROUTE_RESOLVED) {
    Fail("rdma_resolve_route");
    return;
  }
  ibv_qp_init_attr qa{};
  qa.cap.max_send_wr = config.max_wr;
  qa.cap.max_recv_wr = config.max_wr;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.qp_type = IBV_QPT_RC;
  client_pd = v.alloc_pd(client->verbs);
  client_cq = v.create_cq(client->verbs, 64, nullptr, nullptr, 0);
  qa.send_cq = client_cq;
  qa.recv_cq = client_cq;
  if (client_pd == nullptr || client_cq == nullptr || v.create_qp(client, client_pd, &qa) != 0) {
    Fail("client PD/CQ/QP");
    return;
  }
  rdma_conn_param cp{};
  cp.responder_resources = 4;
  cp.initiator_depth = 4;
  cp.retry_count = 3;
  cp.rnr_retry_count = 7;
  if (v.connect(client, &cp) != 0) {
    Fail("rdma_connect");
    return;
  }
  if (NextCmEvent(server_ch, &server, nullptr) != RDMA_CM_EVENT_CONNECT_REQUEST) {
    error_ = "no CONNECT_REQUEST";
    return;
  }
  server_pd = v.alloc_pd(server->verbs);
  server_cq = v.create_cq(server->verbs, 64, nullptr, nullptr, 0);
  qa.send_cq = server_cq;
  qa.recv_cq = server_cq;
  if (config.server_srq_wr > 0) {
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = config.server_srq_wr;
    sa.attr.max_sge = 1;
    server_srq = v.create_srq(server_pd, &sa);
    if (server_srq == nullptr) {
      Fail("ibv_create_srq");
      return;
    }
    qa.srq = server_srq;
  }
  if (server_pd == nullptr || server_cq == nullptr || v.create_qp(server, server_pd, &qa) != 0) {
    Fail("server PD/CQ/QP");
    return;
  }
  rdma_conn_param ap{};
  ap.responder_resources = config.server_responder_resources;
  ap.initiator_depth = 4;
  ap.retry_count = 3;
  ap.rnr_retry_count = 7;
  if (v.accept(server, &ap) != 0) {
    Fail("rdma_accept");
    return;
  }
  if (NextCmEvent(client_ch, nullptr, nullptr) != RDMA_CM_EVENT_ESTABLISHED ||
      NextCmEvent(server_ch, nullptr, nullptr) != RDMA_CM_EVENT_ESTABLISHED) {
    error_ = "not ESTABLISHED";
    return;
  }
  ok_ = true;
}

Pair::~Pair() {
  const internal::VerbsApi& v = Api();
  for (rdma_cm_id* id : {client, server}) {
    if (id == nullptr) continue;
    if (id->qp != nullptr) v.destroy_qp(id);
    v.destroy_id(id);
  }
  if (listener != nullptr) v.destroy_id(listener);
  if (server_srq != nullptr) v.destroy_srq(server_srq);
  if (client_cq != nullptr) v.destroy_cq(client_cq);
  if (server_cq != nullptr) v.destroy_cq(server_cq);
  if (client_pd != nullptr) v.dealloc_pd(client_pd);
  if (server_pd != nullptr) v.dealloc_pd(server_pd);
  if (client_ch != nullptr) v.destroy_event_channel(client_ch);
  if (server_ch != nullptr) v.destroy_event_channel(server_ch);
}

Buffer::Buffer(ibv_pd* pd, size_t size, int access) : data(size, 0) {
  mr = Api().reg_mr(pd, data.data(), size, access);
  EXPECT_NE(mr, nullptr) << "ibv_reg_mr: " << std::strerror(errno);
}

Buffer::~Buffer() {
  if (mr != nullptr) Api().dereg_mr(mr);
}

int PostRecv(ibv_qp* qp, uint64_t wr_id, const Buffer& buf, size_t off, uint32_t len) {
  ibv_sge sge{buf.addr() + off, len, buf.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

int PostSend(ibv_qp* qp, ibv_wr_opcode op, uint64_t wr_id, const Buffer& buf, size_t off,
             uint32_t len, uint64_t remote_addr, uint32_t rkey) {
  ibv_sge sge{buf.addr() + off, len, buf.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

ibv_qp_state StateOf(ibv_qp* qp) {
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  EXPECT_EQ(Api().query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
  return a.qp_state;
}

}  // namespace conformance
}  // namespace rdmarpc
