// key_readers_test.cc: readers of the key table (ScopedMrAccess) take no
// lock, yet dereg_mr returns only once no reader that vouched for the MR is
// still inside its access, and readers and writers in many threads see a
// consistent table.
#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/internal.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace internal {
namespace {

class KeyReadersTest : public testing::SoftDeviceTest {
 protected:
  void SetUp() override {
    SoftDeviceTest::SetUp();
    pd_ = alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
  }
  void TearDown() override {
    EXPECT_EQ(dealloc_pd(pd_), 0);
    SoftDeviceTest::TearDown();
  }
  ibv_pd* pd_ = nullptr;
};

// Each round registers an MR, lets three readers find it by lkey and stay
// inside their access for a while, deregisters it and only then raises
// `gone`: a reader still inside with the MR vouched for that sees `gone`
// would be one dereg_mr did not wait for.
TEST_F(KeyReadersTest, DeregWaitsForEveryReaderThatFoundTheMr) {
  constexpr int kRounds = 300;
  std::vector<uint8_t> mem(4096);
  std::atomic<uint32_t> current_lkey{0};
  std::atomic<bool> gone{false};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> found{0}, violations{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        const uint32_t key = current_lkey.load();
        ScopedMrAccess access;
        MrView v;
        if (key == 0 || !LookupKeyHeld(key, /*remote=*/false, &v)) continue;
        found++;
        {
          ScopedMrAccess nested;  // nests without a second mark
          MrView again;
          if (!LookupKeyHeld(key, false, &again)) violations++;
        }
        for (volatile int i = 0; i < 200; i = i + 1) {
        }
        if (gone.load()) violations++;
      }
    });
  }
  for (int round = 0; round < kRounds; ++round) {
    ibv_mr* mr = reg_mr(pd_, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    gone = false;
    current_lkey = mr->lkey;
    const uint64_t before = found.load();
    while (found.load() < before + 3) std::this_thread::yield();
    ASSERT_EQ(dereg_mr(mr), 0);
    gone = true;
    std::this_thread::yield();
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_GE(found.load(), 3u * kRounds);
  EXPECT_EQ(violations.load(), 0u);
}

// Registrations in two threads while four threads look up their own MR
// (registered once) in a loop: every lookup finds it with its bounds.
TEST_F(KeyReadersTest, LookupsStayRightWhileOtherKeysChange) {
  std::vector<uint8_t> mine(4096);
  ibv_mr* mr = reg_mr(pd_, mine.data(), mine.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> lookups{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        ScopedMrAccess access;
        MrView v;
        if (!LookupKeyHeld(mr->lkey, false, &v) ||
            v.addr != reinterpret_cast<uintptr_t>(mine.data()) || v.length != mine.size() ||
            v.pd != pd_) {
          wrong++;
        }
        lookups++;
      }
    });
  }
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&] {
      std::vector<uint8_t> mem(8192);
      for (int i = 0; i < 400; ++i) {
        ibv_mr* other = reg_mr(pd_, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
        ASSERT_NE(other, nullptr);
        ASSERT_EQ(dereg_mr(other), 0);
      }
    });
  }
  for (std::thread& t : writers) t.join();
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_GT(lookups.load(), 0u);
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(dereg_mr(mr), 0);
}

}  // namespace
}  // namespace internal
}  // namespace softrdma
