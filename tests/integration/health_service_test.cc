// rdmarpc::HealthService: the status table directly, through the generated
// handler, and over a real connection with the generated Health stub.
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "health/health_service.h"
#include "rdmarpc/rdmarpc.h"

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

}  // namespace
