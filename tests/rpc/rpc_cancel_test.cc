// rpc_cancel_test.cc: ClientContext::TryCancel, the server's view of a
// cancelled call, calls made on behalf of a server call
// (ClientContext::FromServerContext), and when a call's time remaining is
// taken.
#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/rpc/context_access.h"
#include "tests/testing/server_test_hooks.h"
#include "runtime/softrdma/softrdma.h"
#include "tests/rpc/call_model_service.h"
#include "tests/rpc/stream_service.h"

namespace rdmarpc {
namespace test {
namespace {

struct Fixture {
  explicit Fixture(ServerOptions so = ServerOptions(), ChannelOptions co = ChannelOptions())
      : server(so) {
    EXPECT_TRUE(server.AddService(&service).ok());
    absl::Status s = server.Start("127.0.0.1:0");
    EXPECT_TRUE(s.ok()) << s;
    channel = NewChannel(co);
    service.relay_channel = NewChannel(co);
  }
  std::shared_ptr<Channel> NewChannel(ChannelOptions co = ChannelOptions()) {
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()), co);
    EXPECT_TRUE(ch.ok()) << ch.status();
    return *ch;
  }
  absl::Status Call(const char* method, const EchoRequest& req, EchoResponse* resp,
                    ClientContext* ctx = nullptr) {
    ClientContext own;
    if (ctx == nullptr) {
      own.set_timeout(absl::Seconds(30));
      ctx = &own;
    }
    return internal::BlockingUnaryCall(channel.get(), method, ctx, req, resp);
  }
  CallModelService service;
  Server server;
  std::shared_ptr<Channel> channel;
};

TEST(TryCancel, FromAnotherThreadEndsABlockingCallCancelledAtOnceAndTellsTheServer) {
  Fixture f;
  EchoRequest req;
  req.set_sleep_ms(10000);
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(30));
  std::thread canceller([&] {
    ASSERT_TRUE(WaitFor([&] { return f.service.started_.load() == 1; }));
    ctx.TryCancel();
  });
  const absl::Time t0 = absl::Now();
  absl::Status s = f.Call(kSlowMethod, req, &resp, &ctx);
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  // The server's context turned cancelled, its callback ran, the handler
  // stopped early.
  ASSERT_TRUE(WaitFor([&] { return f.service.returned_.load() == 1; }));
  EXPECT_EQ(f.service.saw_cancel_.load(), 1);
  EXPECT_EQ(f.service.on_cancel_runs_.load(), 1);
  EXPECT_EQ(ctx.peer(), absl::StrCat("127.0.0.1:", f.server.port()));
  // The connection carries on.
  EchoRequest next;
  next.set_text("next");
  EchoResponse next_resp;
  ASSERT_TRUE(f.Call(kSlowMethod, next, &next_resp).ok());
  EXPECT_EQ(next_resp.text(), "next");
}

TEST(TryCancel, BeforeTheCallStartsFailsItCancelledWithoutSendingIt) {
  Fixture f;
  EchoRequest req;
  EchoResponse resp;
  ClientContext ctx;
  ctx.TryCancel();
  absl::Status s = f.Call(kSlowMethod, req, &resp, &ctx);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_NE(s.message().find("before it was sent"), absl::string_view::npos) << s;
  EXPECT_EQ(f.service.started_.load(), 0);
  EXPECT_EQ(ctx.peer(), "");
}

TEST(TryCancel, AfterTheCallEndedChangesNothing) {
  Fixture f;
  EchoRequest req;
  req.set_text("done");
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(30));
  ASSERT_TRUE(f.Call(kSlowMethod, req, &resp, &ctx).ok());
  ctx.TryCancel();
  EXPECT_EQ(resp.text(), "done");
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(f.service.saw_cancel_.load(), 0);
  EXPECT_EQ(f.service.on_cancel_runs_.load(), 0);
}

