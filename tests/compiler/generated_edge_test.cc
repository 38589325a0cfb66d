// Generated code for unusual but valid .proto files (edge/*.proto) compiles
// with -Wall -Wextra -Werror, gMock stubs included, and uses the right wire
// names and stream kinds.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "edge/clashes.rdmarpc.pb.h"
#include "edge/clashes_mock.rdmarpc.pb.h"
#include "edge/comment_bytes.rdmarpc.pb.h"
#include "edge/global_names.rdmarpc.pb.h"
#include "edge/packaged.rdmarpc.pb.h"
#include "edge/streaming.rdmarpc.pb.h"
#include "edge/streaming_mock.rdmarpc.pb.h"
#include "fake_stream_call.h"
#include "fake_unary_call.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

TEST(GeneratedEdge, GlobalServiceNamedLikeANamespaceIsMangled) {
  EXPECT_EQ(std::string(::rdmarpc_::service_full_name), "rdmarpc");
  EXPECT_EQ(std::string(::std_::service_full_name), "std");
  EXPECT_EQ(std::string(::absl_::service_full_name), "absl");
  fake_call::Reset(absl::OkStatus());
  auto stub = ::rdmarpc_::NewStub(nullptr);
  rdmarpc::ClientContext context;
  google::protobuf::Empty response;
  EXPECT_TRUE(stub->delete_(&context, Thing(), &response).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/rdmarpc/delete");
}

TEST(GeneratedEdge, PackageComponentNamedRdmarpc) {
  using Svc = ::edge::rdmarpc::v1::rdmarpc;
  EXPECT_EQ(std::string(Svc::service_full_name), "edge.rdmarpc.v1.rdmarpc");
  fake_call::Reset(absl::OkStatus());
  Svc::Stub stub(nullptr);
  rdmarpc::ClientContext context;
  Thing::Part part;
  EXPECT_TRUE(stub.Part(&context, Thing::Part(), &part).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/edge.rdmarpc.v1.rdmarpc/Part");
  Svc::Service service;
  google::protobuf::Empty empty;
  EXPECT_EQ(service.Touch(nullptr, Thing(), &empty).code(), absl::StatusCode::kUnimplemented);
}

using ::rdmarpc::internal::RpcKind;

std::vector<RpcKind> Kinds(const ::rdmarpc::Service& service) {
  std::vector<RpcKind> kinds;
  for (const auto& handler : service.methods()) kinds.push_back(handler->kind());
  return kinds;
}

TEST(GeneratedEdge, Proto2StreamingInAPackageWithARdmarpcComponent) {
  using Svc = ::edge::rdmarpc::v2::rdmarpc;
  using ::edge::rdmarpc::v2::Chunk;
  Svc::Service service;
  EXPECT_EQ(Kinds(service), (std::vector<RpcKind>{RpcKind::kUnary, RpcKind::kServerStreaming,
                                                  RpcKind::kClientStreaming,
                                                  RpcKind::kBidiStreaming}));
  EXPECT_EQ(service.methods()[3]->full_name(), "/edge.rdmarpc.v2.rdmarpc/Sync");

  fake_stream::Reset({}, absl::OkStatus());
  Svc::Stub stub(nullptr);
  ::rdmarpc::ClientContext c1, c2, c3;
  Chunk chunk;
  chunk.set_data("abc");
  auto reader = stub.Download(&c1, chunk);
  EXPECT_EQ(fake_stream::LastStream().method, "/edge.rdmarpc.v2.rdmarpc/Download");
  EXPECT_EQ(fake_stream::LastStream().first, chunk.SerializeAsString());
  auto writer = stub.Upload(&c2, &chunk);
  EXPECT_EQ(fake_stream::LastStream().kind, RpcKind::kClientStreaming);
  auto sync = stub.Sync(&c3);
  EXPECT_EQ(fake_stream::LastStream().kind, RpcKind::kBidiStreaming);
  EXPECT_TRUE(sync->Write(Thing()));
  ::Thing::Part part;
  EXPECT_FALSE(sync->Read(&part));
  EXPECT_TRUE(sync->Finish().ok());
}

TEST(GeneratedEdge, StreamingMethodsNamedLikeGeneratedParameters) {
  using ::edge::rdmarpc::v2::Chunk;
  using ::edge::rdmarpc::v2::Params;
  Params::Service service;
  std::vector<std::string> names;
  for (const auto& handler : service.methods()) names.push_back(handler->full_name());
  EXPECT_EQ(names, (std::vector<std::string>{
                       "/edge.rdmarpc.v2.Params/request", "/edge.rdmarpc.v2.Params/writer",
                       "/edge.rdmarpc.v2.Params/reader", "/edge.rdmarpc.v2.Params/response",
                       "/edge.rdmarpc.v2.Params/stream", "/edge.rdmarpc.v2.Params/context"}));
  for (size_t i = 0; i < service.methods().size(); ++i) {
    ::rdmarpc::internal::ServerStreamState state;
    state.incoming.push_back(std::string());  // an empty message parses as either type
    ::rdmarpc::internal::ServerStream stream(&state);
    ::rdmarpc::ServerContext context;
    EXPECT_EQ(service.methods()[i]->InvokeStream(&context, &stream).code(),
              absl::StatusCode::kUnimplemented)
        << names[i];
  }

  fake_stream::Reset({}, absl::OkStatus());
  Params::Stub stub(nullptr);
  ::rdmarpc::ClientContext c1, c2, c3, c4, c5, c6;
  Chunk chunk;
  EXPECT_NE(stub.request(&c1, chunk), nullptr);
  EXPECT_EQ(fake_stream::LastStream().method, "/edge.rdmarpc.v2.Params/request");
  EXPECT_NE(stub.writer(&c2, Thing()), nullptr);
  EXPECT_EQ(fake_stream::LastStream().method, "/edge.rdmarpc.v2.Params/writer");
  EXPECT_NE(stub.reader(&c3, &chunk), nullptr);
  EXPECT_EQ(fake_stream::LastStream().method, "/edge.rdmarpc.v2.Params/reader");
  EXPECT_NE(stub.response(&c4, &chunk), nullptr);
  EXPECT_EQ(fake_stream::LastStream().method, "/edge.rdmarpc.v2.Params/response");
  EXPECT_NE(stub.stream(&c5), nullptr);
  EXPECT_EQ(fake_stream::LastStream().method, "/edge.rdmarpc.v2.Params/stream");
  EXPECT_NE(stub.context(&c6), nullptr);
  EXPECT_EQ(fake_stream::LastStream().method, "/edge.rdmarpc.v2.Params/context");
  EXPECT_EQ(fake_stream::LastStream().opened, 6);

  // Their gMock stubs compile and answer.
  ::edge::rdmarpc::v2::MockParamsStub mock;
  EXPECT_CALL(mock, context(::testing::_)).WillOnce(::testing::Return(::testing::ByMove(nullptr)));
  ::rdmarpc::ClientContext c7;
  EXPECT_EQ(static_cast<Params::StubInterface*>(&mock)->context(&c7), nullptr);
}

// Each unary method of `stub` answers through the fake on its wire name.
template <typename StubT, typename... Calls>
std::vector<std::string> WireNames(StubT* stub, Calls... calls) {
  std::vector<std::string> names;
  ::edge::clash::M request, response;
  for (auto call : {calls...}) {
    ::rdmarpc::ClientContext context;
    EXPECT_TRUE((stub->*call)(&context, request, &response).ok());
    names.push_back(fake_call::LastCall().method);
  }
  return names;
}

TEST(GeneratedEdge, RenamedServicesStepAsideFromMessagesAndEachOther) {
  // service Stub beside message Stub_; service class beside service class_.
  EXPECT_EQ(std::string(::edge::clash::Stub__::service_full_name), "edge.clash.Stub");
  EXPECT_EQ(std::string(::edge::clash::class__::service_full_name), "edge.clash.class");
  EXPECT_EQ(std::string(::edge::clash::class_::service_full_name), "edge.clash.class_");
  EXPECT_EQ(std::string(::edge::clash::CallbackService_::service_full_name),
            "edge.clash.CallbackService");
  EXPECT_EQ(std::string(::edge::clash::EOF_::service_full_name), "edge.clash.EOF");
  ::edge::clash::Stub_ message_keeps_its_name;
  message_keeps_its_name.set_b(1);
  EXPECT_EQ(message_keeps_its_name.b(), 1);

  fake_call::Reset(absl::OkStatus());
  ::edge::clash::class__::Stub cls(nullptr);
  ::edge::clash::class_::Stub cls_(nullptr);
  EXPECT_EQ(WireNames(&cls, &::edge::clash::class__::Stub::Get),
            (std::vector<std::string>{"/edge.clash.class/Get"}));
  EXPECT_EQ(WireNames(&cls_, &::edge::clash::class_::Stub::Get),
            (std::vector<std::string>{"/edge.clash.class_/Get"}));
}

TEST(GeneratedEdge, MethodsNamedLikeGeneratedClassesAndMacrosAreRenamed) {
  using Callback = ::edge::clash::CallbackService_;
  using Eof = ::edge::clash::EOF_;
  fake_call::Reset(absl::OkStatus());
  Callback::Stub callback(nullptr);
  EXPECT_EQ(WireNames(&callback, &Callback::Stub::CallbackService__, &Callback::Stub::Get),
            (std::vector<std::string>{"/edge.clash.CallbackService/CallbackService",
                                      "/edge.clash.CallbackService/Get"}));
  Eof::Stub eof(nullptr);
  EXPECT_EQ(WireNames(&eof, &Eof::Stub::assert_, &Eof::Stub::errno_, &Eof::Stub::NULL_,
                      &Eof::Stub::INT_MAX_, &Eof::Stub::EINVAL_),
            (std::vector<std::string>{"/edge.clash.EOF/assert", "/edge.clash.EOF/errno",
                                      "/edge.clash.EOF/NULL", "/edge.clash.EOF/INT_MAX",
                                      "/edge.clash.EOF/EINVAL"}));
  // The servers' method tables name them too, in .proto order.
  Callback::CallbackService callback_service;
  std::vector<std::string> names;
  for (const auto& handler : callback_service.methods()) names.push_back(handler->full_name());
  EXPECT_EQ(names, (std::vector<std::string>{"/edge.clash.CallbackService/CallbackService",
                                             "/edge.clash.CallbackService/Get"}));
  ::edge::clash::MockEOFStub mock;
  EXPECT_CALL(mock, assert_(::testing::_, ::testing::_, ::testing::_))
      .WillOnce(::testing::Return(absl::NotFoundError("mocked")));
  ::rdmarpc::ClientContext context;
  ::edge::clash::M response;
  EXPECT_EQ(static_cast<Eof::StubInterface*>(&mock)->assert_(&context, {}, &response).code(),
            absl::StatusCode::kNotFound);
}

TEST(GeneratedEdge, CommentsWithCarriageReturnsAndFormFeedsStayComments) {
  // The file compiled (a lone '\r' or a backslash before a form feed in a
  // .proto comment would otherwise end the comment or swallow the next line).
  using Svc = ::edge::bytes::Svc;
  fake_call::Reset(absl::OkStatus());
  Svc::Stub stub(nullptr);
  ::rdmarpc::ClientContext context;
  ::edge::bytes::M response;
  ASSERT_TRUE(stub.Get(&context, {}, &response).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/edge.bytes.Svc/Get");
  ASSERT_TRUE(stub.Put(&context, {}, &response).ok());
  EXPECT_EQ(fake_call::LastCall().method, "/edge.bytes.Svc/Put");
}

}  // namespace
