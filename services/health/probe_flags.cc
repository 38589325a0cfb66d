#include "health/probe_flags.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace rdmarpc {
namespace health_probe {
namespace {

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

// Go's flag.Parse accepts a duration that time.ParseDuration accepts; so
// does absl::ParseDuration, which also takes "inf", which Go does not.
bool ParseGoDuration(absl::string_view text, absl::Duration* out) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d == absl::InfiniteDuration() ||
      d == -absl::InfiniteDuration()) {
    return false;
  }
  *out = d;
  return true;
}

// Go's strconv.ParseBool, which a boolean flag's "=value" goes through.
bool ParseGoBool(absl::string_view text, bool* out) {
  for (absl::string_view t : {"1", "t", "T", "true", "TRUE", "True"}) {
    if (text == t) {
      *out = true;
      return true;
    }
  }
  for (absl::string_view f : {"0", "f", "F", "false", "FALSE", "False"}) {
    if (text == f) {
      *out = false;
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<ProbeFlags> ParseProbeFlags(int argc, const char* const* argv) {
  ProbeFlags flags;
  int i = 1;
  for (; i < argc; ++i) {
    absl::string_view arg = argv[i];
    // As Go's FlagSet.parseOne: "-" and non-flags end the flags, "--" is
    // consumed and ends them.
    if (arg.size() < 2 || arg[0] != '-') break;
    int dashes = 1;
    if (arg[1] == '-') {
      dashes = 2;
      if (arg.size() == 2) {
        ++i;
        break;
      }
    }
    absl::string_view name = arg.substr(dashes);
    if (name.empty() || name[0] == '-' || name[0] == '=') {
      return Invalid(absl::StrCat("bad flag syntax: ", arg));
    }
    bool has_value = false;
    absl::string_view value;
    if (size_t eq = name.find('='); eq != absl::string_view::npos) {
      has_value = true;
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }

    if (name == "h" || name == "help") {
      flags.help = true;
      return flags;
    }
    if (name == "v") {
      if (has_value && !ParseGoBool(value, &flags.verbose)) {
        return Invalid(
            absl::StrCat("invalid boolean value \"", value, "\" for -", name, ": parse error"));
      }
      if (!has_value) flags.verbose = true;
      continue;
    }
    if (name != "addr" && name != "service" && name != "connect-timeout" &&
        name != "rpc-timeout") {
      return Invalid(absl::StrCat("flag provided but not defined: -", name));
    }
    if (!has_value) {
      // A value flag takes the next argument, whatever it looks like.
      if (i + 1 >= argc) return Invalid(absl::StrCat("flag needs an argument: -", name));
      value = argv[++i];
    }
    if (name == "addr") {
      flags.addr = std::string(value);
    } else if (name == "service") {
      flags.service = std::string(value);
    } else {
      absl::Duration* target =
          name == "connect-timeout" ? &flags.connect_timeout : &flags.rpc_timeout;
      if (!ParseGoDuration(value, target)) {
        return Invalid(
            absl::StrCat("invalid value \"", value, "\" for flag -", name, ": parse error"));
      }
    }
  }
  if (i < argc) {
    // grpc_health_probe ignores what follows the flags; a probe command with
    // a stray word is more likely a typo ("-addr 1.2.3.4 7000"), so refuse.
    return Invalid(absl::StrCat("unexpected argument \"", argv[i], "\" after the flags"));
  }

  // grpc_health_probe's checks, in its order and words.
  if (flags.addr.empty()) return Invalid("-addr not specified");
  if (flags.connect_timeout <= absl::ZeroDuration()) {
    return Invalid(absl::StrCat("-connect-timeout must be greater than zero (specified: ",
                                absl::FormatDuration(flags.connect_timeout), ")"));
  }
  if (flags.rpc_timeout <= absl::ZeroDuration()) {
    return Invalid(absl::StrCat("-rpc-timeout must be greater than zero (specified: ",
                                absl::FormatDuration(flags.rpc_timeout), ")"));
  }
  return flags;
}

std::string Usage() {
  return "Usage: health_probe -addr=HOST:PORT [-service=NAME] [-connect-timeout=1s]\n"
         "                    [-rpc-timeout=1s] [-v]\n"
         "Asks the server's grpc.health.v1.Health service about NAME (\"\": the whole\n"
         "server), as grpc_health_probe does. Exit codes: 0 SERVING, 1 bad arguments,\n"
         "2 connection failure, 3 RPC failure, 4 not SERVING.\n"
         "  -addr             (required) HOST:PORT to connect to\n"
         "  -service          service name to check (default \"\")\n"
         "  -connect-timeout  time allowed to connect (default 1s)\n"
         "  -rpc-timeout      time allowed for the Check call (default 1s)\n"
         "  -v                also print the time taken\n"
         "The provider comes from RDMARPC_PROVIDER (auto, rdma-core, soft).\n";
}

}  // namespace health_probe
}  // namespace rdmarpc
