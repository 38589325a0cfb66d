// ExposureTable on softrdma's QPs (ConnectedPair): the client side exposes
// pool buffers through type-2 windows on its QP; the server side plays the
// peer with RDMA READs.
#include "runtime/transport/exposure_table.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/send_queue.h"
#include "tests/softrdma/test_util.h"

namespace rdmarpc {
namespace internal {
namespace {

using softrdma::testing::Buffer;
using softrdma::testing::ConnectedPair;

class ExposureTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(pair_.ok());
    sq_.set_qp(pair_.client->qp);
    pool_ = std::make_unique<LargeBufferPool>(pair_.client_pd, 0, 64 << 20, kWindowedAccess);
    table_.Init(pair_.client_pd, pool_.get(), /*windows=*/true, /*max_exposed_bytes=*/1 << 20);
    mws_before_ = softrdma::GetStats().live_mws;
  }
  void TearDown() override {
    table_.Release();
    EXPECT_EQ(softrdma::GetStats().live_mws, mws_before_);
  }

  // Rings the doorbell and retires every completion of the client's SQ
  // into the table.
  void RunClientSq() {
    ASSERT_EQ(sq_.Doorbell([this](uint64_t, const SqEntry& e) { table_.OnRetired(e, false); }), 0);
    for (const ibv_wc& wc : softrdma::testing::Drain(pair_.client_cq, 200)) {
      if (SqEntry& e = sq_.entry(wc.wr_id); e.window != nullptr && wc.status != IBV_WC_SUCCESS) {
        const SqEntry failed = e;
        e.window = nullptr;
        table_.OnRetired(failed, false);
      }
      sq_.RetireThrough(wc.wr_id, [this](const SqEntry& e) { table_.OnRetired(e, true); });
    }
  }

  // The server side READs `length` bytes at `addr` with `rkey`.
  ibv_wc_status PeerRead(uint64_t addr, uint32_t rkey, uint32_t length) {
    EXPECT_EQ(softrdma::testing::PostSend(pair_.server->qp, IBV_WR_RDMA_READ, ++peer_wr_, sink_, 0,
                                          length, 0, addr, rkey),
              0);
    std::vector<ibv_wc> wcs = softrdma::testing::Drain(pair_.server_cq, 2000);
    return wcs.empty() ? IBV_WC_GENERAL_ERR : wcs.back().status;
  }

