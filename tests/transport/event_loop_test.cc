// EventLoop: who holds the poller — the loop thread or a
// caller leading a synchronous call — and that work left behind by a leader
// is always picked up by the loop thread.
#include "runtime/transport/event_loop.h"

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

// The loop thread's id, read on it.
std::thread::id LoopThreadId(EventLoop* e) {
  std::thread::id id;
  absl::Notification n;
  e->Post([&] {
    id = std::this_thread::get_id();
    n.Notify();
  });
  n.WaitForNotification();
  return id;
}

// TryLead, retried: one try gives up after 1 ms when the loop thread,
// asked to step aside, is not scheduled in time (a loaded 2-core host).
bool LeadSoon(EventLoop* e) {
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!e->TryLead()) {
    if (absl::Now() >= until) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(EventLoop, CallerLeadsAnIdleLoopAndOthersFollow) {
  SpinFlag spin(0);  // the loop thread sleeps as soon as it is idle
  EventLoop e("test");
  ASSERT_TRUE(e.Start().ok());
  LoopThreadId(&e);
  ASSERT_TRUE(LeadSoon(&e));
  EXPECT_TRUE(e.InLoopThread());
  bool other_led = true;
  std::thread other([&] { other_led = e.TryLead(); });
  other.join();
  EXPECT_FALSE(other_led);  // a second caller follows
  e.EndLead();
  EXPECT_FALSE(e.InLoopThread());
  ASSERT_TRUE(LeadSoon(&e));  // handed back: free again
  e.EndLead();
  e.Stop();
}

TEST(EventLoop, LeaderRunsPostedTasksOnItsOwnThread) {
  SpinFlag spin(0);
  EventLoop e("test");
  ASSERT_TRUE(e.Start().ok());
  LoopThreadId(&e);
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

TEST(EventLoop, LoopThreadRunsTasksLeftByALeader) {
  SpinFlag spin(0);
  EventLoop e("test");
  ASSERT_TRUE(e.Start().ok());
  const std::thread::id engine_thread = LoopThreadId(&e);
  ASSERT_TRUE(LeadSoon(&e));
  absl::Notification ran;
  std::thread::id ran_on;
  // Posted from another thread while we lead; we give the poller back
  // without running it: the loop thread must.
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

TEST(EventLoop, LoopThreadFiresTimerAddedByALeader) {
  SpinFlag spin(0);
  EventLoop e("test");
  ASSERT_TRUE(e.Start().ok());
  const std::thread::id engine_thread = LoopThreadId(&e);
  ASSERT_TRUE(LeadSoon(&e));
  absl::Notification fired;
  std::thread::id fired_on;
  e.AddTimer(absl::Now() + absl::Milliseconds(20), [&] {
    fired_on = std::this_thread::get_id();
    fired.Notify();
  });
  e.EndLead();  // the sleeping loop thread must learn of the timer
  ASSERT_TRUE(fired.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(fired_on, engine_thread);
}

TEST(EventLoop, SpinningLoopStepsAsideForACallerUnlessCallsAreInFlight) {
  SpinFlag spin(60'000'000);  // the loop thread spins (holds the poller)
  EventLoop e("test");
  ASSERT_TRUE(e.Start().ok());
  LoopThreadId(&e);
  ASSERT_TRUE(LeadSoon(&e));  // it stepped aside
  e.CallStarted();           // as a call started by the leader would
  e.EndLead();               // calls in flight: the loop thread polls on
  LoopThreadId(&e);        // (it holds the poller again once this ran)
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

TEST(EventLoop, NoCallerLeadsAStoppedLoop) {
  EventLoop e("test");
  ASSERT_TRUE(e.Start().ok());
  e.Stop();
  EXPECT_FALSE(e.TryLead());
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
