// Callback reactors end to end over softrdma: client reactors against
// synchronous servers, synchronous clients against callback servers, and
// reactor against reactor, per method kind; cancellation, deadlines,
// Shutdown, holds and flow control.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/callback_services.h"
#include "tests/rpc/stream_service.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {


// ---- fixtures -------------------------------------------------------------------------

struct Servers {
  explicit Servers(std::vector<rdmarpc::Service*> services, ServerOptions so = ServerOptions())
      : server(so) {
    for (auto* s : services) EXPECT_TRUE(server.AddService(s).ok());
    EXPECT_TRUE(server.Start("127.0.0.1:0").ok());
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()));
    EXPECT_TRUE(ch.ok()) << ch.status();
    if (ch.ok()) channel = *ch;
  }
  Server server;
  std::shared_ptr<Channel> channel;
};

std::vector<std::string> Numbered(const char* prefix, int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back(absl::StrCat(prefix, i));
  return v;
}

bool WaitFor(const std::function<bool()>& pred) {
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!pred()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// ---- unary ------------------------------------------------------------------------------

TEST(ReactorUnary, ClientReactorAgainstSyncServer) {
  EchoService sync;
  Servers s({&sync});
  ClientContext ctx;
  EchoRequest req;
  req.set_text("hello");
  UnaryClient c(s.channel.get(), &ctx, req);
  ASSERT_TRUE(c.done.Wait());
  EXPECT_TRUE(c.done.status.ok()) << c.done.status;
  EXPECT_EQ(c.response.text(), "hello");
  EXPECT_EQ(c.done.times.load(), 1);
}

TEST(ReactorUnary, SyncClientAgainstCallbackServerFinishedLaterFromAnotherThread) {
  CallbackEcho cb;
  Servers s({&cb});
  ClientContext ctx;
  EchoRequest req;
  req.set_text("later");
  req.set_sleep_ms(100);
  EchoResponse resp;
  const absl::Time start = absl::Now();
  absl::Status st = Echo(s.channel.get(), &ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(resp.text(), "later");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_EQ(cb.returned.load(), 1);  // the method returned before the answer
  EXPECT_EQ(cb.finished_late.load(), 1);
}

TEST(ReactorUnary, ReactorToReactor) {
  CallbackEcho cb;
  Servers s({&cb});
  ClientContext ctx;
  EchoRequest req;
  req.set_text("r2r");
  UnaryClient c(s.channel.get(), &ctx, req);
  ASSERT_TRUE(c.done.Wait());
  EXPECT_TRUE(c.done.status.ok()) << c.done.status;
  EXPECT_EQ(c.response.text(), "r2r");
}

// ---- server streaming ------------------------------------------------------------------

void ExpectExpanded(const ExpandClient& c, int n, size_t bytes) {
  ASSERT_EQ(c.texts, Numbered("", n));
  for (int i = 0; i < n; ++i) EXPECT_EQ(c.datas[i], PatternBytes(i, bytes)) << i;
}

TEST(ReactorServerStreaming, ClientReactorAgainstSyncServer) {
  StreamService sync;
  Servers s({&sync});
  ClientContext ctx;
  EchoRequest req;
  req.set_tag(40);
  req.set_reply_bytes(100);
  ExpandClient c(s.channel.get(), &ctx, req, /*hold=*/false);
  ASSERT_TRUE(c.done.Wait());
  EXPECT_TRUE(c.done.status.ok()) << c.done.status;
  ExpectExpanded(c, 40, 100);
  EXPECT_EQ(c.done.times.load(), 1);
}

TEST(ReactorServerStreaming, SyncClientAgainstCallbackServer) {
  CallbackStreams cb;
  Servers s({&cb});
  ClientContext ctx;
  EchoRequest req;
  req.set_tag(50);
  req.set_reply_bytes(64);
  ClientReader<EchoResponse> reader(s.channel.get(), kExpandMethod, &ctx, req);
  EchoResponse r;
  int i = 0;
  while (reader.Read(&r)) {
    EXPECT_EQ(r.text(), absl::StrCat(i));
    EXPECT_EQ(r.data(), PatternBytes(i, 64));
    ++i;
  }
  EXPECT_TRUE(reader.Finish().ok());
  EXPECT_EQ(i, 50);
  EXPECT_TRUE(WaitFor([&] { return cb.counts.done.load() == 1; }));
  EXPECT_EQ(cb.counts.cancelled.load(), 0);
}

TEST(ReactorServerStreaming, ReactorToReactor) {
  CallbackStreams cb;
  Servers s({&cb});
  ClientContext ctx;
  EchoRequest req;
  req.set_tag(35);
  req.set_reply_bytes(10);
  ExpandClient c(s.channel.get(), &ctx, req, /*hold=*/false);
  ASSERT_TRUE(c.done.Wait());
  EXPECT_TRUE(c.done.status.ok()) << c.done.status;
  ExpectExpanded(c, 35, 10);
}

// ---- client streaming ---------------------------------------------------------------------

std::string CollectedData(int n) {
  std::string all;
  for (int i = 0; i < n; ++i) all += absl::StrCat("d", i);
  return all;
}

TEST(ReactorClientStreaming, ClientReactorAgainstSyncServer) {
  StreamService sync;
  Servers s({&sync});
  ClientContext ctx;
  CollectClient c(s.channel.get(), &ctx, 30);
  ASSERT_TRUE(c.done.Wait());
  EXPECT_TRUE(c.done.status.ok()) << c.done.status;
  EXPECT_EQ(c.response.text(), "30");
  EXPECT_EQ(c.response.data(), CollectedData(30));
}

TEST(ReactorClientStreaming, SyncClientAgainstCallbackServerWithMetadata) {
  CallbackStreams cb;
  Servers s({&cb});
  ClientContext ctx;
  ctx.AddMetadata("x-who", "sync");
  EchoResponse resp;
  ClientWriter<EchoRequest> writer(s.channel.get(), kCollectMethod, &ctx, &resp);
  for (int i = 0; i < 25; ++i) {
    EchoRequest req;
    req.set_data(absl::StrCat("d", i));
    ASSERT_TRUE(writer.Write(req));
  }
  absl::Status st = writer.Finish();
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(resp.text(), "25");
  EXPECT_EQ(resp.data(), CollectedData(25));
  ASSERT_EQ(ctx.GetServerInitialMetadata().count("x-who"), 1u);
  EXPECT_EQ(ctx.GetServerInitialMetadata().find("x-who")->second, "sync");
  ASSERT_EQ(ctx.GetServerTrailingMetadata().count("x-who"), 1u);
  EXPECT_EQ(ctx.GetServerTrailingMetadata().find("x-who")->second, "sync");
}

TEST(ReactorClientStreaming, ReactorToReactorFinishedFromAnotherThread) {
  CallbackStreams cb;
  Servers s({&cb});
  ClientContext ctx;
  ctx.AddMetadata("x-who", "reactor");
  CollectClient c(s.channel.get(), &ctx, 40);
  ASSERT_TRUE(c.done.Wait());
  EXPECT_TRUE(c.done.status.ok()) << c.done.status;
  EXPECT_EQ(c.response.text(), "40");
  EXPECT_EQ(c.response.data(), CollectedData(40));
  ASSERT_EQ(ctx.GetServerTrailingMetadata().count("x-who"), 1u);
  EXPECT_EQ(ctx.GetServerTrailingMetadata().find("x-who")->second, "reactor");
  EXPECT_TRUE(WaitFor([&] { return cb.counts.done.load() == 1; }));
}

// ---- bidi -----------------------------------------------------------------------------------

TEST(ReactorBidi, ClientReactorAgainstSyncServerWithMetadata) {
  StreamService sync;
  Servers s({&sync});
  ClientContext ctx;
  ctx.AddMetadata("x-tag", "bidi");
  ChatClient c(s.channel.get(), &ctx, 45);
  ASSERT_TRUE(c.done.Wait());
  EXPECT_TRUE(c.done.status.ok()) << c.done.status;
  EXPECT_EQ(c.texts, Numbered("m", 45));
  EXPECT_TRUE(c.writes_done_ok);
  EXPECT_EQ(c.metadata_calls.load(), 1);
  EXPECT_TRUE(c.initial_ok);
  EXPECT_EQ(c.initial_count, 1);  // arrived before the first message
  ASSERT_EQ(ctx.GetServerTrailingMetadata().count("x-tag"), 1u);
}

TEST(ReactorBidi, SyncClientAgainstCallbackServer) {
  CallbackStreams cb;
  Servers s({&cb});
  ClientContext ctx;
  ClientReaderWriter<EchoRequest, EchoResponse> rw(s.channel.get(), kChatMethod, &ctx);
  for (int i = 0; i < 30; ++i) {
    EchoRequest req;
    req.set_text(absl::StrCat("s", i));
    ASSERT_TRUE(rw.Write(req));
    EchoResponse resp;
    ASSERT_TRUE(rw.Read(&resp));
    EXPECT_EQ(resp.text(), absl::StrCat("s", i));
  }
  EXPECT_TRUE(rw.WritesDone());
  EchoResponse extra;
  EXPECT_FALSE(rw.Read(&extra));
  EXPECT_TRUE(rw.Finish().ok());
  EXPECT_TRUE(WaitFor([&] { return cb.counts.done.load() == 1; }));
}

TEST(ReactorBidi, ReactorToReactorWithMetadata) {
  CallbackStreams cb;
  Servers s({&cb});
  ClientContext ctx;
  ctx.AddMetadata("x-tag", "r2r");
  ChatClient c(s.channel.get(), &ctx, 60);
  ASSERT_TRUE(c.done.Wait());
  EXPECT_TRUE(c.done.status.ok()) << c.done.status;
  EXPECT_EQ(c.texts, Numbered("m", 60));
  EXPECT_EQ(c.initial_count, 1);  // StartSendInitialMetadata sent it first
  ASSERT_EQ(ctx.GetServerInitialMetadata().count("x-tag"), 1u);
  EXPECT_EQ(ctx.GetServerInitialMetadata().find("x-tag")->second, "r2r");
  EXPECT_EQ(c.done.times.load(), 1);
}

// ---- cancellation, deadline, Shutdown ----------------------------------------------------

TEST(ReactorCancel, TryCancelEndsCancelledOnceAndServerSeesOnCancel) {
  CallbackStreams cb;
  Servers s({&cb});
  ClientContext ctx;
  EchoRequest req;
  req.set_text("hang");
  ExpandClient c(s.channel.get(), &ctx, req, /*hold=*/false);
  ASSERT_TRUE(WaitFor([&] { return cb.counts.started.load() == 1; }));
  ctx.TryCancel();
  ASSERT_TRUE(c.done.Wait());
  EXPECT_EQ(c.done.status.code(), absl::StatusCode::kCancelled) << c.done.status;
  EXPECT_TRUE(WaitFor([&] { return cb.counts.done.load() == 1; }));
  EXPECT_EQ(cb.counts.cancelled.load(), 1);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(c.done.times.load(), 1);
  EXPECT_TRUE(c.texts.empty());
}

TEST(ReactorCancel, DeadlineEndsDeadlineExceededAndServerSeesOnCancel) {
  CallbackStreams cb;
  Servers s({&cb});
  ClientContext ctx;
  ctx.set_timeout(absl::Milliseconds(200));
  EchoRequest req;
  req.set_text("hang");
  const absl::Time start = absl::Now();
  ExpandClient c(s.channel.get(), &ctx, req, /*hold=*/false);
  ASSERT_TRUE(c.done.Wait());
  EXPECT_EQ(c.done.status.code(), absl::StatusCode::kDeadlineExceeded) << c.done.status;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
  EXPECT_TRUE(WaitFor([&] { return cb.counts.cancelled.load() == 1; }));
  EXPECT_TRUE(WaitFor([&] { return cb.counts.done.load() == 1; }));
}

TEST(ReactorShutdown, PendingCallbackCallGetsUnavailableAndServerOnDone) {
  CallbackStreams cb;
  auto s = std::make_unique<Servers>(std::vector<rdmarpc::Service*>{&cb});
  ClientContext ctx;
  EchoRequest req;
  req.set_text("hang");
  ExpandClient c(s->channel.get(), &ctx, req, /*hold=*/false);
  ASSERT_TRUE(WaitFor([&] { return cb.counts.started.load() == 1; }));
  const absl::Time start = absl::Now();
  s->server.Shutdown(absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(190));  // the grace first
  EXPECT_LT(took, absl::Seconds(5));
  // Shutdown returned after the reactor's OnDone.
  EXPECT_EQ(cb.counts.cancelled.load(), 1);
  EXPECT_EQ(cb.counts.done.load(), 1);
  ASSERT_TRUE(c.done.Wait());
  EXPECT_EQ(c.done.status.code(), absl::StatusCode::kUnavailable) << c.done.status;
  EXPECT_EQ(c.done.times.load(), 1);
}

// ---- holds and flow control ----------------------------------------------------------------

TEST(ReactorHolds, OnDoneWaitsForRemoveHoldAndUnreadMessagesStayReadable) {
  CallbackStreams cb;
  Servers s({&cb});
  ClientContext ctx;
  EchoRequest req;
  req.set_tag(3);
  req.set_reply_bytes(8);
  ExpandClient c(s.channel.get(), &ctx, req, /*hold=*/true);
  // The server finishes; the held reactor has read nothing and is not done.
  ASSERT_TRUE(WaitFor([&] { return cb.counts.done.load() == 1; }));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(c.done.notified.HasBeenNotified());
  c.StartReading();  // from this thread, under the hold
  ASSERT_TRUE(WaitFor([&] { return c.texts.size() == 3; }));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(c.done.notified.HasBeenNotified());
  c.Release();
  ASSERT_TRUE(c.done.Wait());
  EXPECT_TRUE(c.done_after_release);
  EXPECT_TRUE(c.done.status.ok()) << c.done.status;
  ExpectExpanded(c, 3, 8);
}

TEST(ReactorFlow, AReactorThatDelaysReadingStopsOnlyItsWriter) {
  StreamService sync;
  EchoService echo;
  Servers s({&sync, &echo});
  ClientContext ctx;
  EchoRequest req;
  req.set_tag(300);
  req.set_reply_bytes(4096);
  ExpandClient c(s.channel.get(), &ctx, req, /*hold=*/true);
  ASSERT_TRUE(WaitFor([&] { return sync.written_.load() > 0; }));
  absl::SleepFor(absl::Milliseconds(200));
  const int written = sync.written_.load();
  // The server's writes stop after a bounded window (the reader's inbox and
  // the server's send window).
  EXPECT_LE(written, 2 * static_cast<int>(internal::kStreamWindow) + 1);
  // Meanwhile unary calls on the same channel complete.
  for (int i = 0; i < 100; ++i) {
    ClientContext uctx;
    EchoRequest ureq;
    ureq.set_text(absl::StrCat("u", i));
    EchoResponse uresp;
    ASSERT_TRUE(Echo(s.channel.get(), &uctx, ureq, &uresp).ok());
    ASSERT_EQ(uresp.text(), absl::StrCat("u", i));
  }
  EXPECT_EQ(sync.written_.load(), written);
  c.StartReading();
  ASSERT_TRUE(WaitFor([&] { return c.texts.size() == 300; }));
  c.Release();
  ASSERT_TRUE(c.done.Wait());
  EXPECT_TRUE(c.done.status.ok()) << c.done.status;
  ExpectExpanded(c, 300, 4096);
}

// ---- races (review) ------------------------------------------------------------------------

TEST(ReactorRace, TryCancelFromAnotherThreadDuringABidiChatEndsEachSideOnce) {
  // Reactor against reactor: the client cancels at a varying point of a
  // 40-message chat; each client OnDone runs once and every server reactor
  // reaches OnDone.
  CallbackStreams cb;
  Servers s({&cb});
  constexpr int kCalls = 60;
  for (int i = 0; i < kCalls; ++i) {
    ClientContext ctx;
    ChatClient c(s.channel.get(), &ctx, 40);
    absl::SleepFor(absl::Microseconds((i % 10) * 150));
    ctx.TryCancel();
    ASSERT_TRUE(c.done.Wait()) << i;
    absl::SleepFor(absl::Milliseconds(1));
    EXPECT_EQ(c.done.times.load(), 1) << i;
    EXPECT_TRUE(c.done.status.ok() || c.done.status.code() == absl::StatusCode::kCancelled)
        << i << ": " << c.done.status;
  }
  EXPECT_TRUE(WaitFor([&] { return cb.counts.done.load() == cb.counts.started.load(); }))
      << cb.counts.done.load() << " of " << cb.counts.started.load() << " server reactors done";
}

TEST(ReactorRace, UnaryFinishedFromAnotherThreadAsTheDeadlinePassesEndsOnce) {
  CallbackEcho cb;
  Servers s({&cb});
  constexpr int kCalls = 60;
  for (int i = 0; i < kCalls; ++i) {
    ClientContext ctx;
    ctx.set_timeout(absl::Milliseconds(3));
    EchoRequest req;
    req.set_text("x");
    req.set_sleep_ms(1 + i % 5);
    UnaryClient c(s.channel.get(), &ctx, req);
    ASSERT_TRUE(c.done.Wait()) << i;
    EXPECT_EQ(c.done.times.load(), 1) << i;
  }
  // Every method that ran finished (a request whose deadline passed before
  // it was dispatched never runs).
  EXPECT_TRUE(WaitFor([&] { return cb.finished_late.load() == cb.returned.load(); }))
      << cb.finished_late.load() << " of " << cb.returned.load();
}

TEST(ReactorRace, ShutdownWithChatsInFlightEndsEveryReactor) {
  CallbackStreams cb;
  auto s = std::make_unique<Servers>(std::vector<rdmarpc::Service*>{&cb});
  constexpr int kCalls = 8;
  std::vector<std::unique_ptr<ClientContext>> ctxs;
  std::vector<std::unique_ptr<ChatClient>> clients;
  for (int i = 0; i < kCalls; ++i) {
    ctxs.push_back(std::make_unique<ClientContext>());
    clients.push_back(std::make_unique<ChatClient>(s->channel.get(), ctxs.back().get(), 2000));
  }
  absl::SleepFor(absl::Milliseconds(5));
  s->server.Shutdown(absl::Milliseconds(20));
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(clients[i]->done.Wait()) << i;
    EXPECT_EQ(clients[i]->done.times.load(), 1) << i;
  }
  EXPECT_EQ(cb.counts.done.load(), cb.counts.started.load());
}

// client_callback.h says Start* "never run a reaction inline", as gRPC's
// reactors; ClientUnaryReactor::StartCall runs OnDone inside StartCall when
// the call is refused before anything is sent (here: deadline passed), so a
// reactor that calls StartCall under its own lock, or in its constructor
// with an OnDone that deletes it, deadlocks or uses itself after free.
class InlineProbe final : public ClientUnaryReactor {
 public:
  InlineProbe(Channel* ch, ClientContext* ctx, const EchoRequest& req) {
    internal::ClientReactorAccess::BindUnary(this, ch, kEchoMethod, ctx, &req, &response);
    start_thread = std::this_thread::get_id();
    in_start_call = true;
    StartCall();
    in_start_call = false;
  }
  void OnDone(const absl::Status& s) override {
    // Inline means on this thread while StartCall runs; the channel's
    // thread may run OnDone while StartCall is still returning.
    done_inside_start_call =
        in_start_call.load() && std::this_thread::get_id() == start_thread;
    done.Set(s);
  }
  std::thread::id start_thread;
  std::atomic<bool> in_start_call{false};
  bool done_inside_start_call = false;
  EchoResponse response;
  DoneRecord done;
};

TEST(ReactorUnary, OnDoneNeverRunsInsideStartCallEvenWhenTheCallIsRefused) {
  EchoService sync;
  Servers s({&sync});
  ClientContext ctx;
  ctx.set_deadline(absl::Now() - absl::Seconds(1));
  EchoRequest req;
  req.set_text("late");
  InlineProbe c(s.channel.get(), &ctx, req);
  ASSERT_TRUE(c.done.Wait());
  EXPECT_EQ(c.done.status.code(), absl::StatusCode::kDeadlineExceeded) << c.done.status;
  EXPECT_FALSE(c.done_inside_start_call) << "OnDone ran inline in StartCall";
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