  ConnectedPair pair_;
  SendQueue sq_;
  std::unique_ptr<LargeBufferPool> pool_;
  ExposureTable table_;
  Buffer sink_{pair_.server_pd, 1 << 20, IBV_ACCESS_LOCAL_WRITE};
  uint64_t peer_wr_ = 0;
  int64_t mws_before_ = 0;
};

TEST_F(ExposureTableTest, AWindowOpensItsBytesUntilRevokedAndTheBufferWaitsForTheInvalidation) {
  absl::StatusOr<LargeBuffer*> b = pool_->Get(100000);
  ASSERT_TRUE(b.ok());
  std::memset((*b)->data, 'w', (*b)->capacity);
  absl::StatusOr<uint32_t> rkey =
      table_.Expose(&sq_, *b, (*b)->addr() + 64, 1000, IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(rkey.ok()) << rkey.status();
  EXPECT_NE(*rkey, (*b)->rkey());
  EXPECT_EQ(table_.exposed_bytes(), 1000u);
  EXPECT_EQ(table_.exposed_buffers(), 1u);
  EXPECT_TRUE(table_.exposed(*b));
  RunClientSq();  // the BIND_MW runs
  EXPECT_EQ(PeerRead((*b)->addr() + 64, *rkey, 1000), IBV_WC_SUCCESS);
  EXPECT_EQ(std::string(sink_.data.begin(), sink_.data.begin() + 1000), std::string(1000, 'w'));

  table_.Revoke(&sq_, *b, /*qp_usable=*/true);
  EXPECT_EQ(table_.exposed_bytes(), 0u);
  EXPECT_FALSE(table_.exposed(*b));
  LargeBuffer* held = *b;
  pool_->Put(held);  // held back: its LOCAL_INV has not run yet
  absl::StatusOr<LargeBuffer*> other = pool_->Get(100000);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, held);
  RunClientSq();  // the LOCAL_INV runs and retires
  EXPECT_EQ(table_.cached_windows(), 1u);
  absl::StatusOr<LargeBuffer*> again = pool_->Get(100000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, held);
  // The old rkey opens nothing now.
  EXPECT_EQ(PeerRead(held->addr() + 64, *rkey, 1000), IBV_WC_REM_ACCESS_ERR);
  pool_->Put(*again);
  pool_->Put(*other);
}

TEST_F(ExposureTableTest, TheNextBindOfACachedWindowHasANewRkeyAndTheSameIndex) {
  absl::StatusOr<LargeBuffer*> b = pool_->Get(4096);
  ASSERT_TRUE(b.ok());
  absl::StatusOr<uint32_t> first =
      table_.Expose(&sq_, *b, (*b)->addr(), 512, IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(first.ok());
  RunClientSq();
  table_.Revoke(&sq_, *b, true);
  RunClientSq();
  absl::StatusOr<uint32_t> second =
      table_.Expose(&sq_, *b, (*b)->addr(), 512, IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(table_.cached_windows(), 0u);  // the one window, reused
  EXPECT_EQ(*second, ibv_inc_rkey(*first));
  EXPECT_EQ(*second >> 8, *first >> 8);
  RunClientSq();
  EXPECT_EQ(PeerRead((*b)->addr(), *second, 512), IBV_WC_SUCCESS);
  table_.Revoke(&sq_, *b, true);
  RunClientSq();
  pool_->Put(*b);
}

TEST_F(ExposureTableTest, TheCapNamesTheBytesAndNothingIsExposedOverIt) {
  absl::StatusOr<LargeBuffer*> a = pool_->Get(800 * 1024);
  absl::StatusOr<LargeBuffer*> b = pool_->Get(400 * 1024);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(table_.Expose(&sq_, *a, (*a)->addr(), 800 * 1024, IBV_ACCESS_REMOTE_READ).ok());
  EXPECT_TRUE(table_.CheckRoom(1024 * 1024 - 800 * 1024).ok());
  absl::StatusOr<uint32_t> over =
      table_.Expose(&sq_, *b, (*b)->addr(), 400 * 1024, IBV_ACCESS_REMOTE_READ);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(over.status().message(),
            "exposing 409600 more bytes would pass the connection's cap of 1048576 exposed bytes "
            "(819200 bytes exposed in 1 buffer; max_exposed_bytes_per_connection)");
  EXPECT_FALSE(table_.exposed(*b));
  EXPECT_EQ(table_.exposed_bytes(), 800u * 1024);
  RunClientSq();
  table_.Revoke(&sq_, *a, true);
  table_.Revoke(&sq_, *b, true);
  RunClientSq();
  pool_->Put(*a);
  pool_->Put(*b);
}

TEST_F(ExposureTableTest, AClosingConnectionsWindowsGoOnlyWithRelease) {
  absl::StatusOr<LargeBuffer*> b = pool_->Get(4096);
  ASSERT_TRUE(b.ok());
  absl::StatusOr<uint32_t> rkey =
      table_.Expose(&sq_, *b, (*b)->addr(), 512, IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(rkey.ok());
  // Its BIND_MW still waits in the batch: revoking for a QP that is not
  // usable must not free the window under it.
  const int64_t mws = softrdma::GetStats().live_mws;
  table_.Revoke(&sq_, *b, /*qp_usable=*/false);
  EXPECT_EQ(softrdma::GetStats().live_mws, mws);
  LargeBuffer* held = *b;
  pool_->Put(held);
  absl::StatusOr<LargeBuffer*> other = pool_->Get(4096);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, held);  // still held back
  RunClientSq();
  table_.Release();  // the QP is gone (here: as if): the window goes
  EXPECT_EQ(softrdma::GetStats().live_mws, mws - 1);
  absl::StatusOr<LargeBuffer*> again = pool_->Get(4096);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, held);
  pool_->Put(*again);
  pool_->Put(*other);
}

TEST_F(ExposureTableTest, InvalidationsWaitForSendQueueRoom) {
  absl::StatusOr<LargeBuffer*> b = pool_->Get(4096);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(table_.Expose(&sq_, *b, (*b)->addr(), 512, IBV_ACCESS_REMOTE_READ).ok());
  RunClientSq();
  // Fill the ring (zero-length WRITEs, not rung).
  std::vector<uint64_t> seqs;
  while (sq_.has_room()) {
    ibv_sge sge{};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 0;
    wr.opcode = IBV_WR_RDMA_WRITE;
    seqs.push_back(sq_.PostWr(&wr, SqEntry{}, false));
  }
  const uint64_t next = sq_.next_seq();
  table_.Revoke(&sq_, *b, true);
  EXPECT_EQ(sq_.next_seq(), next);  // kept, not posted into a full ring
  // The ring drains; the invalidation goes next.
  sq_.RetireThrough(seqs.back(), [](const SqEntry&) {});
  table_.PostPendingInvalidations(&sq_);
  EXPECT_EQ(sq_.next_seq(), next + 1);
  EXPECT_NE(sq_.entry(next).window, nullptr);
  pool_->Put(*b);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
