#include "cli/cli_args.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace rdmarpc {
namespace cli {

std::string Usage() {
  return "usage: rdmarpc_cli COMMAND ARGS [flags]\n"
         "  ls HOST:PORT [SERVICE] [-l]     the services (or SERVICE's methods), sorted\n"
         "  describe HOST:PORT SYMBOL       the definition of a service, method, message,\n"
         "                                  enum, field or enum value\n"
         "  call HOST:PORT SERVICE/METHOD [REQUEST] [--json] [--metadata k=v]...\n"
         "                                  calls METHOD; without REQUEST reads requests\n"
         "                                  from stdin, one a line\n"
         "  health HOST:PORT [SERVICE]      grpc.health.v1 status of SERVICE (\"\": the server)\n"
         "flags:\n"
         "  -l               ls: each method's (or service's) definition\n"
         "  --json           requests and responses in JSON, not protobuf text format\n"
         "  --metadata k=v   client metadata for the call (repeatable)\n"
         "  --timeout_ms N   deadline of each call, in milliseconds (default: none);\n"
         "                   reflection lookups get max(N, 10000)\n"
         "exit: 0 ok, 1 bad command line or request, 2 call failed, 4 health: not SERVING\n";
}

absl::StatusOr<CliArgs> ParseCliArgs(int argc, const char* const* argv) {
  CliArgs args;
  bool flags_done = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (flags_done || arg.empty() || arg[0] != '-' || arg == "-") {
      if (args.command.empty()) {
        args.command = std::string(arg);
      } else {
        args.positional.emplace_back(arg);
      }
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    // The value of a flag that takes one: after '=' or the next argument.
    auto value = [&]() -> absl::StatusOr<absl::string_view> {
      if (eq != absl::string_view::npos) return arg.substr(eq + 1);
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      return absl::string_view(argv[++i]);
    };
    if (name == "-h" || name == "--help") {
      args.help = true;
    } else if (name == "--json" && eq == absl::string_view::npos) {
      args.json = true;
    } else if (name == "-l" && eq == absl::string_view::npos) {
      args.long_listing = true;
    } else if (name == "--metadata") {
      absl::StatusOr<absl::string_view> kv = value();
      if (!kv.ok()) return kv.status();
      const size_t split = kv->find('=');
      if (split == absl::string_view::npos || split == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--metadata \"", *kv, "\": want KEY=VALUE"));
      }
      args.metadata.emplace_back(std::string(kv->substr(0, split)),
                                 std::string(kv->substr(split + 1)));
    } else if (name == "--timeout_ms") {
      absl::StatusOr<absl::string_view> text = value();
      if (!text.ok()) return text.status();
      int64_t ms = 0;
      if (!absl::SimpleAtoi(*text, &ms) || ms <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--timeout_ms \"", *text, "\": want a positive number of milliseconds"));
      }
      args.timeout = absl::Milliseconds(ms);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg));
    }
  }
  if (args.command.empty()) args.help = true;
  return args;
}

absl::Duration ReflectionTimeout(const CliArgs& args) {
  return std::max(args.timeout, absl::Seconds(10));
}

}  // namespace cli
}  // namespace rdmarpc
