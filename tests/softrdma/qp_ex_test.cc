// qp_ex_test.cc: extended QPs (create_qp_ex, rdma_create_qp_ex) and the
// ibv_wr_* post-send API: data and completions as ibv_post_send gives them,
// and every misuse failing wr_complete with nothing posted.
#include <arpa/inet.h>

#include <cerrno>
#include <cstring>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
constexpr uint64_t kOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                          IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                          IBV_QP_EX_WITH_RDMA_READ;

void Fill(Buffer& b, uint8_t seed) {
  for (size_t i = 0; i < b.data.size(); ++i) b.data[i] = static_cast<uint8_t>(seed + i * 7);
}

// create_qp_ex as the ibv_create_qp_ex inline reaches it: through the context.
ibv_qp* CreateThroughContext(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  verbs_context* v = verbs_get_ctx_op(ctx, create_qp_ex);
  if (v == nullptr) return nullptr;
  return v->create_qp_ex(ctx, attr);
}

class QpExCreateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ibv_device** list = get_device_list(nullptr);
    ctx_ = open_device(list[0]);
    other_ctx_ = open_device(list[0]);
    free_device_list(list);
    ASSERT_NE(ctx_, nullptr);
    ASSERT_NE(other_ctx_, nullptr);
    pd_ = alloc_pd(ctx_);
    other_pd_ = alloc_pd(other_ctx_);
    cq_ = create_cq(ctx_, 16, nullptr, nullptr, 0);
    ASSERT_NE(pd_, nullptr);
    ASSERT_NE(other_pd_, nullptr);
    ASSERT_NE(cq_, nullptr);
  }
  void TearDown() override {
    EXPECT_EQ(destroy_cq(cq_), 0);
    EXPECT_EQ(dealloc_pd(pd_), 0);
    EXPECT_EQ(dealloc_pd(other_pd_), 0);
    EXPECT_EQ(close_device(ctx_), 0);
    EXPECT_EQ(close_device(other_ctx_), 0);
  }
  ibv_qp_init_attr_ex Attr(uint32_t comp_mask, uint64_t send_ops) {
    ibv_qp_init_attr_ex a{};
    a.send_cq = cq_;
    a.recv_cq = cq_;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 8;
    a.cap.max_recv_wr = 8;
    a.cap.max_send_sge = 2;
    a.cap.max_recv_sge = 2;
    a.cap.max_inline_data = 32;
    a.comp_mask = comp_mask;
    a.pd = pd_;
    a.send_ops_flags = send_ops;
    return a;
  }
  // Expects creation to fail with `err`.
  void ExpectFails(ibv_qp_init_attr_ex a, int err) {
    errno = 0;
    EXPECT_EQ(CreateThroughContext(ctx_, &a), nullptr);
    EXPECT_EQ(errno, err);
  }
  ibv_context* ctx_ = nullptr;
  ibv_context* other_ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_pd* other_pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
};

TEST_F(QpExCreateTest, SendOpsFlagsGiveAQpExWhoseBaseIsTheQp) {
  ibv_qp_init_attr_ex a = Attr(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, kOps);
  ibv_qp* qp = CreateThroughContext(ctx_, &a);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp->qp_type, IBV_QPT_RC);
  EXPECT_EQ(qp->pd, pd_);
  EXPECT_EQ(qp->context, ctx_);
  EXPECT_EQ(a.cap.max_send_wr, 8u);  // reported back: exactly what is enforced
  EXPECT_EQ(a.cap.max_inline_data, 32u);
  ibv_qp_ex* qpx = qp_to_qp_ex(qp);
  ASSERT_NE(qpx, nullptr);
  EXPECT_EQ(&qpx->qp_base, qp);
  EXPECT_NE(qpx->wr_start, nullptr);
  EXPECT_NE(qpx->wr_complete, nullptr);
  EXPECT_NE(qpx->wr_abort, nullptr);
  EXPECT_NE(qpx->wr_send, nullptr);
  EXPECT_NE(qpx->wr_set_sge, nullptr);
  // Ops softrdma lacks are set too (calling one fails wr_complete, never
  // jumps through NULL).
  EXPECT_NE(qpx->wr_bind_mw, nullptr);
  EXPECT_NE(qpx->wr_send_tso, nullptr);
  EXPECT_EQ(destroy_qp(qp), 0);
}

