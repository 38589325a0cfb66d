// Generated code for unusual but valid .proto files (edge/*.proto) compiles
// with -Wall -Wextra -Werror and uses the right wire names.
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "edge/global_names.rdmarpc.pb.h"
#include "edge/packaged.rdmarpc.pb.h"
#include "fake_unary_call.h"
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

}  // namespace
