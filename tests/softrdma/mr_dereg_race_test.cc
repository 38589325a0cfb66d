// mr_dereg_race_test.cc: once dereg_mr returns, the device never touches that
// memory again, even with RDMA WRITEs into it in flight -- as a NIC, whose
// dereg invalidates the MR before it returns. Later writes fail with
// REM_ACCESS_ERR at the requester instead. (softrdma used to check the rkey
// and copy in two steps, so a write checked before the dereg could land
// after it, into memory the user had reused or freed.)
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

TEST(MrDereg, NoWriteLandsAfterDeregReturns) {
  constexpr int kWrites = 6;
  constexpr uint32_t kLen = 4 << 20;  // each copy takes long enough to race with
  for (int round = 0; round < 12; ++round) {
    PairOptions opt;
    opt.max_send_wr = kWrites;
    ConnectedPair p(opt);
    ASSERT_TRUE(p.ok());
    Buffer src(p.client_pd, kLen, kAll);
    std::memset(src.data.data(), 0xAB, kLen);
    std::vector<uint8_t> target(kLen, 0);
    ibv_mr* mr = reg_mr(p.server_pd, target.data(), kLen, kAll);
    ASSERT_NE(mr, nullptr);
    for (int i = 0; i < kWrites; ++i) {
      ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, i, src, 0, kLen, 0,
                         reinterpret_cast<uint64_t>(target.data()), mr->rkey),
                0);
    }
    // Let some writes land, then deregister mid-stream and reuse the memory.
    std::this_thread::sleep_for(std::chrono::microseconds(700 * (round % 6)));
    ASSERT_EQ(dereg_mr(mr), 0);
    std::memset(target.data(), 0x5C, kLen);
    int done = 0;
    while (done < kWrites) {
      ibv_wc wc;
      ASSERT_TRUE(PollOne(p.client_cq, &wc)) << "round " << round << ", " << done << " done";
      EXPECT_TRUE(wc.status == IBV_WC_SUCCESS || wc.status == IBV_WC_REM_ACCESS_ERR ||
                  wc.status == IBV_WC_WR_FLUSH_ERR)
          << "status " << wc.status;
      ++done;
    }
    size_t touched = 0;
    for (uint8_t b : target) touched += b != 0x5C;
    EXPECT_EQ(touched, 0u) << "round " << round << ": bytes written after dereg_mr returned";
  }
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
