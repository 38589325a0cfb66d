// TaskQueue: lock-free multi-producer hand-off to one consumer.
#include "runtime/transport/task_queue.h"

#include <atomic>
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

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
