// domain_test.cc: thread domains, parent domains and extended CQs, through the
// verbs.h inlines a program calls (ibv_alloc_td, ibv_alloc_parent_domain,
// ibv_create_cq_ex, ibv_start_poll, ...), as on mlx5.
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>

#include <cstring>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace {

using testing::Buffer;
using testing::ConnectedPair;
using testing::PairOptions;
using testing::PollOne;

class DomainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    ibv_device** list = get_device_list(&n);
    ASSERT_EQ(n, 1);
    ctx_ = open_device(list[0]);
    free_device_list(list);
    ASSERT_NE(ctx_, nullptr);
  }
  void TearDown() override {
    if (ctx_ != nullptr) {
      EXPECT_EQ(close_device(ctx_), 0);
    }
  }
  ibv_context* ctx_ = nullptr;
};

ibv_qp_init_attr RcAttr(ibv_cq* cq) {
  ibv_qp_init_attr a;
  std::memset(&a, 0, sizeof(a));
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 4;
  a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  return a;
}

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
  ibv_qp_init_attr qa = RcAttr(cq);
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
  ca.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &ca), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
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

// The server end lives in a thread domain: its QP on a parent domain, its CQ
// made by ibv_create_cq_ex single-threaded on that parent domain and read with
// the extended poll functions; its buffer is registered on the plain PD the
// parent domain stands for, and the client writes into it by rkey.
TEST(ThreadDomain, AQpAndCqInAThreadDomainCarryWritesAndSends) {
  ConnectedPair first;  // its server PD is of the context rdma_cm ids use
  ASSERT_TRUE(first.ok());
  ibv_context* ctx = first.server_pd->context;
  ibv_td_init_attr td_attr = {};
  ibv_td* td = ibv_alloc_td(ctx, &td_attr);
  ASSERT_NE(td, nullptr);
  ibv_pd* pd = alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  ibv_parent_domain_init_attr pa = {};
  pa.pd = pd;
  pa.td = td;
  ibv_pd* parent = ibv_alloc_parent_domain(ctx, &pa);
  ASSERT_NE(parent, nullptr);
  ibv_cq_init_attr_ex ca = {};
  ca.cqe = 64;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD | IBV_CQ_INIT_ATTR_MASK_FLAGS;
  ca.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  ca.parent_domain = parent;
  ibv_cq_ex* cqx = ibv_create_cq_ex(ctx, &ca);
  ASSERT_NE(cqx, nullptr);
  EXPECT_EQ(cqx->read_src_qp, nullptr);  // not asked for
  ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  {
    PairOptions opt;
    opt.shared_server_pd = parent;
    opt.shared_server_cq = cq;
    ConnectedPair p(opt);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p.server->qp->pd, parent);
    Buffer target(pd, 256, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
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
  EXPECT_EQ(destroy_cq(cq), 0);
  EXPECT_EQ(dealloc_pd(parent), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_dealloc_td(td), 0);
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