TEST_F(QpExCreateTest, WithoutSendOpsFlagsThereIsNoQpEx) {
  ibv_qp_init_attr_ex a = Attr(IBV_QP_INIT_ATTR_PD, 0);
  ibv_qp* qp = CreateThroughContext(ctx_, &a);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp_to_qp_ex(qp), nullptr);
  EXPECT_EQ(destroy_qp(qp), 0);
  // Nor for a QP of the plain create_qp.
  ibv_qp_init_attr plain{};
  plain.send_cq = cq_;
  plain.recv_cq = cq_;
  plain.qp_type = IBV_QPT_RC;
  plain.cap.max_send_wr = 1;
  plain.cap.max_recv_wr = 1;
  qp = create_qp(pd_, &plain);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp_to_qp_ex(qp), nullptr);
  EXPECT_EQ(destroy_qp(qp), 0);
}

TEST_F(QpExCreateTest, RefusesWhatItCannotDo) {
  const uint32_t kPdOps = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  ExpectFails(Attr(IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, kOps), EINVAL);  // no PD
  ibv_qp_init_attr_ex a = Attr(kPdOps, kOps);
  a.pd = other_pd_;
  ExpectFails(a, EINVAL);  // PD of another context
  ExpectFails(Attr(kPdOps | (1u << 20), kOps), EINVAL);  // unknown comp_mask bit
  ExpectFails(Attr(kPdOps | IBV_QP_INIT_ATTR_XRCD, kOps), EOPNOTSUPP);
  ExpectFails(Attr(kPdOps | IBV_QP_INIT_ATTR_MAX_TSO_HEADER, kOps), EOPNOTSUPP);
  a = Attr(kPdOps | IBV_QP_INIT_ATTR_CREATE_FLAGS, kOps);
  a.create_flags = IBV_QP_CREATE_SCATTER_FCS;
  ExpectFails(a, EOPNOTSUPP);
  ExpectFails(Attr(kPdOps, kOps | IBV_QP_EX_WITH_BIND_MW), EOPNOTSUPP);
  ExpectFails(Attr(kPdOps, kOps | IBV_QP_EX_WITH_TSO), EOPNOTSUPP);
  ExpectFails(Attr(kPdOps, IBV_QP_EX_WITH_SEND_WITH_INV), EOPNOTSUPP);
  a = Attr(kPdOps, kOps);
  a.qp_type = IBV_QPT_UD;
  ExpectFails(a, EOPNOTSUPP);
  // No flag at all in CREATE_FLAGS is fine.
  a = Attr(kPdOps | IBV_QP_INIT_ATTR_CREATE_FLAGS, kOps);
  a.create_flags = 0;
  ibv_qp* qp = CreateThroughContext(ctx_, &a);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(destroy_qp(qp), 0);
}

PairOptions ExOptions(uint64_t ops = kOps) {
  PairOptions opt;
  opt.max_send_wr = 4;
  opt.max_inline = 64;
  opt.client_send_ops_flags = ops;
  return opt;
}

