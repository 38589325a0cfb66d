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
#include "tests/rpc/warning_sink.h"

namespace rdmarpc {
namespace test {
namespace {

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

TEST(ConnectionLog, SetUpFailuresToADeadServerAreOneLineASecondAndNoneIsLost) {
  WarningSink sink;
  const int port = PortWithNoListener();
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
  const std::vector<std::string> failed = sink.LinesWith("rdmarpc: connection set-up failed: ");
  // The first and the last attempt are written (the last a period after any
  // other), and together the lines account for every attempt.
  ASSERT_GE(failed.size(), 2u);
  EXPECT_EQ(EventsIn(failed), uint64_t{kCalls + 1});
  for (const std::string& line : failed) {
    EXPECT_TRUE(absl::StrContains(line, "no server listening on " + peer)) << line;
  }
  EXPECT_EQ(sink.LinesWith("rdmarpc: ").size(), failed.size());  // nothing else, no reconnect
}

TEST(ConnectionLog, ServerShutdownIsADrainQuietOnBothSides) {
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
  // The server announces its end (kGoAway) before it closes: the client
  // expects the close and logs nothing; the server closed on purpose.
  f->server.Shutdown(absl::Seconds(1));
  f->server.Wait();
  absl::SleepFor(absl::Milliseconds(300));  // the client's QP sees the DISCONNECT
  EXPECT_EQ(sink.LinesWith("rdmarpc: ").size(), 0u);
  // A call after it fails to connect, and says so once.
  ClientContext ctx;
  absl::Status s = Echo(f->channel.get(), &ctx, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  const std::vector<std::string> failed = sink.LinesWith("rdmarpc: connection set-up failed: ");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_TRUE(absl::StrContains(failed[0], peer)) << failed[0];
}

TEST(ConnectionLog, AReconnectAfterADrainIsOneLineNamingWhatEndedTheLastConnection) {
  WarningSink sink;
  EchoService service;
  auto first = std::make_unique<Server>();
  ASSERT_TRUE(first->AddService(&service).ok());
  ASSERT_TRUE(first->Start("127.0.0.1:0").ok());
  const int port = first->port();
  const std::string peer = absl::StrCat("127.0.0.1:", port);
  ChannelOptions options;
  options.pool_size = 1;
  auto ch = CreateChannel(peer, options);
  ASSERT_TRUE(ch.ok()) << ch.status();
  EchoRequest req;
  req.set_text("hi");
  EchoResponse resp;
  {
    ClientContext ctx;
    ASSERT_TRUE(Echo(ch->get(), &ctx, req, &resp).ok());
  }
  first->Shutdown(absl::Seconds(1));
  first->Wait();
  first.reset();
  Server second;
  ASSERT_TRUE(second.AddService(&service).ok());
  absl::Status started = second.Start(peer);
  if (!started.ok()) GTEST_SKIP() << "port " << port << " not free again: " << started;
  // A period after the loss's line, so the reconnect's is not held back.
  absl::SleepFor(absl::Milliseconds(1100));
  {
    ClientContext ctx;
    ASSERT_TRUE(Echo(ch->get(), &ctx, req, &resp).ok());
  }
  const std::vector<std::string> reconnected = sink.LinesWith("rdmarpc: reconnected; ");
  ASSERT_EQ(reconnected.size(), 1u);
  EXPECT_TRUE(absl::StrContains(
      reconnected[0],
      "the last connection ended: UNAVAILABLE: " + peer + " is shutting down (GOAWAY)"))
      << reconnected[0];
  // The server closing the drained, idle connection is no loss.
  EXPECT_EQ(sink.LinesWith("rdmarpc: connection lost: ").size(), 0u);
  second.Shutdown(absl::ZeroDuration());
  second.Wait();
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
  EXPECT_TRUE(sink.LinesWith("rdmarpc: ").empty());
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
