// rpc_retry_test.cc: retries and hedging under gRFC A6 policies, from a
// channel's service config and from the IDL's options, counted attempt by
// attempt on the servers; and the service config's parser.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/rpc/service_config.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/scripted_service.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

using internal::MethodConfig;
using internal::ServiceConfig;

std::shared_ptr<Channel> MakeChannel(const std::string& target, const std::string& config,
                                     ChannelOptions options = ChannelOptions()) {
  options.service_config_json = config;
  auto ch = CreateChannel(target, options);
  EXPECT_TRUE(ch.ok()) << ch.status();
  return ch.ok() ? *ch : nullptr;
}

// A retryPolicy for the test's Echo method.
std::string RetryConfig(int max_attempts, const std::string& extra_policy = "",
                        const std::string& extra_top = "") {
  return absl::StrCat(
      R"({"methodConfig": [{"name": [{"service": "rdmarpc.test.EchoService", "method": "Echo"}],
          "retryPolicy": {"maxAttempts": )",
      max_attempts, R"(, "initialBackoff": "0.001s", "maxBackoff": "0.005s",
          "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"])",
      extra_policy, "}}]", extra_top, "}");
}

std::string HedgingConfig(int max_attempts, const std::string& delay,
                          const std::string& non_fatal = R"(["UNAVAILABLE"])") {
  return absl::StrCat(
      R"({"methodConfig": [{"name": [{"service": "rdmarpc.test.EchoService"}],
          "hedgingPolicy": {"maxAttempts": )",
      max_attempts, R"(, "hedgingDelay": ")", delay, R"(", "nonFatalStatusCodes": )", non_fatal,
      "}}]}");
}

absl::Status CallEcho(Channel* channel, ClientContext* ctx, const std::string& text = "hi",
                      EchoResponse* out = nullptr) {
  EchoRequest req;
  req.set_text(text);
  EchoResponse resp;
  if (ctx->deadline() == absl::InfiniteFuture()) ctx->set_timeout(absl::Seconds(20));
  absl::Status s = Echo(channel, ctx, req, &resp);
  if (out != nullptr) *out = resp;
  return s;
}

absl::Status CallEcho(Channel* channel) {
  ClientContext ctx;
  return CallEcho(channel, &ctx);
}

const Step kUnavailable = Fails(absl::StatusCode::kUnavailable);

// UNAVAILABLE, with a pushback asking for the next attempt `ms` later.
Step UnavailableRetryAfter(const std::string& ms) {
  Step step = kUnavailable;
  step.pushback = ms;
  return step;
}

// An asynchronous Echo whose end the test waits for.
struct AsyncEcho {
  EchoRequest req;
  EchoResponse resp;
  ClientContext ctx;
  absl::Notification done;
  absl::Status result;
  void Start(Channel* channel) {
    internal::AsyncUnaryCall(channel, kEchoMethod, &ctx, req, &resp, [this](absl::Status st) {
      result = st;
      done.Notify();
    });
  }
};

// Until `service` saw a call, and 50 ms more for its failure to be back.
void WaitForFirstAttempt(ScriptedService& service) {
  for (int i = 0; i < 2000 && service.calls() == 0; ++i) absl::SleepFor(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(50));
}

// ---- retryPolicy --------------------------------------------------------------

TEST(RetryPolicy, RetryableCodeIsSentExactlyMaxAttemptsTimes) {
  Servers s(1);
  s.ScriptAll({}, kUnavailable);
  auto ch = MakeChannel(s.target(), RetryConfig(4));
  ClientContext ctx;
  absl::Status st = CallEcho(ch.get(), &ctx);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_EQ(st.message(), "scripted failure");
  EXPECT_EQ(s.service(0).calls(), 4);
  EXPECT_EQ(s.service(0).previous(), (std::vector<std::string>{"-", "1", "2", "3"}));
  auto it = ctx.GetServerTrailingMetadata().find("grpc-previous-rpc-attempts");
  ASSERT_NE(it, ctx.GetServerTrailingMetadata().end());
  EXPECT_EQ(it->second, "3");
}

