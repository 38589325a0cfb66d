// The server features of TestServiceImpl that no interop case exercises
// (HalfDuplexCall, interval_us, Echo Status on streams, the refusals),
// served in-process on 127.0.0.1 and called through the generated stub.
#include "test_service_impl.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/testing/empty.pb.h"
#include "grpc/testing/messages.pb.h"
#include "grpc/testing/test.rdmarpc.pb.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"

namespace rdmarpc_interop {
namespace {

using grpc::testing::SimpleRequest;
using grpc::testing::SimpleResponse;
using grpc::testing::StreamingInputCallRequest;
using grpc::testing::StreamingInputCallResponse;
using grpc::testing::StreamingOutputCallRequest;
using grpc::testing::StreamingOutputCallResponse;

class TestServiceImplTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.AddService(&service_).ok());
    ASSERT_TRUE(server_.Start("127.0.0.1:0").ok());
    auto channel = rdmarpc::CreateChannel(absl::StrCat("127.0.0.1:", server_.port()));
    ASSERT_TRUE(channel.ok()) << channel.status();
    channel_ = *channel;
    stub_ = grpc::testing::TestService::NewStub(channel_);
  }
  void TearDown() override {
    stub_.reset();
    channel_.reset();
    server_.Shutdown();
    server_.Wait();
  }

  static StreamingOutputCallRequest AskFor(std::vector<int> sizes, int interval_us = 0) {
    StreamingOutputCallRequest request;
    for (int size : sizes) {
      auto* params = request.add_response_parameters();
      params->set_size(size);
      params->set_interval_us(interval_us);
    }
    return request;
  }

  TestServiceImpl service_;
  rdmarpc::Server server_;
  std::shared_ptr<rdmarpc::Channel> channel_;
  std::unique_ptr<grpc::testing::TestService::Stub> stub_;
};

TEST_F(TestServiceImplTest, HalfDuplexAnswersEveryRequestInOrderAfterTheHalfClose) {
  rdmarpc::ClientContext context;
  auto stream = stub_->HalfDuplexCall(&context);
  ASSERT_TRUE(stream->Write(AskFor({10, 20})));
  ASSERT_TRUE(stream->Write(AskFor({30})));
  ASSERT_TRUE(stream->WritesDone());
  std::vector<size_t> sizes;
  StreamingOutputCallResponse response;
  while (stream->Read(&response)) sizes.push_back(response.payload().body().size());
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(sizes, (std::vector<size_t>{10, 20, 30}));
}

TEST_F(TestServiceImplTest, StreamingOutputSleepsIntervalUsBeforeEachResponse) {
  rdmarpc::ClientContext context;
  const absl::Time start = absl::Now();
  auto reader = stub_->StreamingOutputCall(&context, AskFor({1, 2, 3}, 20000));
  int responses = 0;
  StreamingOutputCallResponse response;
  while (reader->Read(&response)) ++responses;
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(responses, 3);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(60));
}

TEST_F(TestServiceImplTest, StreamingOutputEndsWithTheEchoedStatusAndNoResponses) {
  rdmarpc::ClientContext context;
  StreamingOutputCallRequest request = AskFor({5});
  request.mutable_response_status()->set_code(5);
  request.mutable_response_status()->set_message("no such thing");
  auto reader = stub_->StreamingOutputCall(&context, request);
  StreamingOutputCallResponse response;
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_EQ(reader->Finish(), absl::NotFoundError("no such thing"));
}

TEST_F(TestServiceImplTest, FullDuplexStopsAtTheRequestWithAResponseStatus) {
  rdmarpc::ClientContext context;
  auto stream = stub_->FullDuplexCall(&context);
  ASSERT_TRUE(stream->Write(AskFor({7})));
  StreamingOutputCallResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.payload().body(), std::string(7, '\0'));
  StreamingOutputCallRequest stop = AskFor({9});
  stop.mutable_response_status()->set_code(9);
  stop.mutable_response_status()->set_message("stop here");
  ASSERT_TRUE(stream->Write(stop));
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish(), absl::FailedPreconditionError("stop here"));
}

TEST_F(TestServiceImplTest, HalfDuplexEndsWithTheEchoedStatus) {
  rdmarpc::ClientContext context;
  auto stream = stub_->HalfDuplexCall(&context);
  StreamingOutputCallRequest request = AskFor({3});
  request.mutable_response_status()->set_code(3);
  request.mutable_response_status()->set_message("bad");
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  StreamingOutputCallResponse response;
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish(), absl::InvalidArgumentError("bad"));
}

TEST_F(TestServiceImplTest, UnaryRefusesARequestThatExpectsCompression) {
  rdmarpc::ClientContext context;
  SimpleRequest request;
  request.mutable_expect_compressed()->set_value(true);
  request.set_response_size(10);
  SimpleResponse response;
  EXPECT_EQ(stub_->UnaryCall(&context, request, &response).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TestServiceImplTest, StreamingInputRefusesARequestThatExpectsCompression) {
  rdmarpc::ClientContext context;
  StreamingInputCallResponse response;
  auto writer = stub_->StreamingInputCall(&context, &response);
  StreamingInputCallRequest request;
  request.mutable_expect_compressed()->set_value(true);
  writer->Write(request);
  EXPECT_EQ(writer->Finish().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TestServiceImplTest, UnaryRefusesAnUnknownResponseTypeAndANegativeSize) {
  {
    rdmarpc::ClientContext context;
    SimpleRequest request;
    request.set_response_type(static_cast<grpc::testing::PayloadType>(7));
    SimpleResponse response;
    EXPECT_EQ(stub_->UnaryCall(&context, request, &response).code(),
              absl::StatusCode::kInvalidArgument);
  }
  rdmarpc::ClientContext context;
  SimpleRequest request;
  request.set_response_size(-1);
  SimpleResponse response;
  EXPECT_EQ(stub_->UnaryCall(&context, request, &response).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TestServiceImplTest, CacheableUnaryCallIsNotImplemented) {
  rdmarpc::ClientContext context;
  SimpleResponse response;
  EXPECT_EQ(stub_->CacheableUnaryCall(&context, SimpleRequest(), &response).code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace rdmarpc_interop
