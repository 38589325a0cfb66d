// The client side of generated code (golden/*.proto), over a fake of the
// runtime's call entry points (fake_unary_call.h): each Stub method passes its
// wire name, the caller's context and messages, applies the default deadline
// from rdmarpc/options.proto only when the caller set none, and returns the
// runtime's status.
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "edge/helpers.rdmarpc.pb.h"
#include "fake_unary_call.h"
#include "golden/golden_test.rdmarpc.pb.h"
#include "golden/no_package.rdmarpc.pb.h"
#include "gtest/gtest.h"

namespace {

using ::golden::v1::Admin;
using ::golden::v1::Store;

// Stubs only pass the channel through; the fake never dereferences it.
std::shared_ptr<rdmarpc::Channel> NoChannel() { return nullptr; }

TEST(GeneratedStub, BlockingCallPassesNameContextAndMessages) {
  fake_call::Reset(absl::UnavailableError("fake: no server"));
  std::unique_ptr<Store::Stub> stub = Store::NewStub(NoChannel());
  ASSERT_NE(stub, nullptr);
  rdmarpc::ClientContext context;
  golden::v1::Request request;
  golden::v1::Response response;
  absl::Status status = stub->Get(&context, request, &response);
  EXPECT_EQ(status, absl::UnavailableError("fake: no server"));
  const fake_call::RecordedCall& call = fake_call::LastCall();
  EXPECT_EQ(call.calls, 1);
  EXPECT_FALSE(call.async);
  EXPECT_EQ(call.method, "/golden.v1.Store/Get");
  EXPECT_EQ(call.channel, nullptr);
  EXPECT_EQ(call.request, &request);
  EXPECT_EQ(call.response, &response);
}

TEST(GeneratedStub, MethodDefaultTimeoutAppliesWhenContextHasNoDeadline) {
  fake_call::Reset(absl::OkStatus());
  Store::Stub stub(NoChannel());
  rdmarpc::ClientContext context;
  golden::v1::Response response;
  const absl::Time before = absl::Now();
  ASSERT_TRUE(stub.Get(&context, golden::v1::Request(), &response).ok());
  const absl::Time after = absl::Now();
  // (rdmarpc.method).default_timeout_ms = 200 on Get.
  EXPECT_GE(fake_call::LastCall().deadline, before + absl::Milliseconds(200));
  EXPECT_LE(fake_call::LastCall().deadline, after + absl::Milliseconds(200));
  EXPECT_EQ(context.deadline(), fake_call::LastCall().deadline);
}

TEST(GeneratedStub, ServiceDefaultTimeoutAppliesToMethodsWithoutTheirOwn) {
  fake_call::Reset(absl::OkStatus());
  Store::Stub stub(NoChannel());
  rdmarpc::ClientContext context;
  golden::v1::Response response;
  const absl::Time before = absl::Now();
  ASSERT_TRUE(stub.async_(&context, golden::v1::Request(), &response).ok());
  const absl::Time after = absl::Now();
  // (rdmarpc.service).default_timeout_ms = 1000 on Store.
  EXPECT_GE(fake_call::LastCall().deadline, before + absl::Milliseconds(1000));
  EXPECT_LE(fake_call::LastCall().deadline, after + absl::Milliseconds(1000));
}

TEST(GeneratedStub, CallerDeadlineWinsOverDefault) {
  fake_call::Reset(absl::OkStatus());
  Store::Stub stub(NoChannel());
  rdmarpc::ClientContext context;
  const absl::Time deadline = absl::FromUnixSeconds(4102444800);  // 2100-01-01
  context.set_deadline(deadline);
  golden::v1::Response response;
  ASSERT_TRUE(stub.Get(&context, golden::v1::Request(), &response).ok());
  EXPECT_EQ(fake_call::LastCall().deadline, deadline);
}

TEST(GeneratedStub, NoDeadlineWithoutOption) {
  fake_call::Reset(absl::OkStatus());
  Admin::Stub stub(NoChannel());
  rdmarpc::ClientContext context;
  golden::v1::Status response;
  ASSERT_TRUE(stub.Ping(&context, golden::common::Ping(), &response).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Admin/Ping");
  EXPECT_EQ(fake_call::LastCall().deadline, absl::InfiniteFuture());
}

TEST(GeneratedStub, PassesTheIdlRetryPolicyOfTheMethod) {
  fake_call::Reset(absl::OkStatus());
  Store::Stub store(NoChannel());
  rdmarpc::ClientContext c1, c2, c3;
  golden::v1::Request request;
  golden::v1::Response response;
  ASSERT_TRUE(store.delete_(&c1, request, &response).ok());
  EXPECT_EQ(fake_call::LastCall().idl_config_json,
            R"({"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", )"
            R"("maxBackoff": "0.005s", "backoffMultiplier": 1.5, )"
            R"("retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}})");
  store.async()->delete_(&c2, request, &response, [](absl::Status) {});
  EXPECT_TRUE(fake_call::LastCall().async);
  EXPECT_NE(fake_call::LastCall().idl_config_json.find("\"maxAttempts\": 3"), std::string::npos);
  // A method without a policy passes none.
  ASSERT_TRUE(store.NewStub_(&c3, request, &response).ok());
  EXPECT_EQ(fake_call::LastCall().idl_config_json, "");
}