TEST(RetryPolicy, SucceedsOnTheThirdAttemptWithTheResponse) {
  Servers s(1);
  s.ScriptAll({kUnavailable, kUnavailable});
  auto ch = MakeChannel(s.target(), RetryConfig(5));
  ClientContext ctx;
  EchoResponse resp;
  absl::Status st = CallEcho(ch.get(), &ctx, "third time", &resp);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(resp.text(), "third time");
  EXPECT_EQ(s.service(0).calls(), 3);
  EXPECT_FALSE(ctx.peer().empty());
  auto it = ctx.GetServerTrailingMetadata().find("grpc-previous-rpc-attempts");
  ASSERT_NE(it, ctx.GetServerTrailingMetadata().end());
  EXPECT_EQ(it->second, "2");
}

TEST(RetryPolicy, CodeNotListedIsNotRetried) {
  Servers s(1);
  s.ScriptAll({}, Fails(absl::StatusCode::kNotFound));
  auto ch = MakeChannel(s.target(), RetryConfig(5));
  EXPECT_EQ(CallEcho(ch.get()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.service(0).calls(), 1);
}

TEST(RetryPolicy, NotRetriedOnceTheServerSentResponseHeaders) {
  Servers s(1);
  Step headers_then_unavailable = kUnavailable;
  headers_then_unavailable.initial_metadata = true;
  s.ScriptAll({}, headers_then_unavailable);
  auto ch = MakeChannel(s.target(), RetryConfig(5));
  ClientContext ctx;
  EXPECT_EQ(CallEcho(ch.get(), &ctx).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.service(0).calls(), 1);
  auto it = ctx.GetServerInitialMetadata().find("x-headers");
  ASSERT_NE(it, ctx.GetServerInitialMetadata().end());
  EXPECT_EQ(it->second, "sent");
}

TEST(RetryPolicy, MaxAttemptsAboveFiveCountsAsFive) {
  Servers s(1);
  s.ScriptAll({}, kUnavailable);
  auto ch = MakeChannel(s.target(), RetryConfig(9));
  EXPECT_EQ(CallEcho(ch.get()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.service(0).calls(), 5);
}

TEST(RetryPolicy, NegativePushbackStopsRetrying) {
  Servers s(1);
  s.ScriptAll({}, UnavailableRetryAfter("-1"));
  auto ch = MakeChannel(s.target(), RetryConfig(5));
  EXPECT_EQ(CallEcho(ch.get()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.service(0).calls(), 1);
}

TEST(RetryPolicy, PushbackSetsTheDelayOfTheNextAttempt) {
  Servers s(1);
  s.ScriptAll({UnavailableRetryAfter("300")});
  auto ch = MakeChannel(s.target(), RetryConfig(3));
  ASSERT_TRUE(CallEcho(ch.get()).ok());
  const std::vector<absl::Time> starts = s.service(0).starts();
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_GE(starts[1] - starts[0], absl::Milliseconds(290));
}

TEST(RetryPolicy, TheDeadlineCoversEveryAttempt) {
  Servers s(1);
  s.ScriptAll({}, UnavailableRetryAfter("10000"));  // the next attempt would be 10 s away
  auto ch = MakeChannel(s.target(), RetryConfig(5));
  ClientContext ctx;
  ctx.set_timeout(absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  absl::Status st = CallEcho(ch.get(), &ctx);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(s.service(0).calls(), 1);
  EXPECT_NE(st.message().find("after 1 attempt"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("UNAVAILABLE: scripted failure"), absl::string_view::npos) << st;
}

TEST(RetryPolicy, ThrottleStopsRetriesAtHalfTheTokensAndSuccessesRefillIt) {
  Servers s(1);
  s.ScriptAll({}, kUnavailable);
  auto ch = MakeChannel(s.target(), RetryConfig(2, "", R"(, "retryThrottling": {"maxTokens": 10,
                                                "tokenRatio": 0.1})"));
  // Tokens 10 -> 9 -> 8 (a retry each time while > 5), 7 -> 6, then 5 and
  // 4: no retry.
  std::vector<int> attempts;
  for (int i = 0; i < 4; ++i) {
    const int before = s.service(0).calls();
    EXPECT_EQ(CallEcho(ch.get()).code(), absl::StatusCode::kUnavailable);
    attempts.push_back(s.service(0).calls() - before);
  }
  EXPECT_EQ(attempts, (std::vector<int>{2, 2, 1, 1}));
  // A failure is counted before the throttle is asked: 20 successes bring
  // 4 tokens to 6.0 and the failure to 5.0, not over the threshold; then
  // 21 bring 5.0 to 7.1 and the failure to 6.1, so it is retried.
  auto failing_call_attempts = [&](int successes_before) {
    s.ScriptAll({});
    for (int i = 0; i < successes_before; ++i) EXPECT_TRUE(CallEcho(ch.get()).ok());
    s.ScriptAll({}, kUnavailable);
    const int before = s.service(0).calls();
    EXPECT_EQ(CallEcho(ch.get()).code(), absl::StatusCode::kUnavailable);
    return s.service(0).calls() - before;
  };
  EXPECT_EQ(failing_call_attempts(20), 1);
  EXPECT_EQ(failing_call_attempts(21), 2);
}

TEST(RetryPolicy, RetriesGoToAnotherServer) {
  Servers s(2);
  s.service(0).Script({}, kUnavailable);
  auto ch = MakeChannel(s.target(), RetryConfig(2));
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(CallEcho(ch.get()).ok()) << i;
  // Every call ended on server 1; those that began on server 0 were sent
  // once there.
  EXPECT_EQ(s.service(1).calls(), 20);
  EXPECT_GT(s.service(0).calls(), 0);
  for (const std::string& p : s.service(0).previous()) EXPECT_EQ(p, "-");
}

TEST(RetryPolicy, AsyncCallIsRetriedToo) {
  Servers s(1);
  s.ScriptAll({kUnavailable, kUnavailable});
  auto ch = MakeChannel(s.target(), RetryConfig(3));
  AsyncEcho call;
  call.req.set_text("async");
  call.ctx.set_timeout(absl::Seconds(20));
  call.Start(ch.get());
  ASSERT_TRUE(call.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(call.result.ok()) << call.result;
  EXPECT_EQ(call.resp.text(), "async");
  EXPECT_EQ(s.service(0).calls(), 3);
}

TEST(RetryPolicy, TryCancelWhileWaitingToRetryEndsCancelledAtOnce) {
  Servers s(1);
  s.ScriptAll({}, UnavailableRetryAfter("20000"));
  auto ch = MakeChannel(s.target(), RetryConfig(3));
  AsyncEcho call;
  call.Start(ch.get());
  WaitForFirstAttempt(s.service(0));  // the retry waits 20 s
  const absl::Time start = absl::Now();
  call.ctx.TryCancel();
  ASSERT_TRUE(call.done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(call.result.code(), absl::StatusCode::kCancelled) << call.result;
  EXPECT_EQ(s.service(0).calls(), 1);
}

TEST(RetryPolicy, DestroyingTheChannelWhileWaitingToRetryEndsCancelled) {
  Servers s(1);
  s.ScriptAll({}, UnavailableRetryAfter("20000"));
  auto ch = MakeChannel(s.target(), RetryConfig(3));
  AsyncEcho call;
  call.Start(ch.get());
  WaitForFirstAttempt(s.service(0));
  ch.reset();  // runs the callback before it returns
  ASSERT_TRUE(call.done.HasBeenNotified());
  EXPECT_EQ(call.result.code(), absl::StatusCode::kCancelled) << call.result;
}

TEST(RetryPolicy, EnableRetriesFalseSendsOnce) {
  Servers s(1);
  s.ScriptAll({}, kUnavailable);
  ChannelOptions options;
  options.enable_retries = false;
  auto ch = MakeChannel(s.target(), RetryConfig(5), options);
  EXPECT_EQ(CallEcho(ch.get()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.service(0).calls(), 1);
}

TEST(RetryPolicy, ARequestOverTheRetryBufferIsSentOnce) {
  Servers s(1);
  s.ScriptAll({}, kUnavailable);
  ChannelOptions options;
  options.per_rpc_retry_buffer_bytes = 64 * 1024;
  auto ch = MakeChannel(s.target(), RetryConfig(3), options);
  auto call = [&](size_t bytes) {
    EchoRequest req;
    req.set_data(std::string(bytes, 'd'));
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(20));
    const int before = s.service(0).calls();
    EXPECT_EQ(Echo(ch.get(), &ctx, req, &resp).code(), absl::StatusCode::kUnavailable);
    return s.service(0).calls() - before;
  };
  EXPECT_EQ(call(60 * 1024), 3);
  EXPECT_EQ(call(100 * 1024), 1);
}

TEST(RetryPolicy, TheIdlPolicyAppliesUnlessTheChannelConfigNamesTheMethod) {
  Servers s(1);
  s.ScriptAll({}, kUnavailable);
  // As generated code holds it: in a static, parsed once, never freed.
  static const MethodConfig* const idl = internal::IdlMethodConfig(
      R"({"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
          "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}})");
  auto call = [&](Channel* channel) {
    EchoRequest req;
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(20));
    const int before = s.service(0).calls();
    EXPECT_EQ(internal::BlockingUnaryCall(channel, kEchoMethod, &ctx, req, &resp, idl).code(),
              absl::StatusCode::kUnavailable);
    return s.service(0).calls() - before;
  };
  auto plain = MakeChannel(s.target(), "");
  EXPECT_EQ(call(plain.get()), 3);
  // A config for another service leaves the IDL's policy in place.
  auto other = MakeChannel(s.target(), R"({"methodConfig": [{"name": [{"service": "x.Other"}],
      "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
      "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]})");
  EXPECT_EQ(call(other.get()), 3);
  auto named = MakeChannel(s.target(), RetryConfig(2));
  EXPECT_EQ(call(named.get()), 2);
}

TEST(RetryPolicy, ConfigTimeoutBoundsTheCall) {
  Servers s(1);
  s.ScriptAll({}, Sleeps(absl::Seconds(2)));
  auto ch = MakeChannel(s.target(), R"({"methodConfig": [{"name": [{}], "timeout": "0.2s"}]})");
  const absl::Time start = absl::Now();
  ClientContext ctx;
  EXPECT_EQ(CallEcho(ch.get(), &ctx).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(1500));
}

// ---- hedgingPolicy ------------------------------------------------------------

TEST(HedgingPolicy, ASlowFirstAttemptIsOvertakenAndCancelled) {
  Servers s(2);
  s.service(0).Script({}, Sleeps(absl::Seconds(5)));
  auto ch = MakeChannel(s.target(), HedgingConfig(2, "0.05s"));
  for (int i = 0; i < 6; ++i) {
    const absl::Time start = absl::Now();
    ClientContext ctx;
    EchoResponse resp;
    ASSERT_TRUE(CallEcho(ch.get(), &ctx, absl::StrCat("h", i), &resp).ok()) << i;
    EXPECT_EQ(resp.text(), absl::StrCat("h", i));
    EXPECT_LT(absl::Now() - start, absl::Seconds(3)) << i;
  }
  // Server 1 answered every call; each copy sent to server 0 was cancelled.
  EXPECT_EQ(s.service(1).calls(), 6);
  EXPECT_GT(s.service(0).calls(), 0);
  for (int i = 0; i < 3000 && s.service(0).cancelled() < s.service(0).calls(); ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(s.service(0).cancelled(), s.service(0).calls());
  // A hedge carries the attempt count.
  for (const std::string& p : s.service(1).previous()) EXPECT_TRUE(p == "-" || p == "1") << p;
}

TEST(HedgingPolicy, NonFatalFailureSendsTheNextCopyAtOnceToAnotherServer) {
  Servers s(3);
  s.ScriptAll({}, kUnavailable);
  auto ch = MakeChannel(s.target(), HedgingConfig(3, "10s"));
  const absl::Time start = absl::Now();
  EXPECT_EQ(CallEcho(ch.get()).code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.service(i).calls(), 1) << i;
}

TEST(HedgingPolicy, FatalFailureEndsTheCall) {
  Servers s(3);
  s.ScriptAll({}, Fails(absl::StatusCode::kNotFound));
  auto ch = MakeChannel(s.target(), HedgingConfig(3, "10s"));
  EXPECT_EQ(CallEcho(ch.get()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.total_calls(), 1);
}

TEST(HedgingPolicy, CopiesGoToDistinctServersAtEachDelay) {
  Servers s(3);
  // Fast answers first: the measured call finds its connections made, so
  // the copies reach the servers when they are sent. (On a loaded machine
  // a warm-up call may be hedged too; its copies are answered at once.)
  s.ScriptAll({});
  auto ch = MakeChannel(s.target(), HedgingConfig(3, "0.1s"));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(CallEcho(ch.get()).ok());
  std::vector<int> before;
  for (int i = 0; i < 3; ++i) before.push_back(s.service(i).calls());
  s.ScriptAll({}, Sleeps(absl::Milliseconds(400)));
  ASSERT_TRUE(CallEcho(ch.get()).ok());
  std::vector<absl::Time> starts;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(s.service(i).calls() - before[i], 1) << i;
    starts.push_back(s.service(i).starts().back());
  }
  std::sort(starts.begin(), starts.end());
  // 100 ms apart as sent; a loaded machine may shift an arrival a little.
  EXPECT_GE(starts[1] - starts[0], absl::Milliseconds(80));
  EXPECT_GE(starts[2] - starts[1], absl::Milliseconds(80));
  EXPECT_GE(starts[2] - starts[0], absl::Milliseconds(180));
}

TEST(HedgingPolicy, OneServerGetsEveryCopy) {
  Servers s(1);
  s.ScriptAll({kUnavailable});
  auto ch = MakeChannel(s.target(), HedgingConfig(3, "10s"));
  ASSERT_TRUE(CallEcho(ch.get()).ok());
  EXPECT_EQ(s.service(0).previous(), (std::vector<std::string>{"-", "1"}));
}

// ---- the service config's parser ---------------------------------------------

absl::Status ParseError(const std::string& json) { return ServiceConfig::Parse(json).status(); }

TEST(ServiceConfigParse, NamesTheBadFieldAndValue) {
  EXPECT_EQ(ParseError(RetryConfig(1)).message(),
            "service config: methodConfig[0].retryPolicy.maxAttempts is 1; must be 2 or more");
  EXPECT_EQ(ParseError(absl::StrReplaceAll(RetryConfig(3), {{"\"0.001s\"", "\"0s\""}})).message(),
            "service config: methodConfig[0].retryPolicy.initialBackoff is \"0s\"; must be > 0");
  EXPECT_EQ(
      ParseError(absl::StrReplaceAll(RetryConfig(3), {{"\"UNAVAILABLE\"", "\"BUSY\""}})).message(),
      "service config: methodConfig[0].retryPolicy.retryableStatusCodes[0] is \"BUSY\"; "
      "not a status code (a name such as \"UNAVAILABLE\", or 0..16)");
  EXPECT_EQ(
      ParseError(absl::StrReplaceAll(RetryConfig(3), {{"[\"UNAVAILABLE\"]", "[]"}})).message(),
      "service config: methodConfig[0].retryPolicy.retryableStatusCodes is empty; name at "
      "least one code");
  EXPECT_EQ(ParseError(R"({"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 2}}]})")
                .message(),
            "service config: methodConfig[0].retryPolicy.initialBackoff is required");
  EXPECT_EQ(ParseError(R"({"methodConfig": [{"name": [{}], "retryPolicy": {},
                           "hedgingPolicy": {}}]})")
                .message(),
            "service config: methodConfig[0] sets both retryPolicy and hedgingPolicy; a method "
            "has at most one");
  EXPECT_EQ(ParseError(R"({"methodConfig": [{"name": [{"service": "a.S"}]},
                                            {"name": [{"service": "a.S"}]}]})")
                .message(),
            "service config: methodConfig[1].name[0] names \"a.S/\" a second time");
  EXPECT_EQ(ParseError(R"({"retryThrottling": {"maxTokens": 0, "tokenRatio": 1}})").message(),
            "service config: retryThrottling.maxTokens is 0; must be a whole number in 1..1000");
  EXPECT_EQ(ParseError(R"({"loadBalancingConfig": [{"weighted_target": {}}]})").message(),
            "service config: loadBalancingConfig lists no policy this channel has "
            "(weighted_target; known: round_robin, pick_first, least_request)");
  // proto3 JSON durations only: digits, at most 9 decimals, "s".
  for (const char* d : {"0x10s", "1e9s", " 1s", "-1s", "1", "1.s", "0.0000000001s"}) {
    const std::string config =
        absl::StrReplaceAll(RetryConfig(3), {{"\"0.001s\"", absl::StrCat("\"", d, "\"")}});
    EXPECT_EQ(ParseError(config).message(),
              absl::StrCat("service config: methodConfig[0].retryPolicy.initialBackoff is \"", d,
                           "\"; must be a non-negative duration string such as \"0.1s\""))
        << d;
  }
  // loadBalancingConfig's names are exact, loadBalancingPolicy's are not.
  EXPECT_EQ(ParseError(R"({"loadBalancingConfig": [{"ROUND_ROBIN": {}}]})").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ServiceConfig::Parse(R"({"loadBalancingPolicy": "ROUND_ROBIN"})").ok());
  EXPECT_EQ(ParseError(absl::StrReplaceAll(RetryConfig(3),
                                           {{"\"maxAttempts\": 3", "\"maxAttempts\": \"3\""}}))
                .message(),
            "service config: methodConfig[0].retryPolicy.maxAttempts is \"3\"; must be a number "
            "(2 or more)");
  EXPECT_EQ(ParseError("{not json").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(ParseError("[]").message(), "service config is not a JSON object: "))
      << ParseError("[]");
}

