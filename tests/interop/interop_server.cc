// interop_server: serves grpc.testing.TestService (gRPC's interop test
// service) over rdmarpc until SIGINT or SIGTERM.
//
//   interop_server --port=N [--host=127.0.0.1]
//
// --port=0 lets the kernel pick a free port; the line
// "listening on HOST:PORT" on stdout says which, so scripts can start the
// server without guessing. grpc.testing.UnimplementedService is not
// registered, and TestService's UnimplementedCall is not implemented: both
// answer UNIMPLEMENTED, which the unimplemented_* cases check.
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "rdmarpc/rdmarpc.h"
#include "test_service_impl.h"

DEFINE_int32(port, 0, "Port to listen on; 0 picks a free one (printed on stdout)");
DEFINE_string(host, "127.0.0.1", "Address to listen on; 0.0.0.0 for every interface of this host");

int main(int argc, char** argv) {
  gflags::SetUsageMessage("interop_server --port=N [--host=ADDRESS]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  if (FLAGS_port < 0 || FLAGS_port > 65535) {
    fprintf(stderr, "interop_server: --port must be 0..65535, got %d\n", FLAGS_port);
    return 2;
  }

  // Block the shutdown signals before any thread starts, so that every
  // thread inherits the mask and only sigwait() below sees them: a signal
  // handler could not safely call Server::Shutdown.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  rdmarpc_interop::TestServiceImpl service;
  rdmarpc::Server server;
  absl::Status status = server.AddService(&service);
  if (!status.ok()) {
    LOG(ERROR) << "AddService(" << service.full_name() << "): " << status;
    return 1;
  }
  const std::string listen = absl::StrCat(FLAGS_host, ":", FLAGS_port);
  status = server.Start(listen);
  if (!status.ok()) {
    fprintf(stderr, "interop_server: cannot listen on %s: %s\n", listen.c_str(),
            status.ToString().c_str());
    return 1;
  }

  const std::string bound = absl::StrCat(FLAGS_host, ":", server.port());
  LOG(INFO) << "interop_server listening on " << bound;
  printf("listening on %s\n", bound.c_str());
  fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  LOG(INFO) << "interop_server: " << strsignal(signal_number) << ", shutting down";
  server.Shutdown();
  server.Wait();
  LOG(INFO) << "interop_server: stopped";
  return 0;
}
