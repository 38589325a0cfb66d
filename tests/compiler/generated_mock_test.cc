// User code unit-tested with the generated gMock stubs
// (golden/golden_test_mock.rdmarpc.pb.h, rdmarpc_generate(... GENERATE_MOCKS)):
// functions that take a Store::StubInterface* run against MockStoreStub, whose
// expectations match the arguments the code passes and answer with a status
// and a response, for the blocking calls and for those reached through
// async().
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "golden/golden_test_mock.rdmarpc.pb.h"
#include "golden/no_package_mock.rdmarpc.pb.h"
#include "golden/service_names_mock.rdmarpc.pb.h"
#include "gtest/gtest.h"

namespace {

using ::golden::v1::Admin;
using ::golden::v1::MockAdminStub;
using ::golden::v1::MockStoreStub;
using ::golden::v1::Store;
using ::testing::_;
// The done callback of a unary async() call: tells its mock from the
// reactor overload's.
const auto kAnyDone = ::testing::A<absl::AnyInvocable<void(absl::Status) &&>>();
using ::testing::AllOf;
using ::testing::DoAll;
using ::testing::NotNull;
using ::testing::Property;
using ::testing::Return;
using ::testing::SetArgPointee;
using ::testing::StrictMock;
using ::testing::Truly;

// ---- the code under test: it only knows StubInterface ----------------------

// Reads `key` with a 50 ms timeout and returns its value plus one.
absl::StatusOr<int64_t> ReadAndIncrement(Store::StubInterface* stub, const std::string& key) {
  rdmarpc::ClientContext context;
  context.set_timeout(absl::Milliseconds(50));
  golden::v1::Request request;
  request.set_key(key);
  golden::v1::Response response;
  absl::Status status = stub->Get(&context, request, &response);
  if (!status.ok()) return status;
  return response.value() + 1;
}

// Starts an asynchronous read of `key`; `result` holds the value, or the
// error, once the call has finished.
class AsyncReader {
 public:
  void Start(Store::StubInterface* stub, const std::string& key) {
    golden::v1::Request request;
    request.set_key(key);
    request.set_note("async");
    stub->async()->Get(&context_, request, &response_, [this](absl::Status status) {
      ++done_runs_;
      if (status.ok()) {
        result_ = response_.value();
      } else {
        result_ = std::move(status);
      }
    });
  }

  const std::optional<absl::StatusOr<int64_t>>& result() const { return result_; }
  int done_runs() const { return done_runs_; }

 private:
  rdmarpc::ClientContext context_;
  golden::v1::Response response_;
  std::optional<absl::StatusOr<int64_t>> result_;
  int done_runs_ = 0;
};

// Deletes `key` through the mangled method delete__ and returns the text the
// server answered.
absl::StatusOr<std::string> Delete(Store::StubInterface* stub, const std::string& key) {
  rdmarpc::ClientContext context;
  golden::v1::Request request;
  request.set_key(key);
  golden::v1::Status response;
  absl::Status status = stub->delete__(&context, request, &response);
  if (!status.ok()) return status;
  return response.text();
}

golden::v1::Response ResponseWithValue(int64_t value) {
  golden::v1::Response response;
  response.set_key("answer");
  response.set_value(value);
  return response;
}

// ---- tests --------------------------------------------------------------------

TEST(GeneratedMock, BlockingCallAnswersWithTheResponseItWasGiven) {
  MockStoreStub stub;
  EXPECT_CALL(stub, Get(Truly([](rdmarpc::ClientContext* context) {
                          return context->deadline() != absl::InfiniteFuture();
                        }),
                        Property(&golden::v1::Request::key, "apples"), NotNull()))
      .WillOnce(DoAll(SetArgPointee<2>(ResponseWithValue(41)), Return(absl::OkStatus())));
  absl::StatusOr<int64_t> value = ReadAndIncrement(&stub, "apples");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, 42);
}

TEST(GeneratedMock, BlockingCallPassesTheMockedErrorThrough) {
  MockStoreStub stub;
  EXPECT_CALL(stub, Get(_, Property(&golden::v1::Request::key, "pears"), _))
      .WillOnce(Return(absl::NotFoundError("no pears")));
  EXPECT_EQ(ReadAndIncrement(&stub, "pears").status(), absl::NotFoundError("no pears"));
}

TEST(GeneratedMock, AsyncCallRunsDoneWithTheMockedStatusAndResponse) {
  MockStoreStub stub;
  EXPECT_CALL(*stub.async(), Get(NotNull(),
                                 AllOf(Property(&golden::v1::Request::key, "plums"),
                                       Property(&golden::v1::Request::note, "async")),
                                 NotNull(), kAnyDone))
      .WillOnce([](rdmarpc::ClientContext*, const golden::v1::Request&,
                   golden::v1::Response* response,
                   absl::AnyInvocable<void(absl::Status) &&> done) {
        *response = ResponseWithValue(7);
        std::move(done)(absl::OkStatus());
      });
  AsyncReader reader;
  reader.Start(&stub, "plums");
  EXPECT_EQ(reader.done_runs(), 1);
  ASSERT_TRUE(reader.result().has_value());
  ASSERT_TRUE(reader.result()->ok()) << reader.result()->status();
  EXPECT_EQ(**reader.result(), 7);
}

