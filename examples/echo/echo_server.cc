// echo_server: serves rdmarpc.examples.EchoService (and grpc.health.v1.Health
// and grpc.reflection's ServerReflection, v1 and v1alpha) until SIGINT or
// SIGTERM.
//
//   echo_server --listen=127.0.0.1:7000 [--workers=2]
//               [--register=etcd://127.0.0.1:2379/services/echo]
//
// With port 0 the kernel picks a free port; the line
// "listening on HOST:PORT" on stdout says which, so scripts can start the
// server without guessing a free port.
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "echo.pb.h"
#include "echo.rdmarpc.pb.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "health/health_check_service.h"
#include "rdmarpc/access_log.h"
#include "rdmarpc/rdmarpc.h"
#include "reflection/proto_server_reflection.h"

DEFINE_string(listen, "127.0.0.1:7000", "Address to listen on, HOST:PORT (port 0 picks a free one)");
DEFINE_int32(workers, 2, "Server worker threads, each owning one completion queue");
DEFINE_string(register, "",
              "Register the server for discovery: etcd://HOST:PORT[,HOST:PORT...]/PREFIX "
              "(its address under PREFIX, with a lease kept alive; revoked on shutdown)");
DEFINE_int32(register_ttl_s, 10, "TTL of the --register lease, in seconds");
DEFINE_string(register_address, "",
              "The address --register publishes, IP:PORT (default: the one bound; "
              "required with a wildcard --listen such as 0.0.0.0 or [::])");
DEFINE_bool(access_log, false,
            "Log every call (method, peer, status, duration, sizes) at INFO "
            "(rdmarpc/access_log.h)");

namespace {

using rdmarpc::examples::EchoRequest;
using rdmarpc::examples::EchoResponse;

class EchoServiceImpl final : public rdmarpc::examples::EchoService::Service {
 public:
  absl::Status Echo(rdmarpc::ServerContext* context, const EchoRequest& request,
                    EchoResponse* response) override {
    // The handler runs on a server worker, so the delay holds that worker as a
    // slow real handler would; that is the point of the knob.
    if (request.server_delay_ms() > 0) {
      absl::SleepFor(absl::Milliseconds(request.server_delay_ms()));
    }
    response->set_payload(request.payload());
    // The request's attachment goes back as it arrived: the bytes the
    // transport pulled into registered memory, exposed to the client's
    // READ with no copy.
    if (context->request_attachment()) {
      context->set_response_attachment(context->request_attachment());
    }
    return absl::OkStatus();
  }
};

// Host part of "HOST:PORT" (brackets kept for IPv6 literals).
absl::string_view HostOf(absl::string_view address) {
  size_t colon = address.rfind(':');
  return colon == absl::string_view::npos ? address : address.substr(0, colon);
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "echo_server --listen=HOST:PORT [--workers=N] [--access_log] "
      "[--register=etcd://HOST:PORT/PREFIX [--register_ttl_s=S] [--register_address=IP:PORT]]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  if (FLAGS_workers < 1) {
    fprintf(stderr, "echo_server: --workers must be at least 1, got %d\n", FLAGS_workers);
    return 2;
  }

  // Block the shutdown signals before any thread starts so that every thread
  // inherits the mask and only sigwait() below ever sees them; a handler
  // could not safely call Server::Shutdown.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  EchoServiceImpl echo;
  rdmarpc::HealthCheckService health;
  rdmarpc::reflection::ProtoServerReflection reflection;  // outlives the server
  rdmarpc::ServerOptions options;
  options.num_workers = FLAGS_workers;
  options.register_target = FLAGS_register;
  options.register_ttl = absl::Seconds(FLAGS_register_ttl_s);
  options.register_address = FLAGS_register_address;
  if (FLAGS_access_log) {
    options.interceptor_creators.push_back(
        std::make_shared<rdmarpc::experimental::ServerAccessLogFactory>());
  }
  rdmarpc::Server server(options);
  for (rdmarpc::Service* service : {static_cast<rdmarpc::Service*>(&echo),
                                    static_cast<rdmarpc::Service*>(&health)}) {
    absl::Status status = server.AddService(service);
    if (!status.ok()) {
      LOG(ERROR) << "AddService(" << service->full_name() << "): " << status;
      return 1;
    }
  }
  // grpc.reflection.v1 and v1alpha, so tools (grpcurl-style clients) can
  // list the services and fetch their .proto descriptors.
  if (absl::Status added = reflection.AddToServer(&server); !added.ok()) {
    LOG(ERROR) << "ProtoServerReflection::AddToServer: " << added;
    return 1;
  }
  absl::Status status = server.Start(FLAGS_listen);
  if (!status.ok()) {
    LOG(ERROR) << "cannot start on " << FLAGS_listen << ": " << status;
    fprintf(stderr, "echo_server: %s %s\n",
            absl::StatusCodeToString(status.code()).c_str(),
            std::string(status.message()).c_str());
    return 1;
  }
  health.SetServingStatus(echo.full_name(), true);

  std::string bound = absl::StrCat(HostOf(FLAGS_listen), ":", server.port());
  LOG(INFO) << "echo_server listening on " << bound << " with " << FLAGS_workers
            << " workers";
  printf("listening on %s\n", bound.c_str());
  fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  LOG(INFO) << "echo_server: " << strsignal(signal_number) << ", shutting down";
  health.Shutdown();
  server.Shutdown();
  server.Wait();
  LOG(INFO) << "echo_server: stopped";
  return 0;
}
