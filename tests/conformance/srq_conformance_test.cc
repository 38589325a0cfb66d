// Shared receive queues: ibv_create_srq / ibv_post_srq_recv, and messages of
// two RC QPs taking their receives from one SRQ (ibv_create_srq(3),
// ibv_post_srq_recv(3)). The WC of an SRQ receive names the QP the message
// came in on in qp_num (ibv_poll_cq(3): "relevant for Receive Work
// Completions that are associated with an SRQ").
// SRQ limit events are covered by srq_limit_conformance_test.cc.
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "tests/conformance/conformance_fixture.h"

namespace rdmarpc {
namespace conformance {
namespace {

using internal::Verbs;

class SrqConformance : public ConformanceTest {
 protected:
  void TearDown() override {
    second_.reset();
    first_.reset();
    if (srq_ != nullptr) {
      EXPECT_EQ(Verbs().destroy_srq(srq_), 0);
    }
    srq_ = nullptr;
    ConformanceTest::TearDown();
  }

  ibv_srq* CreateSrq(uint32_t max_wr, uint32_t max_sge) {
    ibv_srq_init_attr attr{};
    attr.attr.max_wr = max_wr;
    attr.attr.max_sge = max_sge;
    srq_ = Verbs().create_srq(server_pd(), &attr);
    EXPECT_NE(srq_, nullptr) << "ibv_create_srq: " << std::strerror(errno);
    granted_ = attr.attr;  // ibv_create_srq(3) writes back the actual sizes
    return srq_;
  }

  static int PostSrqRecv(ibv_srq* srq, uint64_t wr_id, const Region& r, size_t offset,
                         uint32_t length) {
    ibv_sge sge{r.addr(offset), length, r.lkey()};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_srq_recv(srq, &wr, &bad);
  }

