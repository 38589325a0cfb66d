// ProgressThread's owner timers (runtime/softrdma/progress_thread.h): they
// fire in deadline order with the closure timers, and not at all once their
// owner is gone.
#include "softrdma/progress_thread.h"

#include <atomic>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace softrdma {
namespace internal {
namespace {

struct Owner {
  absl::Mutex mu;
  std::vector<int> fired ABSL_GUARDED_BY(mu);
  absl::Notification done;
};

TEST(ProgressThreadTimers, OwnerTimersFireInDeadlineOrderAmongClosures) {
  auto owner = std::make_shared<Owner>();
  ProgressThread& pt = ProgressThread::Get();
  // 30 ms, 10 ms (owner timers) and 20 ms (a closure): 10, 20, 30.
  pt.RunAfter(absl::Milliseconds(30), std::weak_ptr<void>(owner),
              [](const std::shared_ptr<void>& o) {
                auto* w = static_cast<Owner*>(o.get());
                {
                  absl::MutexLock l(&w->mu);
                  w->fired.push_back(30);
                }
                w->done.Notify();
              });
  pt.RunAfter(absl::Milliseconds(10), std::weak_ptr<void>(owner),
              [](const std::shared_ptr<void>& o) {
                auto* w = static_cast<Owner*>(o.get());
                absl::MutexLock l(&w->mu);
                w->fired.push_back(10);
              });
  std::weak_ptr<Owner> weak = owner;
  pt.RunAfter(absl::Milliseconds(20), [weak] {
    if (auto w = weak.lock()) {
      absl::MutexLock l(&w->mu);
      w->fired.push_back(20);
    }
  });
  ASSERT_TRUE(owner->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::MutexLock l(&owner->mu);
  EXPECT_EQ(owner->fired, (std::vector<int>{10, 20, 30}));
}

TEST(ProgressThreadTimers, AnOwnerTimerWhoseOwnerIsGoneDoesNotFire) {
  static std::atomic<int> fired{0};
  fired = 0;
  auto owner = std::make_shared<int>(0);
  ProgressThread::Get().RunAfter(absl::Milliseconds(5), std::weak_ptr<void>(owner),
                                 [](const std::shared_ptr<void>&) { fired++; });
  owner.reset();
  // A later timer that does fire: by then the first one was due.
  auto later = std::make_shared<absl::Notification>();
  ProgressThread::Get().RunAfter(absl::Milliseconds(20), std::weak_ptr<void>(later),
                                 [](const std::shared_ptr<void>& n) {
                                   static_cast<absl::Notification*>(n.get())->Notify();
                                 });
  ASSERT_TRUE(later->WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(fired.load(), 0);
}

}  // namespace
}  // namespace internal
}  // namespace softrdma
