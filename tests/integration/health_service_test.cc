// rdmarpc::HealthService: the status table directly, through the generated
// handler, and over a real connection with the generated Health stub.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "health/health_service.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/call_model_service.h"

namespace {

using rdmarpc::HealthService;
using rdmarpc::health::HealthCheckRequest;
using rdmarpc::health::HealthCheckResponse;

constexpr char kEcho[] = "rdmarpc.examples.EchoService";

TEST(HealthService, WholeServerServingAndOthersUnknownAtStart) {
  HealthService health;
  EXPECT_EQ(health.GetServingStatus(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::SERVICE_UNKNOWN);
}

TEST(HealthService, SetServingStatusFlipsOneService) {
  HealthService health;
  health.SetServingStatus(kEcho, true);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::SERVING);
  health.SetServingStatus(kEcho, false);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(health.GetServingStatus(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(health.GetServingStatus("other.Service"), HealthCheckResponse::SERVICE_UNKNOWN);
}

TEST(HealthService, SetAllChangesEveryKnownService) {
  HealthService health;
  health.SetServingStatus(kEcho, true);
  health.SetServingStatus(false);
  EXPECT_EQ(health.GetServingStatus(""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::NOT_SERVING);
  health.SetServingStatus(true);
  EXPECT_EQ(health.GetServingStatus(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::SERVING);
}

TEST(HealthService, ShutdownIsFinal) {
  HealthService health;
  health.SetServingStatus(kEcho, true);
  health.Shutdown();
  EXPECT_EQ(health.GetServingStatus(""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::NOT_SERVING);
  health.SetServingStatus(kEcho, true);
  health.SetServingStatus(true);
  EXPECT_EQ(health.GetServingStatus(kEcho), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(health.GetServingStatus(""), HealthCheckResponse::NOT_SERVING);
}

TEST(HealthService, CheckHandlerAnswersThroughGeneratedGlue) {
  HealthService health;
  health.SetServingStatus(kEcho, false);
  EXPECT_EQ(health.full_name(), "rdmarpc.health.Health");
  ASSERT_EQ(health.methods().size(), 1u);
  const rdmarpc::internal::MethodHandler& check = *health.methods()[0];
  EXPECT_EQ(check.full_name(), "/rdmarpc.health.Health/Check");

  std::unique_ptr<google::protobuf::MessageLite> request = check.NewRequest();
  std::unique_ptr<google::protobuf::MessageLite> response = check.NewResponse();
  static_cast<HealthCheckRequest*>(request.get())->set_service(kEcho);
  rdmarpc::ServerContext context;
  absl::Status status = check.Invoke(&context, *request, response.get());
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(static_cast<HealthCheckResponse*>(response.get())->status(),
            HealthCheckResponse::NOT_SERVING);
}

// Check over a real connection, as a load balancer's probe would call it.
TEST(HealthService, CheckOverTheWire) {
  HealthService health;
  health.SetServingStatus(kEcho, true);
  rdmarpc::Server server;
  ASSERT_TRUE(server.AddService(&health).ok());
  absl::Status started = server.Start("127.0.0.1:0");
  ASSERT_TRUE(started.ok()) << started;
  absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel =
      rdmarpc::CreateChannel(absl::StrCat("127.0.0.1:", server.port()));
  ASSERT_TRUE(channel.ok()) << channel.status();
  std::unique_ptr<rdmarpc::health::Health::Stub> stub = rdmarpc::health::Health::NewStub(*channel);

  struct Probe {
    std::string service;
    HealthCheckResponse::ServingStatus want;
  };
  for (const Probe& probe : {Probe{"", HealthCheckResponse::SERVING},
                             Probe{kEcho, HealthCheckResponse::SERVING},
                             Probe{"nobody.Home", HealthCheckResponse::SERVICE_UNKNOWN}}) {
    HealthCheckRequest request;
    request.set_service(probe.service);
    HealthCheckResponse response;
    rdmarpc::ClientContext context;
    context.set_timeout(absl::Seconds(10));
    absl::Status status = stub->Check(&context, request, &response);
    ASSERT_TRUE(status.ok()) << "service '" << probe.service << "': " << status;
    EXPECT_EQ(response.status(), probe.want) << "service '" << probe.service << "'";
  }

  health.SetServingStatus(kEcho, false);
  HealthCheckRequest request;
  request.set_service(kEcho);
  HealthCheckResponse response;
  rdmarpc::ClientContext context;
  context.set_timeout(absl::Seconds(10));
  ASSERT_TRUE(stub->Check(&context, request, &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);

  stub.reset();
  server.Shutdown(absl::Seconds(1));
  server.Wait();
}

TEST(HealthService, CheckRunsInlineOnTheWorker) {
  HealthService health;
  ASSERT_EQ(health.methods().size(), 1u);
  EXPECT_TRUE(health.methods()[0]->run_inline());
}

// A probe answers within 50 ms while every handler-pool thread of the
// server is busy in slow handlers: Check runs inline on the worker.
TEST(HealthService, ProbeAnswersWithin50MsWhileEveryHandlerThreadIsBusy) {
  HealthService health;
  rdmarpc::test::CallModelService slow;
  rdmarpc::ServerOptions so;
  so.num_workers = 1;
  so.handler_threads = 2;
  so.max_handler_threads = 2;
  rdmarpc::Server server(so);
  ASSERT_TRUE(server.AddService(&health).ok());
  ASSERT_TRUE(server.AddService(&slow).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const std::string target = absl::StrCat("127.0.0.1:", server.port());
  std::shared_ptr<rdmarpc::Channel> busy = *rdmarpc::CreateChannel(target);
  std::shared_ptr<rdmarpc::Channel> probes = *rdmarpc::CreateChannel(target);
  std::unique_ptr<rdmarpc::health::Health::Stub> stub = rdmarpc::health::Health::NewStub(probes);
  auto probe = [&]() -> absl::Duration {
    HealthCheckRequest request;
    HealthCheckResponse response;
    rdmarpc::ClientContext context;
    context.set_timeout(absl::Seconds(10));
    const absl::Time t0 = absl::Now();
    absl::Status status = stub->Check(&context, request, &response);
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
  EXPECT_EQ(slow.returned_.load(), 0);  // still busy throughout
  std::sort(took.begin(), took.end());
  EXPECT_LT(took[2], absl::Milliseconds(50)) << "median probe took " << took[2];
  done.Wait();
  stub.reset();
  server.Shutdown(absl::Seconds(1));
}

}  // namespace
