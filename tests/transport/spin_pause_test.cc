// SpinPause: how often a busy-poll loop yields its core.
#include "runtime/transport/spin_pause.h"

#include <vector>

#include "gtest/gtest.h"

namespace rdmarpc {
namespace internal {
namespace {

std::vector<bool> Yields(SpinPause& p, int calls) {
  std::vector<bool> out;
  for (int i = 0; i < calls; ++i) out.push_back(p.Pause());
  return out;
}

TEST(SpinPause, YieldsOnEveryNthCallOnly) {
  SpinPause p(4);
  EXPECT_EQ(Yields(p, 9),
            (std::vector<bool>{false, false, false, true, false, false, false, true, false}));
}

TEST(SpinPause, DefaultYieldsOnceInSixteenCalls) {
  SpinPause p(kDefaultSpinYieldEvery);
  const std::vector<bool> got = Yields(p, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], i == 15 || i == 31) << "call " << i;
}

TEST(SpinPause, OneAndZeroYieldOnEveryCall) {
  SpinPause one(1);
  EXPECT_EQ(Yields(one, 3), (std::vector<bool>{true, true, true}));
  SpinPause zero(0);
  EXPECT_EQ(Yields(zero, 3), (std::vector<bool>{true, true, true}));
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
