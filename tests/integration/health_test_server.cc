// health_test_server: a server with only grpc.health.v1.Health, whose
// statuses come from the command line, for health_probe_e2e.sh:
//
//   health_test_server --listen=127.0.0.1:0 --serving=a.A,b.B --not_serving=c.C
//   health_test_server --listen=127.0.0.1:0 --serve_health=false   # no service at all
//
// "" (the whole server) is SERVING. Prints "listening on HOST:PORT" once it
// accepts calls; exits 0 on SIGINT/SIGTERM.
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "health/health_check_service.h"
#include "reflection/proto_server_reflection.h"
#include "rdmarpc/rdmarpc.h"

DEFINE_string(listen, "127.0.0.1:0", "Address to listen on, HOST:PORT");
DEFINE_string(serving, "", "Comma-separated service names to report SERVING");
DEFINE_string(not_serving, "", "Comma-separated service names to report NOT_SERVING");
DEFINE_bool(serve_health, true, "Register the health service (false: a server with no service)");
DEFINE_bool(v1alpha_reflection, false,
            "Also register grpc.reflection.v1alpha.ServerReflection, and not v1: a server "
            "from before gRPC's reflection v1");

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  rdmarpc::HealthCheckService health;
  for (absl::string_view name : absl::StrSplit(FLAGS_serving, ',', absl::SkipEmpty())) {
    health.SetServingStatus(name, true);
  }
  for (absl::string_view name : absl::StrSplit(FLAGS_not_serving, ',', absl::SkipEmpty())) {
    health.SetServingStatus(name, false);
  }
  rdmarpc::Server server;
  rdmarpc::reflection::ProtoServerReflection reflection;
  absl::Status status = FLAGS_serve_health ? server.AddService(&health) : absl::OkStatus();
  if (status.ok() && FLAGS_v1alpha_reflection) status = reflection.AddV1AlphaOnlyToServer(&server);
  if (status.ok()) status = server.Start(FLAGS_listen);
  if (!status.ok()) {
    fprintf(stderr, "health_test_server: %s\n", status.ToString().c_str());
    return 1;
  }
  const std::string host = FLAGS_listen.substr(0, FLAGS_listen.rfind(':'));
  printf("listening on %s:%d\n", host.c_str(), server.port());
  fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  health.Shutdown();
  server.Shutdown();
  server.Wait();
  return 0;
}
