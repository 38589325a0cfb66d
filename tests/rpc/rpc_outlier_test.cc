// rpc_outlier_test.cc: outlier detection (ChannelOptions::outlier_detection)
// takes a failing or slow server out of a channel's rotation, shows it in
// the metrics, and lets it back after its ejection time.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/metrics.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/scripted_service.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

// Every rule off; each test turns on the one it checks.
OutlierDetectionOptions NoRules() {
  OutlierDetectionOptions o;
  o.enabled = true;
  o.interval = absl::Milliseconds(100);
  o.base_ejection_time = absl::Milliseconds(600);
  o.consecutive_failures = 0;
  o.success_rate_minimum_hosts = 0;
  o.failure_percentage_minimum_hosts = 0;
  o.latency_factor = 0;
  return o;
}

std::shared_ptr<Channel> MakeChannel(const std::string& target, const OutlierDetectionOptions& o) {
  ChannelOptions options;
  options.outlier_detection = o;
  auto ch = CreateChannel(target, options);
  EXPECT_TRUE(ch.ok()) << ch.status();
  return ch.ok() ? *ch : nullptr;
}

absl::Status Call(Channel* channel) {
  EchoRequest req;
  req.set_text("x");
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  return Echo(channel, &ctx, req, &resp);
}

// The metrics page's sample for `name` whose labels end with `labels`
// (after the channel's id), or -1.
int64_t Metric(const std::string& name, const std::string& labels) {
  const std::string text = RenderMetricsText();
  const std::string tail = absl::StrCat(",", labels, "} ");
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, absl::StrCat(name, "{channel=\""))) continue;
    const size_t at = line.find(tail);
    if (at == absl::string_view::npos) continue;
    int64_t v = -1;
    if (!absl::SimpleAtoi(line.substr(at + tail.size()), &v)) return -1;
    return v;
  }
  return -1;
}

std::string Labels(const std::string& target, const std::string& server) {
  return absl::StrCat("target=\"", target, "\",server=\"", server, "\"");
}

TEST(OutlierDetection, ConsecutiveFailuresEjectAServerUntilItsTimeIsUp) {
  Servers s(3);
  s.service(0).Script({}, Fails(absl::StatusCode::kUnavailable));
  OutlierDetectionOptions o = NoRules();
  o.consecutive_failures = 3;
  auto ch = MakeChannel(s.target(), o);
  int failed = 0;
  for (int i = 0; i < 60; ++i) failed += Call(ch.get()).ok() ? 0 : 1;
  // Its third failure in a row took it out: no call reached it after that.
  EXPECT_EQ(failed, 3);
  EXPECT_EQ(s.service(0).calls(), 3);
  EXPECT_EQ(s.service(1).calls() + s.service(2).calls(), 57);
  const std::string labels = Labels(s.target(), s.address(0));
  EXPECT_EQ(Metric("rdmarpc_outlier_ejected", labels), 1);
  EXPECT_EQ(Metric("rdmarpc_outlier_ejected", Labels(s.target(), s.address(1))), 0);
  EXPECT_EQ(Metric("rdmarpc_outlier_ejections_total",
                   absl::StrCat(labels, ",reason=\"consecutive_failures\"")),
            1);
  // Back after 600 ms (looked at every 100 ms), now healthy.
  s.service(0).Script({});
  absl::SleepFor(absl::Milliseconds(900));
  EXPECT_EQ(Metric("rdmarpc_outlier_ejected", labels), 0);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(Call(ch.get()).ok()) << i;
  EXPECT_EQ(s.service(0).calls(), 3 + 10);
}

TEST(OutlierDetection, FailurePercentageOverTheThresholdEjects) {
  Servers s(3);
  // Server 0 fails 2 calls of 3.
  std::vector<Step> steps;
  for (int i = 0; i < 300; ++i) {
    steps.push_back(i % 3 == 0 ? Step() : Fails(absl::StatusCode::kInternal));
  }
  s.service(0).Script(steps);
  OutlierDetectionOptions o = NoRules();
  o.interval = absl::Milliseconds(300);
  o.base_ejection_time = absl::Seconds(30);
  o.failure_percentage_threshold = 50;
  o.failure_percentage_minimum_hosts = 3;
  o.failure_percentage_request_volume = 10;
  auto ch = MakeChannel(s.target(), o);
  const std::string labels = Labels(s.target(), s.address(0));
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (absl::Now() < until && Metric("rdmarpc_outlier_ejected", labels) != 1) {
    for (int i = 0; i < 30; ++i) (void)Call(ch.get());
  }
  ASSERT_EQ(Metric("rdmarpc_outlier_ejected", labels), 1);
  EXPECT_EQ(Metric("rdmarpc_outlier_ejections_total",
                   absl::StrCat(labels, ",reason=\"failure_percentage\"")),
            1);
  const int before = s.service(0).calls();
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(Call(ch.get()).ok()) << i;
  EXPECT_EQ(s.service(0).calls(), before);
}

