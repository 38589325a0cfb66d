// ProgressThread's owner timers (runtime/softrdma/progress_thread.h): they
// fire in deadline order with the closure timers and with each other, in
// their FIFO lanes (one per delay) as in the heap past kMaxOwnerLanes
// delays, and not at all once their owner is gone.
#include "softrdma/progress_thread.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
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

// The timers of the tests below: each its own owner, which records its id
// in the shared log when it fires.
struct Log {
  absl::Mutex mu;
  std::vector<int> fired ABSL_GUARDED_BY(mu);
  size_t expected = 0;
  absl::Notification all_fired;
};
struct Item {
  int id;
  Log* log;
};

void RecordFired(const std::shared_ptr<void>& o) {
  auto* item = static_cast<Item*>(o.get());
  absl::MutexLock l(&item->log->mu);
  item->log->fired.push_back(item->id);
  if (item->log->fired.size() == item->log->expected) item->log->all_fired.Notify();
}

std::vector<int> Iota(int from, int to) {
  std::vector<int> v;
  for (int i = from; i < to; ++i) v.push_back(i);
  return v;
}

TEST(ProgressThreadTimers, TimersOfOneDelayFireInArmingOrderAcrossTheLanesGrowthAndWrap) {
  ProgressThread& pt = ProgressThread::Get();
  // A delay no other test uses, so the lane starts empty; long enough that
  // each batch is armed well before its first timer fires.
  const absl::Duration delay = absl::Microseconds(303071);
  std::vector<std::shared_ptr<Item>> items;
  auto arm = [&](Log* log, int from, int to) {
    for (int id = from; id < to; ++id) {
      items.push_back(std::make_shared<Item>(Item{id, log}));
      pt.RunAfter(delay, std::weak_ptr<void>(items.back()), &RecordFired);
    }
  };
  // 40 timers grow the lane's ring from 16 to 64 entries; once they fired
  // its head stands at 40, so the next 60 wrap round its end, and 10 more
  // make it grow again while wrapped.
  Log first;
  first.expected = 40;
  arm(&first, 0, 40);
  ASSERT_TRUE(first.all_fired.WaitForNotificationWithTimeout(absl::Seconds(10)));
  Log second;
  second.expected = 70;
  arm(&second, 0, 70);
  ASSERT_TRUE(second.all_fired.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::MutexLock l1(&first.mu);
  EXPECT_EQ(first.fired, Iota(0, 40));
  absl::MutexLock l2(&second.mu);
  EXPECT_EQ(second.fired, Iota(0, 70));
}

TEST(ProgressThreadTimers, TimersOfManyDelaysFireInDeadlineOrder) {
  ProgressThread& pt = ProgressThread::Get();
  // 80 distinct delays, armed in a shuffled order: more than
  // kMaxOwnerLanes, so some wait in lanes and the rest in the heap.
  constexpr int kTimers = 80;
  std::vector<int> order = Iota(0, kTimers);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  Log log;
  log.expected = kTimers;
  std::vector<std::shared_ptr<Item>> items;
  std::vector<absl::Time> earliest(kTimers), latest(kTimers);
  for (int id : order) {
    const absl::Duration delay = absl::Milliseconds(30) + absl::Microseconds(997) * id;
    items.push_back(std::make_shared<Item>(Item{id, &log}));
    earliest[static_cast<size_t>(id)] = absl::Now() + delay;
    pt.RunAfter(delay, std::weak_ptr<void>(items.back()), &RecordFired);
    latest[static_cast<size_t>(id)] = absl::Now() + delay;
  }
  ASSERT_TRUE(log.all_fired.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::MutexLock l(&log.mu);
  std::vector<int> sorted = log.fired;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, Iota(0, kTimers));
  // Each timer fired no later than any whose deadline was surely later
  // (arming times are bracketed by the two clock reads, so a thread
  // preempted while arming cannot make this fail).
  for (size_t i = 0; i + 1 < log.fired.size(); ++i) {
    const size_t a = static_cast<size_t>(log.fired[i]);
    const size_t b = static_cast<size_t>(log.fired[i + 1]);
    EXPECT_LE(earliest[a], latest[b]) << "timer " << a << " fired before timer " << b;
  }
}

}  // namespace
}  // namespace internal
}  // namespace softrdma
