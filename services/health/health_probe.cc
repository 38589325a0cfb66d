// health_probe: asks a server's rdmarpc.health.Health service how a service
// is doing, for scripts, load balancers and container liveness checks (like
// grpc_health_probe).
//
//   health_probe --server=HOST:PORT [--service=NAME] [--timeout_ms=1000]
//
// Prints one line, "health: SERVING" (exit 0), "health: NOT_SERVING" or
// "health: SERVICE_UNKNOWN" (exit 1), or "health: <STATUS_CODE> <message>"
// when the call fails (exit 2).
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "health.pb.h"
#include "health.rdmarpc.pb.h"
#include "rdmarpc/rdmarpc.h"

DEFINE_string(server, "127.0.0.1:7000", "Server address, HOST:PORT");
DEFINE_string(service, "", "Full service name; empty asks about the whole server");
DEFINE_int64(timeout_ms, 1000, "Deadline of the check, in milliseconds (also bounds connecting)");

int main(int argc, char** argv) {
  gflags::SetUsageMessage("health_probe --server=HOST:PORT [--service=NAME] [--timeout_ms=MS]");
  FLAGS_minloglevel = google::GLOG_WARNING;  // one line of output, nothing else
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  rdmarpc::ChannelOptions options;
  options.connect_timeout = absl::Milliseconds(FLAGS_timeout_ms);
  absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel =
      rdmarpc::CreateChannel(FLAGS_server, options);
  absl::Status status = channel.status();
  rdmarpc::health::HealthCheckResponse response;
  if (status.ok()) {
    std::unique_ptr<rdmarpc::health::Health::Stub> stub =
        rdmarpc::health::Health::NewStub(*channel);
    rdmarpc::health::HealthCheckRequest request;
    request.set_service(FLAGS_service);
    rdmarpc::ClientContext context;
    context.set_timeout(absl::Milliseconds(FLAGS_timeout_ms));
    status = stub->Check(&context, request, &response);
  }
  if (!status.ok()) {
    printf("health: %s %s\n", absl::StatusCodeToString(status.code()).c_str(),
           std::string(status.message()).c_str());
    return 2;
  }
  printf("health: %s\n",
         rdmarpc::health::HealthCheckResponse::ServingStatus_Name(response.status()).c_str());
  return response.status() == rdmarpc::health::HealthCheckResponse::SERVING ? 0 : 1;
}
