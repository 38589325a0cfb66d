// SpinSlots and AdaptiveSpin (spin_governor.h): how many threads may spin,
// and how long a loop spins, learnt from its waits.
#include "runtime/transport/spin_governor.h"

#include <sched.h>

#include <algorithm>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace rdmarpc {
namespace internal {
namespace {

using absl::Microseconds;
using absl::Milliseconds;

TEST(SpinSlots, HandsOutAtMostCapacityAndTakesThemBack) {
  SpinSlots slots(2);
  EXPECT_TRUE(slots.TryAcquire());
  EXPECT_TRUE(slots.TryAcquire());
  EXPECT_FALSE(slots.TryAcquire());
  EXPECT_EQ(slots.in_use(), 2);
  slots.Release();
  EXPECT_EQ(slots.in_use(), 1);
  EXPECT_TRUE(slots.TryAcquire());
  EXPECT_FALSE(slots.TryAcquire());
}

TEST(SpinSlots, BelowOneIsNoLimit) {
  for (int capacity : {0, -1}) {
    SpinSlots slots(capacity);
    for (int i = 0; i < 100; ++i) EXPECT_TRUE(slots.TryAcquire()) << capacity;
  }
}

TEST(SpinSlots, ProcessHasOnePerCpuOfTheAffinityMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(SpinSlots::Process().capacity(), CPU_COUNT(&set));
}

TEST(SpinSlot, HoldsOneSlotUntilReleasedOrDestroyed) {
  SpinSlots slots(1);
  {
    SpinSlot a(&slots);
    SpinSlot b(&slots);
    EXPECT_TRUE(a.Acquire());
    EXPECT_TRUE(a.Acquire());  // held already: no second slot taken
    EXPECT_EQ(slots.in_use(), 1);
    EXPECT_FALSE(b.Acquire());
    a.Release();
    EXPECT_FALSE(a.held());
    EXPECT_TRUE(b.Acquire());
  }
  EXPECT_EQ(slots.in_use(), 0);
}

TEST(AdaptiveSpin, SpinsItsCapUntilAWaitIsSeenAndOffIsOff) {
  AdaptiveSpin spin(Microseconds(50), Milliseconds(2));
  EXPECT_EQ(spin.in_flight_budget(), Milliseconds(2));
  AdaptiveSpin off(absl::ZeroDuration(), absl::ZeroDuration());
  EXPECT_EQ(off.in_flight_budget(), absl::ZeroDuration());
  off.OnInFlightWait(Microseconds(3));
  EXPECT_EQ(off.in_flight_budget(), absl::ZeroDuration());
}

TEST(AdaptiveSpin, ShortWaitsSpinSixteenTimesTheirAverageAtLeastTheIdleWindow) {
  AdaptiveSpin spin(Microseconds(50), Milliseconds(2));
  spin.OnInFlightWait(Microseconds(2));
  EXPECT_EQ(spin.average_wait(), Microseconds(2));
  EXPECT_EQ(spin.in_flight_budget(), Microseconds(50));  // 32 us: the floor
  // The average moves 1/8 of the way to each sample: 2 + (42 - 2) / 8 = 7.
  spin.OnInFlightWait(Microseconds(42));
  EXPECT_EQ(spin.average_wait(), Microseconds(7));
  EXPECT_EQ(spin.in_flight_budget(), Microseconds(112));
  for (int i = 0; i < 40; ++i) spin.OnInFlightWait(Microseconds(90));
  // Close to 90 us, and 16 x that (under the 2 ms cap).
  EXPECT_GT(spin.average_wait(), Microseconds(89));
  EXPECT_EQ(spin.in_flight_budget(), spin.average_wait() * 16);
  spin.OnInFlightWait(Microseconds(100));  // 16 x ~91 us is still under 2 ms
  EXPECT_LT(spin.in_flight_budget(), Milliseconds(2));
  AdaptiveSpin capped(Microseconds(50), Microseconds(1000));
  capped.OnInFlightWait(Microseconds(90));
  EXPECT_EQ(capped.in_flight_budget(), Microseconds(1000));
}

TEST(AdaptiveSpin, WaitsThatSpinningDoesNotPayForSpinOnlyTheIdleWindow) {
  AdaptiveSpin spin(Microseconds(50), Milliseconds(2));
  spin.OnInFlightWait(Milliseconds(1));  // a slow handler
  // Samples count up to twice kSpinPaysBelow.
  EXPECT_EQ(spin.average_wait(), 2 * kSpinPaysBelow);
  EXPECT_EQ(spin.in_flight_budget(), Microseconds(50));
  // Fast answers again: 500 -> 437.9 -> ... -> 257.9 after 5, 226.1 after 6.
  for (int i = 0; i < 5; ++i) spin.OnInFlightWait(Microseconds(3));
  EXPECT_EQ(spin.in_flight_budget(), Microseconds(50));
  spin.OnInFlightWait(Microseconds(3));
  EXPECT_LE(spin.average_wait(), kSpinPaysBelow);
  EXPECT_EQ(spin.in_flight_budget(), std::min(Milliseconds(2), spin.average_wait() * 16));
}

TEST(AdaptiveSpin, TheFloorNeverPassesTheCap) {
  AdaptiveSpin spin(Microseconds(500), Microseconds(100));
  spin.OnInFlightWait(Milliseconds(1));
  EXPECT_EQ(spin.in_flight_budget(), Microseconds(100));
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
