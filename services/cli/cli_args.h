// cli_args.h: rdmarpc_cli's command line, parsed by hand (gflags has no
// repeated flag for --metadata, and flags may follow the positional
// arguments, as in grpc_cli).
//
//   rdmarpc_cli COMMAND ARG... [--json] [-l] [--metadata k=v]... [--timeout_ms N]
//
// Flags take their value after '=' or as the next argument; "--" ends the
// flags (a request that starts with '-' goes after it).
#ifndef RDMARPC_SERVICES_CLI_CLI_ARGS_H_
#define RDMARPC_SERVICES_CLI_CLI_ARGS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rdmarpc {
namespace cli {

// Exit statuses of rdmarpc_cli.
inline constexpr int kExitOk = 0;
// The command line or a request given is wrong (nothing was called, or a
// streaming call was cancelled at the request that did not parse).
inline constexpr int kExitUsage = 1;
// A call failed: no connection, the server's error status, an unknown symbol.
inline constexpr int kExitRpcFailure = 2;
// `health`: the server answered, and the service is not SERVING
// (grpc_health_probe's code for it).
inline constexpr int kExitNotServing = 4;

struct CliArgs {
  std::string command;                  // ls, describe, call, health
  std::vector<std::string> positional;  // after the command, in order
  bool json = false;                    // --json
  bool long_listing = false;            // -l
  bool help = false;                    // -h, --help, or no command
  std::vector<std::pair<std::string, std::string>> metadata;  // --metadata k=v, in order
  // --timeout_ms N: each call's deadline from its start;
  // absl::InfiniteDuration() when not given. (The reflection stream gets
  // ReflectionTimeout(*this).)
  absl::Duration timeout = absl::InfiniteDuration();
};

// The reflection stream's deadline: 10 s, or args.timeout when longer.
absl::Duration ReflectionTimeout(const CliArgs& args);

// Parses argv[1..argc). INVALID_ARGUMENT names the bad flag or value
// (an unknown flag, a missing value, --metadata without '=', a timeout
// that is not a positive integer of milliseconds).
absl::StatusOr<CliArgs> ParseCliArgs(int argc, const char* const* argv);

// The usage text, ending in a newline.
std::string Usage();

}  // namespace cli
}  // namespace rdmarpc

#endif  // RDMARPC_SERVICES_CLI_CLI_ARGS_H_
