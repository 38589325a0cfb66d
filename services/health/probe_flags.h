// probe_flags.h: health_probe's command line, which is grpc_health_probe's
// (github.com/grpc-ecosystem/grpc-health-probe), so a Kubernetes exec probe
// written for gRPC works by changing the binary's name:
//
//   health_probe -addr=127.0.0.1:7000 [-service=NAME]
//                [-connect-timeout=1s] [-rpc-timeout=1s] [-v]
//
// The syntax is Go's flag package's, which grpc_health_probe uses: one or
// two dashes (-addr, --addr), the value after "=" or as the next argument
// (-addr 127.0.0.1:7000), boolean flags bare or with "=true"/"=false";
// parsing stops at "--" or at the first argument that is not a flag.
// Durations are Go's (and absl::ParseDuration's) syntax: "1s", "250ms",
// "1m30s", "1.5s". grpc_health_probe's TLS, ALTS, SPIFFE, gzip and header
// flags are not taken (rdmarpc has no TLS): given one, ParseProbeFlags
// fails as for any flag it does not know.
//
// This is a few lines of hand-written parsing rather than gflags, whose flag
// names cannot contain "-" and which wants two dashes for a value, and rather
// than absl's flags library, which is not a dependency of rdmarpc.
#ifndef RDMARPC_SERVICES_HEALTH_PROBE_FLAGS_H_
#define RDMARPC_SERVICES_HEALTH_PROBE_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rdmarpc {
namespace health_probe {

// grpc_health_probe's exit codes (its StatusInvalidArguments, ...).
enum ExitCode : int {
  kExitServing = 0,            // the service is SERVING
  kExitInvalidArguments = 1,   // a bad command line
  kExitConnectionFailure = 2,  // no connection to the server
  kExitRpcFailure = 3,         // the Check call failed (NOT_FOUND, UNIMPLEMENTED, a deadline)
  kExitUnhealthy = 4,          // the server answered, with a status other than SERVING
};

struct ProbeFlags {
  std::string addr;                              // -addr HOST:PORT; required
  std::string service;                           // -service NAME; "" is the whole server
  absl::Duration connect_timeout = absl::Seconds(1);  // -connect-timeout, > 0
  absl::Duration rpc_timeout = absl::Seconds(1);      // -rpc-timeout, > 0
  bool verbose = false;                          // -v: also print the time taken
  bool help = false;                             // -h, -help: print Usage() and exit 1
};

// Parses argv[1..argc-1]. Returns INVALID_ARGUMENT with the message
// grpc_health_probe prints (Go's flag package's for syntax:
// "flag provided but not defined: -x", "flag needs an argument: -addr",
// "invalid value \"abc\" for flag -rpc-timeout: parse error"; then
// "-addr not specified", "-connect-timeout must be greater than zero
// (specified: 0s)", ...), or the flags. With -h/-help, returns at once with
// `help` set and nothing checked. Pure; any thread.
absl::StatusOr<ProbeFlags> ParseProbeFlags(int argc, const char* const* argv);

// The usage text -h prints (several lines, ends in a newline).
std::string Usage();

}  // namespace health_probe
}  // namespace rdmarpc

#endif  // RDMARPC_SERVICES_HEALTH_PROBE_FLAGS_H_
