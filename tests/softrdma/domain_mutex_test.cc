// domain_mutex_test.cc: the exclusion of a thread domain's objects
// (internal.h's DomainMutex): the owner's lock-free way in and visitors' way
// in exclude each other, nest, and a second owner at once is refused.
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "softrdma/internal.h"

namespace softrdma {
namespace internal {
namespace {

struct Guarded {
  DomainMutex mu;
  uint64_t count = 0;  // plain: only the exclusion keeps increments whole
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};  // a thread found another inside
  // Holds the object for a few hundred cycles, counting any other thread
  // found inside meanwhile.
  void Bump() {
    if (inside.fetch_add(1, std::memory_order_relaxed) != 0) overlaps++;
    const uint64_t before = count;
    for (volatile int i = 0; i < 32; i = i + 1) {
    }
    count = before + 1;
    inside.fetch_sub(1, std::memory_order_relaxed);
  }
};

TEST(DomainMutex, OwnerAndVisitorsExcludeEachOther) {
  std::unique_ptr<SoftTd, void (*)(SoftTd*)> td(NewThreadDomain(nullptr), &ReleaseThreadDomain);
  Guarded a, b;  // two objects of one domain
  a.mu.set_domain(td.get());
  b.mu.set_domain(td.get());
  constexpr int kOwnerRounds = 2000000;
  constexpr int kVisitorRounds = 20000;
  constexpr int kVisitors = 2;
  std::atomic<bool> owner_done{false};
  std::thread owner([&] {
    for (int i = 0; i < kOwnerRounds; ++i) {
      OwnerScope scope(td.get());
      DomainLock la(&a.mu);
      a.Bump();
      DomainLock lb(&b.mu);  // nested: the domain is held already
      b.Bump();
    }
    owner_done = true;
  });
  std::vector<std::thread> visitors;
  for (int v = 0; v < kVisitors; ++v) {
    visitors.emplace_back([&] {
      for (int i = 0; i < kVisitorRounds; ++i) {
        DomainLock lb(&b.mu);
        b.Bump();
        DomainLock la(&a.mu);
        a.Bump();
      }
    });
  }
  owner.join();
  for (std::thread& t : visitors) t.join();
  EXPECT_TRUE(owner_done);
  const uint64_t want = kOwnerRounds + uint64_t{kVisitors} * kVisitorRounds;
  EXPECT_EQ(a.count, want);
  EXPECT_EQ(b.count, want);
  EXPECT_EQ(a.overlaps.load() + b.overlaps.load(), 0);
  EXPECT_EQ(td->owner_in.load(), 0u);
  EXPECT_FALSE(td->visiting.load());
}

TEST(DomainMutex, AnObjectWithoutADomainUsesItsOwnMutex) {
  Guarded g;
  EXPECT_EQ(g.mu.domain(), nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50000; ++i) {
        OwnerScope scope(nullptr);
        DomainLock l(&g.mu);
        ++g.count;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(g.count, 150000u);
}

// Thread A holds the domain as its owner while this thread, also calling
// itself its owner, goes in.
void EnterAsSecondOwner(SoftTd* td, Guarded* g) {
  absl::Notification inside, done;
  std::thread first([&] {
    OwnerScope scope(td);
    DomainLock l(&g->mu);
    inside.Notify();
    done.WaitForNotification();
  });
  inside.WaitForNotification();
  {
    OwnerScope scope(td);
    DomainLock l(&g->mu);  // the domain's promise is broken here
  }
  done.Notify();
  first.join();
}

TEST(DomainMutexDeathTest, TwoOwnersAtOnceAreRefused) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  std::unique_ptr<SoftTd, void (*)(SoftTd*)> td(NewThreadDomain(nullptr), &ReleaseThreadDomain);
  if (!td->fast) GTEST_SKIP() << "no MEMBARRIER_CMD_PRIVATE_EXPEDITED: owners take the mutex";
  Guarded g;
  g.mu.set_domain(td.get());
  EXPECT_DEATH(EnterAsSecondOwner(td.get(), &g),
               "two threads use the objects of one thread domain at once");
}

}  // namespace
}  // namespace internal
}  // namespace softrdma
