// Disconnect and flush: rdma_disconnect moves the local QP to ERROR
// (rdma_disconnect(3): "transitions any associated QP to the error state"),
// which completes every posted receive with IBV_WC_WR_FLUSH_ERR, in posting
// order. The opcode of an error WC is undefined (ibv_poll_cq(3)), so only
// wr_id, status and qp_num are asserted. The peer sees
// RDMA_CM_EVENT_DISCONNECTED; it disconnects too, which flushes its own.
#include <vector>

#include "tests/conformance/conformance_fixture.h"

namespace rdmarpc {
namespace conformance {
namespace {

using internal::Verbs;

class FlushConformance : public ConformanceTest {};

TEST_F(FlushConformance, DisconnectFlushesExactlyThePostedReceives) {
  std::unique_ptr<Region> cbuf = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> sbuf = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(cbuf && sbuf);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(PostRecv(client_qp(), 10 + i, *cbuf, i * 64, 64), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(PostRecv(server_qp(), 20 + i, *sbuf, i * 64, 64), 0);

  ASSERT_EQ(Verbs().disconnect(pair().client_id.get()), 0);
  absl::StatusOr<std::vector<ibv_wc>> flushed = PollN(client_cq(), 4);
  ASSERT_TRUE(flushed.ok()) << flushed.status();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*flushed)[i].wr_id, 10u + i);
    EXPECT_EQ((*flushed)[i].status, IBV_WC_WR_FLUSH_ERR) << WcStatusName((*flushed)[i].status);
    EXPECT_EQ((*flushed)[i].qp_num, client_qp()->qp_num);
  }
  EXPECT_TRUE(DrainFor(client_cq(), absl::Milliseconds(100)).empty());
  EXPECT_EQ(QpState(client_qp()), IBV_QPS_ERR);
  absl::Status s = ExpectCmEvent(client_events(), RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_TRUE(s.ok()) << s;

  // The passive side learns of it, and disconnects in turn as rdma_cm
  // applications do, which flushes its 3 receives.
  s = ExpectCmEvent(server_events(), RDMA_CM_EVENT_DISCONNECTED);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(Verbs().disconnect(pair().server_id.get()), 0);
  absl::StatusOr<std::vector<ibv_wc>> server_flushed = PollN(server_cq(), 3);
  ASSERT_TRUE(server_flushed.ok()) << server_flushed.status();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*server_flushed)[i].wr_id, 20u + i);
    EXPECT_EQ((*server_flushed)[i].status, IBV_WC_WR_FLUSH_ERR)
        << WcStatusName((*server_flushed)[i].status);
  }
  EXPECT_TRUE(DrainFor(server_cq(), absl::Milliseconds(100)).empty());
  EXPECT_EQ(QpState(server_qp()), IBV_QPS_ERR);
}

TEST_F(FlushConformance, ReceivePostedAfterDisconnectIsFlushed) {
  std::unique_ptr<Region> cbuf = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(cbuf);
  ASSERT_EQ(Verbs().disconnect(pair().client_id.get()), 0);
  EXPECT_EQ(QpState(client_qp()), IBV_QPS_ERR);
  // A QP in ERROR accepts receives and flushes them (IBA: WRs posted in the
  // Error state complete with flush error).
  ASSERT_EQ(PostRecv(client_qp(), 77, *cbuf, 0, 64), 0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 77u);
  EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR) << WcStatusName(wc->status);
}

TEST_F(FlushConformance, OutstandingSendsFlushOnDisconnect) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src);
  // No receive at the server, rnr_retry 7: the SEND waits for ever, until
  // the disconnect flushes it (and the one behind it).
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 1, *src, 0, 16), 0);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 2, *src, 0, 16), 0);
  EXPECT_TRUE(DrainFor(client_cq(), absl::Milliseconds(50)).empty());
  ASSERT_EQ(Verbs().disconnect(pair().client_id.get()), 0);
  absl::StatusOr<std::vector<ibv_wc>> wcs = PollN(client_cq(), 2);
  ASSERT_TRUE(wcs.ok()) << wcs.status();
  EXPECT_EQ((*wcs)[0].wr_id, 1u);
  EXPECT_EQ((*wcs)[0].status, IBV_WC_WR_FLUSH_ERR) << WcStatusName((*wcs)[0].status);
  EXPECT_EQ((*wcs)[1].wr_id, 2u);
  EXPECT_EQ((*wcs)[1].status, IBV_WC_WR_FLUSH_ERR) << WcStatusName((*wcs)[1].status);
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
