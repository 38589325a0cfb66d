// cm_own_qp_test.cc: rdma_cm with QPs the application creates itself, as MPI
// libraries, UCX and NCCL connect: ibv_create_qp on a PD of the id's device,
// INIT / RTR / RTS with rdma_init_qp_attr + ibv_modify_qp, the QP number in
// rdma_conn_param.qp_num, CONNECT_RESPONSE and rdma_establish on the active
// side. Also shared receive queues with rdma_cm on both ends.
#include <arpa/inet.h>
#include <errno.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// One end's verbs objects, made by the application (not by rdma_create_qp).
struct OwnEnd {
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_srq* srq = nullptr;
  ibv_qp* qp = nullptr;

  void Make(ibv_context* ctx, bool with_srq) {
    pd = alloc_pd(ctx);
    ASSERT_NE(pd, nullptr);
    cq = create_cq(ctx, 64, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    if (with_srq) {
      ibv_srq_init_attr sa{};
      sa.attr.max_wr = 8;
      sa.attr.max_sge = 1;
      srq = create_srq(pd, &sa);
      ASSERT_NE(srq, nullptr);
    }
    ibv_qp_init_attr qa{};
    qa.qp_type = IBV_QPT_RC;
    qa.send_cq = cq;
    qa.recv_cq = cq;
    qa.srq = srq;
    qa.cap.max_send_wr = 8;
    qa.cap.max_recv_wr = 8;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qp = softrdma::create_qp(pd, &qa);  // ibv_create_qp
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
  }
  ~OwnEnd() {
    if (qp != nullptr) softrdma::destroy_qp(qp);
    if (srq != nullptr) destroy_srq(srq);
    if (cq != nullptr) destroy_cq(cq);
    if (pd != nullptr) dealloc_pd(pd);
  }
};

// Moves `qp` to `state` with what rdma_init_qp_attr returns for `id`.
int MoveTo(rdma_cm_id* id, ibv_qp* qp, ibv_qp_state state, ibv_qp_attr* out = nullptr) {
  ibv_qp_attr a{};
  a.qp_state = state;
  int mask = 0;
  if (init_qp_attr(id, &a, &mask) != 0) return -errno;
  if (out != nullptr) *out = a;
  return softrdma::modify_qp(qp, &a, mask);
}

int PostSrqRecv(ibv_srq* srq, uint64_t wr_id, const Buffer& buf, size_t off, uint32_t len) {
  ibv_sge sge{buf.addr() + off, len, buf.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_srq_recv(srq, &wr, &bad);
}

// A listener on 127.0.0.1 and a client id with its route resolved.
struct CmSetup {
  rdma_event_channel* sch = create_event_channel();
  rdma_event_channel* cch = create_event_channel();
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* client = nullptr;
  rdma_cm_id* server = nullptr;

  void Start() {
    SetNonBlocking(sch->fd);
    SetNonBlocking(cch->fd);
    listener = ListenOnLoopback(sch, 8);
    ASSERT_NE(listener, nullptr);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = get_src_port(listener);
    ASSERT_EQ(create_id(cch, &client, nullptr, RDMA_PS_TCP), 0);
    ASSERT_EQ(resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000), 0);
    ASSERT_EQ(ExpectEvent(cch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
    ASSERT_EQ(resolve_route(client, 2000), 0);
    ASSERT_EQ(ExpectEvent(cch, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
  }
  // Waits for the CONNECT_REQUEST; returns its conn params.
  rdma_conn_param TakeRequest() {
    rdma_conn_param p{};
    rdma_cm_event* e = NextEvent(sch);
    if (e == nullptr || e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      ADD_FAILURE() << "no CONNECT_REQUEST";
      if (e != nullptr) ack_cm_event(e);
      return p;
    }
    server = e->id;
    p = e->param.conn;
    ack_cm_event(e);
    return p;
  }
  ~CmSetup() {
    if (client != nullptr) {
      disconnect(client);
      destroy_id(client);
    }
    if (server != nullptr) {
      disconnect(server);
      destroy_id(server);
    }
    if (listener != nullptr) destroy_id(listener);
    destroy_event_channel(cch);
    destroy_event_channel(sch);
  }
};

TEST(CmOwnQp, BothSidesConnectWithInitQpAttrAndMoveData) {
  CmSetup cm;
  ASSERT_NO_FATAL_FAILURE(cm.Start());
  OwnEnd c;
  ASSERT_NO_FATAL_FAILURE(c.Make(cm.client->verbs, /*with_srq=*/false));

  // Before rdma_connect the CM knows no peer: INIT only, with no remote rights.
  ibv_qp_attr a{};
  ASSERT_EQ(MoveTo(cm.client, c.qp, IBV_QPS_INIT, &a), 0);
  EXPECT_EQ(a.qp_access_flags, 0);
  EXPECT_EQ(a.port_num, 1);
  EXPECT_EQ(c.qp->state, IBV_QPS_INIT);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  int mask = 0;
  EXPECT_EQ(init_qp_attr(cm.client, &a, &mask), -1);
  EXPECT_EQ(errno, EINVAL);

  rdma_conn_param cp{};
  cp.qp_num = c.qp->qp_num;
  cp.responder_resources = 2;
  cp.initiator_depth = 3;
  cp.retry_count = 5;
  cp.rnr_retry_count = 6;
  ASSERT_EQ(softrdma::connect(cm.client, &cp), 0);
  // Connecting, but no CONNECT_RESPONSE yet: still INIT only.
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(init_qp_attr(cm.client, &a, &mask), -1);
  EXPECT_EQ(errno, EINVAL);

  rdma_conn_param req = cm.TakeRequest();
  ASSERT_NE(cm.server, nullptr);
  EXPECT_EQ(req.qp_num, c.qp->qp_num);
  EXPECT_EQ(cm.server->qp, nullptr);
  OwnEnd s;
  ASSERT_NO_FATAL_FAILURE(s.Make(cm.server->verbs, /*with_srq=*/true));
  ASSERT_EQ(MoveTo(cm.server, s.qp, IBV_QPS_INIT, &a), 0);
  EXPECT_EQ(a.qp_access_flags,
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  ASSERT_EQ(MoveTo(cm.server, s.qp, IBV_QPS_RTR, &a), 0);
  EXPECT_EQ(a.dest_qp_num, c.qp->qp_num);
  EXPECT_EQ(a.max_dest_rd_atomic, 3);  // the client's initiator depth
  EXPECT_EQ(a.path_mtu, IBV_MTU_4096);
  ASSERT_EQ(MoveTo(cm.server, s.qp, IBV_QPS_RTS, &a), 0);
  EXPECT_EQ(a.max_rd_atomic, 2);  // the client's responder resources
  EXPECT_EQ(a.retry_cnt, 5);      // the connector's
  EXPECT_EQ(a.rnr_retry, 6);      // what the client asked the server to use
  EXPECT_EQ(s.qp->state, IBV_QPS_RTS);

  Buffer sbuf(s.pd, 4096, kAll);
  ASSERT_EQ(PostSrqRecv(s.srq, 100, sbuf, 0, 64), 0);
  rdma_conn_param ap{};
  ap.qp_num = s.qp->qp_num;
  ap.responder_resources = 2;
  ap.initiator_depth = 2;
  ap.rnr_retry_count = 7;
  ASSERT_EQ(softrdma::accept(cm.server, &ap), 0);

  // The active side gets CONNECT_RESPONSE (no QP of rdma_cm's), not ESTABLISHED.
  rdma_cm_event* e = NextEvent(cm.cch);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->event, RDMA_CM_EVENT_CONNECT_RESPONSE);
  EXPECT_EQ(e->status, 0);
  EXPECT_EQ(e->param.conn.qp_num, s.qp->qp_num);
  ack_cm_event(e);
  EXPECT_EQ(c.qp->state, IBV_QPS_INIT);
  // RTS before RTR is refused by the QP, as on any device.
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(init_qp_attr(cm.client, &a, &mask), 0);
  EXPECT_EQ(softrdma::modify_qp(c.qp, &a, mask), EINVAL);
  ASSERT_EQ(MoveTo(cm.client, c.qp, IBV_QPS_INIT, &a), 0);
  EXPECT_EQ(a.qp_access_flags, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                   IBV_ACCESS_REMOTE_ATOMIC);
  ASSERT_EQ(MoveTo(cm.client, c.qp, IBV_QPS_RTR, &a), 0);
  EXPECT_EQ(a.dest_qp_num, s.qp->qp_num);
  EXPECT_EQ(a.max_dest_rd_atomic, 2);  // the server's initiator depth
  ASSERT_EQ(MoveTo(cm.client, c.qp, IBV_QPS_RTS, &a), 0);
  EXPECT_EQ(a.max_rd_atomic, 2);  // the server's responder resources
  EXPECT_EQ(a.retry_cnt, 5);
  EXPECT_EQ(a.rnr_retry, 7);
  ASSERT_EQ(establish(cm.client), 0);
  EXPECT_EQ(establish(cm.client), -1);  // once
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ExpectEvent(cm.sch, RDMA_CM_EVENT_ESTABLISHED), 0);
  EXPECT_EQ(NextEvent(cm.cch, 200), nullptr);  // nothing more on the active side

  // SEND client -> server (into the SRQ), SEND server -> client, WRITE and READ.
  Buffer cbuf(c.pd, 4096, kAll);
  std::memcpy(cbuf.data.data(), "own-qp-send", 11);
  ASSERT_EQ(PostRecv(c.qp, 200, cbuf, 1024, 64), 0);
  ASSERT_EQ(PostSend(c.qp, IBV_WR_SEND, 1, cbuf, 0, 11), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(s.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 100u);
  EXPECT_EQ(wc.byte_len, 11u);
  EXPECT_EQ(wc.qp_num, s.qp->qp_num);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(sbuf.data.data()), 11), "own-qp-send");
  ASSERT_TRUE(PollOne(c.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 1u);

  std::memcpy(&sbuf.data[512], "reply", 5);
  ASSERT_EQ(PostSend(s.qp, IBV_WR_SEND, 2, sbuf, 512, 5), 0);
  ASSERT_TRUE(PollOne(c.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 200u);
  EXPECT_EQ(wc.byte_len, 5u);
  EXPECT_EQ(std::memcmp(&cbuf.data[1024], "reply", 5), 0);
  ASSERT_TRUE(PollOne(s.cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);

  std::memcpy(&cbuf.data[2048], "written", 7);
  ASSERT_EQ(PostSend(c.qp, IBV_WR_RDMA_WRITE, 3, cbuf, 2048, 7, 0, sbuf.addr() + 2048,
                     sbuf.mr->rkey),
            0);
  ASSERT_TRUE(PollOne(c.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(&sbuf.data[2048], "written", 7), 0);
  std::memcpy(&sbuf.data[3072], "read-me", 7);
  ASSERT_EQ(PostSend(c.qp, IBV_WR_RDMA_READ, 4, cbuf, 3072, 7, 0, sbuf.addr() + 3072,
                     sbuf.mr->rkey),
            0);
  ASSERT_TRUE(PollOne(c.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(std::memcmp(&cbuf.data[3072], "read-me", 7), 0);

  // Loopback takes the same-host link unless SOFTRDMA_SHM=0 (the .tcp run).
  const char* env = std::getenv("SOFTRDMA_SHM");
  const bool shm = env == nullptr || std::string(env) != "0";
  EXPECT_EQ(QpUsesShm(c.qp), shm);
  EXPECT_EQ(QpUsesShm(s.qp), shm);

  // rdma_disconnect: the peer gets DISCONNECTED and its QP flushes.
  ASSERT_EQ(disconnect(cm.client), 0);
  EXPECT_EQ(ExpectEvent(cm.sch, RDMA_CM_EVENT_DISCONNECTED), 0);
  EXPECT_EQ(ExpectEvent(cm.cch, RDMA_CM_EVENT_DISCONNECTED), 0);
  EXPECT_EQ(s.qp->state, IBV_QPS_ERR);
  EXPECT_EQ(c.qp->state, IBV_QPS_ERR);
}

TEST(CmOwnQp, TransitionsMissingRequiredAttributesAreEinval) {
  CmSetup cm;
  ASSERT_NO_FATAL_FAILURE(cm.Start());
  OwnEnd c;
  ASSERT_NO_FATAL_FAILURE(c.Make(cm.client->verbs, false));
  ibv_qp_attr a{};
  // RESET -> INIT needs PKEY_INDEX, PORT and ACCESS_FLAGS.
  a.qp_state = IBV_QPS_INIT;
  EXPECT_EQ(softrdma::modify_qp(c.qp, &a, IBV_QP_STATE), EINVAL);
  a.port_num = 1;
  EXPECT_EQ(softrdma::modify_qp(c.qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX), EINVAL);
  // An attribute the transition does not take (IBV_QP_TIMEOUT) is refused too.
  EXPECT_EQ(softrdma::modify_qp(c.qp, &a,
                                IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX |
                                    IBV_QP_ACCESS_FLAGS | IBV_QP_TIMEOUT),
            EINVAL);
  a.port_num = 2;  // there is one port
  EXPECT_EQ(softrdma::modify_qp(c.qp, &a,
                                IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS),
            EINVAL);
  EXPECT_EQ(c.qp->state, IBV_QPS_RESET);
  // RESET -> RTR skips INIT.
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  EXPECT_EQ(softrdma::modify_qp(c.qp, &a, IBV_QP_STATE), EINVAL);
  ASSERT_EQ(MoveTo(cm.client, c.qp, IBV_QPS_INIT), 0);

  rdma_conn_param cp{};
  cp.qp_num = c.qp->qp_num;
  ASSERT_EQ(softrdma::connect(cm.client, &cp), 0);
  cm.TakeRequest();
  ASSERT_NE(cm.server, nullptr);
  OwnEnd s;
  ASSERT_NO_FATAL_FAILURE(s.Make(cm.server->verbs, false));
  // rdma_init_qp_attr knows only INIT, RTR and RTS.
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_SQD;
  int mask = 0;
  EXPECT_EQ(init_qp_attr(cm.server, &a, &mask), -1);
  EXPECT_EQ(errno, EINVAL);
  ASSERT_EQ(MoveTo(cm.server, s.qp, IBV_QPS_INIT), 0);
  // INIT -> RTR without the destination QP number.
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(init_qp_attr(cm.server, &a, &mask), 0);
  EXPECT_EQ(softrdma::modify_qp(s.qp, &a, mask & ~IBV_QP_DEST_QPN), EINVAL);
  EXPECT_EQ(softrdma::modify_qp(s.qp, &a, mask & ~IBV_QP_AV), EINVAL);
  ASSERT_EQ(softrdma::modify_qp(s.qp, &a, mask), 0);
  // RTR -> RTS without the transport timeout.
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(init_qp_attr(cm.server, &a, &mask), 0);
  EXPECT_EQ(softrdma::modify_qp(s.qp, &a, mask & ~IBV_QP_TIMEOUT), EINVAL);
  EXPECT_EQ(softrdma::modify_qp(s.qp, &a, mask & ~IBV_QP_MAX_QP_RD_ATOMIC), EINVAL);
  EXPECT_EQ(s.qp->state, IBV_QPS_RTR);
  ASSERT_EQ(softrdma::modify_qp(s.qp, &a, mask), 0);
  // rdma_establish belongs to the active side after CONNECT_RESPONSE.
  EXPECT_EQ(establish(cm.client), -1);
  EXPECT_EQ(errno, EINVAL);
  rdma_conn_param ap{};
  ap.qp_num = s.qp->qp_num;
  ASSERT_EQ(softrdma::accept(cm.server, &ap), 0);
  EXPECT_EQ(ExpectEvent(cm.cch, RDMA_CM_EVENT_CONNECT_RESPONSE), 0);
  EXPECT_EQ(establish(cm.server), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST(CmOwnQp, QpNumberOfAQpInUseIsEinval) {
  CmSetup cm;
  ASSERT_NO_FATAL_FAILURE(cm.Start());
  OwnEnd c;
  ASSERT_NO_FATAL_FAILURE(c.Make(cm.client->verbs, false));
  rdma_conn_param cp{};
  cp.qp_num = c.qp->qp_num;
  ASSERT_EQ(softrdma::connect(cm.client, &cp), 0);
  // A second id naming the same QP.
  rdma_cm_id* other = nullptr;
  ASSERT_EQ(create_id(cm.cch, &other, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = get_src_port(cm.listener);
  ASSERT_EQ(resolve_addr(other, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000), 0);
  ASSERT_EQ(ExpectEvent(cm.cch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
  ASSERT_EQ(resolve_route(other, 2000), 0);
  ASSERT_EQ(ExpectEvent(cm.cch, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
  EXPECT_EQ(softrdma::connect(other, &cp), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(destroy_id(other), 0);
}

// rdma_create_qp with an SRQ on both ends (each made on its id's PD with
// ibv_create_srq): SENDs both ways consume the shared receives in order.
TEST(CmOwnQp, RdmaCreateQpWithSrqOnBothEnds) {
  CmSetup cm;
  ASSERT_NO_FATAL_FAILURE(cm.Start());
  auto make = [](rdma_cm_id* id, ibv_pd** pd, ibv_cq** cq, ibv_srq** srq) {
    *pd = alloc_pd(id->verbs);
    *cq = create_cq(id->verbs, 64, nullptr, nullptr, 0);
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 4;
    sa.attr.max_sge = 1;
    *srq = create_srq(*pd, &sa);
    ibv_qp_init_attr qa{};
    qa.qp_type = IBV_QPT_RC;
    qa.send_cq = *cq;
    qa.recv_cq = *cq;
    qa.srq = *srq;
    qa.cap.max_send_wr = 4;
    qa.cap.max_send_sge = 1;
    return create_qp(id, *pd, &qa);
  };
  ibv_pd *cpd, *spd;
  ibv_cq *ccq, *scq;
  ibv_srq *csrq, *ssrq;
  ASSERT_EQ(make(cm.client, &cpd, &ccq, &csrq), 0);
  EXPECT_EQ(cm.client->qp->srq, csrq);
  ASSERT_EQ(softrdma::connect(cm.client, nullptr), 0);
  cm.TakeRequest();
  ASSERT_NE(cm.server, nullptr);
  ASSERT_EQ(make(cm.server, &spd, &scq, &ssrq), 0);
  {
    Buffer cbuf(cpd, 256, kAll);
    Buffer sbuf(spd, 256, kAll);
    ASSERT_EQ(PostSrqRecv(ssrq, 10, sbuf, 0, 32), 0);
    ASSERT_EQ(PostSrqRecv(ssrq, 11, sbuf, 32, 32), 0);
    ASSERT_EQ(PostSrqRecv(csrq, 20, cbuf, 128, 32), 0);
    ASSERT_EQ(softrdma::accept(cm.server, nullptr), 0);
    EXPECT_EQ(ExpectEvent(cm.cch, RDMA_CM_EVENT_ESTABLISHED), 0);
    EXPECT_EQ(ExpectEvent(cm.sch, RDMA_CM_EVENT_ESTABLISHED), 0);
    std::memcpy(cbuf.data.data(), "first second", 12);
    ASSERT_EQ(PostSend(cm.client->qp, IBV_WR_SEND, 1, cbuf, 0, 5), 0);
    ASSERT_EQ(PostSend(cm.client->qp, IBV_WR_SEND, 2, cbuf, 6, 6), 0);
    std::memcpy(&sbuf.data[200], "back", 4);
    ASSERT_EQ(PostSend(cm.server->qp, IBV_WR_SEND, 3, sbuf, 200, 4), 0);
    ibv_wc wc;
    int srv_recvs = 0;
    for (int i = 0; i < 3; ++i) {  // two receives and one send completion
      ASSERT_TRUE(PollOne(scq, &wc));
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      if (wc.opcode == IBV_WC_RECV) {
        EXPECT_EQ(wc.wr_id, srv_recvs == 0 ? 10u : 11u);
        EXPECT_EQ(wc.byte_len, srv_recvs == 0 ? 5u : 6u);
        ++srv_recvs;
      } else {
        EXPECT_EQ(wc.wr_id, 3u);
      }
    }
    EXPECT_EQ(srv_recvs, 2);
    EXPECT_EQ(std::memcmp(sbuf.data.data(), "first", 5), 0);
    EXPECT_EQ(std::memcmp(&sbuf.data[32], "second", 6), 0);
    int cli_recvs = 0;
    for (int i = 0; i < 3; ++i) {  // two send completions and one receive
      ASSERT_TRUE(PollOne(ccq, &wc));
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      if (wc.opcode == IBV_WC_RECV) {
        EXPECT_EQ(wc.wr_id, 20u);
        EXPECT_EQ(wc.byte_len, 4u);
        ++cli_recvs;
      }
    }
    EXPECT_EQ(cli_recvs, 1);
    EXPECT_EQ(std::memcmp(&cbuf.data[128], "back", 4), 0);
    destroy_qp(cm.client);
    destroy_qp(cm.server);
  }
  destroy_srq(csrq);
  destroy_srq(ssrq);
  destroy_cq(ccq);
  destroy_cq(scq);
  dealloc_pd(cpd);
  dealloc_pd(spd);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
