// rdmarpc::HealthCheckService: the status table directly, and
// grpc.health.v1.Health's Check, List and Watch over real connections with
// the stub generated from gRPC's health.proto.
#include "health/health_check_service.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.rdmarpc.pb.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/call_model_service.h"

namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using grpc::health::v1::HealthListRequest;
using grpc::health::v1::HealthListResponse;
using rdmarpc::HealthCheckService;
using ServingStatus = HealthCheckResponse::ServingStatus;

constexpr char kEcho[] = "rdmarpc.examples.EchoService";
// The bound item 4 of issue 10 sets for a Watch to see a change.
constexpr absl::Duration kWatchLatency = absl::Milliseconds(100);

// A server with the health service (and optionally others) on 127.0.0.1.
class HealthServer {
 public:
  explicit HealthServer(HealthCheckService* health, rdmarpc::ServerOptions options = {},
                        rdmarpc::Service* other = nullptr)
      : server_(options) {
    EXPECT_TRUE(server_.AddService(health).ok());
    if (other != nullptr) {
      EXPECT_TRUE(server_.AddService(other).ok());
    }
    absl::Status started = server_.Start("127.0.0.1:0");
    EXPECT_TRUE(started.ok()) << started;
  }
  ~HealthServer() { Stop(absl::Seconds(1)); }

  std::string target() const { return absl::StrCat("127.0.0.1:", server_.port()); }
  std::shared_ptr<rdmarpc::Channel> NewChannel() const {
    absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel = rdmarpc::CreateChannel(target());
    EXPECT_TRUE(channel.ok()) << channel.status();
    return *channel;
  }
  void Stop(absl::Duration grace) {
    if (stopped_) return;
    stopped_ = true;
    server_.Shutdown(grace);
    server_.Wait();
  }

 private:
  rdmarpc::Server server_;
  bool stopped_ = false;
};

absl::Status CallCheck(Health::Stub* stub, const std::string& service,
                       HealthCheckResponse* response) {
  HealthCheckRequest request;
  request.set_service(service);
  rdmarpc::ClientContext context;
  context.set_timeout(absl::Seconds(10));
  return stub->Check(&context, request, response);
}

// One Watch call whose messages a thread of its own reads, noting when each
// arrived.
class Watcher {
 public:
  Watcher(Health::Stub* stub, const std::string& service) {
    HealthCheckRequest request;
    request.set_service(service);
    reader_ = stub->Watch(&context_, request);
    thread_ = std::thread([this] {
      HealthCheckResponse response;
      while (reader_->Read(&response)) {
        absl::MutexLock lock(&mu_);
        received_.push_back({response.status(), absl::Now()});
      }
      absl::Status status = reader_->Finish();
      absl::MutexLock lock(&mu_);
      final_ = std::move(status);
      done_ = true;
    });
  }
  ~Watcher() { Cancel(); }

  // Waits up to `limit` until `n` messages arrived; the time the n-th came.
  absl::StatusOr<absl::Time> WaitForMessage(size_t n, absl::Duration limit = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto arrived = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return received_.size() >= n || done_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&arrived), limit);
    if (received_.size() < n) {
      return absl::DeadlineExceededError(
          absl::StrCat("have ", received_.size(), " messages, want ", n,
                       done_ ? absl::StrCat("; call ended ", final_.ToString()) : ""));
    }
    return received_[n - 1].second;
  }
  std::vector<ServingStatus> statuses() {
    absl::MutexLock lock(&mu_);
    std::vector<ServingStatus> out;
    for (const auto& [status, at] : received_) out.push_back(status);
    return out;
  }
  // Waits for the call to end by itself; its status.
  absl::Status WaitForEnd(absl::Duration limit = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto ended = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ended), limit)) {
      return absl::DeadlineExceededError("the Watch call did not end");
    }
    return final_;
  }
  void Cancel() {
    if (!thread_.joinable()) return;
    context_.TryCancel();
    thread_.join();
  }

 private:
  rdmarpc::ClientContext context_;
  std::unique_ptr<rdmarpc::ClientReaderInterface<HealthCheckResponse>> reader_;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<std::pair<ServingStatus, absl::Time>> received_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status final_ ABSL_GUARDED_BY(mu_);
};

