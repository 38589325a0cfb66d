// rpc_fork_test.cc: a forked child's calls on its parent's Channel fail at
// once with FAILED_PRECONDITION, its destruction of the inherited Channel
// and Server leaves the parent's connections working, and the parent's
// calls go on as before.
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/stream_service.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

absl::Status CallOnce(Channel* channel, absl::Duration timeout) {
  EchoRequest req;
  req.set_text("fork");
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(timeout);
  absl::Status s = Echo(channel, &ctx, req, &resp);
  if (s.ok() && resp.text() != "fork") return absl::DataLossError(resp.text());
  return s;
}

// What the child checks, as exit-code bits (no gtest in the child).
enum ChildFailure {
  kBlockingNotRefused = 1,
  kBlockingSlow = 2,
  kAsyncNotInline = 4,
  kAsyncNotRefused = 8,
  kMessageUnclear = 16,
};

int ChildBody(std::shared_ptr<Channel> channel, std::unique_ptr<Server> server) {
  int failures = 0;
  const absl::Time start = absl::Now();
  absl::Status s = CallOnce(channel.get(), absl::Seconds(1));
  if (s.code() != absl::StatusCode::kFailedPrecondition) failures |= kBlockingNotRefused;
  if (absl::Now() - start > absl::Milliseconds(500)) failures |= kBlockingSlow;
  if (s.message().find("forked child") == absl::string_view::npos ||
      s.message().find(absl::StrCat("process ", getppid())) == absl::string_view::npos) {
    failures |= kMessageUnclear;
  }
  EchoRequest req;
  EchoResponse resp;
  ClientContext ctx;
  bool ran = false;
  absl::Status async_status;
  internal::AsyncUnaryCall(channel.get(), kEchoMethod, &ctx, req, &resp, [&](absl::Status st) {
    ran = true;
    async_status = st;
  });
  if (!ran) failures |= kAsyncNotInline;
  if (async_status.code() != absl::StatusCode::kFailedPrecondition) failures |= kAsyncNotRefused;
  // Letting go of both must touch nothing of the parent's.
  channel.reset();
  server->Shutdown(absl::ZeroDuration());
  server.reset();
  return failures;
}

TEST(Fork, ChildCallsFailFastAndItsTeardownLeavesTheParentsConnectionsAlone) {
  EchoService service;
  auto server = std::make_unique<Server>();
  ASSERT_TRUE(server->AddService(&service).ok());
  ASSERT_TRUE(server->Start("127.0.0.1:0").ok());
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server->port()));
  ASSERT_TRUE(ch.ok()) << ch.status();
  std::shared_ptr<Channel> channel = std::move(*ch);
  ASSERT_TRUE(CallOnce(channel.get(), absl::Seconds(10)).ok());
  // Five forks: the parent's connection must survive every child.
  for (int round = 0; round < 5; ++round) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // The child owns copies of the parent's objects; it gets the
      // references it would have had.
      std::unique_ptr<Server> child_server(server.release());
      _exit(ChildBody(std::move(channel), std::move(child_server)));
    }
    int wstatus = 0;
    ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFEXITED(wstatus)) << "round " << round << ": status " << wstatus;
    EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "round " << round << " (bits of ChildFailure)";
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(CallOnce(channel.get(), absl::Seconds(10)).ok()) << "round " << round << " " << i;
    }
  }
  EXPECT_EQ(service.calls(), 1 + 5 * 50);
}

TEST(Fork, ASyncStreamInTheChildEndsWithTheSameStatus) {
  EchoService service;
  Server server;
  ASSERT_TRUE(server.AddService(&service).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()));
  ASSERT_TRUE(ch.ok()) << ch.status();
  ASSERT_TRUE(CallOnce(ch->get(), absl::Seconds(10)).ok());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(1));
    EchoRequest req;
    ClientReader<EchoResponse> reader(ch->get(), kExpandMethod, &ctx, req);
    EchoResponse resp;
    const bool read = reader.Read(&resp);
    const absl::Status s = reader.Finish();
    _exit(!read && s.code() == absl::StatusCode::kFailedPrecondition ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus)) << wstatus;
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
  EXPECT_TRUE(CallOnce(ch->get(), absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