TEST(QpExPost, OneSequencePostsSendWriteAndReadInOrder) {
  ConnectedPair p(ExOptions());
  ASSERT_TRUE(p.ok());
  ibv_qp_ex* qpx = qp_to_qp_ex(p.client->qp);
  ASSERT_NE(qpx, nullptr);
  Buffer srv(p.server_pd, 4096, kAll);
  Buffer cli(p.client_pd, 4096, kAll);
  Fill(srv, 5);
  Fill(cli, 11);
  const std::vector<uint8_t> srv_before = srv.data;
  ASSERT_EQ(PostRecv(p.server->qp, 100, srv, 0, 512), 0);

  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(qpx, htonl(0x01020304));
  ibv_wr_set_sge(qpx, cli.mr->lkey, cli.addr(), 300);
  qpx->wr_id = 2;
  qpx->wr_flags = 0;  // unsignalled: its slot is freed by the next CQE
  ibv_wr_rdma_write(qpx, srv.mr->rkey, srv.addr() + 1024);
  ibv_sge two[2] = {{cli.addr() + 2000, 100, cli.mr->lkey}, {cli.addr() + 3000, 28, cli.mr->lkey}};
  ibv_wr_set_sge_list(qpx, 2, two);
  qpx->wr_id = 3;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_read(qpx, srv.mr->rkey, srv.addr() + 3500);
  ibv_wr_set_sge(qpx, cli.mr->lkey, cli.addr() + 500, 200);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);

  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 100u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 300u);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(wc.imm_data, htonl(0x01020304));
  EXPECT_EQ(std::memcmp(srv.data.data(), cli.data.data(), 300), 0);

  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 3u);  // the unsignalled WRITE has no CQE
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wc.byte_len, 200u);
  // The WRITE gathered both SGEs, in order; the READ fetched the server's
  // bytes (written before the READ, which follows the WRITE on the QP).
  EXPECT_EQ(std::memcmp(srv.data.data() + 1024, cli.data.data() + 2000, 100), 0);
  EXPECT_EQ(std::memcmp(srv.data.data() + 1124, cli.data.data() + 3000, 28), 0);
  EXPECT_EQ(srv.data[1152], srv_before[1152]);
  EXPECT_EQ(std::memcmp(cli.data.data() + 500, srv_before.data() + 3500, 200), 0);
  EXPECT_TRUE(Drain(p.client_cq, 100).empty());
}

TEST(QpExPost, InlineDataIsCopiedWhenSet) {
  ConnectedPair p(ExOptions());
  ASSERT_TRUE(p.ok());
  ibv_qp_ex* qpx = qp_to_qp_ex(p.client->qp);
  ASSERT_NE(qpx, nullptr);
  Buffer srv(p.server_pd, 256, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 7, srv, 0, 256), 0);
  // Inline data needs no MR: plain memory, overwritten before wr_complete.
  char payload[48];
  std::memset(payload, 'a', sizeof(payload));
  const char part2[] = "-tail";
  ibv_data_buf list[2] = {{payload, 40}, {const_cast<char*>(part2), 5}};
  ibv_wr_start(qpx);
  qpx->wr_id = 8;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_inline_data_list(qpx, 2, list);
  std::memset(payload, 'z', sizeof(payload));
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 45u);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(srv.data.data()), 45),
            std::string(40, 'a') + "-tail");
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 8u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);

  // IBV_SEND_INLINE in wr_flags is ignored: this SGE's lkey is checked, and
  // a wrong one fails the WR as on a NIC.
  Buffer cli(p.client_pd, 64, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 9, srv, 0, 256), 0);
  ibv_wr_start(qpx);
  qpx->wr_id = 10;
  qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, cli.mr->lkey + 1, cli.addr(), 16);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 10u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
}

