// handler_pool_test.cc: the handler pool on its own.
#include "runtime/rpc/handler_pool.h"

#include <atomic>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace rdmarpc {
namespace internal {
namespace {

TEST(HandlerPool, RunsEveryTaskExactlyOnce) {
  std::atomic<int> runs{0};
  {
    HandlerPool pool(2, 2, "test", absl::Microseconds(20));
    for (int i = 0; i < 1000; ++i) pool.Submit([&runs] { runs.fetch_add(1); });
    pool.Stop();  // runs what is still queued first
  }
  EXPECT_EQ(runs.load(), 1000);
}

TEST(HandlerPool, GrowsWhileEveryThreadIsBlocked) {
  HandlerPool pool(1, 8, "test", absl::ZeroDuration());
  // Four tasks that each wait for all four to have started: they finish only
  // when four threads run them at once.
  absl::BlockingCounter started(4);
  absl::Notification all_started;
  std::atomic<int> finished{0};
  for (int i = 0; i < 4; ++i) {
    pool.Submit([&] {
      started.DecrementCount();
      all_started.WaitForNotificationWithTimeout(absl::Seconds(10));
      finished.fetch_add(1);
    });
  }
  started.Wait();
  all_started.Notify();
  EXPECT_EQ(pool.threads(), 4);
  pool.Stop();
  EXPECT_EQ(finished.load(), 4);
}

TEST(HandlerPool, NeverRunsMoreThanMaxThreadsAtOnce) {
  HandlerPool pool(1, 2, "test", absl::ZeroDuration());
  std::atomic<int> running{0}, peak{0}, done{0};
  absl::Notification release;
  for (int i = 0; i < 5; ++i) {
    pool.Submit([&] {
      const int now = running.fetch_add(1) + 1;
      int p = peak.load();
      while (now > p && !peak.compare_exchange_weak(p, now)) {
      }
      release.WaitForNotificationWithTimeout(absl::Seconds(10));
      running.fetch_sub(1);
      done.fetch_add(1);
    });
  }
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(running.load(), 2);
  EXPECT_EQ(pool.threads(), 2);
  release.Notify();
  pool.Stop();
  EXPECT_EQ(done.load(), 5);
  EXPECT_EQ(peak.load(), 2);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
