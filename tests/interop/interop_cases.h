// interop_cases.h: the client side of gRPC's interop test cases
// (doc/interop-test-descriptions.md in grpc/grpc), over one rdmarpc channel.
//
//   rdmarpc_interop::InteropClient client("127.0.0.1:7000", rdmarpc::ChannelOptions());
//   absl::Status verdict = client.Run("large_unary", SoakOptions());
//   if (!verdict.ok()) { /* verdict.message() says which assertion failed */ }
//
// Each case makes the calls its description lists and checks exactly what
// its "Client asserts" section says: statuses, codes and messages, the
// number and sizes of responses (and that their bodies are zeros, which the
// descriptions allow), metadata keys and values. A case returns OK when
// every assertion held; otherwise a status whose message names the step,
// what was wanted and what came (FAILED_PRECONDITION for an assertion, the
// call's own status when a call that had to succeed failed).
#ifndef RDMARPC_TESTS_INTEROP_INTEROP_CASES_H_
#define RDMARPC_TESTS_INTEROP_INTEROP_CASES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpc/testing/test.rdmarpc.pb.h"
#include "rdmarpc/rdmarpc.h"

namespace rdmarpc_interop {

// The knobs of rpc_soak and channel_soak, named after gRPC's client flags.
struct SoakOptions {
  // large_unary calls to make.
  int iterations = 10;
  // Iterations that may fail (a non-OK status, a wrong response, or slower
  // than max_latency) with the case still passing.
  int max_failures = 0;
  // An iteration slower than this counts as failed; zero = no limit.
  absl::Duration max_latency = absl::Seconds(5);
  // The whole soak stops when this has passed, and then fails unless every
  // iteration ran; it is also each call's deadline. Zero = no limit.
  absl::Duration overall_timeout = absl::Seconds(60);
  // Least time from the start of one iteration to the start of the next.
  absl::Duration min_time_between_rpcs = absl::ZeroDuration();
  // Request and response payload sizes, in bytes (large_unary's).
  int request_size = 271828;
  int response_size = 314159;
};

class InteropClient {
 public:
  // `server` is "HOST:PORT"; the channel is made by Init.
  InteropClient(std::string server, rdmarpc::ChannelOptions options);

  // Makes the channel. INVALID_ARGUMENT for a malformed address.
  absl::Status Init();

  // The names Run accepts, in the order of the descriptions.
  static const std::vector<std::string>& CaseNames();

  // Runs case `name` (Init first). INVALID_ARGUMENT for an unknown name.
  absl::Status Run(absl::string_view name, const SoakOptions& soak);

  absl::Status EmptyUnary();
  absl::Status LargeUnary();
  absl::Status ClientStreaming();
  absl::Status ServerStreaming();
  absl::Status PingPong();
  absl::Status EmptyStream();
  absl::Status CancelAfterBegin();
  absl::Status CancelAfterFirstResponse();
  absl::Status TimeoutOnSleepingServer();
  absl::Status CustomMetadata();
  absl::Status StatusCodeAndMessage();
  absl::Status SpecialStatusMessage();
  absl::Status UnimplementedMethod();
  absl::Status UnimplementedService();
  // large_unary `soak.iterations` times on this client's channel.
  absl::Status RpcSoak(const SoakOptions& soak);
  // The same, on a new channel (new connections) for every iteration.
  absl::Status ChannelSoak(const SoakOptions& soak);

 private:
  // One EmptyCall, which makes the channel's connection (lazily made by the
  // first call) for the cases whose call must find it made.
  absl::Status Connect();
  // Makes the calls of rpc_soak (fresh_channel = false) or channel_soak.
  absl::Status Soak(const SoakOptions& soak, bool fresh_channel);

  std::string server_;
  rdmarpc::ChannelOptions options_;
  std::shared_ptr<rdmarpc::Channel> channel_;
  std::unique_ptr<grpc::testing::TestService::Stub> stub_;
};

}  // namespace rdmarpc_interop

#endif  // RDMARPC_TESTS_INTEROP_INTEROP_CASES_H_