  ibv_srq* srq_ = nullptr;
  ibv_srq_attr granted_{};
  std::unique_ptr<Connection> first_;
  std::unique_ptr<Connection> second_;
};

TEST_F(SrqConformance, TwoQpsReceiveThroughOneSrq) {
  ibv_srq* srq = CreateSrq(16, 1);
  ASSERT_NE(srq, nullptr);
  QpOptions o;
  o.server_srq = srq;
  absl::StatusOr<std::unique_ptr<Connection>> a = Connect(o);
  ASSERT_TRUE(a.ok()) << a.status();
  first_ = std::move(*a);
  absl::StatusOr<std::unique_ptr<Connection>> b = Connect(o);
  ASSERT_TRUE(b.ok()) << b.status();
  second_ = std::move(*b);
  EXPECT_EQ(first_->server_qp()->srq, srq);
  EXPECT_EQ(second_->server_qp()->srq, srq);

  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  ASSERT_EQ(PostSrqRecv(srq, 501, *dst, 0, 1024), 0);
  ASSERT_EQ(PostSrqRecv(srq, 502, *dst, 1024, 1024), 0);
  src->data()[0] = 0xa1;
  src->data()[100] = 0xb2;

  // One message per QP; receives are taken in SRQ order, whichever QP asks.
  ASSERT_EQ(PostSend(first_->client_qp(), IBV_WR_SEND_WITH_IMM, 1, *src, 0, 10, 0, 0,
                     htonl(1)),
            0);
  absl::StatusOr<ibv_wc> r1 = PollOne(server_cq());
  ASSERT_TRUE(r1.ok()) << r1.status();
  ASSERT_EQ(PostSend(second_->client_qp(), IBV_WR_SEND_WITH_IMM, 2, *src, 100, 20, 0, 0,
                     htonl(2)),
            0);
  absl::StatusOr<ibv_wc> r2 = PollOne(server_cq());
  ASSERT_TRUE(r2.ok()) << r2.status();

  EXPECT_EQ(r1->wr_id, 501u);
  EXPECT_EQ(r1->status, IBV_WC_SUCCESS) << WcStatusName(r1->status);
  EXPECT_EQ(r1->opcode, IBV_WC_RECV);
  EXPECT_EQ(r1->byte_len, 10u);
  EXPECT_EQ(r1->qp_num, first_->server_qp()->qp_num);
  EXPECT_EQ(r1->imm_data, htonl(1));
  EXPECT_EQ(r2->wr_id, 502u);
  EXPECT_EQ(r2->status, IBV_WC_SUCCESS) << WcStatusName(r2->status);
  EXPECT_EQ(r2->byte_len, 20u);
  EXPECT_EQ(r2->qp_num, second_->server_qp()->qp_num);
  EXPECT_EQ(r2->imm_data, htonl(2));
  EXPECT_EQ(dst->data()[0], 0xa1);
  EXPECT_EQ(dst->data()[1024], 0xb2);

  absl::StatusOr<std::vector<ibv_wc>> sends = PollN(client_cq(), 2);
  ASSERT_TRUE(sends.ok()) << sends.status();
  for (const ibv_wc& wc : *sends) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << WcStatusName(wc.status);
  }
}

TEST_F(SrqConformance, FullSrqIsEnomemAtTheFirstRefusedWr) {
  ibv_srq* srq = CreateSrq(8, 1);
  ASSERT_NE(srq, nullptr);
  ASSERT_GE(granted_.max_wr, 8u);
  ASSERT_LE(granted_.max_wr, 4096u);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst);
  const uint32_t depth = granted_.max_wr;
  std::vector<ibv_sge> sges(depth + 1, ibv_sge{dst->addr(), 16, dst->lkey()});
  std::vector<ibv_recv_wr> wrs(depth + 1);
  for (uint32_t i = 0; i <= depth; ++i) {
    wrs[i].wr_id = i;
    wrs[i].sg_list = &sges[i];
    wrs[i].num_sge = 1;
    wrs[i].next = i < depth ? &wrs[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(srq, &wrs[0], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[depth]);
}

TEST_F(SrqConformance, SrqReceiveTooManySgesIsRefused) {
  ibv_srq* srq = CreateSrq(8, 1);
  ASSERT_NE(srq, nullptr);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst);
  // max_sge may be granted larger than asked; go past the device's limit.
  const int over = device_attr().max_srq_sge + 1;
  std::vector<ibv_sge> sges(static_cast<size_t>(over), ibv_sge{dst->addr(), 4, dst->lkey()});
  ibv_recv_wr ok{};
  ok.wr_id = 1;
  ok.sg_list = sges.data();
  ok.num_sge = 1;
  ibv_recv_wr bad_wr = ok;
  bad_wr.wr_id = 2;
  bad_wr.num_sge = over;
  ok.next = &bad_wr;
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_srq_recv(srq, &ok, &bad);
  if (OnSoftProvider()) {
    EXPECT_EQ(rc, EINVAL);
  } else {
    EXPECT_TRUE(rc == EINVAL || rc == ENOMEM) << "rc " << rc;
  }
  EXPECT_EQ(bad, &bad_wr);
}

TEST_F(SrqConformance, PostRecvOnAnSrqQpIsRefused) {
  ibv_srq* srq = CreateSrq(8, 1);
  ASSERT_NE(srq, nullptr);
  QpOptions o;
  o.server_srq = srq;
  absl::StatusOr<std::unique_ptr<Connection>> a = Connect(o);
  ASSERT_TRUE(a.ok()) << a.status();
  first_ = std::move(*a);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst);
  // A QP attached to an SRQ has no receive queue of its own (ibv_create_qp(3):
  // max_recv_wr is ignored with an SRQ): the post is refused, whatever errno
  // the provider picks (softrdma: EINVAL), and bad_wr names the WR.
  ibv_sge sge{dst->addr(), 64, dst->lkey()};
  ibv_recv_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_recv(first_->server_qp(), &wr, &bad);
  if (OnSoftProvider()) {
    EXPECT_EQ(rc, EINVAL);
  } else {
    EXPECT_NE(rc, 0);
  }
  EXPECT_EQ(bad, &wr);
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
