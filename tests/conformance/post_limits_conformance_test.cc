// Post-time limits: a WR beyond the QP's caps (as ibv_query_qp reports them,
// which may exceed what was asked) is refused by ibv_post_send /
// ibv_post_recv with an errno value, and *bad_wr points at the first refused
// WR; the WRs before it in the chain are posted (ibv_post_send(3)).
//
// ibv_post_send(3): ENOMEM "Send Queue is full or not enough resources to
// complete this operation", EINVAL "Invalid value provided in wr". A full
// queue is ENOMEM on every provider. Too many SGEs or too much inline data
// are EINVAL on rxe and softrdma but ENOMEM on mlx5 (its post_send reports
// both as "not enough resources"); on rdma-core either is accepted, on
// softrdma exactly EINVAL.
#include <cerrno>
#include <vector>

#include "tests/conformance/conformance_fixture.h"

namespace rdmarpc {
namespace conformance {
namespace {

class PostLimitsConformance : public ConformanceTest {
 protected:
  QpOptions DefaultOptions() const override {
    QpOptions o;
    o.max_send_wr = 8;
    o.max_recv_wr = 8;
    o.max_send_sge = 2;
    o.max_recv_sge = 2;
    o.max_inline_data = 32;
    return o;
  }

  // The errno for "too many SGEs / too much inline" (see file comment).
  static void ExpectInvalidWrErrno(int rc) {
    if (OnSoftProvider()) {
      EXPECT_EQ(rc, EINVAL);
    } else {
      EXPECT_TRUE(rc == EINVAL || rc == ENOMEM) << "rc " << rc;
    }
  }
};

TEST_F(PostLimitsConformance, SendQueueFullIsEnomemAtTheFirstRefusedWr) {
  const uint32_t depth = pair().client_cap.max_send_wr;
  ASSERT_GE(depth, 8u);
  ASSERT_LE(depth, 4096u);
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(
      server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(src && dst);
  // depth + 1 signalled WRITEs in one chain: a send slot is freed only when
  // the CQE covering it is polled, so the last one finds the queue full.
  std::vector<ibv_sge> sges(depth + 1, ibv_sge{src->addr(), 8, src->lkey()});
  std::vector<ibv_send_wr> wrs(depth + 1);
  for (uint32_t i = 0; i <= depth; ++i) {
    wrs[i].wr_id = i;
    wrs[i].opcode = IBV_WR_RDMA_WRITE;
    wrs[i].sg_list = &sges[i];
    wrs[i].num_sge = 1;
    wrs[i].send_flags = IBV_SEND_SIGNALED;
    wrs[i].wr.rdma.remote_addr = dst->addr();
    wrs[i].wr.rdma.rkey = dst->rkey();
    wrs[i].next = i < depth ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(client_qp(), &wrs[0], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[depth]);
  absl::StatusOr<std::vector<ibv_wc>> wcs = PollN(client_cq(), static_cast<int>(depth));
  ASSERT_TRUE(wcs.ok()) << wcs.status();
  for (uint32_t i = 0; i < depth; ++i) {
    EXPECT_EQ((*wcs)[i].wr_id, i);
    EXPECT_EQ((*wcs)[i].status, IBV_WC_SUCCESS) << WcStatusName((*wcs)[i].status);
  }
  EXPECT_TRUE(DrainFor(client_cq(), absl::Milliseconds(50)).empty());
  // Polled: the slots are free again.
  bad = nullptr;
  wrs[depth].next = nullptr;
  EXPECT_EQ(ibv_post_send(client_qp(), &wrs[depth], &bad), 0);
  absl::StatusOr<ibv_wc> last = PollOne(client_cq());
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->wr_id, depth);
}

TEST_F(PostLimitsConformance, ReceiveQueueFullIsEnomemAtTheFirstRefusedWr) {
  const uint32_t depth = pair().server_cap.max_recv_wr;
  ASSERT_GE(depth, 8u);
  ASSERT_LE(depth, 4096u);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst);
  std::vector<ibv_sge> sges(depth + 1, ibv_sge{dst->addr(), 64, dst->lkey()});
  std::vector<ibv_recv_wr> wrs(depth + 1);
  for (uint32_t i = 0; i <= depth; ++i) {
    wrs[i].wr_id = 100 + i;
    wrs[i].sg_list = &sges[i];
    wrs[i].num_sge = 1;
    wrs[i].next = i < depth ? &wrs[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_recv(server_qp(), &wrs[0], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[depth]);
  // The first `depth` were posted: `depth` sends all land.
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src);
  for (uint32_t i = 0; i < depth; ++i) {
    ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, i, *src, 0, 4, 0, 0, 0, 0), 0);
    if (i % 4 == 3) {  // one signalled WR per 4 keeps the send queue from filling
      ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 1000 + i, *src, 0, 0), 0);
      absl::StatusOr<ibv_wc> covered = PollOne(client_cq());
      ASSERT_TRUE(covered.ok()) << covered.status();
      ASSERT_EQ(covered->status, IBV_WC_SUCCESS) << WcStatusName(covered->status);
    }
  }
  absl::StatusOr<std::vector<ibv_wc>> recvs = PollN(server_cq(), static_cast<int>(depth));
  ASSERT_TRUE(recvs.ok()) << recvs.status();
  for (uint32_t i = 0; i < depth; ++i) {
    EXPECT_EQ((*recvs)[i].wr_id, 100 + i);
    EXPECT_EQ((*recvs)[i].status, IBV_WC_SUCCESS) << WcStatusName((*recvs)[i].status);
  }
}

