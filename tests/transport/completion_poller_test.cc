// Engine (completion_poller): who holds the poller — the engine thread or a
// caller leading a synchronous call — and that work left behind by a leader
// is always picked up by the engine thread.
#include "runtime/transport/completion_poller.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gflags/gflags.h"
#include "gtest/gtest.h"

DECLARE_int64(rdmarpc_spin_us);

namespace rdmarpc {
namespace internal {
namespace {

class SpinFlag {
 public:
  explicit SpinFlag(int64_t us) : saved_(FLAGS_rdmarpc_spin_us) { FLAGS_rdmarpc_spin_us = us; }
  ~SpinFlag() { FLAGS_rdmarpc_spin_us = saved_; }

 private:
  int64_t saved_;
};

// The engine thread's id, read on it.
std::thread::id EngineThreadId(Engine* e) {
  std::thread::id id;
  absl::Notification n;
  e->Post([&] {
    id = std::this_thread::get_id();
    n.Notify();
  });
  n.WaitForNotification();
  return id;
}

// TryLead, retried: one try gives up after 1 ms when the engine thread,
// asked to step aside, is not scheduled in time (a loaded 2-core host).
bool LeadSoon(Engine* e) {
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!e->TryLead()) {
    if (absl::Now() >= until) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(Engine, CallerLeadsAnIdleEngineAndOthersFollow) {
  SpinFlag spin(0);  // the engine thread sleeps as soon as it is idle
  Engine e("test");
  ASSERT_TRUE(e.Start().ok());
  EngineThreadId(&e);
  ASSERT_TRUE(LeadSoon(&e));
  EXPECT_TRUE(e.InEngineThread());
  bool other_led = true;
  std::thread other([&] { other_led = e.TryLead(); });
  other.join();
  EXPECT_FALSE(other_led);  // a second caller follows
  e.EndLead();
  EXPECT_FALSE(e.InEngineThread());
  ASSERT_TRUE(LeadSoon(&e));  // handed back: free again
  e.EndLead();
  e.Stop();
}

TEST(Engine, LeaderRunsPostedTasksOnItsOwnThread) {
  SpinFlag spin(0);
  Engine e("test");
  ASSERT_TRUE(e.Start().ok());
  EngineThreadId(&e);
  ASSERT_TRUE(LeadSoon(&e));
  std::atomic<bool> ran{false};
  std::thread::id ran_on;
  e.Post([&] {
    ran_on = std::this_thread::get_id();
    ran = true;
  });
  const bool finished = e.LeadUntil([&] { return ran.load(); });
  EXPECT_TRUE(finished);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(Engine, EngineThreadRunsTasksLeftByALeader) {
  SpinFlag spin(0);
  Engine e("test");
  ASSERT_TRUE(e.Start().ok());
  const std::thread::id engine_thread = EngineThreadId(&e);
  ASSERT_TRUE(LeadSoon(&e));
  absl::Notification ran;
  std::thread::id ran_on;
  // Posted from another thread while we lead; we give the poller back
  // without running it: the engine thread must.
  std::thread poster([&] {
    e.Post([&] {
      ran_on = std::this_thread::get_id();
      ran.Notify();
    });
  });
  poster.join();
  e.EndLead();
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(ran_on, engine_thread);
}

TEST(Engine, EngineThreadFiresTimerAddedByALeader) {
  SpinFlag spin(0);
  Engine e("test");
  ASSERT_TRUE(e.Start().ok());
  const std::thread::id engine_thread = EngineThreadId(&e);
  ASSERT_TRUE(LeadSoon(&e));
  absl::Notification fired;
  std::thread::id fired_on;
  e.AddTimer(absl::Now() + absl::Milliseconds(20), [&] {
    fired_on = std::this_thread::get_id();
    fired.Notify();
  });
  e.EndLead();  // the sleeping engine thread must learn of the timer
  ASSERT_TRUE(fired.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(fired_on, engine_thread);
}

TEST(Engine, SpinningEngineStepsAsideForACallerUnlessCallsAreInFlight) {
  SpinFlag spin(60'000'000);  // the engine thread spins (holds the poller)
  Engine e("test");
  ASSERT_TRUE(e.Start().ok());
  EngineThreadId(&e);
  ASSERT_TRUE(LeadSoon(&e));  // it stepped aside
  e.CallStarted();           // as a call started by the leader would
  e.EndLead();               // calls in flight: the engine thread polls on
  EngineThreadId(&e);        // (it holds the poller again once this ran)
  EXPECT_FALSE(e.TryLead());  // and a caller follows rather than take over
  absl::Notification n;
  e.Post([&] {
    e.CallFinished();
    n.Notify();
  });
  n.WaitForNotification();
  ASSERT_TRUE(LeadSoon(&e));
  EXPECT_EQ(e.calls_in_flight(), 0);
  e.EndLead();
  e.Stop();
}

TEST(Engine, NoCallerLeadsAStoppedEngine) {
  Engine e("test");
  ASSERT_TRUE(e.Start().ok());
  e.Stop();
  EXPECT_FALSE(e.TryLead());
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
