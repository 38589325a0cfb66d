// connection_backoff_test.cc: gRPC's connection backoff schedule.
#include "runtime/transport/connection_backoff.h"

#include "gtest/gtest.h"

namespace rdmarpc {
namespace internal {
namespace {

TEST(ConnectionBackoff, GrowsBy1Point6FromOneSecondUpTo120) {
  ConnectionBackoff b;
  // unit 0.5: the middle of the jitter band, no spread.
  EXPECT_EQ(b.NextDelay(0.5), absl::Seconds(1));
  EXPECT_EQ(b.NextDelay(0.5), absl::Milliseconds(1600));
  EXPECT_EQ(b.NextDelay(0.5), absl::Milliseconds(2560));
  for (int i = 0; i < 20; ++i) b.NextDelay(0.5);
  EXPECT_EQ(b.NextDelay(0.5), absl::Seconds(120));
}

TEST(ConnectionBackoff, JitterSpreadsTwentyPercentEachWay) {
  ConnectionBackoff low, high;
  EXPECT_EQ(low.NextDelay(0.0), absl::Milliseconds(800));
  EXPECT_EQ(high.NextDelay(1.0), absl::Milliseconds(1200));
}

TEST(ConnectionBackoff, ResetStartsOver) {
  ConnectionBackoff b;
  b.NextDelay(0.5);
  b.NextDelay(0.5);
  b.Reset();
  EXPECT_EQ(b.NextDelay(0.5), absl::Seconds(1));
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
