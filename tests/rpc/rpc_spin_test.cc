// Completion loops with no spinning slot left (spin_governor.h): every
// poller sleeps on its completion channel instead of busy-polling, and
// calls of every kind still complete.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/transport/engine_stats.h"
#include "runtime/transport/spin_governor.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

using internal::SpinSlots;

// Takes every slot of the process while alive. A loop spinning out its
// idle window holds one until it sleeps (--rdmarpc_spin_us, 50 us), so the
// constructor keeps trying, for up to 5 s.
class AllSlotsTaken {
 public:
  AllSlotsTaken() {
    const absl::Time give_up = absl::Now() + absl::Seconds(5);
    while (taken_ < SpinSlots::Process().capacity() && absl::Now() < give_up) {
      if (SpinSlots::Process().TryAcquire()) {
        ++taken_;
      } else {
        absl::SleepFor(absl::Microseconds(100));
      }
    }
  }
  ~AllSlotsTaken() {
    for (int i = 0; i < taken_; ++i) SpinSlots::Process().Release();
  }
  int taken() const { return taken_; }

 private:
  int taken_ = 0;
};

absl::Status EchoOnce(Channel* channel, const std::string& text, EchoResponse* resp) {
  EchoRequest req;
  req.set_text(text);
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  return Echo(channel, &ctx, req, resp);
}

TEST(SpinSlotsTaken, BlockingCallsSleepInsteadOfSpinningAndAllComplete) {
  EchoFixture f;
  EchoResponse resp;
  ASSERT_TRUE(EchoOnce(f.channel.get(), "warm up", &resp).ok());
  AllSlotsTaken taken;
  ASSERT_EQ(taken.taken(), SpinSlots::Process().capacity());
  const internal::EngineTotals before = internal::SumEngineStats();
  constexpr int kCalls = 100;
  for (int i = 0; i < kCalls; ++i) {
    const std::string text = absl::StrCat("call ", i);
    absl::Status s = EchoOnce(f.channel.get(), text, &resp);
    ASSERT_TRUE(s.ok()) << i << ": " << s;
    ASSERT_EQ(resp.text(), text);
  }
  const internal::EngineTotals after = internal::SumEngineStats();
  // Each call finds no slot at least once (the caller leading it, or the
  // server's worker waiting for the next request) and the loops sleep
  // between calls: at least the server's worker once per call.
  EXPECT_GE(after.spins_refused - before.spins_refused, kCalls);
  EXPECT_GE(after.loop_sleeps - before.loop_sleeps, kCalls);
}

TEST(SpinSlotsTaken, AsyncCallsInFlightCompleteWithSleepingLoops) {
  EchoFixture f;
  AllSlotsTaken taken;
  ASSERT_EQ(taken.taken(), SpinSlots::Process().capacity());
  const internal::EngineTotals before = internal::SumEngineStats();
  constexpr int kCalls = 64;
  std::vector<std::unique_ptr<ClientContext>> contexts;
  std::vector<EchoRequest> requests(kCalls);
  std::vector<EchoResponse> responses(kCalls);
  std::vector<absl::Status> statuses(kCalls);
  absl::Mutex mu;
  int done = 0;
  for (int i = 0; i < kCalls; ++i) {
    requests[i].set_text(absl::StrCat("async ", i));
    contexts.push_back(std::make_unique<ClientContext>());
    contexts.back()->set_timeout(absl::Seconds(10));
    internal::AsyncUnaryCall(f.channel.get(), kEchoMethod, contexts.back().get(), requests[i],
                             &responses[i], [&, i](absl::Status s) {
                               absl::MutexLock lock(&mu);
                               statuses[i] = s;
                               ++done;
                             });
  }
  absl::MutexLock lock(&mu);
  ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                      +[](int* d) { return *d == kCalls; }, &done),
                                  absl::Seconds(20)))
      << done << " of " << kCalls << " calls completed";
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i];
    EXPECT_EQ(responses[i].text(), requests[i].text());
  }
  const internal::EngineTotals after = internal::SumEngineStats();
  // The client's loop and the server's worker each wanted to spin and
  // slept instead.
  EXPECT_GE(after.spins_refused - before.spins_refused, 2);
  EXPECT_GE(after.loop_sleeps - before.loop_sleeps, 2);
}

TEST(SpinSlotsTaken, IdleLoopsGiveTheirSlotsBack) {
  EchoFixture f;
  EchoResponse resp;
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(EchoOnce(f.channel.get(), "x", &resp).ok());
  // Idle, every loop of the fixture sleeps once its idle window
  // (--rdmarpc_spin_us, 50 us) is over, and a sleeping loop holds no slot:
  // all of them come free while the server and channel are still up.
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (SpinSlots::Process().in_use() > 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(SpinSlots::Process().in_use(), 0);
  // Calls start again, taking slots as they spin.
  ASSERT_TRUE(EchoOnce(f.channel.get(), "again", &resp).ok());
  EXPECT_EQ(resp.text(), "again");
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
