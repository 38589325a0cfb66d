// Completion callbacks of AsyncUnaryCall: what may and may not run inside.
// Regression test for a reported fault: a blocking call made inside a
// callback hung forever, past its deadline, and ~Channel then hung too.
#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

TEST(Callback, BlockingCallOnSameChannelIsFailedPreconditionNotAHang) {
  EchoFixture f;
  EchoRequest req;
  req.set_text("outer");
  EchoResponse outer_resp;
  ClientContext outer_ctx;
  outer_ctx.set_timeout(absl::Seconds(10));

  absl::Notification done;
  absl::Status outer_status;
  absl::Status inner_status;
  Channel* channel = f.channel.get();
  internal::AsyncUnaryCall(channel, kEchoMethod, &outer_ctx, req, &outer_resp,
                           [&](absl::Status s) {
                             outer_status = s;
                             EchoRequest inner_req;
                             inner_req.set_text("inner");
                             EchoResponse inner_resp;
                             ClientContext inner_ctx;
                             inner_ctx.set_timeout(absl::Seconds(3));
                             inner_status = Echo(channel, &inner_ctx, inner_req, &inner_resp);
                             done.Notify();
                           });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_TRUE(outer_status.ok()) << outer_status;
  EXPECT_EQ(outer_resp.text(), "outer");
  EXPECT_EQ(inner_status.code(), absl::StatusCode::kFailedPrecondition) << inner_status;
  EXPECT_NE(inner_status.message().find(kEchoMethod), absl::string_view::npos) << inner_status;
  // Only the outer call reached the server.
  EXPECT_EQ(f.service.calls(), 1);

  // The channel still works from an ordinary thread afterwards.
  EchoRequest again;
  again.set_text("again");
  EchoResponse again_resp;
  ClientContext again_ctx;
  again_ctx.set_timeout(absl::Seconds(10));
  absl::Status s = Echo(channel, &again_ctx, again, &again_resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(again_resp.text(), "again");
}

TEST(Callback, BlockingCallOnAnotherChannelFromCallbackWorks) {
  EchoFixture f;
  auto other = CreateChannel(absl::StrCat("127.0.0.1:", f.server.port()));
  ASSERT_TRUE(other.ok()) << other.status();
  std::shared_ptr<Channel> second = *other;

  EchoRequest req;
  req.set_text("first");
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  absl::Notification done;
  absl::Status inner_status;
  std::string inner_text;
  internal::AsyncUnaryCall(f.channel.get(), kEchoMethod, &ctx, req, &resp, [&](absl::Status) {
    EchoRequest inner_req;
    inner_req.set_text("second");
    EchoResponse inner_resp;
    ClientContext inner_ctx;
    inner_ctx.set_timeout(absl::Seconds(10));
    inner_status = Echo(second.get(), &inner_ctx, inner_req, &inner_resp);
    inner_text = inner_resp.text();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(inner_status.ok()) << inner_status;
  EXPECT_EQ(inner_text, "second");
  EXPECT_EQ(f.service.calls(), 2);
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
