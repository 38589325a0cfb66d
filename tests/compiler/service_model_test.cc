// What the generator learns about a service (compiler/service_model.h):
// C++ names, wire names, default deadlines and run_inline from
// rdmarpc/options.proto, comments, the kind of each method, and which
// streaming method asks to run inline.
#include "service_model.h"

#include <string>
#include <utility>
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

MethodDescriptorProto* AddStreamingMethod(ServiceDescriptorProto* service, const std::string& name,
                                          bool client, bool server) {
  MethodDescriptorProto* method = AddMethod(service, name, ".a.b.Req", ".a.b.Resp");
  method->set_client_streaming(client);
  method->set_server_streaming(server);
  return method;
}

TEST(BuildServiceModel, KindOfEachMethodFromItsStreamKeywords) {
  FileDescriptorProto proto = BaseFile();
  ServiceDescriptorProto* service = proto.add_service();
  service->set_name("S");
  AddStreamingMethod(service, "Unary", false, false);
  AddStreamingMethod(service, "Watch", false, true);
  AddStreamingMethod(service, "Upload", true, false);
  AddStreamingMethod(service, "Chat", true, true);
  DescriptorPool pool;
  const FileDescriptor* file = pool.BuildFile(proto);
  ASSERT_NE(file, nullptr);

  ServiceModel model = BuildServiceModel(file->service(0));
  ASSERT_EQ(model.methods.size(), 4u);
  EXPECT_EQ(model.methods[0].kind, MethodKind::kUnary);
  EXPECT_EQ(model.methods[1].kind, MethodKind::kServerStreaming);
  EXPECT_EQ(model.methods[2].kind, MethodKind::kClientStreaming);
  EXPECT_EQ(model.methods[3].kind, MethodKind::kBidiStreaming);
  EXPECT_EQ(model.methods[3].full_name, "/a.b.S/Chat");
  EXPECT_STREQ(MethodKindName(model.methods[0].kind), "unary");
  EXPECT_STREQ(MethodKindName(model.methods[1].kind), "server-streaming");
  EXPECT_STREQ(MethodKindName(model.methods[2].kind), "client-streaming");
  EXPECT_STREQ(MethodKindName(model.methods[3].kind), "bidi-streaming");
}

TEST(BuildServiceModel, ServiceRunInlinePassesStreamingMethodsBy) {
  FileDescriptorProto proto = BaseFile();
  ServiceDescriptorProto* service = proto.add_service();
  service->set_name("Fast");
  service->mutable_options()->MutableExtension(rdmarpc::service)->set_run_inline(true);
  service->mutable_options()->MutableExtension(rdmarpc::service)->set_default_timeout_ms(30);
  AddStreamingMethod(service, "Get", false, false);
  AddStreamingMethod(service, "Watch", false, true);
  AddStreamingMethod(service, "Upload", true, false);
  // A streaming method may say false.
  AddStreamingMethod(service, "Chat", true, true)
      ->mutable_options()
      ->MutableExtension(rdmarpc::method)
      ->set_run_inline(false);
  DescriptorPool pool;
  const FileDescriptor* file = pool.BuildFile(proto);
  ASSERT_NE(file, nullptr);

  ServiceModel model = BuildServiceModel(file->service(0));
  EXPECT_TRUE(model.run_inline);
  ASSERT_EQ(model.methods.size(), 4u);
  EXPECT_TRUE(model.methods[0].run_inline);
  EXPECT_EQ(model.methods[0].run_inline_source, "(rdmarpc.service)");
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_FALSE(model.methods[i].run_inline) << model.methods[i].proto_name;
    // The service's default deadline applies to streaming methods too.
    EXPECT_EQ(model.methods[i].default_timeout_ms, 30u) << model.methods[i].proto_name;
    EXPECT_EQ(model.methods[i].default_timeout_source, "(rdmarpc.service)");
  }
  EXPECT_EQ(model.methods[1].run_inline_source, "");
  EXPECT_EQ(model.methods[2].run_inline_source, "");
  EXPECT_EQ(model.methods[3].run_inline_source, "(rdmarpc.method)");
}

TEST(FindInlineStreamingMethod, NamesFirstStreamingMethodThatSetsRunInline) {
  for (const auto& [client, server] : {std::pair{true, false}, std::pair{false, true},
                                       std::pair{true, true}}) {
    FileDescriptorProto proto = BaseFile();
    ServiceDescriptorProto* service = proto.add_service();
    service->set_name("S");
    // A unary method may run inline; a streaming one without the option is fine.
    AddMethod(service, "Unary", ".a.b.Req", ".a.b.Resp")
        ->mutable_options()
        ->MutableExtension(rdmarpc::method)
        ->set_run_inline(true);
    AddStreamingMethod(service, "Plain", client, server);
    AddStreamingMethod(service, "Watch", client, server)
        ->mutable_options()
        ->MutableExtension(rdmarpc::method)
        ->set_run_inline(true);
    DescriptorPool pool;
    const FileDescriptor* file = pool.BuildFile(proto);
    ASSERT_NE(file, nullptr);
    const google::protobuf::MethodDescriptor* method = FindInlineStreamingMethod(file);
    ASSERT_NE(method, nullptr);
    EXPECT_EQ(method->full_name(), "a.b.S.Watch");
  }
}

TEST(FindInlineStreamingMethod, NullWhenNoStreamingMethodSetsRunInline) {
  FileDescriptorProto proto = BaseFile();
  ServiceDescriptorProto* service = proto.add_service();
  service->set_name("S");
  // The service's option is not the method's: it passes streaming methods by.
  service->mutable_options()->MutableExtension(rdmarpc::service)->set_run_inline(true);
  AddMethod(service, "Get", ".a.b.Req", ".a.b.Resp")
      ->mutable_options()
      ->MutableExtension(rdmarpc::method)
      ->set_run_inline(true);
  AddStreamingMethod(service, "Watch", false, true);
  AddStreamingMethod(service, "Chat", true, true)
      ->mutable_options()
      ->MutableExtension(rdmarpc::method)
      ->set_run_inline(false);
  DescriptorPool pool;
  const FileDescriptor* file = pool.BuildFile(proto);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(FindInlineStreamingMethod(file), nullptr);
}

}  // namespace
}  // namespace compiler
}  // namespace rdmarpc
