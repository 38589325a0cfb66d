// rpc_resolver_test.cc: a Channel whose addresses come from a resolver
// (rdmarpc/resolver.h), here one the test drives by hand: calls wait for the
// first list, follow every change (new servers get calls, servers left out
// get none and their connections close), fail fast on a resolver error, and
// ask for re-resolution when a connection fails.
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/metrics.h"
#include "rdmarpc/rdmarpc.h"
#include "rdmarpc/resolver.h"
#include "tests/rpc/metrics_text.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/stream_service.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

// Resolvers of scheme "manual": "manual:NAME" registers its listener under
// NAME, and the test reports through it.
class ManualResolvers {
 public:
  static ManualResolvers& Get() {
    static ManualResolvers* m = new ManualResolvers;
    return *m;
  }
  void Add(const std::string& name, ResolverListener* listener) {
    absl::MutexLock lock(&mu_);
    listeners_[name] = listener;
  }
  void Remove(const std::string& name) {
    absl::MutexLock lock(&mu_);
    listeners_.erase(name);
  }
  ResolverListener* Find(const std::string& name) {
    absl::MutexLock lock(&mu_);
    auto it = listeners_.find(name);
    return it == listeners_.end() ? nullptr : it->second;
  }
  std::atomic<int> reresolutions{0};

 private:
  absl::Mutex mu_;
  std::map<std::string, ResolverListener*> listeners_ ABSL_GUARDED_BY(mu_);
};

class ManualResolver final : public Resolver {
 public:
  ManualResolver(std::string name, ResolverListener* listener) : name_(std::move(name)) {
    ManualResolvers::Get().Add(name_, listener);
  }
  ~ManualResolver() override { ManualResolvers::Get().Remove(name_); }
  void RequestReresolution() override { ManualResolvers::Get().reresolutions.fetch_add(1); }

 private:
  const std::string name_;
};

class ManualResolverFactory final : public ResolverFactory {
 public:
  std::string scheme() const override { return "manual"; }
  absl::StatusOr<std::unique_ptr<Resolver>> Create(const ResolverArgs& args) override {
    absl::string_view name = args.target;
    name.remove_prefix(std::string("manual:").size());
    if (name.empty()) return absl::InvalidArgumentError("manual: needs a name");
    return std::unique_ptr<Resolver>(new ManualResolver(std::string(name), args.listener));
  }
};

class ResolverTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(RegisterResolverFactory(std::make_unique<ManualResolverFactory>()).ok());
  }
  ResolverListener* Listener(const std::string& name) { return ManualResolvers::Get().Find(name); }
};

absl::Status Call(Channel* channel, absl::Duration timeout = absl::Seconds(5)) {
  EchoRequest req;
  req.set_text("x");
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(timeout);
  absl::Status s = Echo(channel, &ctx, req, &resp);
  if (s.ok() && resp.text() != "x") return absl::DataLossError(resp.text());
  return s;
}

struct EchoServer {
  EchoServer() {
    EXPECT_TRUE(server.AddService(&service).ok());
    EXPECT_TRUE(server.Start("127.0.0.1:0").ok());
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", server.port()); }
  EchoService service;
  Server server;
};

TEST_F(ResolverTest, CallsWaitForTheFirstAddressesThenGoThere) {
  EchoServer a;
  auto ch = CreateChannel("manual:first");
  ASSERT_TRUE(ch.ok()) << ch.status();
  EXPECT_EQ((*ch)->target(), "manual:first");
  ResolverListener* l = Listener("first");
  ASSERT_NE(l, nullptr);

  // One asynchronous and one blocking call start before there is an address.
  EchoRequest req;
  req.set_text("early");
  EchoResponse async_resp;
  ClientContext async_ctx;
  async_ctx.set_timeout(absl::Seconds(10));
  absl::Notification async_done;
  absl::Status async_status;
  internal::AsyncUnaryCall(ch->get(), kEchoMethod, &async_ctx, req, &async_resp,
                           [&](absl::Status s) {
                             async_status = s;
                             async_done.Notify();
                           });
  absl::Status blocking_status;
  std::thread blocking([&] { blocking_status = Call(ch->get(), absl::Seconds(10)); });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(async_done.HasBeenNotified());
  EXPECT_EQ(a.service.calls(), 0);

  l->OnAddresses({a.address()});
  ASSERT_TRUE(async_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  blocking.join();
  EXPECT_TRUE(async_status.ok()) << async_status;
  EXPECT_EQ(async_resp.text(), "early");
  EXPECT_EQ(async_ctx.peer(), a.address());
  EXPECT_TRUE(blocking_status.ok()) << blocking_status;
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(Call(ch->get()).ok());
  EXPECT_EQ(a.service.calls(), 12);
}

TEST_F(ResolverTest, AWaitingCallEndsAtItsDeadlineAndOnTryCancel) {
  auto ch = CreateChannel("manual:never");
  ASSERT_TRUE(ch.ok()) << ch.status();
  const absl::Time start = absl::Now();
  absl::Status s = Call(ch->get(), absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "waiting for an address of manual:never")) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));

  EchoRequest req;
  EchoResponse resp;
  ClientContext ctx;  // no deadline: only TryCancel ends it
  absl::Notification done;
  absl::Status status;
  internal::AsyncUnaryCall(ch->get(), kEchoMethod, &ctx, req, &resp, [&](absl::Status st) {
    status = st;
    done.Notify();
  });
  absl::SleepFor(absl::Milliseconds(100));
  ctx.TryCancel();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
}