TEST(ServiceConfigParse, FindsMethodThenServiceThenDefault) {
  auto config = ServiceConfig::Parse(R"({"methodConfig": [
      {"name": [{"service": "a.S", "method": "M"}], "timeout": "1s"},
      {"name": [{"service": "a.S"}], "timeout": "2s"},
      {"name": [{}], "timeout": "3s"}],
      "loadBalancingConfig": [{"grpclb": {}}, {"pick_first": {}}],
      "someFutureField": true})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ((*config)->Find("/a.S/M")->timeout, absl::Seconds(1));
  EXPECT_EQ((*config)->Find("/a.S/N")->timeout, absl::Seconds(2));
  EXPECT_EQ((*config)->Find("/b.T/M")->timeout, absl::Seconds(3));
  EXPECT_EQ((*config)->load_balancing_policy(), "pick_first");
  auto hedging = ServiceConfig::Parse(HedgingConfig(7, "0.25s", R"([14, "aborted"])"));
  ASSERT_TRUE(hedging.ok()) << hedging.status();
  const MethodConfig* m = (*hedging)->Find("/rdmarpc.test.EchoService/Echo");
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->hedging.has_value());
  EXPECT_EQ(m->hedging->max_attempts, 5);
  EXPECT_EQ(m->hedging->hedging_delay, absl::Milliseconds(250));
  EXPECT_EQ(m->hedging->non_fatal_codes, (1u << 14) | (1u << 10));
}

TEST(ServiceConfigParse, CreateChannelRefusesABadConfig) {
  ChannelOptions options;
  options.service_config_json = RetryConfig(1);
  auto ch = CreateChannel("127.0.0.1:1", options);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ch.status().message(),
            "ChannelOptions: service_config_json: service config: "
            "methodConfig[0].retryPolicy.maxAttempts is 1; must be 2 or more");
}

TEST(ServiceConfigParse, ThrottleCountsInThousandths) {
  internal::RetryThrottle t(internal::RetryThrottleConfig{3000, 500});
  EXPECT_TRUE(t.RetryAllowed());
  t.RecordFailure();  // 2.0 > 1.5
  EXPECT_TRUE(t.RetryAllowed());
  t.RecordFailure();  // 1.0
  EXPECT_FALSE(t.RetryAllowed());
  t.RecordFailure();
  t.RecordFailure();  // floors at 0
  EXPECT_EQ(t.milli_tokens(), 0);
  for (int i = 0; i < 10; ++i) t.RecordSuccess();  // caps at 3.0
  EXPECT_EQ(t.milli_tokens(), 3000);
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
