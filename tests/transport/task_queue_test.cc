// TaskQueue: lock-free multi-producer hand-off to one consumer.
#include "runtime/transport/task_queue.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace rdmarpc {
namespace internal {
namespace {

TEST(TaskQueue, RunsInPushOrderFromOneThread) {
  TaskQueue q;
  std::vector<int> seen;
  for (int i = 0; i < 5; ++i) q.Push([&seen, i] { seen.push_back(i); });
  EXPECT_EQ(q.size(), 5);
  while (q.RunOne()) {
  }
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(q.size(), 0);
  EXPECT_FALSE(q.RunOne());
}

TEST(TaskQueue, ManyProducersLoseNothingAndKeepPerProducerOrder) {
  TaskQueue q;
  constexpr int kProducers = 4;
  constexpr int kEach = 20000;
  std::vector<int> last(kProducers, -1);
  std::atomic<int> out_of_order{0};
  int ran = 0;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kEach; ++i) {
        q.Push([&, p, i] {
          if (last[p] != i - 1) out_of_order.fetch_add(1);
          last[p] = i;
          ++ran;
        });
      }
    });
  }
  // Consume concurrently with the producers.
  while (ran < kProducers * kEach) {
    if (!q.RunOne()) std::this_thread::yield();
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(ran, kProducers * kEach);
  EXPECT_EQ(out_of_order.load(), 0);
  EXPECT_EQ(q.size(), 0);
}

TEST(TaskQueue, DestroysUnrunTasks) {
  auto counter = std::make_shared<int>(0);
  {
    TaskQueue q;
    q.Push([counter] { ++*counter; });
    EXPECT_EQ(counter.use_count(), 2);
  }
  EXPECT_EQ(counter.use_count(), 1);
  EXPECT_EQ(*counter, 0);
}

// A caller-owned node runs in order with heap tasks, and may be pushed
// again once its task has started.
TEST(TaskQueue, RunsAnOwnedTaskAndTakesItAgainAfterItRan) {
  TaskQueue q;
  std::vector<int> order;
  TaskQueue::Task owned;
  owned.fn = [&order] { order.push_back(2); };
  q.Push([&order] { order.push_back(1); });
  q.Push(&owned);
  q.Push([&order] { order.push_back(3); });
  while (q.RunOne()) {
  }
  owned.fn = [&order] { order.push_back(4); };
  q.Push(&owned);
  EXPECT_EQ(q.size(), 1);
  EXPECT_TRUE(q.RunOne());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(q.size(), 0);
}

// An owned node whose task owns the node's holder (a call that hands
// itself over): the queue's destructor destroys the task, and with it the
// holder, without touching the node after.
TEST(TaskQueue, DestroysAnUnrunOwnedTaskThatOwnsItsNode) {
  struct Holder {
    TaskQueue::Task task;
    std::shared_ptr<int> alive;
  };
  auto alive = std::make_shared<int>(0);
  {
    TaskQueue q;
    auto holder = std::make_unique<Holder>();
    holder->alive = alive;
    Holder* raw = holder.get();
    raw->task.fn = [owned = std::move(holder)] { ++*owned->alive; };
    q.Push(&raw->task);
    EXPECT_EQ(alive.use_count(), 2);
  }
  EXPECT_EQ(alive.use_count(), 1);  // the holder is gone (ASan: no leak, no use after free)
  EXPECT_EQ(*alive, 0);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
