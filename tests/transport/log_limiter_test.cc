// log_limiter_test.cc: one line per key per period, the lines held back
// counted into the next one (log_limiter.h).
#include "runtime/transport/log_limiter.h"

#include "gtest/gtest.h"

namespace rdmarpc {
namespace internal {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(LogLimiter, OneLinePerKeyPerPeriodAndTheNextCountsTheRest) {
  LogLimiter limiter(absl::Seconds(1));
  uint64_t held = 99;
  ASSERT_TRUE(limiter.Allow("10.0.0.1:7000", kT0, &held));
  EXPECT_EQ(held, 0u);
  for (int i = 1; i <= 5; ++i) {
    EXPECT_FALSE(limiter.Allow("10.0.0.1:7000", kT0 + absl::Milliseconds(100 * i), &held));
  }
  // Another peer is not held back by the first.
  ASSERT_TRUE(limiter.Allow("10.0.0.2:7000", kT0 + absl::Milliseconds(500), &held));
  EXPECT_EQ(held, 0u);
  EXPECT_FALSE(limiter.Allow("10.0.0.1:7000", kT0 + absl::Milliseconds(999), &held));
  ASSERT_TRUE(limiter.Allow("10.0.0.1:7000", kT0 + absl::Seconds(1), &held));
  EXPECT_EQ(held, 6u);
  // The count starts again after each allowed line.
  EXPECT_FALSE(limiter.Allow("10.0.0.1:7000", kT0 + absl::Milliseconds(1500), &held));
  ASSERT_TRUE(limiter.Allow("10.0.0.1:7000", kT0 + absl::Seconds(5), &held));
  EXPECT_EQ(held, 1u);
}

TEST(LogLimiter, PastMaxKeysIdleKeysAreForgottenAndAFloodOfNewOnesIsSilent) {
  LogLimiter limiter(absl::Seconds(1), /*max_keys=*/2);
  uint64_t held = 0;
  ASSERT_TRUE(limiter.Allow("a", kT0, &held));
  ASSERT_TRUE(limiter.Allow("b", kT0, &held));
  // Both keys are within their period: a third one gets no line.
  EXPECT_FALSE(limiter.Allow("c", kT0 + absl::Milliseconds(10), &held));
  EXPECT_EQ(held, 0u);
  // A period later "a" and "b" are idle and forgotten; "c" gets its line.
  ASSERT_TRUE(limiter.Allow("c", kT0 + absl::Seconds(1), &held));
  EXPECT_EQ(held, 0u);
}

TEST(LogLimiter, SuppressedSuffixSaysHowManyOrNothing) {
  EXPECT_EQ(SuppressedSuffix(0), "");
  EXPECT_EQ(SuppressedSuffix(3), " (3 more for this peer suppressed since the last line)");
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
