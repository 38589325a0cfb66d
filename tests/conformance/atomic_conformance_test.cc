// Atomics: FETCH_AND_ADD and CMP_AND_SWP on 8-byte aligned targets of an MR
// registered with IBV_ACCESS_REMOTE_ATOMIC (ibv_post_send(3), IBA vol. 1
// 9.4.5 atomic operations). The original value lands in the local SGE (one
// 8-byte SGE); the WC's byte_len is 8 (ibv_poll_cq(3): relevant on the send
// queue for atomics).
//
// Byte order: rxe and softrdma treat the target and the returned value as
// host-order u64s; ConnectX HCAs on little-endian hosts operate on and reply
// big-endian ("the atomic operation replied value is big-endian and
// contradicts the host endianness", NVIDIA MLNX_OFED "Advanced Transport").
// So the exact-value tests use byte-palindromic operands (0x0101... + 0x0101...
// never carries across bytes), which mean the same in either order, and the
// carry test accepts either order on rdma-core but only host order on soft.
//
// Errors: a target without IBV_ACCESS_REMOTE_ATOMIC is a remote access
// violation (IBV_WC_REM_ACCESS_ERR); a target not 8-byte aligned is an
// invalid request (NAK Invalid Request -> IBV_WC_REM_INV_REQ_ERR), as rxe's
// responder implements the spec's alignment rule.
#include <cstring>
#include <ios>

#include "tests/conformance/conformance_fixture.h"

namespace rdmarpc {
namespace conformance {
namespace {

constexpr int kAtomicAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
    IBV_ACCESS_REMOTE_ATOMIC;

class AtomicConformance : public ConformanceTest {
 protected:
  void SetUp() override {
    ConformanceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (device_attr().atomic_cap == IBV_ATOMIC_NONE) {
      GTEST_SKIP() << "device reports atomic_cap IBV_ATOMIC_NONE";
    }
  }

  int PostAtomic(ibv_wr_opcode opcode, uint64_t wr_id, const Region& local, size_t offset,
                 uint64_t remote_addr, uint32_t rkey, uint64_t compare_add, uint64_t swap) {
    ibv_sge sge{local.addr(offset), 8, local.lkey()};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap = swap;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(client_qp(), &wr, &bad);
  }

