// What the generator learns about a service (compiler/service_model.h):
// C++ names, wire names, default deadlines and run_inline from
// rdmarpc/options.proto, comments, and which methods stream.
#include "service_model.h"

#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "gtest/gtest.h"
#include "rdmarpc/options.pb.h"

namespace rdmarpc {
namespace compiler {
namespace {

using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;
using google::protobuf::FileDescriptorProto;
using google::protobuf::MethodDescriptorProto;
using google::protobuf::ServiceDescriptorProto;

FileDescriptorProto BaseFile() {
  FileDescriptorProto file;
  file.set_name("a/b.proto");
  file.set_package("a.b");
  file.set_syntax("proto3");
  file.add_message_type()->set_name("Req");
  file.add_message_type()->add_nested_type()->set_name("Inner");
  file.mutable_message_type(1)->set_name("Resp");
  return file;
}

MethodDescriptorProto* AddMethod(ServiceDescriptorProto* service, const std::string& name,
                                 const std::string& input, const std::string& output) {
  MethodDescriptorProto* method = service->add_method();
  method->set_name(name);
  method->set_input_type(input);
  method->set_output_type(output);
  return method;
}

TEST(BuildServiceModel, NamesTypesAndWireNames) {
  FileDescriptorProto proto = BaseFile();
  ServiceDescriptorProto* service = proto.add_service();
  service->set_name("S");
  AddMethod(service, "Get", ".a.b.Req", ".a.b.Resp");
  AddMethod(service, "delete", ".a.b.Resp.Inner", ".a.b.Req");
  DescriptorPool pool;
  const FileDescriptor* file = pool.BuildFile(proto);
  ASSERT_NE(file, nullptr);

  ServiceModel model = BuildServiceModel(file->service(0));
  EXPECT_EQ(model.name, "S");
  EXPECT_EQ(model.full_name, "a.b.S");
  EXPECT_EQ(model.qualified_class, "::a::b::S");
  EXPECT_EQ(model.mock_class, "MockSStub");
  ASSERT_EQ(model.methods.size(), 2u);
  EXPECT_EQ(model.methods[0].kind, MethodKind::kUnary);
  EXPECT_EQ(model.methods[0].cpp_name, "Get");
  EXPECT_EQ(model.methods[0].full_name, "/a.b.S/Get");
  EXPECT_EQ(model.methods[0].request, "::a::b::Req");
  EXPECT_EQ(model.methods[0].response, "::a::b::Resp");
  EXPECT_EQ(model.methods[1].proto_name, "delete");
  EXPECT_EQ(model.methods[1].cpp_name, "delete_");
  EXPECT_EQ(model.methods[1].full_name, "/a.b.S/delete");
  EXPECT_EQ(model.methods[1].request, "::a::b::Resp_Inner");
  EXPECT_EQ(model.methods[1].request_proto, "a.b.Resp.Inner");
}

TEST(BuildServiceModel, MethodTimeoutWinsOverServiceTimeout) {
  FileDescriptorProto proto = BaseFile();
  ServiceDescriptorProto* service = proto.add_service();
  service->set_name("S");
  service->mutable_options()->MutableExtension(rdmarpc::service)->set_default_timeout_ms(1000);
  AddMethod(service, "Own", ".a.b.Req", ".a.b.Resp")
      ->mutable_options()
      ->MutableExtension(rdmarpc::method)
      ->set_default_timeout_ms(200);
  AddMethod(service, "Inherited", ".a.b.Req", ".a.b.Resp");
  DescriptorPool pool;
  const FileDescriptor* file = pool.BuildFile(proto);
  ASSERT_NE(file, nullptr);

  ServiceModel model = BuildServiceModel(file->service(0));
  ASSERT_EQ(model.methods.size(), 2u);
  EXPECT_EQ(model.methods[0].default_timeout_ms, 200u);
  EXPECT_EQ(model.methods[0].default_timeout_source, "(rdmarpc.method)");
  EXPECT_EQ(model.methods[1].default_timeout_ms, 1000u);
  EXPECT_EQ(model.methods[1].default_timeout_source, "(rdmarpc.service)");
}

TEST(BuildServiceModel, NoTimeoutWithoutOptions) {
  FileDescriptorProto proto = BaseFile();
  ServiceDescriptorProto* service = proto.add_service();
  service->set_name("S");
  AddMethod(service, "Get", ".a.b.Req", ".a.b.Resp");
  DescriptorPool pool;
  const FileDescriptor* file = pool.BuildFile(proto);
  ASSERT_NE(file, nullptr);

  ServiceModel model = BuildServiceModel(file->service(0));
  EXPECT_EQ(model.methods[0].default_timeout_ms, 0u);
  EXPECT_EQ(model.methods[0].default_timeout_source, "");
}

TEST(BuildServiceModel, RunInlineFromMethodElseService) {
  FileDescriptorProto proto = BaseFile();
  ServiceDescriptorProto* plain = proto.add_service();
  plain->set_name("Plain");
  AddMethod(plain, "Default", ".a.b.Req", ".a.b.Resp");
  AddMethod(plain, "Inline", ".a.b.Req", ".a.b.Resp")
      ->mutable_options()
      ->MutableExtension(rdmarpc::method)
      ->set_run_inline(true);
  ServiceDescriptorProto* fast = proto.add_service();
  fast->set_name("Fast");
  fast->mutable_options()->MutableExtension(rdmarpc::service)->set_run_inline(true);
  AddMethod(fast, "Inherited", ".a.b.Req", ".a.b.Resp");
  // Set, to false: wins over the service's true.
  AddMethod(fast, "OptedOut", ".a.b.Req", ".a.b.Resp")
      ->mutable_options()
      ->MutableExtension(rdmarpc::method)
      ->set_run_inline(false);
  // Only another option set: run_inline stays unset and the service's applies.
  AddMethod(fast, "OtherOption", ".a.b.Req", ".a.b.Resp")
      ->mutable_options()
      ->MutableExtension(rdmarpc::method)
      ->set_default_timeout_ms(5);
  DescriptorPool pool;
  const FileDescriptor* file = pool.BuildFile(proto);
  ASSERT_NE(file, nullptr);

  ServiceModel plain_model = BuildServiceModel(file->service(0));
  ASSERT_EQ(plain_model.methods.size(), 2u);
  EXPECT_FALSE(plain_model.methods[0].run_inline);
  EXPECT_EQ(plain_model.methods[0].run_inline_source, "");
  EXPECT_TRUE(plain_model.methods[1].run_inline);
  EXPECT_EQ(plain_model.methods[1].run_inline_source, "(rdmarpc.method)");

  ServiceModel fast_model = BuildServiceModel(file->service(1));
  ASSERT_EQ(fast_model.methods.size(), 3u);
  EXPECT_TRUE(fast_model.methods[0].run_inline);
  EXPECT_EQ(fast_model.methods[0].run_inline_source, "(rdmarpc.service)");
  EXPECT_FALSE(fast_model.methods[1].run_inline);
  EXPECT_EQ(fast_model.methods[1].run_inline_source, "(rdmarpc.method)");
  EXPECT_TRUE(fast_model.methods[2].run_inline);
  EXPECT_EQ(fast_model.methods[2].run_inline_source, "(rdmarpc.service)");
}

TEST(BuildServiceModel, LeadingCommentsLoseTrailingBlanks) {
  FileDescriptorProto proto = BaseFile();
  ServiceDescriptorProto* service = proto.add_service();
  service->set_name("S");
  AddMethod(service, "Get", ".a.b.Req", ".a.b.Resp");
  // Path of service 0 is {6, 0}; of its method 0, {6, 0, 2, 0}
  // (descriptor.proto field numbers).
  auto* service_location = proto.mutable_source_code_info()->add_location();
  service_location->add_path(6);
  service_location->add_path(0);
  for (int i = 0; i < 4; ++i) service_location->add_span(0);
  service_location->set_leading_comments(" The S service.  \n\n Second line.\n");
  auto* method_location = proto.mutable_source_code_info()->add_location();
  for (int p : {6, 0, 2, 0}) method_location->add_path(p);
  for (int i = 0; i < 4; ++i) method_location->add_span(0);
  method_location->set_leading_comments(" Gets.\n");
  DescriptorPool pool;
  const FileDescriptor* file = pool.BuildFile(proto);
  ASSERT_NE(file, nullptr);

  ServiceModel model = BuildServiceModel(file->service(0));
  EXPECT_EQ(model.comment_lines,
            (std::vector<std::string>{" The S service.", "", " Second line."}));
  EXPECT_EQ(model.methods[0].comment_lines, (std::vector<std::string>{" Gets."}));
}

TEST(FindStreamingMethod, NamesFirstStreamingMethodAndItsKind) {
  struct Case {
    bool client;
    bool server;
    const char* kind;
  };
  for (const Case& c : {Case{true, false, "client-streaming"}, Case{false, true, "server-streaming"},
                        Case{true, true, "bidi-streaming"}}) {
    FileDescriptorProto proto = BaseFile();
    ServiceDescriptorProto* service = proto.add_service();
    service->set_name("S");
    AddMethod(service, "Unary", ".a.b.Req", ".a.b.Resp");
    MethodDescriptorProto* watch = AddMethod(service, "Watch", ".a.b.Req", ".a.b.Resp");
    watch->set_client_streaming(c.client);
    watch->set_server_streaming(c.server);
    DescriptorPool pool;
    const FileDescriptor* file = pool.BuildFile(proto);
    ASSERT_NE(file, nullptr);
    std::string kind;
    const google::protobuf::MethodDescriptor* method = FindStreamingMethod(file, &kind);
    ASSERT_NE(method, nullptr);
    EXPECT_EQ(method->full_name(), "a.b.S.Watch");
    EXPECT_EQ(kind, c.kind);
  }
}

TEST(FindStreamingMethod, NullWhenAllUnary) {
  FileDescriptorProto proto = BaseFile();
  ServiceDescriptorProto* service = proto.add_service();
  service->set_name("S");
  AddMethod(service, "Get", ".a.b.Req", ".a.b.Resp");
  DescriptorPool pool;
  const FileDescriptor* file = pool.BuildFile(proto);
  ASSERT_NE(file, nullptr);
  std::string kind;
  EXPECT_EQ(FindStreamingMethod(file, &kind), nullptr);
}

}  // namespace
}  // namespace compiler
}  // namespace rdmarpc