TEST(GeneratedStub, PassesTheServiceHedgingPolicyToEveryMethod) {
  fake_call::Reset(absl::OkStatus());
  Admin::Stub admin(NoChannel());
  rdmarpc::ClientContext c1, c2;
  golden::common::Empty empty;
  golden::common::Ping ping;
  ASSERT_TRUE(admin.class_(&c1, empty, &empty).ok());
  const std::string expected =
      R"({"hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "1.500s", )"
      R"("nonFatalStatusCodes": ["UNAVAILABLE"]}})";
  EXPECT_EQ(fake_call::LastCall().idl_config_json, expected);
  ASSERT_TRUE(admin.new_(&c2, ping, &ping).ok());
  EXPECT_EQ(fake_call::LastCall().idl_config_json, expected);
}

TEST(GeneratedStub, MangledMethodsCallTheirWireNames) {
  fake_call::Reset(absl::OkStatus());
  Store::Stub store(NoChannel());
  rdmarpc::ClientContext c1, c2, c3, c4, c5, c6, c7;
  golden::v1::Request request;
  golden::v1::Response response;
  golden::v1::Status status_message;
  golden::common::Empty empty;
  golden::v1::Channel channel_message;

  ASSERT_TRUE(store.delete__(&c1, request, &status_message).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Store/delete");
  ASSERT_TRUE(store.delete_(&c2, request, &response).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Store/delete_");
  ASSERT_TRUE(store.Stub_(&c3, golden::common::Ping(), &empty).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Store/Stub");
  ASSERT_TRUE(store.Service_(&c4, golden::v1::Outer::Inner(), &channel_message).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Store/Service");
  ASSERT_TRUE(store.NewStub_(&c5, request, &response).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Store/NewStub");
  ASSERT_TRUE(store.async_(&c6, request, &response).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Store/async");
  ASSERT_TRUE(store.Store_(&c7, request, &response).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Store/Store");
  EXPECT_EQ(fake_call::LastCall().calls, 7);

  Admin::Stub admin(NoChannel());
  rdmarpc::ClientContext c8, c9;
  golden::common::Ping ping;
  ASSERT_TRUE(admin.class_(&c8, empty, &empty).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Admin/class");
  ASSERT_TRUE(admin.new_(&c9, ping, &ping).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Admin/new");
}

TEST(GeneratedStub, MethodsNamedLikeTheGeneratedHelpersStillFindThem) {
  using Svc = ::edge::helpers::Svc;
  fake_call::Reset(absl::OkStatus());
  Svc::Stub stub(nullptr);
  ::edge::helpers::M response;
  // Each call reaches its own wire name; only the first carries the IDL's
  // retry policy (the helper SvcMethodConfig0 is its).
  ::rdmarpc::ClientContext c1, c2, c3;
  ASSERT_TRUE(stub.Retried(&c1, {}, &response).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/edge.helpers.Svc/Retried");
  EXPECT_NE(fake_call::LastCall().idl_config_json.find("retryPolicy"), std::string::npos);
  ASSERT_TRUE(stub.SvcMethodConfig0(&c2, {}, &response).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/edge.helpers.Svc/SvcMethodConfig0");
  EXPECT_EQ(fake_call::LastCall().idl_config_json, "");
  ASSERT_TRUE(stub.kSvcMethodNames(&c3, {}, &response).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/edge.helpers.Svc/kSvcMethodNames");
  EXPECT_EQ(fake_call::LastCall().calls, 3);
}

TEST(GeneratedStub, AsyncCallRunsDoneOnceWithTheStatus) {
  fake_call::Reset(absl::DeadlineExceededError("fake: too late"));
  std::unique_ptr<Store::Stub> stub = Store::NewStub(NoChannel());
  rdmarpc::ClientContext context;
  golden::v1::Request request;
  golden::v1::Response response;
  int done_runs = 0;
  std::optional<absl::Status> result;
  const absl::Time before = absl::Now();
  stub->async()->Get(&context, request, &response, [&](absl::Status status) {
    ++done_runs;
    result = std::move(status);
  });
  const absl::Time after = absl::Now();
  EXPECT_EQ(done_runs, 1);
  EXPECT_EQ(result, absl::DeadlineExceededError("fake: too late"));
  const fake_call::RecordedCall& call = fake_call::LastCall();
  EXPECT_TRUE(call.async);
  EXPECT_EQ(call.method, "/golden.v1.Store/Get");
  EXPECT_EQ(call.response, &response);
  EXPECT_GE(call.deadline, before + absl::Milliseconds(200));
  EXPECT_LE(call.deadline, after + absl::Milliseconds(200));
}

TEST(GeneratedStub, AsyncMangledMethodsCallTheirWireNames) {
  fake_call::Reset(absl::OkStatus());
  Store::Stub stub(NoChannel());
  rdmarpc::ClientContext c1, c2;
  golden::v1::Request request;
  golden::v1::Response response;
  int done_runs = 0;
  stub.async()->async_(&c1, request, &response, [&](absl::Status) { ++done_runs; });
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Store/async");
  stub.async()->Store_(&c2, request, &response, [&](absl::Status) { ++done_runs; });
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Store/Store");
  EXPECT_EQ(done_runs, 2);
}

TEST(GeneratedStub, CallsThroughStubInterfaceReachTheRuntime) {
  fake_call::Reset(absl::ResourceExhaustedError("fake: full"));
  std::unique_ptr<Store::Stub> owned = Store::NewStub(NoChannel());
  Store::StubInterface* stub = owned.get();
  rdmarpc::ClientContext c1, c2;
  golden::v1::Request request;
  golden::v1::Response response;
  EXPECT_EQ(stub->Peek(&c1, request, &response), absl::ResourceExhaustedError("fake: full"));
  EXPECT_FALSE(fake_call::LastCall().async);
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Store/Peek");
  EXPECT_EQ(fake_call::LastCall().request, &request);

  Store::StubInterface::async_interface* async = stub->async();
  EXPECT_EQ(async, owned->async());
  std::optional<absl::Status> result;
  async->Peek(&c2, request, &response, [&](absl::Status status) { result = std::move(status); });
  EXPECT_EQ(result, absl::ResourceExhaustedError("fake: full"));
  EXPECT_TRUE(fake_call::LastCall().async);
  EXPECT_EQ(fake_call::LastCall().method, "/golden.v1.Store/Peek");
  EXPECT_EQ(fake_call::LastCall().response, &response);
  EXPECT_EQ(fake_call::LastCall().calls, 2);
}

TEST(GeneratedStub, FileWithoutPackage) {
  fake_call::Reset(absl::OkStatus());
  ::Notes::Stub stub(NoChannel());
  rdmarpc::ClientContext context;
  ::Note note;
  ASSERT_TRUE(stub.Add(&context, note, &note).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/Notes/Add");
  EXPECT_NE(::Bare::NewStub(NoChannel()), nullptr);
}

}  // namespace