  static uint64_t U64At(const Region& r, size_t offset) {
    uint64_t v;
    std::memcpy(&v, r.data() + offset, 8);
    return v;
  }
  static void SetU64(Region& r, size_t offset, uint64_t v) { std::memcpy(r.data() + offset, &v, 8); }
};

TEST_F(AtomicConformance, FetchAndAddReturnsOriginalAndAdds) {
  std::unique_ptr<Region> local = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> target = NewRegion(server_pd(), 4096, kAtomicAccess);
  ASSERT_TRUE(local && target);
  SetU64(*target, 64, 0x0101010101010101ull);
  ASSERT_EQ(PostAtomic(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, *local, 0, target->addr(64),
                       target->rkey(), 0x0202020202020202ull, 0),
            0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 1u);
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS) << WcStatusName(wc->status);
  EXPECT_EQ(wc->opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(wc->byte_len, 8u);
  EXPECT_EQ(U64At(*local, 0), 0x0101010101010101ull);
  EXPECT_EQ(U64At(*target, 64), 0x0303030303030303ull);
  EXPECT_EQ(U64At(*target, 56), 0u);  // neighbours untouched
  EXPECT_EQ(U64At(*target, 72), 0u);
}

TEST_F(AtomicConformance, FetchAndAddCarriesAndWrapsAsA64BitAdd) {
  std::unique_ptr<Region> local = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> target = NewRegion(server_pd(), 4096, kAtomicAccess);
  ASSERT_TRUE(local && target);
  // All-ones + 2 wraps modulo 2^64 to 1, carrying through every byte.
  SetU64(*target, 0, ~uint64_t{0});
  ASSERT_EQ(PostAtomic(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, *local, 0, target->addr(0),
                       target->rkey(), 2, 0),
            0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS) << WcStatusName(wc->status);
  EXPECT_EQ(U64At(*local, 0), ~uint64_t{0});  // the same in either byte order
  const uint64_t host_order = 1;
  const uint64_t big_endian = __builtin_bswap64(1);  // 1 stored big-endian, read on LE
  if (OnSoftProvider()) {
    EXPECT_EQ(U64At(*target, 0), host_order);
  } else {
    const uint64_t got = U64At(*target, 0);
    EXPECT_TRUE(got == host_order || got == big_endian) << std::hex << got;
  }
}

TEST_F(AtomicConformance, CompareAndSwapSwapsOnlyOnMatch) {
  std::unique_ptr<Region> local = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> target = NewRegion(server_pd(), 4096, kAtomicAccess);
  ASSERT_TRUE(local && target);
  SetU64(*target, 0, 0x1111111111111111ull);
  // Match: swapped, original returned.
  ASSERT_EQ(PostAtomic(IBV_WR_ATOMIC_CMP_AND_SWP, 1, *local, 0, target->addr(0), target->rkey(),
                       0x1111111111111111ull, 0x0707070707070707ull),
            0);
  // No match: unchanged, current value returned.
  ASSERT_EQ(PostAtomic(IBV_WR_ATOMIC_CMP_AND_SWP, 2, *local, 8, target->addr(0), target->rkey(),
                       0x0909090909090909ull, 0x0101010101010101ull),
            0);
  absl::StatusOr<std::vector<ibv_wc>> wcs = PollN(client_cq(), 2);
  ASSERT_TRUE(wcs.ok()) << wcs.status();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ((*wcs)[i].wr_id, static_cast<uint64_t>(i + 1));
    EXPECT_EQ((*wcs)[i].status, IBV_WC_SUCCESS) << WcStatusName((*wcs)[i].status);
    EXPECT_EQ((*wcs)[i].opcode, IBV_WC_COMP_SWAP);
    EXPECT_EQ((*wcs)[i].byte_len, 8u);
  }
  EXPECT_EQ(U64At(*local, 0), 0x1111111111111111ull);
  EXPECT_EQ(U64At(*local, 8), 0x0707070707070707ull);
  EXPECT_EQ(U64At(*target, 0), 0x0707070707070707ull);
}

TEST_F(AtomicConformance, TargetWithoutRemoteAtomicAccessIsRemAccessErr) {
  std::unique_ptr<Region> local = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> target = NewRegion(
      server_pd(), 4096,
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(local && target);
  SetU64(*target, 0, 0x0505050505050505ull);
  ASSERT_EQ(PostAtomic(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, *local, 0, target->addr(0),
                       target->rkey(), 1, 0),
            0);
  ASSERT_EQ(PostAtomic(IBV_WR_ATOMIC_FETCH_AND_ADD, 2, *local, 8, target->addr(0),
                       target->rkey(), 1, 0),
            0);
  absl::StatusOr<std::vector<ibv_wc>> wcs = PollN(client_cq(), 2);
  ASSERT_TRUE(wcs.ok()) << wcs.status();
  EXPECT_EQ((*wcs)[0].wr_id, 1u);
  EXPECT_EQ((*wcs)[0].status, IBV_WC_REM_ACCESS_ERR) << WcStatusName((*wcs)[0].status);
  EXPECT_EQ((*wcs)[1].wr_id, 2u);
  EXPECT_EQ((*wcs)[1].status, IBV_WC_WR_FLUSH_ERR) << WcStatusName((*wcs)[1].status);
  EXPECT_EQ(U64At(*target, 0), 0x0505050505050505ull);
}

TEST_F(AtomicConformance, MisalignedTargetIsRemInvReqErr) {
  std::unique_ptr<Region> local = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> target = NewRegion(server_pd(), 4096, kAtomicAccess);
  ASSERT_TRUE(local && target);
  ASSERT_EQ(PostAtomic(IBV_WR_ATOMIC_CMP_AND_SWP, 1, *local, 0, target->addr(4), target->rkey(),
                       0, 9),
            0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 1u);
  EXPECT_EQ(wc->status, IBV_WC_REM_INV_REQ_ERR) << WcStatusName(wc->status);
  EXPECT_EQ(U64At(*target, 0), 0u);
  EXPECT_EQ(U64At(*target, 8), 0u);
  EXPECT_EQ(QpState(client_qp()), IBV_QPS_ERR);
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