TEST(HealthCheckService, WholeServerServingAndOthersUnknownAtStart) {
  HealthCheckService health;
  EXPECT_EQ(health.GetServingStatus(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::SERVICE_UNKNOWN);
}

TEST(HealthCheckService, SetServingStatusFlipsOneService) {
  HealthCheckService health;
  health.SetServingStatus(kEcho, true);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::SERVING);
  health.SetServingStatus(kEcho, false);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(health.GetServingStatus(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(health.GetServingStatus("other.Service"), HealthCheckResponse::SERVICE_UNKNOWN);
}

TEST(HealthCheckService, SetAllChangesEveryKnownService) {
  HealthCheckService health;
  health.SetServingStatus(kEcho, true);
  health.SetServingStatus(false);
  EXPECT_EQ(health.GetServingStatus(""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(health.GetServingStatus("other.Service"), HealthCheckResponse::SERVICE_UNKNOWN);
  health.SetServingStatus(true);
  EXPECT_EQ(health.GetServingStatus(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::SERVING);
}

TEST(HealthCheckService, ShutdownIsFinal) {
  HealthCheckService health;
  health.SetServingStatus(kEcho, true);
  health.Shutdown();
  EXPECT_EQ(health.GetServingStatus(""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::NOT_SERVING);
  health.SetServingStatus(kEcho, true);
  health.SetServingStatus(true);
  health.SetServingStatus("late.Service", true);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(health.GetServingStatus(""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(health.GetServingStatus("late.Service"), HealthCheckResponse::SERVICE_UNKNOWN);
}

// gRPC's names, in health.proto's order, and where each runs.
TEST(HealthCheckService, RegistersGrpcHealthV1MethodsToRunInline) {
  HealthCheckService health;
  EXPECT_EQ(health.full_name(), "grpc.health.v1.Health");
  ASSERT_EQ(health.methods().size(), 3u);
  const rdmarpc::internal::MethodHandler& check = *health.methods()[0];
  const rdmarpc::internal::MethodHandler& list = *health.methods()[1];
  const rdmarpc::internal::MethodHandler& watch = *health.methods()[2];
  EXPECT_EQ(check.full_name(), "/grpc.health.v1.Health/Check");
  EXPECT_EQ(list.full_name(), "/grpc.health.v1.Health/List");
  EXPECT_EQ(watch.full_name(), "/grpc.health.v1.Health/Watch");
  EXPECT_EQ(check.kind(), rdmarpc::internal::RpcKind::kUnary);
  EXPECT_EQ(list.kind(), rdmarpc::internal::RpcKind::kUnary);
  EXPECT_EQ(watch.kind(), rdmarpc::internal::RpcKind::kServerStreaming);
  EXPECT_FALSE(check.callback());
  EXPECT_TRUE(watch.callback());
  EXPECT_TRUE(check.run_inline());
  EXPECT_TRUE(list.run_inline());
  EXPECT_TRUE(watch.run_inline());
  // The same names the stub generated from gRPC's health.proto calls.
  const google::protobuf::ServiceDescriptor* proto =
      HealthCheckRequest::descriptor()->file()->FindServiceByName("Health");
  ASSERT_NE(proto, nullptr);
  EXPECT_EQ(proto->full_name(), health.full_name());
  ASSERT_EQ(proto->method_count(), 3);
  EXPECT_EQ(proto->method(0)->name(), "Check");
  EXPECT_EQ(proto->method(1)->name(), "List");
  EXPECT_EQ(proto->method(2)->name(), "Watch");
  EXPECT_EQ(HealthCheckRequest::descriptor()->file()->name(), "grpc/health/v1/health.proto");
}

// Check over a real connection, as a load balancer's probe calls it.
TEST(HealthCheckService, CheckOverTheWire) {
  HealthCheckService health;
  health.SetServingStatus(kEcho, true);
  HealthServer server(&health);
  std::unique_ptr<Health::Stub> stub = Health::NewStub(server.NewChannel());

  HealthCheckResponse response;
  absl::Status status = CallCheck(stub.get(), "", &response);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  status = CallCheck(stub.get(), kEcho, &response);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);

  health.SetServingStatus(kEcho, false);
  status = CallCheck(stub.get(), kEcho, &response);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);

  // gRPC's health.proto: an unknown service fails NOT_FOUND.
  status = CallCheck(stub.get(), "nobody.Home", &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "unknown service 'nobody.Home'");
}

TEST(HealthCheckService, ListReturnsEveryKnownStatus) {
  HealthCheckService health;
  health.SetServingStatus(kEcho, true);
  health.SetServingStatus("b.Down", false);
  HealthServer server(&health);
  std::unique_ptr<Health::Stub> stub = Health::NewStub(server.NewChannel());
  // A watched name that was never set is not listed.
  Watcher watcher(stub.get(), "only.Watched");
  ASSERT_TRUE(watcher.WaitForMessage(1).ok());

  HealthListResponse response;
  rdmarpc::ClientContext context;
  context.set_timeout(absl::Seconds(10));
  absl::Status status = stub->List(&context, HealthListRequest(), &response);
  ASSERT_TRUE(status.ok()) << status;
  std::map<std::string, ServingStatus> got;
  for (const auto& [name, entry] : response.statuses()) got[name] = entry.status();
  EXPECT_EQ(got, (std::map<std::string, ServingStatus>{{"", HealthCheckResponse::SERVING},
                                                       {"b.Down", HealthCheckResponse::NOT_SERVING},
                                                       {kEcho, HealthCheckResponse::SERVING}}));
}

// health.proto lets List fail RESOURCE_EXHAUSTED "if too many services
// exist"; the bound is grpc-go's, 100.
TEST(HealthCheckService, ListRefusesMoreThan100Services) {
  HealthCheckService health;
  for (int i = 1; i < 100; ++i) health.SetServingStatus(absl::StrCat("svc.S", i), true);
  HealthServer server(&health);
  std::unique_ptr<Health::Stub> stub = Health::NewStub(server.NewChannel());
  auto list = [&](HealthListResponse* response) {
    rdmarpc::ClientContext context;
    context.set_timeout(absl::Seconds(10));
    return stub->List(&context, HealthListRequest(), response);
  };
  HealthListResponse response;
  absl::Status status = list(&response);  // "" and 99 others: exactly 100
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(response.statuses_size(), 100);

  health.SetServingStatus("svc.S100", true);
  status = list(&response);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(), "server health list has 101 services, more than the maximum 100");
}

// Watch: the current status at once, then each change, each within 100 ms
// of the SetServingStatus that made it; a repeated status is not sent again;
// Shutdown's NOT_SERVING arrives; the call stays open until cancelled.
TEST(HealthCheckService, WatchSeesEachChangeWithin100Ms) {
  HealthCheckService health;
  health.SetServingStatus(kEcho, true);
  HealthServer server(&health);
  std::unique_ptr<Health::Stub> stub = Health::NewStub(server.NewChannel());
  Watcher watcher(stub.get(), kEcho);
  ASSERT_TRUE(watcher.WaitForMessage(1).ok());

  auto change = [&](size_t n, auto set) {
    const absl::Time set_at = absl::Now();
    set();
    absl::StatusOr<absl::Time> arrived = watcher.WaitForMessage(n);
    ASSERT_TRUE(arrived.ok()) << arrived.status();
    EXPECT_LT(*arrived - set_at, kWatchLatency) << "message " << n;
  };
  change(2, [&] { health.SetServingStatus(kEcho, false); });
  change(3, [&] { health.SetServingStatus(kEcho, true); });
  health.SetServingStatus(kEcho, true);        // no change: nothing sent
  health.SetServingStatus("other.Svc", false);  // another name: nothing sent
  change(4, [&] { health.SetServingStatus(false); });
  change(5, [&] { health.SetServingStatus(true); });
  change(6, [&] { health.Shutdown(); });
  health.SetServingStatus(kEcho, true);  // after Shutdown: ignored
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(watcher.statuses(),
            (std::vector<ServingStatus>{HealthCheckResponse::SERVING,
                                        HealthCheckResponse::NOT_SERVING,
                                        HealthCheckResponse::SERVING,
                                        HealthCheckResponse::NOT_SERVING,
                                        HealthCheckResponse::SERVING,
                                        HealthCheckResponse::NOT_SERVING}));
  watcher.Cancel();
  EXPECT_EQ(watcher.WaitForEnd().code(), absl::StatusCode::kCancelled);
}

// gRPC's health.proto: an unknown service is answered SERVICE_UNKNOWN, the
// call stays open, and the status follows once the service is registered.
TEST(HealthCheckService, WatchOfUnknownServiceGetsServiceUnknownThenUpdates) {
  HealthCheckService health;
  HealthServer server(&health);
  std::unique_ptr<Health::Stub> stub = Health::NewStub(server.NewChannel());
  Watcher watcher(stub.get(), "late.Service");
  ASSERT_TRUE(watcher.WaitForMessage(1).ok());
  EXPECT_EQ(health.GetServingStatus("late.Service"), HealthCheckResponse::SERVICE_UNKNOWN);
  HealthCheckResponse response;
  EXPECT_EQ(CallCheck(stub.get(), "late.Service", &response).code(), absl::StatusCode::kNotFound);
  health.SetServingStatus(false);  // every known name: not this one
  absl::SleepFor(absl::Milliseconds(100));

  const absl::Time set_at = absl::Now();
  health.SetServingStatus("late.Service", true);
  absl::StatusOr<absl::Time> arrived = watcher.WaitForMessage(2);
  ASSERT_TRUE(arrived.ok()) << arrived.status();
  EXPECT_LT(*arrived - set_at, kWatchLatency);
  EXPECT_EQ(watcher.statuses(), (std::vector<ServingStatus>{HealthCheckResponse::SERVICE_UNKNOWN,
                                                            HealthCheckResponse::SERVING}));
}

// Several watchers of one name all see the change.
TEST(HealthCheckService, EveryWatcherOfANameSeesTheChange) {
  HealthCheckService health;
  health.SetServingStatus(kEcho, true);
  HealthServer server(&health);
  std::unique_ptr<Health::Stub> stub = Health::NewStub(server.NewChannel());
  std::vector<std::unique_ptr<Watcher>> watchers;
  for (int i = 0; i < 4; ++i) {
    watchers.push_back(std::make_unique<Watcher>(stub.get(), kEcho));
    ASSERT_TRUE(watchers.back()->WaitForMessage(1).ok());
  }
  health.SetServingStatus(kEcho, false);
  for (auto& watcher : watchers) {
    ASSERT_TRUE(watcher->WaitForMessage(2).ok());
    EXPECT_EQ(watcher->statuses(), (std::vector<ServingStatus>{HealthCheckResponse::SERVING,
                                                               HealthCheckResponse::NOT_SERVING}));
  }
}

// Open Watch calls hold no handler-pool thread: with a pool of one thread
// and four watchers, a call that needs the pool still runs at once.
TEST(HealthCheckService, WatchersHoldNoHandlerThread) {
  HealthCheckService health;
  rdmarpc::test::CallModelService other;
  rdmarpc::ServerOptions so;
  so.handler_threads = 1;
  so.max_handler_threads = 1;
  HealthServer server(&health, so, &other);
  std::shared_ptr<rdmarpc::Channel> channel = server.NewChannel();
  std::unique_ptr<Health::Stub> stub = Health::NewStub(channel);
  std::vector<std::unique_ptr<Watcher>> watchers;
  for (int i = 0; i < 4; ++i) {
    watchers.push_back(std::make_unique<Watcher>(stub.get(), ""));
    ASSERT_TRUE(watchers.back()->WaitForMessage(1).ok());
  }
  rdmarpc::test::EchoRequest req;
  req.set_text("pooled");
  rdmarpc::test::EchoResponse resp;
  rdmarpc::ClientContext ctx;
  ctx.set_timeout(absl::Seconds(5));
  absl::Status status =
      rdmarpc::internal::BlockingUnaryCall(channel.get(), rdmarpc::test::kSlowMethod, &ctx, req, &resp);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(resp.text(), "pooled");
}

// Server::Shutdown ends open Watch calls when its grace runs out.
TEST(HealthCheckService, ServerShutdownEndsWatch) {
  HealthCheckService health;
  HealthServer server(&health);
  std::unique_ptr<Health::Stub> stub = Health::NewStub(server.NewChannel());
  Watcher watcher(stub.get(), "");
  ASSERT_TRUE(watcher.WaitForMessage(1).ok());
  health.Shutdown();
  ASSERT_TRUE(watcher.WaitForMessage(2).ok());
  server.Stop(absl::Milliseconds(100));
  EXPECT_EQ(watcher.WaitForEnd().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(watcher.statuses(), (std::vector<ServingStatus>{HealthCheckResponse::SERVING,
                                                            HealthCheckResponse::NOT_SERVING}));
}

// Check, List and a new Watch answer within 50 ms while every handler-pool
// thread of the server is busy in slow handlers: all three run on the worker.
TEST(HealthCheckService, AnswersWithin50MsWhileEveryHandlerThreadIsBusy) {
  HealthCheckService health;
  rdmarpc::test::CallModelService slow;
  rdmarpc::ServerOptions so;
  so.num_workers = 1;
  so.handler_threads = 2;
  so.max_handler_threads = 2;
  HealthServer server(&health, so, &slow);
  std::shared_ptr<rdmarpc::Channel> busy = server.NewChannel();
  std::shared_ptr<rdmarpc::Channel> probes = server.NewChannel();
  std::unique_ptr<Health::Stub> stub = Health::NewStub(probes);
  auto probe = [&]() -> absl::Duration {
    HealthCheckResponse response;
    const absl::Time t0 = absl::Now();
    absl::Status status = CallCheck(stub.get(), "", &response);
    const absl::Duration took = absl::Now() - t0;
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
    return took;
  };
  probe();
  probe();  // both pooled connections are up before the clock starts
  constexpr int kSlow = 3;  // two run, one waits for a pool thread
  std::vector<rdmarpc::test::EchoRequest> reqs(kSlow);
  std::vector<rdmarpc::test::EchoResponse> resps(kSlow);
  std::vector<rdmarpc::ClientContext> ctxs(kSlow);
  absl::BlockingCounter done(kSlow);
  for (int i = 0; i < kSlow; ++i) {
    reqs[i].set_sleep_ms(1500);
    ctxs[i].set_timeout(absl::Seconds(30));
    rdmarpc::internal::AsyncUnaryCall(busy.get(), rdmarpc::test::kSlowMethod, &ctxs[i], reqs[i],
                                      &resps[i], [&](absl::Status s) {
                                        EXPECT_TRUE(s.ok()) << s;
                                        done.DecrementCount();
                                      });
  }
  ASSERT_TRUE(rdmarpc::test::WaitFor([&] { return slow.started_.load() == 2; }));
  std::vector<absl::Duration> took;
  for (int i = 0; i < 5; ++i) took.push_back(probe());
  const absl::Time list_at = absl::Now();
  HealthListResponse list;
  rdmarpc::ClientContext list_context;
  list_context.set_timeout(absl::Seconds(10));
  absl::Status listed = stub->List(&list_context, HealthListRequest(), &list);
  const absl::Duration list_took = absl::Now() - list_at;
  const absl::Time watch_at = absl::Now();
  Watcher watcher(stub.get(), "");
  absl::StatusOr<absl::Time> first = watcher.WaitForMessage(1);
  EXPECT_EQ(slow.returned_.load(), 0);  // still busy throughout
  std::sort(took.begin(), took.end());
  EXPECT_LT(took[2], absl::Milliseconds(50)) << "median Check took " << took[2];
  ASSERT_TRUE(listed.ok()) << listed;
  EXPECT_EQ(list.statuses_size(), 1);
  EXPECT_LT(list_took, absl::Milliseconds(50)) << "List took " << list_took;
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_LT(*first - watch_at, absl::Milliseconds(50)) << "Watch's first message";
  watcher.Cancel();
  done.Wait();
}

}  // namespace
