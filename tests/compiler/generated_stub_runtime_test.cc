// Generated stubs and services (golden/golden_test.proto) on the real
// runtime: a call to a closed port fails with UNAVAILABLE, and a call to a
// local server reaches the user's override. Built only when the target
// `rdmarpc` exists. Loopback only.
#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "golden/golden_test.rdmarpc.pb.h"
#include "gtest/gtest.h"

namespace {

using ::golden::v1::Admin;
using ::golden::v1::Store;

// Port 1 (tcpmux) has no listener on test machines.
constexpr char kClosedPort[] = "127.0.0.1:1";

TEST(GeneratedStubOnChannel, ClosedPortGivesUnavailable) {
  absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel = rdmarpc::CreateChannel(kClosedPort);
  ASSERT_TRUE(channel.ok()) << channel.status();
  std::unique_ptr<Admin::Stub> stub = Admin::NewStub(*channel);
  rdmarpc::ClientContext context;
  context.set_timeout(absl::Seconds(20));
  golden::v1::Status response;
  absl::Status status = stub->Ping(&context, golden::common::Ping(), &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
}

TEST(GeneratedStubOnChannel, AsyncClosedPortGivesUnavailable) {
  absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel = rdmarpc::CreateChannel(kClosedPort);
  ASSERT_TRUE(channel.ok()) << channel.status();
  std::unique_ptr<Admin::Stub> stub = Admin::NewStub(*channel);
  rdmarpc::ClientContext context;
  context.set_timeout(absl::Seconds(20));
  golden::v1::Status response;
  absl::Notification done;
  std::optional<absl::Status> result;
  stub->async()->Ping(&context, golden::common::Ping(), &response, [&](absl::Status status) {
    result = std::move(status);
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->code(), absl::StatusCode::kUnavailable) << *result;
}

class StoreImpl final : public Store::Service {
 public:
  absl::Status Get(rdmarpc::ServerContext*, const golden::v1::Request& request,
                   golden::v1::Response* response) override {
    response->set_key(request.key() + "!");
    response->set_value(request.value() + 1);
    return absl::OkStatus();
  }
  absl::Status delete__(rdmarpc::ServerContext*, const golden::v1::Request& request,
                        golden::v1::Status* response) override {
    response->set_code(3);
    response->set_text("deleted " + request.key());
    return absl::OkStatus();
  }
  // UNAVAILABLE for the first `fail_first` calls (its IDL retry policy
  // retries that code, three attempts in all).
  absl::Status delete_(rdmarpc::ServerContext*, const golden::v1::Request& request,
                       golden::v1::Response* response) override {
    if (delete_calls.fetch_add(1) < fail_first) return absl::UnavailableError("not yet");
    response->set_key(request.key());
    return absl::OkStatus();
  }
  std::atomic<int> delete_calls{0};
  int fail_first = 0;
};

TEST(GeneratedStubOnChannel, IdlRetryPolicyRetriesUpToItsMaxAttempts) {
  StoreImpl impl;
  rdmarpc::Server server;
  ASSERT_TRUE(server.AddService(&impl).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  auto channel = rdmarpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()));
  ASSERT_TRUE(channel.ok()) << channel.status();
  std::unique_ptr<Store::Stub> store = Store::NewStub(*channel);
  golden::v1::Request request;
  request.set_key("k");
  {
    impl.fail_first = 2;
    rdmarpc::ClientContext context;
    golden::v1::Response response;
    ASSERT_TRUE(store->delete_(&context, request, &response).ok());
    EXPECT_EQ(response.key(), "k");
    EXPECT_EQ(impl.delete_calls.load(), 3);
  }
  {
    impl.delete_calls = 0;
    impl.fail_first = 10;
    rdmarpc::ClientContext context;
    golden::v1::Response response;
    absl::Status status = store->delete_(&context, request, &response);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_EQ(impl.delete_calls.load(), 3);
  }
  server.Shutdown(absl::Seconds(1));
  server.Wait();
}

TEST(GeneratedStubOnChannel, CallsReachOverridesOnLocalServer) {
  StoreImpl service;
  rdmarpc::Server server;
  ASSERT_TRUE(server.AddService(&service).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel =
      rdmarpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()));
  ASSERT_TRUE(channel.ok()) << channel.status();
  std::unique_ptr<Store::Stub> store = Store::NewStub(*channel);

  golden::v1::Request request;
  request.set_key("k");
  request.set_value(41);
  {
    rdmarpc::ClientContext context;
    context.set_timeout(absl::Seconds(20));
    golden::v1::Response response;
    ASSERT_TRUE(store->Get(&context, request, &response).ok());
    EXPECT_EQ(response.key(), "k!");
    EXPECT_EQ(response.value(), 42);
  }
  {
    // Keyword method: C++ name delete__, wire name "delete".
    rdmarpc::ClientContext context;
    context.set_timeout(absl::Seconds(20));
    golden::v1::Status response;
    ASSERT_TRUE(store->delete__(&context, request, &response).ok());
    EXPECT_EQ(response.code(), 3);
    EXPECT_EQ(response.text(), "deleted k");
  }
  {
    // Not overridden: the generated default's status crosses the wire.
    rdmarpc::ClientContext context;
    context.set_timeout(absl::Seconds(20));
    golden::v1::Response response;
    absl::Status status = store->Store_(&context, request, &response);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
    EXPECT_EQ(status.message(), "method /golden.v1.Store/Store is not implemented by this server");
  }
  {
    // A service the server does not have.
    std::unique_ptr<Admin::Stub> admin = Admin::NewStub(*channel);
    rdmarpc::ClientContext context;
    context.set_timeout(absl::Seconds(20));
    golden::v1::Status response;
    absl::Status status = admin->Ping(&context, golden::common::Ping(), &response);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  }
  server.Shutdown(absl::Seconds(1));
  server.Wait();
}

}  // namespace
