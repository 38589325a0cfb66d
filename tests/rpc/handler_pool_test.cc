// handler_pool_test.cc: the handler pool on its own.
#include "runtime/rpc/handler_pool.h"

#include <time.h>

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

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Regression: once idle longer than the idle-exit time, the minimum threads
// looped on an expired deadline and burnt a core each.
TEST(HandlerPool, IdleThreadsSleepAndExtraOnesExit) {
  HandlerPool pool(2, 4, "test", absl::Microseconds(20), absl::Milliseconds(50));
  absl::BlockingCounter started(4);
  absl::Notification release;
  for (int i = 0; i < 4; ++i) {
    pool.Submit([&] {
      started.DecrementCount();
      release.WaitForNotificationWithTimeout(absl::Seconds(10));
    });
  }
  started.Wait();
  EXPECT_EQ(pool.threads(), 4);
  release.Notify();
  absl::SleepFor(absl::Milliseconds(300));  // well past the idle-exit time
  EXPECT_EQ(pool.threads(), 2);             // the two extra threads left
  const double cpu0 = ProcessCpuSeconds();
  absl::SleepFor(absl::Milliseconds(500));
  const double cpu = ProcessCpuSeconds() - cpu0;
  EXPECT_LT(cpu, 0.05) << "idle pool used " << cpu << " s of CPU in 0.5 s";
  std::atomic<int> runs{0};
  pool.Submit([&] { runs.fetch_add(1); });  // still serves after the idle spell
  pool.Stop();
  EXPECT_EQ(runs.load(), 1);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
