// corrupting_echo_server: an EchoService that damages one reply on purpose,
// so the echo_e2e "dataloss" test can check that echo_client notices and
// names the exact call and byte.
//
//   corrupting_echo_server --listen=127.0.0.1:0 --corrupt_call=3 --corrupt_byte=17
//
// The reply to the corrupt_call-th request this server receives (counting
// from 0) has byte corrupt_byte inverted; every other reply is a faithful
// echo. With one call in flight, the server's request order is the client's
// call order. Prints "listening on HOST:PORT" like echo_server; exits on
// SIGINT/SIGTERM.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "echo.pb.h"
#include "echo.rdmarpc.pb.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "rdmarpc/rdmarpc.h"

DEFINE_string(listen, "127.0.0.1:0", "Address to listen on, HOST:PORT");
DEFINE_uint64(corrupt_call, 3, "Which request's reply to damage, counting from 0");
DEFINE_uint64(corrupt_byte, 17, "Which byte of that reply's payload to invert");

namespace {

class CorruptingEcho final : public rdmarpc::examples::EchoService::Service {
 public:
  absl::Status Echo(rdmarpc::ServerContext* /*context*/,
                    const rdmarpc::examples::EchoRequest& request,
                    rdmarpc::examples::EchoResponse* response) override {
    std::string payload = request.payload();
    uint64_t n = calls_.fetch_add(1);
    if (n == FLAGS_corrupt_call && FLAGS_corrupt_byte < payload.size()) {
      payload[FLAGS_corrupt_byte] = static_cast<char>(~payload[FLAGS_corrupt_byte]);
      LOG(INFO) << "corrupted byte " << FLAGS_corrupt_byte << " of reply " << n;
    }
    response->set_payload(std::move(payload));
    return absl::OkStatus();
  }

 private:
  std::atomic<uint64_t> calls_{0};
};

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  CorruptingEcho echo;
  rdmarpc::Server server;
  absl::Status status = server.AddService(&echo);
  if (status.ok()) status = server.Start(FLAGS_listen);
  if (!status.ok()) {
    LOG(ERROR) << "cannot serve on " << FLAGS_listen << ": " << status;
    return 1;
  }
  std::string host = FLAGS_listen.substr(0, FLAGS_listen.rfind(':'));
  printf("listening on %s:%d\n", host.c_str(), server.port());
  fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  server.Shutdown();
  server.Wait();
  return 0;
}