TEST(OutlierDetection, SuccessRateFarBelowThePeersEjects) {
  Servers s(5);
  std::vector<Step> half;
  for (int i = 0; i < 400; ++i) {
    half.push_back(i % 2 == 0 ? Step() : Fails(absl::StatusCode::kUnavailable));
  }
  s.service(2).Script(half);
  OutlierDetectionOptions o = NoRules();
  o.interval = absl::Milliseconds(400);
  o.base_ejection_time = absl::Seconds(30);
  o.success_rate_minimum_hosts = 5;
  o.success_rate_request_volume = 10;
  auto ch = MakeChannel(s.target(), o);
  // Rates 1, 1, 0.5, 1, 1: mean 0.9, stdev 0.2, floor 0.9 - 1.9 * 0.2 = 0.52.
  const std::string labels = Labels(s.target(), s.address(2));
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (absl::Now() < until && Metric("rdmarpc_outlier_ejected", labels) != 1) {
    for (int i = 0; i < 50; ++i) (void)Call(ch.get());
  }
  ASSERT_EQ(Metric("rdmarpc_outlier_ejected", labels), 1);
  EXPECT_EQ(
      Metric("rdmarpc_outlier_ejections_total", absl::StrCat(labels, ",reason=\"success_rate\"")),
      1);
  for (int i : {0, 1, 3, 4}) {
    EXPECT_EQ(Metric("rdmarpc_outlier_ejected", Labels(s.target(), s.address(i))), 0) << i;
  }
}

TEST(OutlierDetection, ASlowServerIsEjectedByTheLatencyRule) {
  Servers s(3);
  s.service(1).Script({}, Sleeps(absl::Milliseconds(30)));
  OutlierDetectionOptions o = NoRules();
  o.interval = absl::Milliseconds(500);
  o.base_ejection_time = absl::Seconds(30);
  o.latency_factor = 5;
  o.latency_minimum_hosts = 3;
  o.latency_request_volume = 5;
  auto ch = MakeChannel(s.target(), o);
  const std::string labels = Labels(s.target(), s.address(1));
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (absl::Now() < until && Metric("rdmarpc_outlier_ejected", labels) != 1) {
    for (int i = 0; i < 30; ++i) ASSERT_TRUE(Call(ch.get()).ok());
  }
  ASSERT_EQ(Metric("rdmarpc_outlier_ejected", labels), 1);
  EXPECT_EQ(Metric("rdmarpc_outlier_ejections_total", absl::StrCat(labels, ",reason=\"latency\"")),
            1);
  const int before = s.service(1).calls();
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(Call(ch.get()).ok());
  EXPECT_EQ(s.service(1).calls(), before);
}

TEST(OutlierDetection, AtMostMaxEjectionPercentButAlwaysOneServerIsOut) {
  Servers s(3);
  s.ScriptAll({}, Fails(absl::StatusCode::kUnavailable));
  OutlierDetectionOptions o = NoRules();
  o.consecutive_failures = 2;
  o.base_ejection_time = absl::Seconds(30);
  auto ch = MakeChannel(s.target(), o);
  for (int i = 0; i < 30; ++i) EXPECT_FALSE(Call(ch.get()).ok());
  int out = 0;
  for (int i = 0; i < 3; ++i) {
    out += Metric("rdmarpc_outlier_ejected", Labels(s.target(), s.address(i))) == 1 ? 1 : 0;
  }
  EXPECT_EQ(out, 1);
}

TEST(OutlierDetection, ApplicationErrorsDoNotCount) {
  Servers s(3);
  s.service(0).Script({}, Fails(absl::StatusCode::kNotFound));
  OutlierDetectionOptions o = NoRules();
  o.consecutive_failures = 2;
  auto ch = MakeChannel(s.target(), o);
  for (int i = 0; i < 30; ++i) (void)Call(ch.get());
  EXPECT_EQ(s.service(0).calls(), 10);
  EXPECT_EQ(Metric("rdmarpc_outlier_ejected", Labels(s.target(), s.address(0))), 0);
}

TEST(OutlierDetection, TwoChannelsToOneTargetAreTwoSeries) {
  Servers s(2);
  OutlierDetectionOptions o = NoRules();
  auto a = MakeChannel(s.target(), o);
  auto b = MakeChannel(s.target(), o);
  const std::string text = RenderMetricsText();
  const std::string series = absl::StrCat(",", Labels(s.target(), s.address(0)), "} 0");
  int lines = 0;
  std::vector<std::string> channels;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, "rdmarpc_outlier_ejected{channel=\"") ||
        !absl::EndsWith(line, series)) {
      continue;
    }
    ++lines;
    channels.emplace_back(line.substr(0, line.find(',')));
  }
  EXPECT_EQ(lines, 2);
  ASSERT_EQ(channels.size(), 2u);
  EXPECT_NE(channels[0], channels[1]);
}

TEST(OutlierDetection, BadOptionsAreRefused) {
  ChannelOptions options;
  options.outlier_detection.enabled = true;
  options.outlier_detection.interval = absl::ZeroDuration();
  auto ch = CreateChannel("127.0.0.1:1", options);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ch.status().message(), "ChannelOptions: outlier_detection.interval is 0; must be > 0");
  options.outlier_detection.interval = absl::Seconds(1);
  options.outlier_detection.max_ejection_percent = 101;
  ch = CreateChannel("127.0.0.1:1", options);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().message(),
            "ChannelOptions: outlier_detection.max_ejection_percent is 101; must be in 0..100");
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