TEST_F(ResolverTest, DestroyingTheChannelCancelsWaitingCalls) {
  EchoRequest req;
  EchoResponse resp;
  ClientContext ctx;
  absl::Notification done;
  absl::Status status;
  {
    auto ch = CreateChannel("manual:dropped");
    ASSERT_TRUE(ch.ok()) << ch.status();
    internal::AsyncUnaryCall(ch->get(), kEchoMethod, &ctx, req, &resp, [&](absl::Status st) {
      status = st;
      done.Notify();
    });
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(done.HasBeenNotified());
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
}

TEST_F(ResolverTest, AResolverErrorFailsWaitingAndNewCallsUntilAListArrives) {
  EchoServer a;
  auto ch = CreateChannel("manual:broken");
  ASSERT_TRUE(ch.ok()) << ch.status();
  ResolverListener* l = Listener("broken");
  ASSERT_NE(l, nullptr);
  absl::Status waiting;
  std::thread t([&] { waiting = Call(ch->get(), absl::Seconds(10)); });
  absl::SleepFor(absl::Milliseconds(100));
  l->OnError(absl::UnavailableError("no such service"));
  t.join();
  EXPECT_EQ(waiting.code(), absl::StatusCode::kUnavailable) << waiting;
  EXPECT_TRUE(absl::StrContains(waiting.message(), "no such service")) << waiting;
  const absl::Time start = absl::Now();
  absl::Status fresh = Call(ch->get(), absl::Seconds(10));
  EXPECT_EQ(fresh.code(), absl::StatusCode::kUnavailable) << fresh;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));

  // A list with nothing usable is an error too; then a good one heals.
  l->OnAddresses({"not an address", "[::1]"});
  fresh = Call(ch->get());
  EXPECT_EQ(fresh.code(), absl::StatusCode::kUnavailable) << fresh;
  EXPECT_TRUE(absl::StrContains(fresh.message(), "reported no usable address (2 given)")) << fresh;
  l->OnAddresses({a.address()});
  EXPECT_TRUE(Call(ch->get()).ok());
  // An error while a list is there keeps the list.
  l->OnError(absl::UnavailableError("flaky"));
  EXPECT_TRUE(Call(ch->get()).ok());
  EXPECT_EQ(a.service.calls(), 2);
}

TEST_F(ResolverTest, CallsFollowEveryChangeOfTheList) {
  EchoServer a, b;
  ChannelOptions options;
  options.engine_threads = 2;
  auto ch = CreateChannel("manual:moving", options);
  ASSERT_TRUE(ch.ok()) << ch.status();
  ResolverListener* l = Listener("moving");
  ASSERT_NE(l, nullptr);

  l->OnAddresses({a.address()});
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Call(ch->get()).ok());
  EXPECT_EQ(a.service.calls(), 20);
  EXPECT_EQ(b.service.calls(), 0);

  auto established = [] {
    return MetricValue(RenderMetricsText(), "rdmarpc_connections", {{"state", "established"}})
        .value_or(-1);
  };
  // Waits (up to 10 s) until `n` connections are established: b's are made
  // as soon as the list names it, but on a loaded machine the first calls
  // could otherwise start before they are up and all go to a.
  auto wait_established = [&](int n) {
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (established() != n && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
    return established();
  };

  // Both (b twice: duplicates count once): 2 slots per address (one per
  // engine thread), each counted by the client and its server; then an
  // even split.
  l->OnAddresses({a.address(), b.address(), b.address()});
  EXPECT_EQ(wait_established(8), 8);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Call(ch->get()).ok());
  EXPECT_EQ(a.service.calls(), 30);
  EXPECT_EQ(b.service.calls(), 10);

  // a leaves: every call goes to b, none fails, and a's connections close.
  l->OnAddresses({b.address()});
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Call(ch->get()).ok());
  EXPECT_EQ(a.service.calls(), 30);
  EXPECT_EQ(b.service.calls(), 30);
  EXPECT_EQ(wait_established(4), 4);

  // a is back.
  l->OnAddresses({a.address(), b.address()});
  EXPECT_EQ(wait_established(8), 8);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Call(ch->get()).ok());
  EXPECT_EQ(a.service.calls(), 40);
  EXPECT_EQ(b.service.calls(), 40);
}

