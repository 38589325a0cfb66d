// rpc_status_details_test.cc: a non-OK status reaches the client with its
// code, message and binary details (absl::Status payloads) intact, small or
// large enough to travel by rendezvous.
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/call_model_service.h"

namespace rdmarpc {
namespace test {
namespace {

struct Fixture {
  Fixture() {
    EXPECT_TRUE(server.AddService(&service).ok());
    absl::Status s = server.Start("127.0.0.1:0");
    EXPECT_TRUE(s.ok()) << s;
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()));
    EXPECT_TRUE(ch.ok()) << ch.status();
    channel = *ch;
  }
  absl::Status Call(const EchoRequest& req) {
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(30));
    return internal::BlockingUnaryCall(channel.get(), kDetailsMethod, &ctx, req, &resp);
  }
  CallModelService service;
  Server server;
  std::shared_ptr<Channel> channel;
};

// Bytes of every value 0..255, so a NUL or a high byte would show.
std::string BinaryBytes(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 7 % 256);
  return s;
}

TEST(StatusDetails, CodeMessageAndBinaryPayloadArriveIntact) {
  Fixture f;
  EchoRequest req;
  req.set_tag(static_cast<int>(absl::StatusCode::kFailedPrecondition));
  req.set_text("quota \xe2\x9c\x93 exceeded\tfor user 7");
  req.set_data(BinaryBytes(300));
  absl::Status s = f.Call(req);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), req.text());
  absl::optional<absl::Cord> details = s.GetPayload(kDetailsTypeUrl);
  ASSERT_TRUE(details.has_value()) << s;
  EXPECT_EQ(std::string(*details), req.data());
}

TEST(StatusDetails, SeveralPayloadsAllArrive) {
  Fixture f;
  EchoRequest req;
  req.set_tag(static_cast<int>(absl::StatusCode::kNotFound));
  req.set_text("missing");
  req.set_data("first");
  req.set_reply_bytes(1);  // asks for a second payload
  absl::Status s = f.Call(req);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(s.GetPayload(kDetailsTypeUrl).has_value());
  EXPECT_EQ(std::string(*s.GetPayload(kDetailsTypeUrl)), "first");
  ASSERT_TRUE(s.GetPayload("second").has_value());
  EXPECT_EQ(std::string(*s.GetPayload("second")), "2");
  int count = 0;
  s.ForEachPayload([&](absl::string_view, const absl::Cord&) { ++count; });
  EXPECT_EQ(count, 2);
}

TEST(StatusDetails, DetailsLargerThanTheEagerLimitTravelByRendezvous) {
  Fixture f;
  EchoRequest req;
  req.set_tag(static_cast<int>(absl::StatusCode::kAborted));
  req.set_text("conflict");
  req.set_data(BinaryBytes(100000));  // far above the 8 KiB eager limit
  absl::Status s = f.Call(req);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "conflict");
  ASSERT_TRUE(s.GetPayload(kDetailsTypeUrl).has_value());
  EXPECT_EQ(std::string(*s.GetPayload(kDetailsTypeUrl)), req.data());
}

TEST(StatusDetails, AStatusWithoutPayloadsHasNone) {
  Fixture f;
  EchoRequest req;
  req.set_tag(static_cast<int>(absl::StatusCode::kPermissionDenied));
  req.set_text("no");
  absl::Status s = f.Call(req);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  // Details() always sets its payload; an empty value still arrives.
  ASSERT_TRUE(s.GetPayload(kDetailsTypeUrl).has_value());
  EXPECT_EQ(std::string(*s.GetPayload(kDetailsTypeUrl)), "");
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
