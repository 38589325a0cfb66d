// secure_echo_server: rdmarpc.examples.EchoService behind shared-secret
// authentication (hmac_auth.h), at both levels: a connect request without a
// good HMAC token is rejected before the server spends a QP or registered
// memory on it, and every call must carry a good HMAC signature for its
// method. Serves until SIGINT or SIGTERM.
//
//   secure_echo_server --listen=127.0.0.1:7100 --keyring=keys.txt
//
// keys.txt holds one "KEY_ID NAME SECRET_HEX" line per client (secrets of
// at least 16 bytes; `openssl rand -hex 32` makes one). Answers carry
// "x-authenticated-as: NAME" in their initial metadata; refusals are logged
// (one line a second per client host).
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "echo.pb.h"
#include "echo.rdmarpc.pb.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "hmac_auth.h"
#include "rdmarpc/rdmarpc.h"

DEFINE_string(listen, "127.0.0.1:7100",
              "Address to listen on, HOST:PORT (port 0 picks a free one)");
DEFINE_string(keyring, "", "File of \"KEY_ID NAME SECRET_HEX\" lines: the clients let in");
DEFINE_int32(window_s, 30,
             "How far a connection token's time may be from this host's clock, either way, in "
             "seconds (call signatures: 5 minutes)");

namespace {

class EchoServiceImpl final : public rdmarpc::examples::EchoService::Service {
 public:
  absl::Status Echo(rdmarpc::ServerContext* context, const rdmarpc::examples::EchoRequest& request,
                    rdmarpc::examples::EchoResponse* response) override {
    // Who is calling, as the authenticator and the processor agreed.
    VLOG(1) << "Echo from " << context->auth_context()->GetPeerIdentity()[0];
    response->set_payload(request.payload());
    return absl::OkStatus();
  }
};

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("secure_echo_server --listen=HOST:PORT --keyring=FILE [--window_s=S]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_keyring.empty()) {
    fprintf(stderr, "secure_echo_server: --keyring is required\n");
    return 2;
  }
  if (FLAGS_window_s < 1) {
    fprintf(stderr, "secure_echo_server: --window_s must be at least 1, got %d\n", FLAGS_window_s);
    return 2;
  }
  absl::StatusOr<rdmarpc::examples::HmacKeyring> keys =
      rdmarpc::examples::HmacKeyring::FromFile(FLAGS_keyring);
  if (!keys.ok()) {
    fprintf(stderr, "secure_echo_server: %s\n", std::string(keys.status().message()).c_str());
    return 2;
  }
  if (keys->size() == 0) {
    fprintf(stderr, "secure_echo_server: %s holds no key: nobody could get in\n",
            FLAGS_keyring.c_str());
    return 2;
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  EchoServiceImpl echo;
  rdmarpc::ServerOptions options;
  options.connection_authenticator =
      std::make_shared<rdmarpc::examples::HmacConnectionAuthenticator>(
          *keys, absl::Seconds(FLAGS_window_s));
  options.auth_metadata_processor =
      std::make_shared<rdmarpc::examples::HmacAuthMetadataProcessor>(*keys);
  rdmarpc::Server server(options);
  if (absl::Status s = server.AddService(&echo); !s.ok()) {
    LOG(ERROR) << "AddService: " << s;
    return 1;
  }
  if (absl::Status s = server.Start(FLAGS_listen); !s.ok()) {
    fprintf(stderr, "secure_echo_server: cannot start on %s: %s\n", FLAGS_listen.c_str(),
            s.ToString().c_str());
    return 1;
  }
  const std::string host = FLAGS_listen.substr(0, FLAGS_listen.rfind(':'));
  printf("listening on %s:%d\n", host.c_str(), server.port());
  fflush(stdout);
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  LOG(INFO) << "secure_echo_server: " << strsignal(signal_number) << ", shutting down";
  server.Shutdown(absl::Seconds(5));
  server.Wait();
  return 0;
}
