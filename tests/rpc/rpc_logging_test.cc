// rpc_logging_test.cc: connection set-up failures, losses and reconnects are
// logged at WARNING by default, at most one line per peer a second, and the
// next line counts the ones held back (runtime/transport/log_limiter.h);
// closes this process decided, and a client's orderly disconnect as its
// server sees it, are not.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

// Collects WARNING-and-worse lines of rdmarpc's connection log.
class WarningSink : public google::LogSink {
 public:
  WarningSink() { google::AddLogSink(this); }
  ~WarningSink() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity severity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t message_len) override {
    if (severity < google::GLOG_WARNING) return;
    std::string line(message, message_len);
    if (!absl::StartsWith(line, "rdmarpc: ")) return;
    absl::MutexLock l(&mu_);
    lines_.push_back(std::move(line));
  }
  std::vector<std::string> LinesWith(absl::string_view what) {
    absl::MutexLock l(&mu_);
    std::vector<std::string> out;
    for (const std::string& s : lines_) {
      if (absl::StrContains(s, what)) out.push_back(s);
    }
    return out;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
};

// Each line stands for itself and the lines held back before it.
uint64_t EventsIn(const std::vector<std::string>& lines) {
  uint64_t n = 0;
  for (const std::string& s : lines) {
    n += 1;
    const size_t open = s.rfind(" (");
    const size_t more = s.find(" more for this peer suppressed");
    uint64_t held = 0;
    if (open != std::string::npos && more != std::string::npos && more > open &&
        absl::SimpleAtoi(s.substr(open + 2, more - open - 2), &held)) {
      n += held;
    }
  }
  return n;
}

int DeadPort() {
  Server probe;
  EXPECT_TRUE(probe.Start("127.0.0.1:0").ok());
  const int port = probe.port();
  probe.Shutdown(absl::ZeroDuration());
  probe.Wait();
  return port;
}

TEST(ConnectionLog, SetUpFailuresToADeadServerAreOneLineASecondAndNoneIsLost) {
  WarningSink sink;
  const int port = DeadPort();
  const std::string peer = absl::StrCat("127.0.0.1:", port);
  ChannelOptions options;
  options.pool_size = 1;  // every call after the first reconnects the one slot
  auto ch = CreateChannel(peer, options);
  ASSERT_TRUE(ch.ok()) << ch.status();
  constexpr int kCalls = 6;
  for (int i = 0; i < kCalls; ++i) {
    EchoRequest req;
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(3));
    EXPECT_EQ(Echo(ch->get(), &ctx, req, &resp).code(), absl::StatusCode::kUnavailable);
  }
  // Past the period, one more failure is always written, and it carries the
  // count of those held back: every attempt shows in the log.
  absl::SleepFor(absl::Milliseconds(1100));
  {
    EchoRequest req;
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(3));
    EXPECT_EQ(Echo(ch->get(), &ctx, req, &resp).code(), absl::StatusCode::kUnavailable);
  }
  const std::vector<std::string> failed =
      sink.LinesWith(absl::StrCat("connection to ", peer, " failed: "));
  ASSERT_GE(failed.size(), 2u);
  EXPECT_EQ(EventsIn(failed), uint64_t{kCalls + 1});
  EXPECT_TRUE(absl::StrContains(failed[0], "no server listening on " + peer)) << failed[0];
  EXPECT_TRUE(absl::StrContains(failed.back(), "more for this peer suppressed")) << failed.back();
  // Every attempt after the first reconnects the slot the last one failed.
  const std::vector<std::string> reconnects =
      sink.LinesWith(absl::StrCat("reconnecting to ", peer));
  EXPECT_EQ(EventsIn(reconnects), uint64_t{kCalls});
}

TEST(ConnectionLog, ServerShutdownIsALossForTheClientAndQuietOnTheServer) {
  WarningSink sink;
  auto f = std::make_unique<EchoFixture>();
  const std::string peer = absl::StrCat("127.0.0.1:", f->server.port());
  EchoRequest req;
  req.set_text("hi");
  EchoResponse resp;
  {
    ClientContext ctx;
    ASSERT_TRUE(Echo(f->channel.get(), &ctx, req, &resp).ok());
  }
  f->server.Shutdown(absl::Seconds(1));
  f->server.Wait();
  // The client's QP sees the server's DISCONNECT.
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (sink.LinesWith("connection to " + peer + " lost: ").empty() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const std::vector<std::string> lost = sink.LinesWith("connection to " + peer + " lost: ");
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_TRUE(absl::StrContains(lost[0], "peer disconnected")) << lost[0];
  // The server closed on purpose: no line of its own.
  EXPECT_TRUE(sink.LinesWith("connection from ").empty());
}

TEST(ConnectionLog, AClientGoingAwayIsNotAWarningOnTheServer) {
  WarningSink sink;
  auto f = std::make_unique<EchoFixture>();
  EchoRequest req;
  req.set_text("hi");
  EchoResponse resp;
  {
    ClientContext ctx;
    ASSERT_TRUE(Echo(f->channel.get(), &ctx, req, &resp).ok());
  }
  f->channel.reset();  // the client disconnects in order
  // The server's connection count drops once it handled the DISCONNECT.
  absl::SleepFor(absl::Milliseconds(200));
  f->server.Shutdown(absl::Seconds(1));
  f->server.Wait();
  EXPECT_TRUE(sink.LinesWith("connection from ").empty());
  EXPECT_TRUE(sink.LinesWith(" lost: ").empty());
  EXPECT_TRUE(sink.LinesWith(" failed: ").empty());
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
