// rpc_handler_pool_test.cc: handlers run on the handler pool, never on the
// worker that polls the CQ, so a slow handler delays no other call; inline
// methods run on the worker.
#include <algorithm>
#include <atomic>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/call_model_service.h"

namespace rdmarpc {
namespace test {
namespace {

struct Fixture {
  explicit Fixture(ServerOptions so = ServerOptions()) : server(so) {
    EXPECT_TRUE(server.AddService(&service).ok());
    absl::Status s = server.Start("127.0.0.1:0");
    EXPECT_TRUE(s.ok()) << s;
  }
  std::shared_ptr<Channel> NewChannel(int pool_size = 1) {
    ChannelOptions co;
    co.pool_size = pool_size;
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()), co);
    EXPECT_TRUE(ch.ok()) << ch.status();
    // Connect now, so set-up time is not counted in what the tests measure.
    EchoRequest req;
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(30));
    EXPECT_TRUE(internal::BlockingUnaryCall(ch->get(), kInlineMethod, &ctx, req, &resp).ok());
    return *ch;
  }
  CallModelService service;
  Server server;
};

ServerOptions OneWorker() {
  ServerOptions so;
  so.num_workers = 1;
  return so;
}

TEST(HandlerPool, ThreeConcurrentOneSecondCallsOnOneWorkerEachTakeAboutOneSecond) {
  Fixture f(OneWorker());
  std::shared_ptr<Channel> ch = f.NewChannel();
  constexpr int kCalls = 3;
  std::vector<EchoRequest> reqs(kCalls);
  std::vector<EchoResponse> resps(kCalls);
  std::vector<ClientContext> ctxs(kCalls);
  std::vector<absl::Status> results(kCalls);
  std::vector<absl::Duration> took(kCalls);
  absl::BlockingCounter done(kCalls);
  const absl::Time start = absl::Now();
  for (int i = 0; i < kCalls; ++i) {
    reqs[i].set_sleep_ms(1000);
    reqs[i].set_text(absl::StrCat("call ", i));
    ctxs[i].set_timeout(absl::Seconds(20));
    internal::AsyncUnaryCall(ch.get(), kSlowMethod, &ctxs[i], reqs[i], &resps[i],
                             [&, i](absl::Status s) {
                               results[i] = std::move(s);
                               took[i] = absl::Now() - start;
                               done.DecrementCount();
                             });
  }
  done.Wait();
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i];
    EXPECT_EQ(resps[i].text(), absl::StrCat("call ", i));
    // All three ran at once: ~1 s each (run one after another on the worker
    // they took 1, 2 and 3 s).
    EXPECT_GE(took[i], absl::Milliseconds(1000)) << i;
    EXPECT_LT(took[i], absl::Milliseconds(1800)) << i << ": " << took[i];
  }
  EXPECT_EQ(f.service.started_.load(), kCalls + 0);
}

TEST(HandlerPool, FastClientIsNotHeldUpByAnotherClientsSlowHandlers) {
  Fixture f(OneWorker());
  std::shared_ptr<Channel> slow_channel = f.NewChannel();
  std::shared_ptr<Channel> fast_channel = f.NewChannel();
  constexpr int kSlow = 2;
  std::vector<EchoRequest> reqs(kSlow);
  std::vector<EchoResponse> resps(kSlow);
  std::vector<ClientContext> ctxs(kSlow);
  std::atomic<int> slow_done{0};
  absl::BlockingCounter done(kSlow);
  for (int i = 0; i < kSlow; ++i) {
    reqs[i].set_sleep_ms(1500);
    ctxs[i].set_timeout(absl::Seconds(20));
    internal::AsyncUnaryCall(slow_channel.get(), kSlowMethod, &ctxs[i], reqs[i], &resps[i],
                             [&](absl::Status s) {
                               EXPECT_TRUE(s.ok()) << s;
                               slow_done.fetch_add(1);
                               done.DecrementCount();
                             });
  }
  ASSERT_TRUE(WaitFor([&] { return f.service.started_.load() == kSlow; }));
  // 200 calls of the other client, through the same worker and the same
  // pool: all are answered while both slow handlers still run.
  for (int i = 0; i < 200; ++i) {
    EchoRequest req;
    req.set_text(absl::StrCat("fast ", i));
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(20));
    absl::Status s = internal::BlockingUnaryCall(fast_channel.get(), kSlowMethod, &ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << i << ": " << s;
    EXPECT_EQ(resp.text(), req.text());
  }
  EXPECT_EQ(slow_done.load(), 0);
  done.Wait();
  EXPECT_EQ(slow_done.load(), kSlow);
}

