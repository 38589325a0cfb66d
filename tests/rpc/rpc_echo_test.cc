// End-to-end calls through Channel and Server over softrdma on 127.0.0.1.
#include <memory>
#include <string>

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

}  // namespace
}  // namespace test
}  // namespace rdmarpc