TEST(GeneratedMock, AsyncCallCanFinishLater) {
  MockStoreStub stub;
  // The mock keeps `done`, as a channel engine thread would, and the test
  // runs it afterwards.
  absl::AnyInvocable<void(absl::Status) &&> saved_done;
  EXPECT_CALL(*stub.async(), Get(_, Property(&golden::v1::Request::key, "figs"), _, kAnyDone))
      .WillOnce([&saved_done](rdmarpc::ClientContext*, const golden::v1::Request&,
                              golden::v1::Response*,
                              absl::AnyInvocable<void(absl::Status) &&> done) {
        saved_done = std::move(done);
      });
  AsyncReader reader;
  reader.Start(&stub, "figs");
  EXPECT_EQ(reader.done_runs(), 0);
  EXPECT_FALSE(reader.result().has_value());
  ASSERT_TRUE(saved_done);
  std::move(saved_done)(absl::DeadlineExceededError("fake: too late"));
  EXPECT_EQ(reader.done_runs(), 1);
  ASSERT_TRUE(reader.result().has_value());
  EXPECT_EQ(reader.result()->status(), absl::DeadlineExceededError("fake: too late"));
}

TEST(GeneratedMock, MangledMethodsAreMockedUnderTheirCppNames) {
  MockStoreStub stub;
  golden::v1::Status deleted;
  deleted.set_code(0);
  deleted.set_text("deleted cherries");
  EXPECT_CALL(stub, delete__(_, Property(&golden::v1::Request::key, "cherries"), NotNull()))
      .WillOnce(DoAll(SetArgPointee<2>(deleted), Return(absl::OkStatus())));
  absl::StatusOr<std::string> text = Delete(&stub, "cherries");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "deleted cherries");
}

TEST(GeneratedMock, StrictMockOfAnotherService) {
  // Mock<S>Stub is not final, so gMock's NiceMock and StrictMock wrap it.
  StrictMock<MockAdminStub> admin;
  golden::common::Ping echoed;
  echoed.set_text("pong");
  EXPECT_CALL(admin, new_(_, Property(&golden::common::Ping::text, "ping"), NotNull()))
      .WillOnce(DoAll(SetArgPointee<2>(echoed), Return(absl::OkStatus())));
  Admin::StubInterface* stub = &admin;
  rdmarpc::ClientContext context;
  golden::common::Ping request;
  request.set_text("ping");
  golden::common::Ping response;
  EXPECT_TRUE(stub->new_(&context, request, &response).ok());
  EXPECT_EQ(response.text(), "pong");
}

TEST(GeneratedMock, FileWithoutPackageHasGlobalMocks) {
  ::MockNotesStub notes;
  ::Note added;
  added.set_text("noted");
  // A generic lambda, as in the mock header's usage comment.
  EXPECT_CALL(*notes.async(), Add(_, Property(&::Note::text, "note"), NotNull(), kAnyDone))
      .WillOnce([&added](auto*, const auto&, auto* response, auto done) {
        *response = added;
        std::move(done)(absl::OkStatus());
      });
  ::Notes::StubInterface* stub = &notes;
  rdmarpc::ClientContext context;
  ::Note request;
  request.set_text("note");
  ::Note response;
  std::optional<absl::Status> result;
  stub->async()->Add(&context, request, &response,
                     [&result](absl::Status status) { result = std::move(status); });
  EXPECT_EQ(result, absl::OkStatus());
  EXPECT_EQ(response.text(), "noted");

  // A service without methods still has a mock, with an empty async().
  ::MockBareStub bare;
  EXPECT_NE(static_cast<::Bare::StubInterface*>(&bare)->async(), nullptr);
}

// Mock<S>Stub is named after the .proto name of S and steps aside from a
// message of the same name (service_names.proto).
static_assert(std::is_base_of_v<::golden::names::Stub_::StubInterface,
                                ::golden::names::MockStubStub>);
static_assert(std::is_base_of_v<::golden::names::delete_::StubInterface,
                                ::golden::names::MockdeleteStub_>);
static_assert(std::is_base_of_v<::google::protobuf::Message, ::golden::names::MockdeleteStub>);

TEST(GeneratedMock, ServiceNamedStubInterfaceIsMockedUnderMangledNames) {
  ::golden::names::MockStubInterfaceStub mock;
  golden::names::M answer;
  answer.set_text("mangled");
  EXPECT_CALL(mock, StubInterface__(_, _, NotNull()))
      .WillOnce(DoAll(SetArgPointee<2>(answer), Return(absl::OkStatus())));
  EXPECT_CALL(mock, async_interface_(_, _, _)).WillOnce(Return(absl::AbortedError("second")));
  ::golden::names::StubInterface_::StubInterface* stub = &mock;
  rdmarpc::ClientContext c1, c2;
  golden::names::M response;
  EXPECT_TRUE(stub->StubInterface__(&c1, golden::names::M(), &response).ok());
  EXPECT_EQ(response.text(), "mangled");
  EXPECT_EQ(stub->async_interface_(&c2, golden::names::M(), &response),
            absl::AbortedError("second"));
}

}  // namespace
