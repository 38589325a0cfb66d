// Selective signalling (QP created with sq_sig_all = 0): a WR without
// IBV_SEND_SIGNALED produces no WC when it succeeds; a later signalled WR's
// completion covers it (RC completes in order), and its send-queue slot is
// free once that WC is polled (ibv_create_qp(3) sq_sig_all,
// ibv_post_send(3) IBV_SEND_SIGNALED). An unsignalled WR that FAILS still
// produces its error WC.
#include <cstring>
#include <vector>

#include "tests/conformance/conformance_fixture.h"

namespace rdmarpc {
namespace conformance {
namespace {

class SignallingConformance : public ConformanceTest {
 protected:
  QpOptions DefaultOptions() const override {
    QpOptions o;
    o.max_send_wr = 8;
    return o;
  }
};

constexpr int kRemoteWrite = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

TEST_F(SignallingConformance, OnlySignalledWrsComplete) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, kRemoteWrite);
  ASSERT_TRUE(src && dst);
  for (int i = 0; i < 4; ++i) src->data()[i * 100] = static_cast<uint8_t>(0x10 + i);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 10 + i, *src, i * 100, 50,
                       dst->addr(i * 100), dst->rkey(), 0, /*send_flags=*/0),
              0);
  }
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 13, *src, 300, 50, dst->addr(300),
                     dst->rkey()),
            0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 13u);
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS) << WcStatusName(wc->status);
  EXPECT_TRUE(DrainFor(client_cq(), absl::Milliseconds(100)).empty());
  // The signalled WR's completion implies the earlier ones are done.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(dst->data()[i * 100], 0x10 + i) << i;
}

TEST_F(SignallingConformance, PolledSignalledWcFreesTheUnsignalledSlots) {
  const uint32_t depth = pair().client_cap.max_send_wr;
  ASSERT_GE(depth, 8u);
  ASSERT_LE(depth, 4096u);
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, kRemoteWrite);
  ASSERT_TRUE(src && dst);
  // Three rounds of depth-1 unsignalled + 1 signalled fill the queue each
  // time; if the polled WC did not free the unsignalled slots, round 2 would
  // get ENOMEM.
  for (int round = 0; round < 3; ++round) {
    for (uint32_t i = 0; i + 1 < depth; ++i) {
      ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, i, *src, 0, 8, dst->addr(),
                         dst->rkey(), 0, 0),
                0)
          << "round " << round << " wr " << i;
    }
    ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 1000 + round, *src, 0, 8, dst->addr(),
                       dst->rkey()),
              0);
    absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
    ASSERT_TRUE(wc.ok()) << wc.status();
    EXPECT_EQ(wc->wr_id, 1000u + round);
    EXPECT_EQ(wc->status, IBV_WC_SUCCESS) << WcStatusName(wc->status);
  }
}

TEST_F(SignallingConformance, UnsignalledWrThatFailsStillCompletes) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, kRemoteWrite);
  ASSERT_TRUE(src && dst);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 1, *src, 0, 8, dst->addr(), dst->rkey(), 0,
                     0),
            0);
  // Unsignalled and out of bounds: its error WC is reported regardless
  // (ibv_post_send(3): unsignalled WRs generate a WC only on error).
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 2, *src, 0, 8, dst->addr(4092),
                     dst->rkey(), 0, 0),
            0);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 3, *src, 0, 8, dst->addr(), dst->rkey(), 0,
                     0),
            0);
  absl::StatusOr<std::vector<ibv_wc>> wcs = PollN(client_cq(), 2);
  ASSERT_TRUE(wcs.ok()) << wcs.status();
  EXPECT_EQ((*wcs)[0].wr_id, 2u);
  EXPECT_EQ((*wcs)[0].status, IBV_WC_REM_ACCESS_ERR) << WcStatusName((*wcs)[0].status);
  EXPECT_EQ((*wcs)[1].wr_id, 3u);  // flushed WRs complete even if unsignalled
  EXPECT_EQ((*wcs)[1].status, IBV_WC_WR_FLUSH_ERR) << WcStatusName((*wcs)[1].status);
  EXPECT_TRUE(DrainFor(client_cq(), absl::Milliseconds(50)).empty());
}

class SignalAllConformance : public ConformanceTest {
 protected:
  QpOptions DefaultOptions() const override {
    QpOptions o;
    o.sq_sig_all = true;
    return o;
  }
};

TEST_F(SignalAllConformance, SqSigAllSignalsEveryWr) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, kRemoteWrite);
  ASSERT_TRUE(src && dst);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 40 + i, *src, 0, 8, dst->addr(),
                       dst->rkey(), 0, /*send_flags=*/0),
              0);
  }
  absl::StatusOr<std::vector<ibv_wc>> wcs = PollN(client_cq(), 3);
  ASSERT_TRUE(wcs.ok()) << wcs.status();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*wcs)[i].wr_id, 40u + i);
    EXPECT_EQ((*wcs)[i].status, IBV_WC_SUCCESS) << WcStatusName((*wcs)[i].status);
  }
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