TEST(TryCancel, RacingAsyncCallsEachEndExactlyOnceOkOrCancelled) {
  Fixture f;
  constexpr int kCalls = 200;
  std::vector<EchoRequest> reqs(kCalls);
  std::vector<EchoResponse> resps(kCalls);
  std::vector<ClientContext> ctxs(kCalls);
  std::vector<absl::Status> results(kCalls);
  std::vector<std::atomic<int>> ends(kCalls);
  absl::BlockingCounter done(kCalls);
  std::mt19937 rng(7);
  for (int i = 0; i < kCalls; ++i) {
    reqs[i].set_sleep_ms(i % 3);  // 0, 1 or 2 ms in the handler
    reqs[i].set_text(absl::StrCat(i));
    ctxs[i].set_timeout(absl::Seconds(30));
    internal::AsyncUnaryCall(f.channel.get(), kSlowMethod, &ctxs[i], reqs[i], &resps[i],
                             [&, i](absl::Status s) {
                               results[i] = std::move(s);
                               ends[i].fetch_add(1);
                               done.DecrementCount();
                             });
    if (rng() % 2 == 0) absl::SleepFor(absl::Microseconds(rng() % 500));
    ctxs[rng() % (i + 1)].TryCancel();
  }
  done.Wait();
  int cancelled = 0;
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(ends[i].load(), 1) << i;
    if (results[i].ok()) {
      EXPECT_EQ(resps[i].text(), absl::StrCat(i));
    } else {
      EXPECT_EQ(results[i].code(), absl::StatusCode::kCancelled) << i << ": " << results[i];
      ++cancelled;
    }
  }
  EXPECT_GT(cancelled, 0);
  // Every call was answered by the server or dropped before it was sent:
  // the channel still works.
  EchoRequest next;
  next.set_text("after");
  EchoResponse next_resp;
  ASSERT_TRUE(f.Call(kSlowMethod, next, &next_resp).ok());
  EXPECT_EQ(next_resp.text(), "after");
}

TEST(TryCancel, LargeRequestCancelledBeforeTheServerPulledItIsSkippedAndTheConnectionLives) {
  ChannelOptions co;
  co.pool_size = 1;
  Fixture f(ServerOptions(), co);
  EchoRequest warm;
  EchoResponse warm_resp;
  ASSERT_TRUE(f.Call(kSlowMethod, warm, &warm_resp).ok());
  softrdma::ResetStats();
  internal::SetServerRequestReadDelay(absl::Milliseconds(400), 1);
  EchoRequest big;
  big.set_data(std::string(200000, 'b'));
  EchoResponse big_resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(30));
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ctx.TryCancel();
  });
  absl::Status s = f.Call(kSlowMethod, big, &big_resp, &ctx);
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  absl::SleepFor(absl::Milliseconds(600));  // past the delayed READ
  internal::SetServerRequestReadDelay(absl::ZeroDuration(), 0);
  EXPECT_EQ(softrdma::GetStats().rdma_read, 0u);  // skipped, not posted
  EXPECT_EQ(softrdma::GetStats().rem_access_errors, 0u);
  EXPECT_EQ(f.service.started_.load(), 1);  // the warm-up call only
  for (int i = 0; i < 10; ++i) {
    EchoRequest req;
    req.set_data(std::string(200000, static_cast<char>('0' + i)));
    EchoResponse resp;
    absl::Status r = f.Call(kSlowMethod, req, &resp);
    ASSERT_TRUE(r.ok()) << i << ": " << r;
    EXPECT_EQ(resp.data(), req.data());
  }
}

// A server-streaming call's opening request is large (pulled by RDMA READ,
// delayed here): cancelled while the pull waits, the call ends CANCELLED,
// the READ is never posted, the handler never starts, and the connection
// carries the next such calls whole.
TEST(TryCancel, AServerStreamingCallCancelledBeforeItsRequestWasPulledNeverStartsItsHandler) {
  StreamService service;
  Server server;
  ASSERT_TRUE(server.AddService(&service).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  ChannelOptions co;
  co.pool_size = 1;
  absl::StatusOr<std::shared_ptr<Channel>> channel =
      CreateChannel(absl::StrCat("127.0.0.1:", server.port()), co);
  ASSERT_TRUE(channel.ok()) << channel.status();
  // Reads the call's messages; returns how many had the expected text and
  // data before the stream ended, and the status.
  auto expand = [&](ClientContext* ctx, const EchoRequest& req, int* good) {
    ClientReader<EchoResponse> reader(channel->get(), kExpandMethod, ctx, req);
    EchoResponse resp;
    *good = 0;
    while (reader.Read(&resp)) {
      if (resp.text() == absl::StrCat(*good) &&
          resp.data() == PatternBytes(*good, static_cast<size_t>(req.reply_bytes()))) {
        ++*good;
      }
    }
    return reader.Finish();
  };
  EchoRequest warm;
  warm.set_tag(3);
  warm.set_reply_bytes(10);
  int good = 0;
  ClientContext warm_ctx;
  warm_ctx.set_timeout(absl::Seconds(30));
  ASSERT_TRUE(expand(&warm_ctx, warm, &good).ok());
  ASSERT_EQ(good, 3);
  softrdma::ResetStats();
  internal::SetServerRequestReadDelay(absl::Milliseconds(400), 1);
  EchoRequest big;
  big.set_data(std::string(200000, 'b'));
  big.set_tag(5);
  big.set_reply_bytes(100);
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(30));
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ctx.TryCancel();
  });
  const absl::Status s = expand(&ctx, big, &good);
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(good, 0);
  absl::SleepFor(absl::Milliseconds(600));  // past the delayed READ
  internal::SetServerRequestReadDelay(absl::ZeroDuration(), 0);
  EXPECT_EQ(softrdma::GetStats().rdma_read, 0u);  // skipped, not posted
  EXPECT_EQ(softrdma::GetStats().rem_access_errors, 0u);
  EXPECT_EQ(service.expand_started_.load(), 1);  // the warm-up call only
  for (int i = 0; i < 5; ++i) {
    EchoRequest req = big;
    req.set_data(std::string(200000, static_cast<char>('0' + i)));
    ClientContext next;
    next.set_timeout(absl::Seconds(30));
    const absl::Status r = expand(&next, req, &good);
    EXPECT_TRUE(r.ok()) << r;
    EXPECT_EQ(good, 5) << "call " << i;
  }
  EXPECT_EQ(service.expand_started_.load(), 6);
}

