// health_probe's command line (services/health/probe_flags.h): Go's flag
// syntax and grpc_health_probe's checks, with their exact messages.
#include "health/probe_flags.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace {

using rdmarpc::health_probe::ParseProbeFlags;
using rdmarpc::health_probe::ProbeFlags;

absl::StatusOr<ProbeFlags> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "health_probe");
  return ParseProbeFlags(static_cast<int>(args.size()), args.data());
}

// The message of a failed parse (INVALID_ARGUMENT), or "ok".
std::string Error(std::vector<const char*> args) {
  absl::StatusOr<ProbeFlags> flags = Parse(std::move(args));
  if (flags.ok()) return "ok";
  EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(flags.status().message());
}

TEST(ProbeFlags, DefaultsAreGrpcHealthProbes) {
  absl::StatusOr<ProbeFlags> flags = Parse({"-addr=h:1"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->addr, "h:1");
  EXPECT_EQ(flags->service, "");
  EXPECT_EQ(flags->connect_timeout, absl::Seconds(1));
  EXPECT_EQ(flags->rpc_timeout, absl::Seconds(1));
  EXPECT_FALSE(flags->verbose);
  EXPECT_FALSE(flags->help);
}

TEST(ProbeFlags, TakesEveryFormGoTakes) {
  for (const std::vector<const char*>& args : std::vector<std::vector<const char*>>{
           {"-addr=h:1", "-service=s.S", "-connect-timeout=250ms", "-rpc-timeout=1m30s", "-v"},
           {"-addr", "h:1", "-service", "s.S", "-connect-timeout", "250ms", "-rpc-timeout",
            "90s", "-v=true"},
           {"--addr=h:1", "--service=s.S", "--connect-timeout=0.25s", "--rpc-timeout=1.5m",
            "--v"},
           {"--addr", "h:1", "--service", "s.S", "--connect-timeout", "250ms", "--rpc-timeout",
            "90000ms", "-v=1", "--"}}) {
    absl::StatusOr<ProbeFlags> flags = Parse(args);
    ASSERT_TRUE(flags.ok()) << flags.status() << " for " << args[0];
    EXPECT_EQ(flags->addr, "h:1");
    EXPECT_EQ(flags->service, "s.S");
    EXPECT_EQ(flags->connect_timeout, absl::Milliseconds(250));
    EXPECT_EQ(flags->rpc_timeout, absl::Seconds(90));
    EXPECT_TRUE(flags->verbose);
  }
}

TEST(ProbeFlags, LaterFlagWinsAndValueMayLookLikeAFlag) {
  absl::StatusOr<ProbeFlags> flags =
      Parse({"-addr=a:1", "-addr=b:2", "-service", "-v", "-v=false"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->addr, "b:2");
  EXPECT_EQ(flags->service, "-v");  // a value flag takes the next argument
  EXPECT_FALSE(flags->verbose);
  flags = Parse({"-addr=a:1", "-service="});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->service, "");
}

TEST(ProbeFlags, HelpReturnsAtOnce) {
  for (const char* help : {"-h", "-help", "--help", "--h"}) {
    absl::StatusOr<ProbeFlags> flags = Parse({help, "-no-such-flag"});
    ASSERT_TRUE(flags.ok()) << flags.status() << " for " << help;
    EXPECT_TRUE(flags->help);
  }
}

TEST(ProbeFlags, RefusesWithGrpcHealthProbesMessages) {
  EXPECT_EQ(Error({}), "-addr not specified");
  EXPECT_EQ(Error({"-addr="}), "-addr not specified");
  EXPECT_EQ(Error({"-server=h:1"}), "flag provided but not defined: -server");
  EXPECT_EQ(Error({"-addr=h:1", "-tls"}), "flag provided but not defined: -tls");
  EXPECT_EQ(Error({"-addr"}), "flag needs an argument: -addr");
  EXPECT_EQ(Error({"-addr=h:1", "-rpc-timeout"}), "flag needs an argument: -rpc-timeout");
  EXPECT_EQ(Error({"-addr=h:1", "-rpc-timeout=1"}),
            "invalid value \"1\" for flag -rpc-timeout: parse error");
  EXPECT_EQ(Error({"-addr=h:1", "-connect-timeout=inf"}),
            "invalid value \"inf\" for flag -connect-timeout: parse error");
  EXPECT_EQ(Error({"-addr=h:1", "-v=maybe"}), "invalid boolean value \"maybe\" for -v: parse error");
  EXPECT_EQ(Error({"---addr=h:1"}), "bad flag syntax: ---addr=h:1");
  EXPECT_EQ(Error({"-=h:1"}), "bad flag syntax: -=h:1");
  EXPECT_EQ(Error({"-addr=h:1", "-connect-timeout=0s"}),
            "-connect-timeout must be greater than zero (specified: 0)");
  EXPECT_EQ(Error({"-addr=h:1", "-rpc-timeout=-250ms"}),
            "-rpc-timeout must be greater than zero (specified: -250ms)");
  EXPECT_EQ(Error({"-addr", "h", "1"}), "unexpected argument \"1\" after the flags");
  EXPECT_EQ(Error({"-addr=h:1", "--", "x"}), "unexpected argument \"x\" after the flags");
  EXPECT_EQ(Error({"-addr=h:1", "-"}), "unexpected argument \"-\" after the flags");
}

}  // namespace
