#include "test_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "gtest/gtest.h"

namespace softrdma {
namespace testing {

void SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

rdma_cm_event* NextEvent(rdma_event_channel* ch, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    rdma_cm_event* e = nullptr;
    if (get_cm_event(ch, &e) == 0) return e;
    if (errno != EAGAIN) return nullptr;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return nullptr;
    pollfd p{ch->fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
}

int ExpectEvent(rdma_event_channel* ch, rdma_cm_event_type type, int timeout_ms) {
  rdma_cm_event* e = NextEvent(ch, timeout_ms);
  EXPECT_NE(e, nullptr) << "no event, wanted " << static_cast<int>(type);
  if (e == nullptr) return -9999;
  EXPECT_EQ(e->event, type) << "got " << static_cast<int>(e->event) << " wanted "
                            << static_cast<int>(type);
  int status = e->event == type ? e->status : -9999;
  ack_cm_event(e);
  return status;
}

bool PollOne(ibv_cq* cq, ibv_wc* wc, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int n = ibv_poll_cq(cq, 1, wc);  // the verbs.h inline, through ops
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
    int n = ibv_poll_cq(cq, 16, wc);
    for (int i = 0; i < n; ++i) out.push_back(wc[i]);
    if (n <= 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return out;
}

bool WaitAsyncEvent(ibv_context* ctx, ibv_event_type type, ibv_async_event* out,
                    int timeout_ms) {
  SetNonBlocking(ctx->async_fd);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    ibv_async_event ev{};
    if (get_async_event(ctx, &ev) == 0) {
      if (ev.event_type == type) {
        *out = ev;
        return true;
      }
      ack_async_event(&ev);
      continue;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{ctx->async_fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
}

ibv_qp_init_attr RcAttr(ibv_cq* cq, uint32_t max_recv) {
  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.cap = {4, max_recv, 1, 1, 0};
  return qa;
}

void SoftDeviceTest::SetUp() {
  int n = 0;
  ibv_device** list = get_device_list(&n);
  ASSERT_EQ(n, 1);
  ctx_ = open_device(list[0]);
  free_device_list(list);
  ASSERT_NE(ctx_, nullptr);
}

void SoftDeviceTest::TearDown() {
  if (ctx_ != nullptr) {
    EXPECT_EQ(close_device(ctx_), 0);
  }
}

int CountOpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;  // the DIR's own fd
}

rdma_cm_id* ListenOnLoopback(rdma_event_channel* ch, int backlog, void* context) {
  rdma_cm_id* listener = nullptr;
  if (create_id(ch, &listener, context, RDMA_PS_TCP) != 0) return nullptr;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind_addr(listener, reinterpret_cast<sockaddr*>(&addr)) != 0 ||
      softrdma::listen(listener, backlog) != 0) {
    destroy_id(listener);
    return nullptr;
  }
  return listener;
}

ConnectedPair::ConnectedPair(const PairOptions& opt) {
  server_ch = create_event_channel();
  client_ch = create_event_channel();
  SetNonBlocking(server_ch->fd);
  SetNonBlocking(client_ch->fd);
  listener = ListenOnLoopback(server_ch, 8, this);
  if (listener == nullptr) return;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = get_src_port(listener);

  if (create_id(client_ch, &client, nullptr, RDMA_PS_TCP) != 0) return;
  if (resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000) != 0) return;
  if (ExpectEvent(client_ch, RDMA_CM_EVENT_ADDR_RESOLVED) != 0) return;
  if (resolve_route(client, 2000) != 0) return;
  if (ExpectEvent(client_ch, RDMA_CM_EVENT_ROUTE_RESOLVED) != 0) return;

  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = opt.max_send_wr;
  qa.cap.max_recv_wr = opt.max_recv_wr;
  qa.cap.max_send_sge = opt.max_sge;
  qa.cap.max_recv_sge = opt.max_sge;
  qa.cap.max_inline_data = opt.max_inline;

  client_pd = alloc_pd(client->verbs);
  client_comp = create_comp_channel(client->verbs);
  client_cq = create_cq(client->verbs, opt.cqe, nullptr, client_comp, 0);
  qa.send_cq = client_cq;
  qa.recv_cq = client_cq;
  if (opt.client_send_ops_flags != 0) {
    // An extended QP, made as rdma_create_qp_ex makes it.
    ibv_qp_init_attr_ex qx{};
    std::memcpy(&qx, &qa, sizeof(qa));
    qx.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qx.pd = client_pd;
    qx.send_ops_flags = opt.client_send_ops_flags;
    if (create_qp_ex(client, &qx) != 0) return;
  } else if (create_qp(client, client_pd, &qa) != 0) {
    return;
  }

  rdma_conn_param cp{};
  cp.private_data = opt.client_private_data.data();
  cp.private_data_len = static_cast<uint8_t>(opt.client_private_data.size());
  cp.responder_resources = 4;
  cp.initiator_depth = 4;
  cp.retry_count = 7;
  cp.rnr_retry_count = opt.rnr_retry;
  if (softrdma::connect(client, &cp) != 0) return;

  rdma_cm_event* e = NextEvent(server_ch);
  if (e == nullptr || e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    ADD_FAILURE() << "no CONNECT_REQUEST";
    if (e) ack_cm_event(e);
    return;
  }
  server = e->id;
  EXPECT_EQ(e->listen_id, listener);
  EXPECT_EQ(server->context, this);  // inherited from the listener
  EXPECT_NE(server->verbs, nullptr);
  private_data_at_server.assign(static_cast<const char*>(e->param.conn.private_data),
                                e->param.conn.private_data_len);
  ack_cm_event(e);

  server_pd = opt.shared_server_pd != nullptr ? opt.shared_server_pd : alloc_pd(server->verbs);
  owns_server_pd_ = opt.shared_server_pd == nullptr;
  owns_server_cq_ = opt.shared_server_cq == nullptr;
  if (owns_server_cq_) {
    server_comp = create_comp_channel(server->verbs);
    server_cq = create_cq(server->verbs, opt.cqe, nullptr, server_comp, 0);
  } else {
    server_cq = opt.shared_server_cq;
  }
  qa.send_cq = server_cq;
  qa.recv_cq = server_cq;
  if (opt.server_srq_wr > 0) {
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = opt.server_srq_wr;
    sa.attr.max_sge = opt.max_sge;
    server_srq = create_srq(server_pd, &sa);
    qa.srq = server_srq;
  }
  if (create_qp(server, server_pd, &qa) != 0) return;
  rdma_conn_param ap{};
  ap.private_data = opt.server_private_data.data();
  ap.private_data_len = static_cast<uint8_t>(opt.server_private_data.size());
  ap.responder_resources = opt.server_responder_resources;
  ap.initiator_depth = 4;
  ap.rnr_retry_count = opt.rnr_retry;
  if (softrdma::accept(server, &ap) != 0) return;
  if (opt.after_accept) opt.after_accept(server, server_pd);
  if (opt.before_client_established) opt.before_client_established(this);
  if (!opt.take_established) {
    ok_ = true;
    return;
  }

  e = NextEvent(client_ch);
  if (e == nullptr || e->event != RDMA_CM_EVENT_ESTABLISHED) {
    ADD_FAILURE() << "client not ESTABLISHED";
    if (e) ack_cm_event(e);
    return;
  }
  private_data_at_client.assign(static_cast<const char*>(e->param.conn.private_data),
                                e->param.conn.private_data_len);
  ack_cm_event(e);
  if (ExpectEvent(server_ch, RDMA_CM_EVENT_ESTABLISHED) != 0) return;
  ok_ = true;
}

ConnectedPair::~ConnectedPair() {
  if (client != nullptr) {
    if (client->qp != nullptr) destroy_qp(client);
    destroy_id(client);
  }
  if (server != nullptr) {
    if (server->qp != nullptr) destroy_qp(server);
    destroy_id(server);
  }
  if (listener != nullptr) destroy_id(listener);
  if (server_srq) destroy_srq(server_srq);
  if (client_cq) destroy_cq(client_cq);
  if (server_cq && owns_server_cq_) destroy_cq(server_cq);
  if (client_comp) destroy_comp_channel(client_comp);
  if (server_comp) destroy_comp_channel(server_comp);
  if (client_pd) dealloc_pd(client_pd);
  if (server_pd && owns_server_pd_) dealloc_pd(server_pd);
  destroy_event_channel(client_ch);
  destroy_event_channel(server_ch);
}

Buffer::Buffer(ibv_pd* pd, size_t size, int access) : data(size, 0) {
  mr = reg_mr(pd, data.data(), size, access);
}

Buffer::~Buffer() {
  if (mr != nullptr) dereg_mr(mr);
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
             uint32_t len, uint32_t imm, uint64_t remote_addr, uint32_t rkey, int extra_flags) {
  ibv_sge sge{buf.addr() + off, len, buf.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED | extra_flags;
  wr.imm_data = imm;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

}  // namespace testing
}  // namespace softrdma