TEST(FromServerContext, ChildCallInheritsTheDeadline) {
  Fixture f;
  EchoRequest req;
  req.set_sleep_ms(1);
  EchoResponse resp;
  ClientContext ctx;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  ctx.set_deadline(deadline);
  ASSERT_TRUE(f.Call(kRelayMethod, req, &resp, &ctx).ok());
  absl::MutexLock lock(&f.service.mu_);
  EXPECT_EQ(f.service.relay_child_deadline_, f.service.relay_parent_deadline_);
  // The child's own server saw no more time than the parent had.
  EXPECT_LE(f.service.last_deadline_, f.service.relay_parent_deadline_ + absl::Milliseconds(50));
  EXPECT_LE(absl::AbsDuration(f.service.relay_parent_deadline_ - deadline),
            absl::Milliseconds(500));
}

TEST(FromServerContext, CancellingTheParentCallCancelsTheChildCall) {
  Fixture f;
  EchoRequest req;
  req.set_sleep_ms(10000);
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(30));
  std::thread canceller([&] {
    // Relay runs on one pool thread and calls Slow: both have started.
    ASSERT_TRUE(WaitFor([&] { return f.service.started_.load() == 1; }));
    ctx.TryCancel();
  });
  absl::Status s = f.Call(kRelayMethod, req, &resp, &ctx);
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  // The parent's cancel reached the child call, whose server handler saw it.
  ASSERT_TRUE(WaitFor([&] { return f.service.saw_cancel_.load() == 1; }));
  EXPECT_EQ(f.service.on_cancel_runs_.load(), 1);
}

TEST(FromServerContext, ChildOfAnAlreadyCancelledCallFailsCancelledUnsent) {
  Fixture f;
  ServerContext parent;
  internal::ServerContextAccess::Cancel(&parent);  // as the runtime cancels one
  std::unique_ptr<ClientContext> child = ClientContext::FromServerContext(parent);
  EchoRequest req;
  EchoResponse resp;
  absl::Status s = f.Call(kSlowMethod, req, &resp, child.get());
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(f.service.started_.load(), 0);
}

TEST(Deadline, TimeRemainingIsTakenWhenTheRequestGoesOnTheWire) {
  // One worker: a client's connection is accepted on it only once the
  // blocking inline call below lets the worker go, so the second channel's
  // first call waits ~400 ms for its connection before it is sent.
  ServerOptions so;
  so.num_workers = 1;
  Fixture f(so);
  EchoRequest warm;
  EchoResponse warm_resp;
  ASSERT_TRUE(f.Call(kSlowMethod, warm, &warm_resp).ok());
  EchoRequest hold;
  hold.set_sleep_ms(400);
  EchoResponse hold_resp;
  ClientContext hold_ctx;
  hold_ctx.set_timeout(absl::Seconds(30));
  std::atomic<bool> held{false};
  internal::AsyncUnaryCall(f.channel.get(), kInlineMethod, &hold_ctx, hold, &hold_resp,
                           [&](absl::Status s) {
                             EXPECT_TRUE(s.ok()) << s;
                             held.store(true);
                           });
  ASSERT_TRUE(WaitFor([&] { return f.service.inline_calls_.load() == 1; }));
  std::shared_ptr<Channel> fresh = f.NewChannel();
  EchoRequest req;
  EchoResponse resp;
  ClientContext ctx;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  ctx.set_deadline(deadline);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(internal::BlockingUnaryCall(fresh.get(), kSlowMethod, &ctx, req, &resp).ok());
  const absl::Duration waited = absl::Now() - t0;
  EXPECT_GE(waited, absl::Milliseconds(250)) << "the connection was not held up";
  ASSERT_TRUE(WaitFor([&] { return held.load(); }));
  absl::MutexLock lock(&f.service.mu_);
  // Server clock == client clock here: the server's deadline exceeds the
  // client's only by the request's transit, not by the connection set-up.
  EXPECT_LT(f.service.last_deadline_ - deadline, absl::Milliseconds(100))
      << "server deadline is " << (f.service.last_deadline_ - deadline) << " after the client's";
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