// Each misuse fails wr_complete with its errno and posts nothing, not even
// the valid WRs before it: the server's receive stays unconsumed and the
// client's CQ empty.
TEST(QpExPost, MisuseFailsCompleteAndPostsNothing) {
  ConnectedPair p(ExOptions(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ));
  ASSERT_TRUE(p.ok());
  ibv_qp_ex* qpx = qp_to_qp_ex(p.client->qp);
  ASSERT_NE(qpx, nullptr);
  Buffer srv(p.server_pd, 4096, kAll);
  Buffer cli(p.client_pd, 4096, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, srv, 0, 4096), 0);
  auto valid_send = [&] {
    qpx->wr_id = 50;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, cli.mr->lkey, cli.addr(), 8);
  };

  // No wr_start.
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
  // An op not in send_ops_flags.
  ibv_wr_start(qpx);
  valid_send();
  ibv_wr_rdma_write(qpx, srv.mr->rkey, srv.addr());
  ibv_wr_set_sge(qpx, cli.mr->lkey, cli.addr(), 8);
  EXPECT_EQ(ibv_wr_complete(qpx), EOPNOTSUPP);
  // An op softrdma lacks.
  ibv_wr_start(qpx);
  valid_send();
  ibv_wr_send_inv(qpx, 1234);
  EXPECT_EQ(ibv_wr_complete(qpx), EOPNOTSUPP);
  // Data with no WR to attach it to.
  ibv_wr_start(qpx);
  ibv_wr_set_sge(qpx, cli.mr->lkey, cli.addr(), 8);
  valid_send();
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
  // Inline data on a READ (it writes locally).
  ibv_wr_start(qpx);
  valid_send();
  ibv_wr_rdma_read(qpx, srv.mr->rkey, srv.addr());
  char bytes[8] = {};
  ibv_wr_set_inline_data(qpx, bytes, sizeof(bytes));
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
  // Inline data longer than max_inline_data (64).
  ibv_wr_start(qpx);
  valid_send();
  ibv_wr_send(qpx);
  ibv_wr_set_inline_data(qpx, cli.data.data(), 65);
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
  // More SGEs than max_send_sge (4).
  ibv_wr_start(qpx);
  valid_send();
  ibv_wr_send(qpx);
  ibv_sge five[5];
  for (int i = 0; i < 5; ++i) five[i] = {cli.addr() + 16 * i, 16, cli.mr->lkey};
  ibv_wr_set_sge_list(qpx, 5, five);
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
  // More WRs than the send queue holds (4).
  ibv_wr_start(qpx);
  for (int i = 0; i < 5; ++i) valid_send();
  EXPECT_EQ(ibv_wr_complete(qpx), ENOMEM);
  // wr_abort drops what was built; an empty sequence posts nothing.
  ibv_wr_start(qpx);
  valid_send();
  ibv_wr_abort(qpx);
  ibv_wr_start(qpx);
  EXPECT_EQ(ibv_wr_complete(qpx), 0);

  EXPECT_TRUE(Drain(p.client_cq, 200).empty());
  EXPECT_TRUE(Drain(p.server_cq, 0).empty());
  // The QP is unharmed: a valid sequence of the queue's full depth goes.
  ibv_wr_start(qpx);
  for (int i = 0; i < 4; ++i) valid_send();
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.byte_len, 8u);
}

TEST(QpExPost, RdmaCreateQpExWithoutPdUsesTheDefaultPd) {
  rdma_event_channel* ch = create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind_addr(id, reinterpret_cast<sockaddr*>(&a)), 0);
  ASSERT_NE(id->verbs, nullptr);
  ibv_qp_init_attr_ex x{};
  x.qp_type = IBV_QPT_RC;
  x.cap.max_send_wr = 2;
  x.cap.max_recv_wr = 2;
  x.cap.max_send_sge = 1;
  x.cap.max_recv_sge = 1;
  x.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  x.send_ops_flags = IBV_QP_EX_WITH_SEND;
  ASSERT_EQ(create_qp_ex(id, &x), 0);
  ASSERT_NE(id->qp, nullptr);
  EXPECT_NE(id->qp->pd, nullptr);
  EXPECT_EQ(id->qp->pd, id->pd);
  EXPECT_NE(id->send_cq, nullptr);  // made by the library, as librdmacm does
  EXPECT_EQ(id->qp->state, IBV_QPS_INIT);
  EXPECT_NE(qp_to_qp_ex(id->qp), nullptr);
  // A second QP on the same id is refused.
  EXPECT_EQ(create_qp_ex(id, &x), -1);
  EXPECT_EQ(errno, EINVAL);
  destroy_qp(id);
  EXPECT_EQ(destroy_id(id), 0);
  destroy_event_channel(ch);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
