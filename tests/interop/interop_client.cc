// interop_client: runs one of gRPC's interop test cases against an
// interop_server (or any server of grpc.testing.TestService over rdmarpc).
//
//   interop_client --server=127.0.0.1:7000 --test_case=large_unary
//   interop_client --server=127.0.0.1:7000 --test_case=rpc_soak --soak_iterations=100
//
// The last line of stdout is the verdict, meant for scripts:
//   interop: PASS <test_case>                          (exit 0)
//   interop: FAIL <test_case>: <what was wanted, what came>   (exit 1)
// A usage error (unknown case, bad flag value) exits 2.
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "interop_cases.h"
#include "rdmarpc/rdmarpc.h"

DEFINE_string(server, "127.0.0.1:7000", "Server address, HOST:PORT");
DEFINE_string(test_case, "large_unary", "The test case to run (see --help for the list)");
DEFINE_int64(connect_timeout_ms, 5000, "Time allowed to set up one connection, in ms");

// The soak flags of gRPC's interop clients, with defaults small enough for a
// CI run under sanitizers.
DEFINE_int32(soak_iterations, 10, "large_unary calls made by rpc_soak and channel_soak");
DEFINE_int32(soak_max_failures, 0,
             "Soak iterations that may fail (non-OK status, wrong response, or slower "
             "than --soak_per_iteration_max_acceptable_latency_ms) with the case passing");
DEFINE_int32(soak_per_iteration_max_acceptable_latency_ms, 5000,
             "A soak iteration slower than this fails; 0 = no limit");
DEFINE_int32(soak_overall_timeout_seconds, 60,
             "A soak stops after this long and fails unless every iteration ran; also "
             "each soak call's deadline; 0 = no limit");
DEFINE_int32(soak_min_time_ms_between_rpcs, 0,
             "Least time from the start of one soak iteration to the next, in ms");
DEFINE_int32(soak_request_size, 271828, "Request payload of each soak iteration, in bytes");
DEFINE_int32(soak_response_size, 314159, "Response payload of each soak iteration, in bytes");

namespace {

// A flag that must not be negative; prints why and returns false otherwise.
bool NonNegative(const char* flag, int64_t value) {
  if (value >= 0) return true;
  fprintf(stderr, "interop_client: --%s must be >= 0, got %lld\n", flag,
          static_cast<long long>(value));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using rdmarpc_interop::InteropClient;
  gflags::SetUsageMessage("interop_client --server=HOST:PORT --test_case=NAME\n  cases: " +
                          absl::StrJoin(InteropClient::CaseNames(), " "));
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  if (!NonNegative("soak_iterations", FLAGS_soak_iterations) ||
      !NonNegative("soak_max_failures", FLAGS_soak_max_failures) ||
      !NonNegative("soak_per_iteration_max_acceptable_latency_ms",
                   FLAGS_soak_per_iteration_max_acceptable_latency_ms) ||
      !NonNegative("soak_overall_timeout_seconds", FLAGS_soak_overall_timeout_seconds) ||
      !NonNegative("soak_min_time_ms_between_rpcs", FLAGS_soak_min_time_ms_between_rpcs) ||
      !NonNegative("soak_request_size", FLAGS_soak_request_size) ||
      !NonNegative("soak_response_size", FLAGS_soak_response_size)) {
    return 2;
  }
  if (FLAGS_connect_timeout_ms <= 0) {
    fprintf(stderr, "interop_client: --connect_timeout_ms must be > 0, got %lld\n",
            static_cast<long long>(FLAGS_connect_timeout_ms));
    return 2;
  }
  bool known = false;
  for (const std::string& name : InteropClient::CaseNames()) known |= name == FLAGS_test_case;
  if (!known) {
    fprintf(stderr, "interop_client: unknown --test_case=%s; cases: %s\n", FLAGS_test_case.c_str(),
            absl::StrJoin(InteropClient::CaseNames(), " ").c_str());
    return 2;
  }

  rdmarpc_interop::SoakOptions soak;
  soak.iterations = FLAGS_soak_iterations;
  soak.max_failures = FLAGS_soak_max_failures;
  soak.max_latency = absl::Milliseconds(FLAGS_soak_per_iteration_max_acceptable_latency_ms);
  soak.overall_timeout = absl::Seconds(FLAGS_soak_overall_timeout_seconds);
  soak.min_time_between_rpcs = absl::Milliseconds(FLAGS_soak_min_time_ms_between_rpcs);
  soak.request_size = FLAGS_soak_request_size;
  soak.response_size = FLAGS_soak_response_size;

  rdmarpc::ChannelOptions options;
  options.connect_timeout = absl::Milliseconds(FLAGS_connect_timeout_ms);
  InteropClient client(FLAGS_server, options);
  absl::Status verdict = client.Init();
  if (verdict.ok()) verdict = client.Run(FLAGS_test_case, soak);
  if (verdict.ok()) {
    printf("interop: PASS %s\n", FLAGS_test_case.c_str());
    return 0;
  }
  printf("interop: FAIL %s: %s\n", FLAGS_test_case.c_str(), verdict.ToString().c_str());
  return 1;
}
