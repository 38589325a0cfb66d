// health_probe: grpc_health_probe for rdmarpc servers. Asks the server's
// grpc.health.v1.Health service how a service is doing, for scripts, load
// balancers and container probes; the flags and exit codes are
// grpc_health_probe's (probe_flags.h), so a Kubernetes exec probe
//
//   exec: {command: ["/bin/grpc_health_probe", "-addr=:7000"]}
//
// works by changing the binary's name to health_probe.
//
//   health_probe -addr=HOST:PORT [-service=NAME] [-connect-timeout=1s]
//                [-rpc-timeout=1s] [-v]
//
// Prints one line on stderr, in grpc_health_probe's words, and exits:
//   0  "status: SERVING"
//   1  "error: <what is wrong with the command line>" (also -h, after the usage)
//   2  "error: failed to connect service at \"ADDR\": CODE: message": the call
//      failed UNAVAILABLE (no connection within -connect-timeout, refused,
//      lost, or the server is shutting down), or no RDMA provider opened
//   3  "error: health rpc failed: CODE: message" (NOT_FOUND for an unknown
//      service, ...), "error: this server does not implement the grpc health
//      protocol (grpc.health.v1.Health): ..." (UNIMPLEMENTED), or
//      "timeout: health rpc did not complete within 1s"
//   4  "service unhealthy (responded with \"NOT_SERVING\")"
//
// Connections are made by the first call, so -connect-timeout bounds that
// set-up (ChannelOptions::connect_timeout) and the Check's deadline is
// -connect-timeout plus -rpc-timeout from the start. The provider comes from
// RDMARPC_PROVIDER; glog's output is limited to errors.
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "grpc/health/v1/health.pb.h"
#include "grpc/health/v1/health.rdmarpc.pb.h"
#include "health/probe_flags.h"
#include "rdmarpc/rdmarpc.h"

namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
namespace probe = rdmarpc::health_probe;

std::string Describe(const absl::Status& status) {
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
}

int Probe(const probe::ProbeFlags& flags) {
  const absl::Time start = absl::Now();
  rdmarpc::ChannelOptions options;
  options.connect_timeout = flags.connect_timeout;
  // ":PORT", as grpc_health_probe takes it (Go's dialer): this machine.
  const std::string target = absl::StartsWith(flags.addr, ":") ? "127.0.0.1" + flags.addr
                                                                : flags.addr;
  absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel =
      rdmarpc::CreateChannel(target, options);
  if (!channel.ok()) {
    if (channel.status().code() == absl::StatusCode::kInvalidArgument) {
      fprintf(stderr, "error: -addr \"%s\": %s\n", flags.addr.c_str(),
              Describe(channel.status()).c_str());
      return probe::kExitInvalidArguments;
    }
    fprintf(stderr, "error: failed to connect service at \"%s\": %s\n", flags.addr.c_str(),
            Describe(channel.status()).c_str());
    return probe::kExitConnectionFailure;
  }
  std::unique_ptr<grpc::health::v1::Health::Stub> stub = grpc::health::v1::Health::NewStub(*channel);
  HealthCheckRequest request;
  request.set_service(flags.service);
  HealthCheckResponse response;
  rdmarpc::ClientContext context;
  context.set_deadline(start + flags.connect_timeout + flags.rpc_timeout);
  const absl::Status status = stub->Check(&context, request, &response);
  if (flags.verbose) {
    fprintf(stderr, "time elapsed: %s\n", absl::FormatDuration(absl::Now() - start).c_str());
  }
  switch (status.code()) {
    case absl::StatusCode::kOk:
      break;
    case absl::StatusCode::kUnavailable:
      fprintf(stderr, "error: failed to connect service at \"%s\": %s\n", flags.addr.c_str(),
              Describe(status).c_str());
      return probe::kExitConnectionFailure;
    case absl::StatusCode::kUnimplemented:
      fprintf(stderr,
              "error: this server does not implement the grpc health protocol "
              "(grpc.health.v1.Health): %s\n",
              std::string(status.message()).c_str());
      return probe::kExitRpcFailure;
    case absl::StatusCode::kDeadlineExceeded:
      fprintf(stderr, "timeout: health rpc did not complete within %s\n",
              absl::FormatDuration(flags.rpc_timeout).c_str());
      return probe::kExitRpcFailure;
    default:
      fprintf(stderr, "error: health rpc failed: %s\n", Describe(status).c_str());
      return probe::kExitRpcFailure;
  }
  const std::string name = HealthCheckResponse::ServingStatus_Name(response.status());
  if (response.status() != HealthCheckResponse::SERVING) {
    fprintf(stderr, "service unhealthy (responded with \"%s\")\n", name.c_str());
    return probe::kExitUnhealthy;
  }
  fprintf(stderr, "status: %s\n", name.c_str());
  return probe::kExitServing;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<probe::ProbeFlags> flags = probe::ParseProbeFlags(argc, argv);
  if (!flags.ok()) {
    fprintf(stderr, "error: %s\n", std::string(flags.status().message()).c_str());
    return probe::kExitInvalidArguments;
  }
  if (flags->help) {
    fputs(probe::Usage().c_str(), stderr);
    return probe::kExitInvalidArguments;
  }
  // One line of output: the runtime logs only errors, to stderr.
  FLAGS_minloglevel = google::GLOG_ERROR;
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  return Probe(*flags);
}