TEST_F(PostLimitsConformance, TooManySendSgesIsRefusedAtThatWr) {
  const uint32_t max_sge = pair().client_cap.max_send_sge;
  ASSERT_GE(max_sge, 2u);
  ASSERT_LE(max_sge, 64u);
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(
      server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(src && dst);
  std::vector<ibv_sge> sges(max_sge + 1, ibv_sge{src->addr(), 4, src->lkey()});
  ibv_send_wr ok{};
  ok.wr_id = 1;
  ok.opcode = IBV_WR_RDMA_WRITE;
  ok.sg_list = sges.data();
  ok.num_sge = static_cast<int>(max_sge);  // exactly the cap: fine
  ok.send_flags = IBV_SEND_SIGNALED;
  ok.wr.rdma.remote_addr = dst->addr();
  ok.wr.rdma.rkey = dst->rkey();
  ibv_send_wr over = ok;
  over.wr_id = 2;
  over.num_sge = static_cast<int>(max_sge + 1);
  ok.next = &over;
  ibv_send_wr* bad = nullptr;
  ExpectInvalidWrErrno(ibv_post_send(client_qp(), &ok, &bad));
  EXPECT_EQ(bad, &over);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 1u);
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS) << WcStatusName(wc->status);
  EXPECT_TRUE(DrainFor(client_cq(), absl::Milliseconds(50)).empty());
}

TEST_F(PostLimitsConformance, TooManyRecvSgesIsRefusedAtThatWr) {
  const uint32_t max_sge = pair().server_cap.max_recv_sge;
  ASSERT_GE(max_sge, 2u);
  ASSERT_LE(max_sge, 64u);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst);
  std::vector<ibv_sge> sges(max_sge + 1, ibv_sge{dst->addr(), 4, dst->lkey()});
  ibv_recv_wr ok{};
  ok.wr_id = 1;
  ok.sg_list = sges.data();
  ok.num_sge = 1;
  ibv_recv_wr over = ok;
  over.wr_id = 2;
  over.num_sge = static_cast<int>(max_sge + 1);
  ok.next = &over;
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_recv(server_qp(), &ok, &bad);
  ExpectInvalidWrErrno(rc);
  EXPECT_EQ(bad, &over);
}

TEST_F(PostLimitsConformance, InlineBeyondMaxInlineDataIsRefused) {
  const uint32_t max_inline = pair().client_cap.max_inline_data;
  ASSERT_GE(max_inline, 32u);
  ASSERT_LE(max_inline, 4000u);
  std::unique_ptr<Region> src = NewRegion(client_pd(), 8192, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 8192, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  ASSERT_EQ(PostRecv(server_qp(), 9, *dst, 0, 8192), 0);
  ibv_sge at_cap{src->addr(), max_inline, src->lkey()};
  ibv_sge over_cap{src->addr(), max_inline + 1, src->lkey()};
  ibv_send_wr ok{};
  ok.wr_id = 1;
  ok.opcode = IBV_WR_SEND;
  ok.sg_list = &at_cap;
  ok.num_sge = 1;
  ok.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_send_wr over = ok;
  over.wr_id = 2;
  over.sg_list = &over_cap;
  ok.next = &over;
  ibv_send_wr* bad = nullptr;
  ExpectInvalidWrErrno(ibv_post_send(client_qp(), &ok, &bad));
  EXPECT_EQ(bad, &over);
  absl::StatusOr<ibv_wc> recv = PollOne(server_cq());
  ASSERT_TRUE(recv.ok()) << recv.status();
  EXPECT_EQ(recv->status, IBV_WC_SUCCESS) << WcStatusName(recv->status);
  EXPECT_EQ(recv->byte_len, max_inline);  // the WR at the cap went through
}

TEST_F(PostLimitsConformance, DeviceAttrsBoundTheGrantedCaps) {
  const ibv_device_attr& a = device_attr();
  EXPECT_GE(static_cast<uint32_t>(a.max_qp_wr), pair().client_cap.max_send_wr);
  EXPECT_GE(static_cast<uint32_t>(a.max_qp_wr), pair().server_cap.max_recv_wr);
  EXPECT_GE(static_cast<uint32_t>(a.max_sge), pair().client_cap.max_send_sge);
  EXPECT_GE(static_cast<uint32_t>(a.max_sge), pair().server_cap.max_recv_sge);
  // Caps are at least what was asked (ibv_create_qp(3): "may be larger").
  EXPECT_GE(pair().client_cap.max_send_wr, 8u);
  EXPECT_GE(pair().client_cap.max_send_sge, 2u);
  EXPECT_GE(pair().client_cap.max_inline_data, 32u);
  // Asking beyond the device's limits fails with EINVAL at QP creation.
  QpOptions too_deep = DefaultOptions();
  too_deep.max_send_wr = static_cast<uint32_t>(a.max_qp_wr) + 1;
  absl::StatusOr<std::unique_ptr<Connection>> c = Connect(too_deep);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  EXPECT_NE(c.status().message().find("rdma_create_qp"), absl::string_view::npos) << c.status();
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
