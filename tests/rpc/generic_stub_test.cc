// GenericStub: calls by method name with google::protobuf::DynamicMessage
// (types known only at run time), all four kinds, against the test
// services over softrdma.
#include "rdmarpc/generic_stub.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "rpc_test.pb.h"
#include "tests/rpc/stream_service.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

namespace pb = google::protobuf;

class GenericStubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.AddService(&echo_).ok());
    ASSERT_TRUE(server_.AddService(&streams_).ok());
    ASSERT_TRUE(server_.Start("127.0.0.1:0").ok());
    auto channel = CreateChannel(absl::StrCat("127.0.0.1:", server_.port()));
    ASSERT_TRUE(channel.ok()) << channel.status();
    stub_ = std::make_unique<GenericStub>(*channel);
  }

  // A DynamicMessage of `type`'s descriptor, parsed from `text`.
  std::unique_ptr<pb::Message> Make(const pb::Descriptor* type, const std::string& text = "") {
    std::unique_ptr<pb::Message> m(factory_.GetPrototype(type)->New());
    EXPECT_TRUE(pb::TextFormat::ParseFromString(text, m.get()));
    return m;
  }
  static std::string Text(const pb::Message& m) {
    std::string out;
    pb::TextFormat::Printer printer;
    printer.SetSingleLineMode(true);
    printer.PrintToString(m, &out);
    return out;
  }

  const pb::Descriptor* request_type_ = EchoRequest::descriptor();
  const pb::Descriptor* response_type_ = EchoResponse::descriptor();
  pb::DynamicMessageFactory factory_;
  EchoService echo_;
  StreamService streams_;
  Server server_;
  std::unique_ptr<GenericStub> stub_;
};

TEST_F(GenericStubTest, UnaryCallWithDynamicMessages) {
  auto request = Make(request_type_, "text: \"hi\"");
  auto response = Make(response_type_);
  ClientContext context;
  ASSERT_TRUE(stub_->UnaryCall(&context, kEchoMethod, *request, response.get()).ok());
  EXPECT_EQ(Text(*response), "text: \"hi\" ");
}

TEST_F(GenericStubTest, UnaryCallReturnsTheHandlersStatus) {
  auto request = Make(request_type_, "text: \"fail\"");
  auto response = Make(response_type_);
  ClientContext context;
  const absl::Status status = stub_->UnaryCall(&context, kEchoMethod, *request, response.get());
  EXPECT_EQ(status, absl::NotFoundError("asked to fail"));
}

TEST_F(GenericStubTest, UnknownMethodIsUnimplemented) {
  auto request = Make(request_type_);
  auto response = Make(response_type_);
  ClientContext context;
  EXPECT_EQ(stub_->UnaryCall(&context, "/rdmarpc.test.EchoService/Nope", *request, response.get())
                .code(),
            absl::StatusCode::kUnimplemented);
}

TEST_F(GenericStubTest, UnaryCallToAStreamingMethodIsInternal) {
  auto request = Make(request_type_, "tag: 1");
  auto response = Make(response_type_);
  ClientContext context;
  EXPECT_EQ(stub_->UnaryCall(&context, kExpandMethod, *request, response.get()),
            absl::InternalError("/rdmarpc.test.Streams/Expand is a streaming method on this "
                                "server but was called as a unary call"));
}

TEST_F(GenericStubTest, ServerStreamingCallReadsEveryMessage) {
  auto request = Make(request_type_, "tag: 3");
  ClientContext context;
  auto reader = stub_->ServerStreamingCall(&context, kExpandMethod, *request);
  auto response = Make(response_type_);
  std::string seen;
  while (reader->Read(response.get())) absl::StrAppend(&seen, Text(*response), "|");
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(seen, "text: \"0\" |text: \"1\" |text: \"2\" |");
}

TEST_F(GenericStubTest, ClientStreamingCallGetsOneResponse) {
  auto response = Make(response_type_);
  ClientContext context;
  auto writer = stub_->ClientStreamingCall(&context, kCollectMethod, response.get());
  for (const char* data : {"a", "b", "c"}) {
    ASSERT_TRUE(writer->Write(*Make(request_type_, absl::StrCat("data: \"", data, "\""))));
  }
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(Text(*response), "text: \"3\" data: \"abc\" ");
}

TEST_F(GenericStubTest, BidiStreamingCallEchoesInOrder) {
  ClientContext context;
  auto stream = stub_->BidiStreamingCall(&context, kChatMethod);
  auto response = Make(response_type_);
  for (const char* text : {"x", "y"}) {
    ASSERT_TRUE(stream->Write(*Make(request_type_, absl::StrCat("text: \"", text, "\""))));
    ASSERT_TRUE(stream->Read(response.get()));
    EXPECT_EQ(Text(*response), absl::StrCat("text: \"", text, "\" "));
  }
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_FALSE(stream->Read(response.get()));
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
