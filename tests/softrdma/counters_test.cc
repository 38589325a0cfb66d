// softrdma's counters (Stat(), GetStats, ResetStats): each thread counts
// into a block of its own; GetStats sums every block, including those of
// threads that have exited, and takes the maximum of the max_* fields.
#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/internal.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace internal {
namespace {

TEST(Counters, GetStatsSumsEveryThreadsCountsAfterTheThreadsExit) {
  ResetStats();
  const Stats before = GetStats();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 1000; ++i) Stat().send_with_imm++;
      // As softrdma raises a maximum (a block may have served an earlier
      // thread: only ever raised).
      std::atomic<uint64_t>& m = Stat().max_send_bytes;
      const uint64_t v = 100 * static_cast<uint64_t>(t + 1);
      uint64_t cur = m.load();
      while (cur < v && !m.compare_exchange_weak(cur, v)) {
      }
    });
  }
  for (std::thread& t : threads) t.join();
  Stat().send_with_imm += 7;
  const Stats s = GetStats();
  EXPECT_EQ(s.send_with_imm - before.send_with_imm, 4007u);
  EXPECT_EQ(s.max_send_bytes, 400u);
  ResetStats();
  const Stats reset = GetStats();
  EXPECT_EQ(reset.send_with_imm, 0u);
  EXPECT_EQ(reset.max_send_bytes, 0u);
}

TEST(Counters, AThreadThatStartsLaterTakesALeftBlockAndKeepsItsCounts) {
  ResetStats();
  std::thread first([] { Stat().recv += 5; });
  first.join();
  std::thread second([] { Stat().recv += 6; });  // may reuse first's block
  second.join();
  EXPECT_EQ(GetStats().recv, 11u);
}

}  // namespace
}  // namespace internal
}  // namespace softrdma