TEST_F(ResolverTest, ANewAddressIsConnectedBeforeAnyCallNeedsIt) {
  EchoServer a, b;
  auto ch = CreateChannel("manual:eager");
  ASSERT_TRUE(ch.ok()) << ch.status();
  ResolverListener* l = Listener("eager");
  ASSERT_NE(l, nullptr);
  auto established = [] {
    return MetricValue(RenderMetricsText(), "rdmarpc_connections", {{"state", "established"}})
        .value_or(-1);
  };
  EXPECT_EQ(established(), 0);
  l->OnAddresses({a.address(), b.address()});
  // No call yet: 2 slots (pool_size) per address, each connection counted
  // by the client and by its server: 8.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (established() < 8 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(established(), 8);
  EXPECT_EQ(a.service.calls() + b.service.calls(), 0);
}

TEST_F(ResolverTest, AFailedConnectionAsksForReresolution) {
  EchoServer a;
  auto ch = CreateChannel("manual:stale");
  ASSERT_TRUE(ch.ok()) << ch.status();
  ResolverListener* l = Listener("stale");
  ASSERT_NE(l, nullptr);
  const int before = ManualResolvers::Get().reresolutions.load();
  l->OnAddresses({a.address(), absl::StrCat("127.0.0.1:", PortWithNoListener())});
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (ManualResolvers::Get().reresolutions.load() == before && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GT(ManualResolvers::Get().reresolutions.load(), before);
  // The dead address is skipped meanwhile.
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(Call(ch->get()).ok());
}

TEST_F(ResolverTest, AStreamStartedBeforeTheFirstAddressKeepsItsWrites) {
  StreamService streams;
  Server server;
  ASSERT_TRUE(server.AddService(&streams).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  auto ch = CreateChannel("manual:stream");
  ASSERT_TRUE(ch.ok()) << ch.status();
  ResolverListener* l = Listener("stream");
  ASSERT_NE(l, nullptr);
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(20));
  ClientReaderWriter<EchoRequest, EchoResponse> stream(ch->get(), kChatMethod, &ctx);
  for (int i = 0; i < 3; ++i) {
    EchoRequest req;
    req.set_text(absl::StrCat("m", i));
    req.set_data(PatternBytes(i, i == 2 ? 70000 : 16));  // one by rendezvous
    ASSERT_TRUE(stream.Write(req)) << i;
  }
  ASSERT_TRUE(stream.WritesDone());
  absl::SleepFor(absl::Milliseconds(100));
  l->OnAddresses({absl::StrCat("127.0.0.1:", server.port())});
  for (int i = 0; i < 3; ++i) {
    EchoResponse resp;
    ASSERT_TRUE(stream.Read(&resp)) << i;
    EXPECT_EQ(resp.text(), absl::StrCat("m", i));
    EXPECT_EQ(resp.data(), PatternBytes(i, i == 2 ? 70000 : 16));
  }
  EchoResponse extra;
  EXPECT_FALSE(stream.Read(&extra));
  absl::Status s = stream.Finish();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(ctx.peer(), absl::StrCat("127.0.0.1:", server.port()));
}

TEST_F(ResolverTest, RegistrationRefusesBadSchemes) {
  class Named final : public ResolverFactory {
   public:
    explicit Named(std::string s) : s_(std::move(s)) {}
    std::string scheme() const override { return s_; }
    absl::StatusOr<std::unique_ptr<Resolver>> Create(const ResolverArgs&) override {
      return absl::UnimplementedError("unused");
    }

   private:
    std::string s_;
  };
  EXPECT_EQ(RegisterResolverFactory(std::make_unique<Named>("1abc")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RegisterResolverFactory(std::make_unique<Named>("a b")).code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status s = RegisterResolverFactory(std::make_unique<Named>("ipv4"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "taken by static address lists")) << s;
  EXPECT_EQ(RegisterResolverFactory(nullptr).code(), absl::StatusCode::kInvalidArgument);
  // A factory's Create error is CreateChannel's.
  ASSERT_TRUE(RegisterResolverFactory(std::make_unique<Named>("refuses")).ok());
  auto ch = CreateChannel("refuses:anything");
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(CreateChannel("manual:").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
