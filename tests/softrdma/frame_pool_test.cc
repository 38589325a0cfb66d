// FramePool (runtime/softrdma/frame_pool.h): frames are reused once nobody
// else holds them, never while someone does; each thread has its own pool,
// whose frames outlive it, and a thread_local destructor that runs after
// the pool is gone still gets frames.
#include "softrdma/frame_pool.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace softrdma {
namespace internal {
namespace {

FrameHeader Header(uint32_t psn) {
  FrameHeader h;
  h.type = FrameType::kSend;
  h.psn = psn;
  return h;
}

TEST(FramePool, ReusesAFrameOnceItsLastOtherHolderLetGo) {
  FramePool pool;
  std::shared_ptr<std::vector<uint8_t>> first = pool.Get(Header(1), 32);
  const std::vector<uint8_t>* bytes = first.get();
  ASSERT_EQ(first->size(), kHeaderSize + 32);
  // Held (by a WQE, say): a second frame is another buffer.
  std::shared_ptr<std::vector<uint8_t>> second = pool.Get(Header(2), 32);
  EXPECT_NE(second.get(), bytes);
  first.reset();
  second.reset();
  // Both free now: the search starts at the oldest, which comes back
  // re-encoded for its new use.
  std::shared_ptr<std::vector<uint8_t>> again = pool.Get(Header(3), 8);
  EXPECT_EQ(again.get(), bytes);
  ASSERT_EQ(again->size(), kHeaderSize + 8);
  const FrameHeader h = DecodeHeader(again->data());
  EXPECT_EQ(h.psn, 3u);
  EXPECT_EQ(h.length, 8u);
}

TEST(FramePool, NeverHandsOutAFrameSomeoneStillHolds) {
  FramePool pool;
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> held;
  for (uint32_t i = 0; i < 40; ++i) held.push_back(pool.Get(Header(i), 16));
  // Every frame is a distinct buffer while all are held, and each still
  // says what it was built for.
  for (size_t i = 0; i < held.size(); ++i) {
    for (size_t j = i + 1; j < held.size(); ++j) ASSERT_NE(held[i].get(), held[j].get());
    EXPECT_EQ(DecodeHeader(held[i]->data()).psn, i);
  }
  // All let go: the next 40 frames are those same buffers, each once.
  std::vector<const std::vector<uint8_t>*> freed;
  for (auto& f : held) freed.push_back(f.get());
  held.clear();
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> again;
  for (size_t k = 0; k < freed.size(); ++k) {
    again.push_back(pool.Get(Header(100), 16));
    EXPECT_NE(std::find(freed.begin(), freed.end(), again.back().get()), freed.end());
  }
  for (size_t i = 0; i < again.size(); ++i) {
    for (size_t j = i + 1; j < again.size(); ++j) ASSERT_NE(again[i].get(), again[j].get());
  }
  // And with all of them held again, one more is a new buffer.
  std::shared_ptr<std::vector<uint8_t>> extra = pool.Get(Header(101), 16);
  EXPECT_EQ(std::find(freed.begin(), freed.end(), extra.get()), freed.end());
}

TEST(FramePool, LargeFramesAreNotKept) {
  FramePool pool;
  std::shared_ptr<std::vector<uint8_t>> big = pool.Get(Header(1), FramePool::kMaxPooledPayload + 1);
  ASSERT_EQ(big->size(), kHeaderSize + FramePool::kMaxPooledPayload + 1);
  EXPECT_EQ(big.use_count(), 1);  // the pool holds no reference to it
}

TEST(FramePool, EachThreadHasItsOwnPoolWhoseFramesOutliveIt) {
  FramePool* mine = FramePool::ForThisThread();
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(FramePool::ForThisThread(), mine);
  FramePool* theirs = nullptr;
  std::shared_ptr<std::vector<uint8_t>> kept;
  std::thread t([&] {
    theirs = FramePool::ForThisThread();
    kept = FramePool::Take(Header(7), 24);
  });
  t.join();
  EXPECT_NE(theirs, mine);
  // The thread and its pool are gone; the frame it took is ours now.
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept.use_count(), 1);
  ASSERT_EQ(kept->size(), kHeaderSize + 24);
  EXPECT_EQ(DecodeHeader(kept->data()).psn, 7u);
}

// What a thread_local destructor that runs after the thread's pool was freed
// got from FramePool::Take (a per-thread connection saying goodbye).
struct LateTake {
  bool armed = false;
  std::shared_ptr<std::vector<uint8_t>>* out = nullptr;
  ~LateTake() {
    if (out != nullptr) *out = FramePool::Take(Header(9), 40);
  }
};
thread_local LateTake t_late_take;

TEST(FramePool, AThreadLocalDestroyedAfterThePoolStillGetsFrames) {
  std::shared_ptr<std::vector<uint8_t>> late;
  std::thread t([&] {
    t_late_take.out = &late;  // made before the pool: destroyed after it
    std::shared_ptr<std::vector<uint8_t>> f = FramePool::Take(Header(8), 40);  // makes the pool
    ASSERT_NE(f, nullptr);
  });
  t.join();
  ASSERT_NE(late, nullptr);
  ASSERT_EQ(late->size(), kHeaderSize + 40);
  EXPECT_EQ(DecodeHeader(late->data()).psn, 9u);
  EXPECT_EQ(late.use_count(), 1);  // built fresh: no pool holds it
}

}  // namespace
}  // namespace internal
}  // namespace softrdma
