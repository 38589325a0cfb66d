// SpinPause: how often a busy-poll loop yields its core, and how that
// interval stretches while yields find the core idle.
#include "runtime/transport/spin_pause.h"

#include <vector>

#include "gtest/gtest.h"

namespace rdmarpc {
namespace internal {
namespace {

// Stand-ins for TimedYield: another thread ran (10 us away), or nobody did
// (0.4 us, as an idle sched_yield took on the bench VM).
int yields = 0;
int64_t BusyYield() {
  ++yields;
  return 10'000;
}
int64_t QuietYield() {
  ++yields;
  return 400;
}

std::vector<bool> Yields(SpinPause& p, int calls) {
  std::vector<bool> out;
  for (int i = 0; i < calls; ++i) out.push_back(p.Pause());
  return out;
}

TEST(SpinPause, YieldsOnEveryNthCallWhileTheCoreIsWanted) {
  SpinPause p(4, &BusyYield);
  EXPECT_EQ(Yields(p, 9),
            (std::vector<bool>{false, false, false, true, false, false, false, true, false}));
}

TEST(SpinPause, DefaultYieldsOnceInSixteenCallsWhileTheCoreIsWanted) {
  SpinPause p(kDefaultSpinYieldEvery, &BusyYield);
  const std::vector<bool> got = Yields(p, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], i == 15 || i == 31) << "call " << i;
  EXPECT_EQ(p.interval(), 16u);
}

TEST(SpinPause, OneAndZeroYieldOnEveryCallEvenWhenTheCoreIsIdle) {
  SpinPause one(1, &QuietYield);
  EXPECT_EQ(Yields(one, 3), (std::vector<bool>{true, true, true}));
  SpinPause zero(0, &QuietYield);
  EXPECT_EQ(Yields(zero, 3), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(one.interval(), 1u);
}

TEST(SpinPause, QuietYieldsDoubleTheIntervalUpToItsCap) {
  SpinPause p(kDefaultSpinYieldEvery, &QuietYield);
  yields = 0;
  // Yields at calls 16, 48, 112, 240, 496, then every 256.
  const std::vector<bool> got = Yields(p, 496 + 256 * 2);
  std::vector<int> at;
  for (int i = 0; i < static_cast<int>(got.size()); ++i) {
    if (got[i]) at.push_back(i + 1);
  }
  EXPECT_EQ(at, (std::vector<int>{16, 48, 112, 240, 496, 752, 1008}));
  EXPECT_EQ(yields, 7);
  EXPECT_EQ(p.interval(), kMaxYieldEvery);
}

// A stand-in whose answer the test switches.
bool core_wanted = false;
int64_t SwitchedYield() { return core_wanted ? BusyYield() : QuietYield(); }

TEST(SpinPause, AYieldThatFoundAnotherThreadBringsTheIntervalBack) {
  core_wanted = false;
  SpinPause p(kDefaultSpinYieldEvery, &SwitchedYield);
  Yields(p, 496);  // quiet yields at 16, 48, 112, 240 and 496
  ASSERT_EQ(p.interval(), kMaxYieldEvery);
  // Another thread now wants the core: the next yield (256 calls on) finds
  // it, and the one after comes 16 calls later.
  core_wanted = true;
  const std::vector<bool> got = Yields(p, 256 + 16);
  for (int i = 0; i < 256 + 16; ++i) EXPECT_EQ(got[i], i == 255 || i == 271) << "call " << i;
  EXPECT_EQ(p.interval(), kDefaultSpinYieldEvery);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
