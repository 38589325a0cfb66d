// rdmarpc_cli's command line (services/cli/cli_args.h), without a server.
#include "cli/cli_args.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace rdmarpc {
namespace cli {
namespace {

absl::StatusOr<CliArgs> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "rdmarpc_cli");
  return ParseCliArgs(static_cast<int>(args.size()), args.data());
}

TEST(CliArgs, FlagsMayFollowThePositionalArguments) {
  absl::StatusOr<CliArgs> args = Parse({"call", "h:1", "a.B/C", "x: 1", "--json",
                                        "--metadata", "k=v", "--metadata=t=a=b",
                                        "--timeout_ms=250"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->command, "call");
  EXPECT_EQ(args->positional, (std::vector<std::string>{"h:1", "a.B/C", "x: 1"}));
  EXPECT_TRUE(args->json);
  EXPECT_FALSE(args->long_listing);
  EXPECT_EQ(args->metadata, (std::vector<std::pair<std::string, std::string>>{
                                {"k", "v"}, {"t", "a=b"}}));
  EXPECT_EQ(args->timeout, absl::Milliseconds(250));
}

TEST(CliArgs, DefaultsHaveNoDeadlineAndText) {
  absl::StatusOr<CliArgs> args = Parse({"-l", "ls", "h:1"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->command, "ls");
  EXPECT_TRUE(args->long_listing);
  EXPECT_FALSE(args->json);
  EXPECT_FALSE(args->help);
  EXPECT_EQ(args->timeout, absl::InfiniteDuration());
}

TEST(CliArgs, DoubleDashEndsTheFlags) {
  absl::StatusOr<CliArgs> args = Parse({"call", "h:1", "a.B/C", "--", "--json"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->positional, (std::vector<std::string>{"h:1", "a.B/C", "--json"}));
  EXPECT_FALSE(args->json);
}

TEST(CliArgs, NoCommandIsHelp) {
  absl::StatusOr<CliArgs> args = Parse({});
  ASSERT_TRUE(args.ok());
  EXPECT_TRUE(args->help);
}

TEST(CliArgs, RejectsBadFlagsNamingThem) {
  EXPECT_EQ(Parse({"ls", "--nope"}).status(), absl::InvalidArgumentError("unknown flag --nope"));
  EXPECT_EQ(Parse({"ls", "--json=1"}).status(),
            absl::InvalidArgumentError("unknown flag --json=1"));
  EXPECT_EQ(Parse({"call", "--metadata"}).status(),
            absl::InvalidArgumentError("--metadata needs a value"));
  EXPECT_EQ(Parse({"call", "--metadata=novalue"}).status(),
            absl::InvalidArgumentError("--metadata \"novalue\": want KEY=VALUE"));
  EXPECT_EQ(Parse({"call", "--timeout_ms", "0"}).status(),
            absl::InvalidArgumentError(
                "--timeout_ms \"0\": want a positive number of milliseconds"));
  EXPECT_EQ(Parse({"call", "--timeout_ms=1s"}).status(),
            absl::InvalidArgumentError(
                "--timeout_ms \"1s\": want a positive number of milliseconds"));
}

}  // namespace
}  // namespace cli
}  // namespace rdmarpc
