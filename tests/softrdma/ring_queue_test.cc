// RingQueue (runtime/softrdma/ring_queue.h): the send and receive queues'
// ring buffer keeps deque order through growth and wrap-around, and
// releases what a popped slot held.
#include "softrdma/ring_queue.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace softrdma {
namespace internal {
namespace {

std::vector<int> Contents(const RingQueue<int>& q) {
  std::vector<int> out;
  for (int v : q) out.push_back(v);
  return out;
}

TEST(RingQueue, KeepsFifoOrderThroughWrapAroundAndGrowth) {
  RingQueue<int> q;
  int next_in = 0, next_out = 0;
  // Moves the head around the ring several times at sizes 3..40, growing
  // it while the live elements wrap past the end.
  for (int round = 0; round < 200; ++round) {
    const int push = 3 + round % 38;
    for (int i = 0; i < push; ++i) q.push_back(next_in++);
    while (q.size() > static_cast<size_t>(round % 5)) {
      ASSERT_EQ(q.front(), next_out);
      q.pop_front();
      ++next_out;
    }
  }
  std::vector<int> want;
  for (int v = next_out; v < next_in; ++v) want.push_back(v);
  EXPECT_EQ(Contents(q), want);
}

TEST(RingQueue, PushFrontIndexingAndBack) {
  RingQueue<int> q;
  q.push_back(2);
  q.push_back(3);
  q.push_front(1);
  q.push_front(0);
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q.front(), 0);
  EXPECT_EQ(q.back(), 3);
  for (size_t i = 0; i < q.size(); ++i) EXPECT_EQ(q[i], static_cast<int>(i));
  q[2] = 7;
  EXPECT_EQ(Contents(q), (std::vector<int>{0, 1, 7, 3}));
  q.clear();
  EXPECT_TRUE(q.empty());
  q.push_back(9);
  EXPECT_EQ(Contents(q), (std::vector<int>{9}));
}

TEST(RingQueue, PopAndClearReleaseWhatTheSlotHeld) {
  RingQueue<std::shared_ptr<int>> q;
  auto a = std::make_shared<int>(1);
  auto b = std::make_shared<int>(2);
  q.push_back(a);
  q.push_back(b);
  EXPECT_EQ(a.use_count(), 2);
  q.pop_front();
  EXPECT_EQ(a.use_count(), 1);  // not kept alive by the popped slot
  EXPECT_EQ(b.use_count(), 2);
  q.clear();
  EXPECT_EQ(b.use_count(), 1);
}

}  // namespace
}  // namespace internal
}  // namespace softrdma
