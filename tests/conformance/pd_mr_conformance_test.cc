// Protection domains and memory regions (ibv_alloc_pd(3), ibv_reg_mr(3)):
//  - ibv_dealloc_pd fails with EBUSY while an MR (or QP) of the PD lives;
//  - keys of live MRs are distinct (lkey vs lkey, rkey vs rkey; an MR's lkey
//    and rkey may be equal, as on mlx5);
//  - after ibv_dereg_mr the keys are dead: a local use is IBV_WC_LOC_PROT_ERR
//    and a remote one IBV_WC_REM_ACCESS_ERR;
//  - remote write access without local write is refused at registration
//    (ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC
//    is set, then IBV_ACCESS_LOCAL_WRITE must be set too") with EINVAL.
#include <cerrno>
#include <cstdlib>
#include <set>
#include <vector>

#include "tests/conformance/conformance_fixture.h"

namespace rdmarpc {
namespace conformance {
namespace {

using internal::Verbs;

class PdMrConformance : public ConformanceTest {};

TEST_F(PdMrConformance, DeallocPdWithLiveMrIsEbusy) {
  ibv_pd* pd = Verbs().alloc_pd(context());
  ASSERT_NE(pd, nullptr);
  std::vector<uint8_t> buf(4096);
  ibv_mr* mr = Verbs().reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->pd, pd);
  EXPECT_EQ(mr->addr, buf.data());
  EXPECT_EQ(mr->length, buf.size());
  EXPECT_EQ(Verbs().dealloc_pd(pd), EBUSY);
  EXPECT_EQ(Verbs().dereg_mr(mr), 0);
  EXPECT_EQ(Verbs().dealloc_pd(pd), 0);
}

TEST_F(PdMrConformance, DeallocPdWithLiveQpIsEbusy) {
  EXPECT_EQ(Verbs().dealloc_pd(client_pd()), EBUSY);
  EXPECT_EQ(Verbs().dealloc_pd(server_pd()), EBUSY);
}

TEST_F(PdMrConformance, KeysOfLiveMrsAreDistinct) {
  constexpr int kRegions = 16;
  std::vector<std::unique_ptr<Region>> regions;
  std::set<uint32_t> lkeys;
  std::set<uint32_t> rkeys;
  for (int i = 0; i < kRegions; ++i) {
    // Alternate PDs: keys are unique per device, not per PD.
    regions.push_back(NewRegion(i % 2 == 0 ? client_pd() : server_pd(), 4096,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                    IBV_ACCESS_REMOTE_READ));
    ASSERT_TRUE(regions.back());
    lkeys.insert(regions.back()->lkey());
    rkeys.insert(regions.back()->rkey());
  }
  EXPECT_EQ(lkeys.size(), static_cast<size_t>(kRegions));
  EXPECT_EQ(rkeys.size(), static_cast<size_t>(kRegions));
}

TEST_F(PdMrConformance, RemoteWriteWithoutLocalWriteIsEinval) {
  std::vector<uint8_t> buf(4096);
  errno = 0;
  ibv_mr* mr = Verbs().reg_mr(client_pd(), buf.data(), buf.size(), IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(errno, EINVAL);
  if (mr != nullptr) Verbs().dereg_mr(mr);
}

TEST_F(PdMrConformance, DeregisteredLkeyIsLocProtErr) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  ASSERT_EQ(PostRecv(server_qp(), 1, *dst, 0, 4096), 0);
  ASSERT_EQ(src->Deregister(), 0);
  // The memory is still allocated; only the key is gone.
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 2, *src, 0, 64), 0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 2u);
  EXPECT_EQ(wc->status, IBV_WC_LOC_PROT_ERR) << WcStatusName(wc->status);
}

TEST_F(PdMrConformance, DeregisteredRkeyIsRemAccessErr) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(
      server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(src && dst);
  src->data()[0] = 0x99;
  // The key works before dereg ...
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 1, *src, 0, 8, dst->addr(), dst->rkey()),
            0);
  absl::StatusOr<ibv_wc> ok = PollOne(client_cq());
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->status, IBV_WC_SUCCESS) << WcStatusName(ok->status);
  ASSERT_EQ(dst->data()[0], 0x99);
  // ... and not after.
  ASSERT_EQ(dst->Deregister(), 0);
  src->data()[0] = 0x55;
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 2, *src, 0, 8, dst->addr(), dst->rkey()),
            0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 2u);
  EXPECT_EQ(wc->status, IBV_WC_REM_ACCESS_ERR) << WcStatusName(wc->status);
  EXPECT_EQ(dst->data()[0], 0x99);
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
