// secure_echo_client: calls secure_echo_server's Echo with a shared-secret
// key (hmac_auth.h), checks every byte that comes back, and says whom the
// server took it for.
//
//   secure_echo_client --target=127.0.0.1:7100 --key_id=7 --secret_file=alice.key
//                      [--calls=10] [--payload_bytes=64] [--connection_auth=true]
//                      [--call_auth=true] [--call_key_id=N --call_secret_file=FILE]
//
// alice.key holds the secret in hex (the same as the server's keyring line).
// Turning one level off shows what the server does without it; signing the
// calls with another key than the connection's (--call_key_id,
// --call_secret_file) shows its PERMISSION_DENIED. Exit status 0 when every
// call succeeded; 1 otherwise, after printing the status of the first
// failure ("UNAUTHENTICATED: ..."); 2 for bad arguments.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/algorithm/container.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "echo.pb.h"
#include "echo.rdmarpc.pb.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "hmac_auth.h"
#include "rdmarpc/rdmarpc.h"

DEFINE_string(target, "127.0.0.1:7100", "Server address, HOST:PORT (or any rdmarpc target)");
DEFINE_int32(key_id, -1, "This client's key id (0..65535), as in the server's keyring");
DEFINE_string(secret_file, "", "File holding this client's secret in hex (at least 16 bytes)");
DEFINE_int32(call_key_id, -1, "Sign calls with this key id instead (default: --key_id)");
DEFINE_string(call_secret_file, "", "Secret for --call_key_id (default: --secret_file)");
DEFINE_int32(calls, 10, "Echo calls to make, one after another");
DEFINE_int32(payload_bytes, 64, "Bytes of payload per call");
DEFINE_bool(connection_auth, true, "Send an HMAC token with each connect request");
DEFINE_bool(call_auth, true, "Sign each call (authorization metadata)");

namespace {

// The secret in hex in `path` (its first word).
absl::StatusOr<std::string> ReadSecret(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::string hex;
  in >> hex;
  if (hex.empty() || hex.size() % 2 != 0 || !absl::c_all_of(hex, absl::ascii_isxdigit)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " does not hold a secret in hex"));
  }
  std::string secret = absl::HexStringToBytes(hex);
  if (secret.size() < rdmarpc::examples::kMinSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds a secret of ", secret.size(),
                                                   " bytes; need at least ",
                                                   rdmarpc::examples::kMinSecretBytes));
  }
  return secret;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "secure_echo_client --target=HOST:PORT --key_id=N --secret_file=FILE [--calls=N]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_key_id < 0 || FLAGS_key_id > 0xffff || FLAGS_secret_file.empty()) {
    fprintf(stderr, "secure_echo_client: --key_id (0..65535) and --secret_file are required\n");
    return 2;
  }
  const int call_key_flag = FLAGS_call_key_id >= 0 ? FLAGS_call_key_id : FLAGS_key_id;
  if (call_key_flag > 0xffff) {
    fprintf(stderr, "secure_echo_client: --call_key_id must be 0..65535\n");
    return 2;
  }
  absl::StatusOr<std::string> secret = ReadSecret(FLAGS_secret_file);
  absl::StatusOr<std::string> call_secret =
      FLAGS_call_secret_file.empty() ? secret : ReadSecret(FLAGS_call_secret_file);
  for (const absl::StatusOr<std::string>* s : {&secret, &call_secret}) {
    if (!s->ok()) {
      fprintf(stderr, "secure_echo_client: %s\n", std::string(s->status().message()).c_str());
      return 2;
    }
  }
  const uint16_t key_id = static_cast<uint16_t>(FLAGS_key_id);
  const uint16_t call_key_id = static_cast<uint16_t>(call_key_flag);
  rdmarpc::ChannelOptions options;
  if (FLAGS_connection_auth) {
    options.connection_credentials =
        std::make_shared<rdmarpc::examples::HmacConnectionCredentials>(key_id, *secret);
  }
  if (FLAGS_call_auth) {
    options.call_credentials =
        std::make_shared<rdmarpc::examples::HmacCallCredentials>(call_key_id, *call_secret);
  }
  absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel =
      rdmarpc::CreateChannel(FLAGS_target, options);
  if (!channel.ok()) {
    fprintf(stderr, "secure_echo_client: %s\n", channel.status().ToString().c_str());
    return 2;
  }
  auto stub = rdmarpc::examples::EchoService::NewStub(*channel);
  std::string who;
  for (int i = 0; i < FLAGS_calls; ++i) {
    rdmarpc::ClientContext context;
    context.set_deadline(absl::Now() + absl::Seconds(10));
    rdmarpc::examples::EchoRequest request;
    request.set_payload(
        std::string(static_cast<size_t>(FLAGS_payload_bytes), static_cast<char>('a' + i % 26)));
    rdmarpc::examples::EchoResponse response;
    absl::Status status = stub->Echo(&context, request, &response);
    if (status.ok() && response.payload() != request.payload()) {
      status = absl::DataLossError(absl::StrCat("call ", i, ": payload came back changed"));
    }
    if (!status.ok()) {
      printf("call %d of %d failed: %s\n", i + 1, FLAGS_calls, status.ToString().c_str());
      return 1;
    }
    auto it = context.GetServerInitialMetadata().find("x-authenticated-as");
    who = it == context.GetServerInitialMetadata().end() ? "(not said)" : it->second;
  }
  printf("%d of %d calls OK, authenticated as %s\n", FLAGS_calls, FLAGS_calls, who.c_str());
  return 0;
}