TEST(HandlerPool, InlineMethodAnswersWithin50MsWhileEveryHandlerThreadIsBusy) {
  ServerOptions so = OneWorker();
  so.handler_threads = 2;
  so.max_handler_threads = 2;
  Fixture f(so);
  std::shared_ptr<Channel> slow_channel = f.NewChannel();
  std::shared_ptr<Channel> probe_channel = f.NewChannel();
  constexpr int kSlow = 4;  // two run, two wait for a pool thread
  std::vector<EchoRequest> reqs(kSlow);
  std::vector<EchoResponse> resps(kSlow);
  std::vector<ClientContext> ctxs(kSlow);
  absl::BlockingCounter done(kSlow);
  for (int i = 0; i < kSlow; ++i) {
    reqs[i].set_sleep_ms(2000);
    ctxs[i].set_timeout(absl::Seconds(30));
    internal::AsyncUnaryCall(slow_channel.get(), kSlowMethod, &ctxs[i], reqs[i], &resps[i],
                             [&](absl::Status s) {
                               EXPECT_TRUE(s.ok()) << s;
                               done.DecrementCount();
                             });
  }
  ASSERT_TRUE(WaitFor([&] { return f.service.started_.load() == 2; }));
  std::vector<absl::Duration> probes;
  for (int i = 0; i < 5; ++i) {
    EchoRequest req;
    req.set_text("probe");
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(10));
    const absl::Time t0 = absl::Now();
    absl::Status s = internal::BlockingUnaryCall(probe_channel.get(), kInlineMethod, &ctx, req, &resp);
    probes.push_back(absl::Now() - t0);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(resp.text(), "probe");
  }
  // Both pool threads were busy the whole time, and no third one started.
  EXPECT_EQ(f.service.started_.load(), 2);
  EXPECT_EQ(f.service.returned_.load(), 0);
  std::sort(probes.begin(), probes.end());
  EXPECT_LT(probes[probes.size() / 2], absl::Milliseconds(50)) << probes[probes.size() / 2];
  done.Wait();
  EXPECT_EQ(f.service.started_.load(), kSlow);
}

TEST(HandlerPool, InlineMethodWithARequestOverOneMebibyteRunsOnThePoolNotTheWorker) {
  // A 2 MiB request (above kMaxInlineRequestBytes, 1 MiB) arrives by
  // rendezvous: parsing and handling it is blocking work, so even a
  // run_inline method runs it on the pool. Its
  // handler sleeps 1 s; small inline probes on the same worker meanwhile
  // answer at once.
  Fixture f(OneWorker());
  std::shared_ptr<Channel> large_channel = f.NewChannel();
  std::shared_ptr<Channel> probe_channel = f.NewChannel();
  const int inline_before = f.service.inline_calls_.load();
  EchoRequest large;
  large.set_sleep_ms(1000);
  large.set_text("large");
  large.set_data(std::string(2 << 20, 'L'));
  EchoResponse large_resp;
  ClientContext large_ctx;
  large_ctx.set_timeout(absl::Seconds(30));
  absl::Notification large_done;
  absl::Status large_status;
  internal::AsyncUnaryCall(large_channel.get(), kInlineMethod, &large_ctx, large, &large_resp,
                           [&](absl::Status s) {
                             large_status = s;
                             large_done.Notify();
                           });
  ASSERT_TRUE(WaitFor([&] { return f.service.inline_calls_.load() == inline_before + 1; }));
  std::vector<absl::Duration> probes;
  for (int i = 0; i < 5; ++i) {
    EchoRequest req;
    req.set_text("probe");
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(10));
    const absl::Time t0 = absl::Now();
    absl::Status s =
        internal::BlockingUnaryCall(probe_channel.get(), kInlineMethod, &ctx, req, &resp);
    probes.push_back(absl::Now() - t0);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(resp.text(), "probe");
  }
  EXPECT_FALSE(large_done.HasBeenNotified()) << "the large call's handler ended early";
  std::sort(probes.begin(), probes.end());
  EXPECT_LT(probes[probes.size() / 2], absl::Milliseconds(50)) << probes[probes.size() / 2];
  ASSERT_TRUE(large_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(large_status.ok()) << large_status;
  EXPECT_EQ(large_resp.text(), "large");
  EXPECT_EQ(f.service.inline_calls_.load(), inline_before + 6);
}

TEST(HandlerPool, ServerOptionsOutOfRangeAreInvalidArgument) {
  {
    ServerOptions so;
    so.handler_threads = -1;
    Server server(so);
    absl::Status s = server.Start("127.0.0.1:0");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("handler_threads -1"), absl::string_view::npos) << s;
  }
  {
    ServerOptions so;
    so.handler_threads = 4;
    so.max_handler_threads = 2;
    Server server(so);
    absl::Status s = server.Start("127.0.0.1:0");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("max_handler_threads 2 is below handler_threads 4"),
              absl::string_view::npos)
        << s;
  }
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
