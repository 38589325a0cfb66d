// Receiver Not Ready: a SEND (or WRITE_WITH_IMM) reaching a QP with no
// receive posted is NAKed RNR; the requester retries up to its rnr_retry
// (7 = forever) and then completes the WR with IBV_WC_RNR_RETRY_EXC_ERR
// (ibv_modify_qp(3) rnr_retry; IBA vol. 1 ch. 9, RNR NAK).
//
// rdma_cm sets a QP's rnr_retry from the PEER's conn_param.rnr_retry_count
// (rdma_accept(3)), which QpOptions::client_rnr_retry does here.
//
// The requester waits between retries at least the RNR timer the responder's
// NAK names: the responder QP's min_rnr_timer (ibv_modify_qp(3); IBA table 45).
#include <arpa/inet.h>

#include <cstring>

#include "absl/time/clock.h"
#include "tests/conformance/conformance_fixture.h"

namespace rdmarpc {
namespace conformance {
namespace {

using internal::Verbs;

class RnrNoRetryConformance : public ConformanceTest {
 protected:
  QpOptions DefaultOptions() const override {
    QpOptions o;
    o.client_rnr_retry = 0;
    return o;
  }
};

TEST_F(RnrNoRetryConformance, SendWithoutReceiveFailsWithRnrRetryExcErr) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 1, *src, 0, 32), 0);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 2, *src, 0, 32), 0);
  absl::StatusOr<std::vector<ibv_wc>> wcs = PollN(client_cq(), 2);
  ASSERT_TRUE(wcs.ok()) << wcs.status();
  EXPECT_EQ((*wcs)[0].wr_id, 1u);
  EXPECT_EQ((*wcs)[0].status, IBV_WC_RNR_RETRY_EXC_ERR) << WcStatusName((*wcs)[0].status);
  EXPECT_EQ((*wcs)[1].wr_id, 2u);
  EXPECT_EQ((*wcs)[1].status, IBV_WC_WR_FLUSH_ERR) << WcStatusName((*wcs)[1].status);
  EXPECT_EQ(QpState(client_qp()), IBV_QPS_ERR);
  // RNR is not an error of the responder: its QP stays usable (RTS).
  EXPECT_EQ(QpState(server_qp()), IBV_QPS_RTS);
}

TEST_F(RnrNoRetryConformance, WriteWithImmWithoutReceiveFailsWithRnrRetryExcErr) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(
      server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(src && dst);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE_WITH_IMM, 3, *src, 0, 32, dst->addr(),
                     dst->rkey(), htonl(1)),
            0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 3u);
  EXPECT_EQ(wc->status, IBV_WC_RNR_RETRY_EXC_ERR) << WcStatusName(wc->status);
}

TEST_F(RnrNoRetryConformance, PlainWriteNeedsNoReceive) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(
      server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(src && dst);
  src->data()[0] = 0x77;
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 4, *src, 0, 32, dst->addr(), dst->rkey()),
            0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS) << WcStatusName(wc->status);
  EXPECT_EQ(dst->data()[0], 0x77);
}

// min_rnr_timer 26 (81.92 ms) on the responder, rnr_retry 2 on the
// requester: the SEND is tried three times, with two RNR waits between.
class RnrTimerConformance : public ConformanceTest {
 protected:
  QpOptions DefaultOptions() const override {
    QpOptions o;
    o.client_rnr_retry = 2;
    return o;
  }
};

TEST_F(RnrTimerConformance, RetriesWaitTheRespondersMinRnrTimer) {
  ibv_qp_attr a{};
  a.min_rnr_timer = 26;  // 81.92 ms
  ASSERT_EQ(Verbs().modify_qp(server_qp(), &a, IBV_QP_MIN_RNR_TIMER), 0);
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src);
  const absl::Time start = absl::Now();
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 7, *src, 0, 32), 0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 7u);
  EXPECT_EQ(wc->status, IBV_WC_RNR_RETRY_EXC_ERR) << WcStatusName(wc->status);
  EXPECT_GE(took, absl::Microseconds(2 * 81920)) << "two RNR waits of at least 81.92 ms";
}

class RnrLowRetryConformance : public ConformanceTest {
 protected:
  QpOptions DefaultOptions() const override {
    QpOptions o;
    o.client_rnr_retry = 2;
    return o;
  }
};

TEST_F(RnrLowRetryConformance, SendWithoutReceiveFailsAfterItsRetries) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 5, *src, 0, 32), 0);
  // 2 retries, each after the responder's min_rnr_timer (up to 655 ms on IB
  // when rdma_cm leaves it at its 0 encoding), then the WR fails.
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq(), absl::Seconds(10));
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 5u);
  EXPECT_EQ(wc->status, IBV_WC_RNR_RETRY_EXC_ERR) << WcStatusName(wc->status);
  EXPECT_EQ(QpState(client_qp()), IBV_QPS_ERR);
  // No receive was consumed at the responder, which is still usable.
  EXPECT_TRUE(DrainFor(server_cq(), absl::Milliseconds(50)).empty());
  EXPECT_EQ(QpState(server_qp()), IBV_QPS_RTS);
}

class RnrForeverConformance : public ConformanceTest {};  // rnr_retry 7 (default)

TEST_F(RnrForeverConformance, SendWaitsForAReceivePostedLater) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  std::memset(src->data(), 0x3c, 200);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 1, *src, 0, 200), 0);
  // With rnr_retry 7 the requester retries forever: nothing completes while
  // no receive is posted.
  EXPECT_TRUE(DrainFor(client_cq(), absl::Milliseconds(200)).empty());
  EXPECT_TRUE(DrainFor(server_cq(), absl::Milliseconds(10)).empty());

  ASSERT_EQ(PostRecv(server_qp(), 2, *dst, 0, 4096), 0);
  absl::StatusOr<ibv_wc> send = PollOne(client_cq());
  ASSERT_TRUE(send.ok()) << send.status();
  EXPECT_EQ(send->wr_id, 1u);
  EXPECT_EQ(send->status, IBV_WC_SUCCESS) << WcStatusName(send->status);
  absl::StatusOr<ibv_wc> recv = PollOne(server_cq());
  ASSERT_TRUE(recv.ok()) << recv.status();
  EXPECT_EQ(recv->wr_id, 2u);
  EXPECT_EQ(recv->status, IBV_WC_SUCCESS) << WcStatusName(recv->status);
  EXPECT_EQ(recv->byte_len, 200u);
  EXPECT_EQ(dst->data()[199], 0x3c);
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
