// rpc_shutdown_test.cc: Server::Shutdown(grace) starts no handler once it
// began, delivers the replies of handlers that finish within the grace,
// cancels the rest (their clients get UNAVAILABLE at once), and returns as
// soon as the remaining handlers returned. Every accepted call gets exactly
// one answer.
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/call_model_service.h"

namespace rdmarpc {
namespace test {
namespace {

// Async calls of `method`, each answered exactly once (checked).
struct Calls {
  explicit Calls(int n) : reqs(n), resps(n), ctxs(n), results(n), answers(n) {}
  void Start(Channel* ch, const char* method, int i) {
    ctxs[i].set_timeout(absl::Seconds(60));
    internal::AsyncUnaryCall(ch, method, &ctxs[i], reqs[i], &resps[i], [this, i](absl::Status s) {
      results[i] = std::move(s);
      answers[i].fetch_add(1);
      total.fetch_add(1);
    });
  }
  bool AllAnswered() const { return total.load() == static_cast<int>(reqs.size()); }
  std::vector<EchoRequest> reqs;
  std::vector<EchoResponse> resps;
  std::vector<ClientContext> ctxs;
  std::vector<absl::Status> results;
  std::vector<std::atomic<int>> answers;
  std::atomic<int> total{0};
};

struct Fixture {
  explicit Fixture(int handler_threads) : server(Options(handler_threads)) {
    EXPECT_TRUE(server.AddService(&service).ok());
    absl::Status s = server.Start("127.0.0.1:0");
    EXPECT_TRUE(s.ok()) << s;
    ChannelOptions co;
    co.pool_size = 1;  // one connection: every call below shares it
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()), co);
    EXPECT_TRUE(ch.ok()) << ch.status();
    channel = *ch;
  }
  static ServerOptions Options(int handler_threads) {
    ServerOptions so;
    so.num_workers = 1;
    so.handler_threads = handler_threads;
    so.max_handler_threads = handler_threads;
    return so;
  }
  CallModelService service;
  Server server;
  std::shared_ptr<Channel> channel;
};

TEST(Shutdown, GraceExpiryCancelsRunningHandlersAndStartsNoQueuedOne) {
  Fixture f(/*handler_threads=*/2);
  constexpr int kCalls = 100;
  Calls calls(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    calls.reqs[i].set_sleep_ms(20000);  // far longer than the grace
    calls.Start(f.channel.get(), kSlowMethod, i);
  }
  // Both pool threads run a handler; the other 98 calls wait for one.
  ASSERT_TRUE(WaitFor([&] { return f.service.started_.load() == 2; }));
  const absl::Time t0 = absl::Now();
  f.server.Shutdown(absl::Seconds(1));
  const absl::Duration took = absl::Now() - t0;
  // The grace, then the two cancelled handlers return within a few ms.
  EXPECT_GE(took, absl::Seconds(1));
  EXPECT_LT(took, absl::Seconds(3)) << took;
  EXPECT_EQ(f.service.started_.load(), 2);  // none started after Shutdown began
  EXPECT_EQ(f.service.saw_cancel_.load(), 2);
  EXPECT_EQ(f.service.on_cancel_runs_.load(), 2);
  EXPECT_EQ(f.service.returned_.load(), 2);
  ASSERT_TRUE(WaitFor([&] { return calls.AllAnswered(); }));
  int not_started = 0, cancelled_at_grace = 0;
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(calls.answers[i].load(), 1) << i;
    ASSERT_EQ(calls.results[i].code(), absl::StatusCode::kUnavailable) << i << calls.results[i];
    const absl::string_view m = calls.results[i].message();
    if (m.find("was not started") != absl::string_view::npos) ++not_started;
    if (m.find("did not finish within the grace period") != absl::string_view::npos) {
      ++cancelled_at_grace;
    }
  }
  EXPECT_EQ(not_started, kCalls - 2);
  EXPECT_EQ(cancelled_at_grace, 2);
}

// A client whose channel is idle sleeps with its CQ unarmed only for
// EventLoop::kUnarmedSleep, then arms it, so the server's kGoAway wakes it
// and is answered at once, not at the client's next timer (its keepalive,
// about 1 s after the last call) or the server's 1 s bound for the answer.
TEST(Shutdown, AnIdleClientAnswersTheDrainAtOnce) {
  Fixture f(/*handler_threads=*/2);
  Calls calls(1);
  calls.reqs[0].set_text("only call");
  calls.Start(f.channel.get(), kSlowMethod, 0);
  ASSERT_TRUE(WaitFor([&] { return calls.AllAnswered(); }));
  ASSERT_TRUE(calls.results[0].ok()) << calls.results[0];
  absl::SleepFor(absl::Milliseconds(150));  // the client's loop is asleep, armed
  const absl::Time t0 = absl::Now();
  f.server.Shutdown(absl::Seconds(10));
  const absl::Duration took = absl::Now() - t0;
  EXPECT_LT(took, absl::Milliseconds(600)) << took;  // 0.9-1 s if the kGoAway waited
}

