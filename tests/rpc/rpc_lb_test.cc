// rpc_lb_test.cc: round robin over several servers skips one whose
// connections fail, reconnects it in the background with gRPC's connection
// backoff, and sends it calls again once it is back.
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "absl/synchronization/notification.h"
#include "tests/rpc/call_model_service.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

absl::Status Call(Channel* channel) {
  EchoRequest req;
  req.set_text("x");
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(5));
  return Echo(channel, &ctx, req, &resp);
}

struct Tally {
  int ok = 0;
  int failed = 0;
  absl::Status last_failure;
};

// Calls one after another for `d`.
Tally CallFor(Channel* channel, absl::Duration d) {
  Tally t;
  const absl::Time until = absl::Now() + d;
  while (absl::Now() < until) {
    absl::Status s = Call(channel);
    if (s.ok()) {
      ++t.ok;
    } else {
      ++t.failed;
      t.last_failure = s;
    }
  }
  return t;
}

TEST(RoundRobin, HalfDeadListSucceedsEveryCallFromTheStart) {
  EchoService live_service;
  Server live;
  ASSERT_TRUE(live.AddService(&live_service).ok());
  ASSERT_TRUE(live.Start("127.0.0.1:0").ok());
  const int dead = PortWithNoListener();
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", live.port(), ",127.0.0.1:", dead));
  ASSERT_TRUE(ch.ok()) << ch.status();
  const Tally first = CallFor(ch->get(), absl::Seconds(1));
  EXPECT_GT(first.ok, 0);
  // Even in the first second: a call picked for the dead server never left
  // this process, so it went to the live one (a transparent retry).
  EXPECT_EQ(first.failed, 0) << first.last_failure;
  // Then 3 s, past the dead server's reconnect attempts at about 1 s and
  // 2.6 s of backoff: none of them costs a call.
  const Tally after = CallFor(ch->get(), absl::Seconds(3));
  EXPECT_EQ(after.failed, 0) << after.last_failure;
  EXPECT_GT(after.ok, 100);
  EXPECT_EQ(live_service.calls(), first.ok + after.ok);
}

TEST(RoundRobin, AServerThatLeavesIsSkippedAndGetsCallsAgainOnceBack) {
  EchoService a_service, b_service;
  Server a;
  ASSERT_TRUE(a.AddService(&a_service).ok());
  ASSERT_TRUE(a.Start("127.0.0.1:0").ok());
  auto b = std::make_unique<Server>();
  ASSERT_TRUE(b->AddService(&b_service).ok());
  ASSERT_TRUE(b->Start("127.0.0.1:0").ok());
  const int b_port = b->port();
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", a.port(), ",127.0.0.1:", b_port));
  ASSERT_TRUE(ch.ok()) << ch.status();
  Tally t = CallFor(ch->get(), absl::Milliseconds(300));
  EXPECT_EQ(t.failed, 0) << t.last_failure;
  EXPECT_GT(b_service.calls(), 0);

  b->Shutdown();
  b->Wait();
  b.reset();
  CallFor(ch->get(), absl::Milliseconds(500));  // calls that picked b as it left may fail
  t = CallFor(ch->get(), absl::Seconds(1));
  EXPECT_EQ(t.failed, 0) << t.last_failure;
  EXPECT_GT(t.ok, 50);

  // b back on its port: the background reconnect (backoff 1 s, then 1.6 s,
  // ±20 %) finds it, and round robin sends it calls again.
  EchoService b2_service;
  Server b2;
  ASSERT_TRUE(b2.AddService(&b2_service).ok());
  ASSERT_TRUE(b2.Start(absl::StrCat("127.0.0.1:", b_port)).ok());
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (b2_service.calls() == 0 && absl::Now() < until) {
    EXPECT_TRUE(Call(ch->get()).ok());
  }
  EXPECT_GT(b2_service.calls(), 0) << "b never got a call back";
  t = CallFor(ch->get(), absl::Milliseconds(300));
  EXPECT_EQ(t.failed, 0) << t.last_failure;
}

TEST(RoundRobin, EveryServerFailingStillTriesAndFailsUnavailable) {
  const int first = PortWithNoListener();
  const int second = PortWithNoListener();
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", first, ",127.0.0.1:", second));
  ASSERT_TRUE(ch.ok()) << ch.status();
  for (int i = 0; i < 20; ++i) {
    absl::Status s = Call(ch->get());
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  }
}

TEST(PickFirst, EveryCallGoesToTheFirstServerUntilItLeaves) {
  EchoService a_service, b_service;
  auto a = std::make_unique<Server>();
  ASSERT_TRUE(a->AddService(&a_service).ok());
  ASSERT_TRUE(a->Start("127.0.0.1:0").ok());
  Server b;
  ASSERT_TRUE(b.AddService(&b_service).ok());
  ASSERT_TRUE(b.Start("127.0.0.1:0").ok());
  ChannelOptions options;
  options.load_balancing_policy = "pick_first";
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", a->port(), ",127.0.0.1:", b.port()), options);
  ASSERT_TRUE(ch.ok()) << ch.status();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Call(ch->get()).ok());
  EXPECT_EQ(a_service.calls(), 20);
  EXPECT_EQ(b_service.calls(), 0);
  // a drains and goes: the next server of the list takes every call.
  a->Shutdown();
  a->Wait();
  a.reset();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Call(ch->get()).ok()) << i;
  EXPECT_EQ(a_service.calls(), 20);
  EXPECT_EQ(b_service.calls(), 20);
}

TEST(LeastRequest, CallsAvoidTheServerWithACallInFlight) {
  CallModelService a_service, b_service;
  Server a, b;
  ASSERT_TRUE(a.AddService(&a_service).ok());
  ASSERT_TRUE(b.AddService(&b_service).ok());
  ASSERT_TRUE(a.Start("127.0.0.1:0").ok());
  ASSERT_TRUE(b.Start("127.0.0.1:0").ok());
  ChannelOptions options;
  options.load_balancing_policy = "least_request";
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", a.port(), ",127.0.0.1:", b.port()), options);
  ASSERT_TRUE(ch.ok()) << ch.status();
  auto slow_call = [&](int sleep_ms) {
    EchoRequest req;
    req.set_sleep_ms(sleep_ms);
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(10));
    return internal::BlockingUnaryCall(ch->get(), kSlowMethod, &ctx, req, &resp);
  };
  // One long call holds one of the two servers.
  absl::Status long_status;
  std::thread long_call([&] { long_status = slow_call(1500); });
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (a_service.started_.load() + b_service.started_.load() < 1 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const bool a_busy = a_service.started_.load() == 1;
  // With two servers both are drawn every time: each short call goes to
  // the idle one.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(slow_call(0).ok()) << i;
  EXPECT_EQ((a_busy ? a_service : b_service).started_.load(), 1);
  EXPECT_EQ((a_busy ? b_service : a_service).started_.load(), 20);
  long_call.join();
  EXPECT_TRUE(long_status.ok()) << long_status;
}

TEST(LoadBalancing, AnUnknownPolicyIsInvalidArgument) {
  ChannelOptions options;
  options.load_balancing_policy = "random";
  auto ch = CreateChannel("127.0.0.1:1", options);
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ch.status().message(),
            "ChannelOptions: load_balancing_policy \"random\" is not round_robin, pick_first or "
            "least_request");
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
