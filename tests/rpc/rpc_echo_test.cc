// End-to-end calls through Channel and Server over softrdma on 127.0.0.1.
#include <memory>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/softrdma/softrdma.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

using Fixture = EchoFixture;

TEST(RpcEcho, SmallEchoReturnsSameText) {
  Fixture f;
  EchoRequest req;
  req.set_text("hello, rdma");
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  absl::Status s = Echo(f.channel.get(), &ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.text(), "hello, rdma");
  EXPECT_EQ(f.service.calls(), 1);
  EXPECT_EQ(f.service.last_method(), kEchoMethod);
  EXPECT_EQ(ctx.peer(), absl::StrCat("127.0.0.1:", f.server.port()));
}

TEST(RpcEcho, ManySequentialCallsOnOneChannel) {
  Fixture f;
  for (int i = 0; i < 200; ++i) {
    EchoRequest req;
    req.set_text(absl::StrCat("n", i));
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(10));
    absl::Status s = Echo(f.channel.get(), &ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s << " at call " << i;
    ASSERT_EQ(resp.text(), absl::StrCat("n", i));
  }
  EXPECT_EQ(f.service.calls(), 200);
}

TEST(RpcEcho, SixteenMiBEchoHasCorrectBytes) {
  Fixture f;
  EchoRequest req;
  std::string data(16 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 131) ^ (i >> 9));
  req.set_data(data);
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(30));
  absl::Status s = Echo(f.channel.get(), &ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(resp.data().size(), data.size());
  EXPECT_TRUE(resp.data() == data);
}

// A thread_local made before its thread's first call whose destructor makes
// a call (a per-thread client saying goodbye) is destroyed after the
// per-thread caches of softrdma and the runtime that its thread's calls
// made: its call must not use them (ASan use-after-free in PollCq's
// vector of slot releases, before).
struct GoodbyeAtThreadExit {
  Channel* channel = nullptr;
  absl::Status* result = nullptr;
  ~GoodbyeAtThreadExit() {
    if (channel == nullptr) return;
    EchoRequest req;
    req.set_text("goodbye");
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(10));
    *result = Echo(channel, &ctx, req, &resp);
    if (result->ok() && resp.text() != "goodbye") *result = absl::InternalError(resp.text());
  }
};
thread_local GoodbyeAtThreadExit t_goodbye;

TEST(RpcEcho, ACallFromAThreadLocalDestructorAtThreadExitWorks) {
  Fixture f;
  absl::Status goodbye = absl::UnknownError("not called");
  std::thread t([&] {
    t_goodbye.channel = f.channel.get();  // made before this thread's calls
    t_goodbye.result = &goodbye;
    for (int i = 0; i < 5; ++i) {
      EchoRequest req;
      req.set_text("hello");
      EchoResponse resp;
      ClientContext ctx;
      ctx.set_timeout(absl::Seconds(10));
      ASSERT_TRUE(Echo(f.channel.get(), &ctx, req, &resp).ok());
    }
  });
  t.join();
  EXPECT_TRUE(goodbye.ok()) << goodbye;
  EXPECT_EQ(f.service.calls(), 6);
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