TEST(Shutdown, RepliesOfHandlersFinishingWithinTheGraceAreDeliveredAndItReturnsEarly) {
  Fixture f(/*handler_threads=*/2);
  Calls calls(2);
  for (int i = 0; i < 2; ++i) {
    calls.reqs[i].set_sleep_ms(300);
    calls.reqs[i].set_text(absl::StrCat("reply ", i));
    calls.Start(f.channel.get(), kSlowMethod, i);
  }
  ASSERT_TRUE(WaitFor([&] { return f.service.started_.load() == 2; }));
  const absl::Time t0 = absl::Now();
  f.server.Shutdown(absl::Seconds(10));
  const absl::Duration took = absl::Now() - t0;
  EXPECT_LT(took, absl::Seconds(5)) << took;  // not the 10 s grace
  ASSERT_TRUE(WaitFor([&] { return calls.AllAnswered(); }));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(calls.answers[i].load(), 1);
    ASSERT_TRUE(calls.results[i].ok()) << calls.results[i];
    EXPECT_EQ(calls.resps[i].text(), absl::StrCat("reply ", i));
  }
  EXPECT_EQ(f.service.saw_cancel_.load(), 0);
  EXPECT_EQ(f.service.on_cancel_runs_.load(), 0);
}

TEST(Shutdown, HandlerIgnoringCancellationHoldsShutdownUpButItsClientIsAnsweredAtTheGrace) {
  Fixture f(/*handler_threads=*/1);
  Calls calls(1);
  calls.reqs[0].set_sleep_ms(1500);
  calls.reqs[0].set_text("ignore-cancel");
  calls.Start(f.channel.get(), kSlowMethod, 0);
  ASSERT_TRUE(WaitFor([&] { return f.service.started_.load() == 1; }));
  std::atomic<bool> shutdown_returned{false};
  const absl::Time t0 = absl::Now();
  std::thread shutdown([&] {
    f.server.Shutdown(absl::Milliseconds(200));
    shutdown_returned.store(true);
  });
  // The client hears UNAVAILABLE at the grace, while the handler still runs.
  ASSERT_TRUE(WaitFor([&] { return calls.AllAnswered(); }));
  const absl::Duration answered_after = absl::Now() - t0;
  EXPECT_EQ(calls.results[0].code(), absl::StatusCode::kUnavailable) << calls.results[0];
  EXPECT_LT(answered_after, absl::Milliseconds(1200)) << answered_after;
  EXPECT_FALSE(shutdown_returned.load());
  EXPECT_EQ(f.service.returned_.load(), 0);
  shutdown.join();
  // Shutdown returned only once the handler did.
  EXPECT_EQ(f.service.returned_.load(), 1);
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(1500));
  EXPECT_EQ(f.service.on_cancel_runs_.load(), 1);
  EXPECT_EQ(calls.answers[0].load(), 1);
}

TEST(Shutdown, ACallMadeDuringTheGraceIsNotSentToTheDrainingServer) {
  Fixture f(/*handler_threads=*/2);
  Calls running(1);
  running.reqs[0].set_sleep_ms(800);
  running.Start(f.channel.get(), kSlowMethod, 0);
  ASSERT_TRUE(WaitFor([&] { return f.service.started_.load() == 1; }));
  std::thread shutdown([&] { f.server.Shutdown(absl::Seconds(5)); });
  absl::SleepFor(absl::Milliseconds(100));  // Shutdown has begun
  EchoRequest req;
  req.set_sleep_ms(1);
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  absl::Status s = internal::BlockingUnaryCall(f.channel.get(), kSlowMethod, &ctx, req, &resp);
  // The client was told the server drains (kGoAway): the call does not go
  // on the open connection, and a new one is refused. No other server:
  // UNAVAILABLE, naming it.
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find(absl::StrCat("127.0.0.1:", f.server.port())), absl::string_view::npos)
      << s;
  shutdown.join();
  EXPECT_EQ(f.service.started_.load(), 1);
  ASSERT_TRUE(WaitFor([&] { return running.AllAnswered(); }));
  EXPECT_TRUE(running.results[0].ok()) << running.results[0];
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
