// The naming rules of compiler/names.h: keywords, reserved names and the
// one mangling rule, package namespaces, include guards.
#include "names.h"

#include <string>
#include <utility>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace rdmarpc {
namespace compiler {
namespace {

using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;
using google::protobuf::FileDescriptorProto;

// Builds a file with package `package` and one service `service` whose
// methods (all M -> M) are named `methods`.
const FileDescriptor* BuildFile(DescriptorPool* pool, const std::string& package,
                                const std::string& service,
                                const std::vector<std::string>& methods) {
  FileDescriptorProto proto;
  proto.set_name("test.proto");
  proto.set_package(package);
  proto.set_syntax("proto3");
  proto.add_message_type()->set_name("M");
  auto* s = proto.add_service();
  s->set_name(service);
  for (const std::string& name : methods) {
    auto* m = s->add_method();
    m->set_name(name);
    m->set_input_type(package.empty() ? ".M" : "." + package + ".M");
    m->set_output_type(package.empty() ? ".M" : "." + package + ".M");
  }
  const FileDescriptor* file = pool->BuildFile(proto);
  EXPECT_NE(file, nullptr);
  return file;
}

TEST(IsCppKeyword, KnowsKeywordsAndAlternativeTokens) {
  for (const char* keyword : {"delete", "new", "class", "register", "default", "and",
                              "not_eq", "co_await", "requires", "char8_t", "this"}) {
    EXPECT_TRUE(IsCppKeyword(keyword)) << keyword;
  }
  for (const char* name : {"Delete", "delete_", "Get", "main", "std", "Status", ""}) {
    EXPECT_FALSE(IsCppKeyword(name)) << name;
  }
}

TEST(CppMethodNames, KeepsOrdinaryNames) {
  DescriptorPool pool;
  const FileDescriptor* file = BuildFile(&pool, "a.b", "S", {"Get", "Put", "status"});
  EXPECT_EQ(CppMethodNames(file->service(0)),
            (std::vector<std::string>{"Get", "Put", "status"}));
}

TEST(CppMethodNames, AppendsUnderscoreToKeywordsAndReservedNames) {
  DescriptorPool pool;
  const FileDescriptor* file = BuildFile(
      &pool, "a.b", "S",
      {"delete", "new", "class", "register", "default", "Service", "Stub", "NewStub", "async",
       "service_full_name", "channel_", "async_stub_", "full_name", "methods", "AddMethod",
       "S", "StubInterface", "async_interface"});
  EXPECT_EQ(CppMethodNames(file->service(0)),
            (std::vector<std::string>{
                "delete_", "new_", "class_", "register_", "default_", "Service_", "Stub_",
                "NewStub_", "async_", "service_full_name_", "channel__", "async_stub__",
                "full_name_", "methods_", "AddMethod_", "S_", "StubInterface_",
                "async_interface_"}));
}

TEST(CppMethodNames, SkipsNamesOfOtherMethods) {
  DescriptorPool pool;
  // "delete" cannot become "delete_": a method of that name exists, even
  // later in the file.
  const FileDescriptor* file = BuildFile(&pool, "", "S", {"delete", "delete_", "Stub__"});
  EXPECT_EQ(CppMethodNames(file->service(0)),
            (std::vector<std::string>{"delete__", "delete_", "Stub__"}));
}

TEST(CppMethodNames, MangledNameSkipsOtherMangledNames) {
  DescriptorPool pool;
  // "channel" is fine, but "channel_" is the Stub's member: "channel__",
  // which a later method already has, so "channel___".
  const FileDescriptor* file =
      BuildFile(&pool, "p", "S", {"channel_", "channel", "channel__", "Stub", "Stub_"});
  EXPECT_EQ(CppMethodNames(file->service(0)),
            (std::vector<std::string>{"channel___", "channel", "channel__", "Stub__", "Stub_"}));
}

TEST(CppServiceName, AppendsUnderscoreToKeywordsAndClassMembers) {
  for (const auto& [proto_name, cpp_name] :
       std::vector<std::pair<std::string, std::string>>{{"Store", "Store"},
                                                        {"delete", "delete_"},
                                                        {"Service", "Service_"},
                                                        {"Stub", "Stub_"},
                                                        {"NewStub", "NewStub_"},
                                                        {"StubInterface", "StubInterface_"},
                                                        {"async_interface", "async_interface"},
                                                        {"service_full_name", "service_full_name_"},
                                                        {"CallbackService", "CallbackService_"},
                                                        {"EOF", "EOF_"},
                                                        {"assert", "assert_"},
                                                        {"async", "async"}}) {
    DescriptorPool pool;
    EXPECT_EQ(CppServiceName(BuildFile(&pool, "p", proto_name, {})->service(0)), cpp_name);
  }
}

TEST(CppServiceName, RenamedServiceStepsAsideFromTheFilesOtherNames) {
  FileDescriptorProto proto;
  proto.set_name("test.proto");
  proto.set_package("p");
  proto.set_syntax("proto3");
  proto.add_message_type()->set_name("Stub_");
  auto* color = proto.add_enum_type();
  color->set_name("Color");
  color->add_value()->set_name("Service_");
  color->mutable_value(0)->set_number(0);
  for (const char* name : {"Stub", "Service", "class", "class_", "class__"}) {
    proto.add_service()->set_name(name);
  }
  DescriptorPool pool;
  const FileDescriptor* file = pool.BuildFile(proto);
  ASSERT_NE(file, nullptr);
  // Stub_ is a message and Service_ an enum value; class_ and class__ are
  // services that keep their names.
  EXPECT_EQ(CppServiceName(file->service(0)), "Stub__");
  EXPECT_EQ(CppServiceName(file->service(1)), "Service__");
  EXPECT_EQ(CppServiceName(file->service(2)), "class___");
  EXPECT_EQ(CppServiceName(file->service(3)), "class_");
  EXPECT_EQ(CppServiceName(file->service(4)), "class__");
}

TEST(IsStandardMacro, KnowsTheCLibrarysMacros) {
  for (const char* name :
       {"assert", "errno", "NULL", "EOF", "offsetof", "INT_MAX", "UINT32_MAX", "SIZE_MAX",
        "INFINITY", "EINVAL", "EXIT_FAILURE", "INT64_C", "UINTMAX_C", "INT_FAST16_MIN",
        "UINT_LEAST8_MAX", "INTPTR_WIDTH", "PRId64", "SCNuPTR", "EDEADLOCK", "ENOTBLK", "alloca",
        "PATH_MAX", "htobe32", "CLOCK_MONOTONIC", "linux", "unix"}) {
    EXPECT_TRUE(IsStandardMacro(name)) << name;
  }
  for (const char* name : {"Assert", "assert_", "Get", "major", "LOG", "CHECK", "Null", "",
                           "INT64_C_", "INT", "UINT", "INT_", "PRI", "PRId", "PRId64_", "INTERNAL",
                           "INT_FAST", "Linux"}) {
    EXPECT_FALSE(IsStandardMacro(name)) << name;
  }
}

// The names are worked out once per file: a file of many services that all
// need new names takes linear work, not work that doubles per service.
TEST(CppServiceName, ManyRenamedServicesInOneFile) {
  FileDescriptorProto proto;
  proto.set_name("test.proto");
  proto.set_package("p");
  proto.set_syntax("proto3");
  std::vector<std::string> want;
  int n = 0;
  for (const char* name : {"E2BIG", "EACCES", "EADDRINUSE", "EAGAIN", "EBADF", "EBUSY", "ECHILD",
                           "EDOM", "EEXIST", "EFAULT", "EFBIG", "EINTR", "EINVAL", "EIO", "EISDIR",
                           "EMFILE", "EMLINK", "ENFILE", "ENODEV", "ENOENT", "ENOEXEC", "ENOMEM",
                           "ENOSPC", "ENOTDIR", "ENOTTY", "ENXIO", "EPERM", "EPIPE", "ERANGE",
                           "EROFS", "ESPIPE", "ESRCH", "ETXTBSY", "EXDEV", "Service", "Stub"}) {
    proto.add_service()->set_name(name);
    want.push_back(std::string(name) + "_");
    ++n;
  }
  DescriptorPool pool;
  const FileDescriptor* file = pool.BuildFile(proto);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(CppServiceNames(file), want);
  for (int i = 0; i < n; ++i) EXPECT_EQ(CppServiceName(file->service(i)), want[i]);
}

// An import in the same package puts its .pb.h's names in the namespace too.
TEST(CppServiceName, RenamedServiceStepsAsideFromASamePackageImport) {
  DescriptorPool pool;
  FileDescriptorProto dep;
  dep.set_name("dep.proto");
  dep.set_package("q");
  dep.set_syntax("proto3");
  dep.add_message_type()->set_name("Stub_");
  dep.add_message_type()->set_name("MockStubStub");
  ASSERT_NE(pool.BuildFile(dep), nullptr);
  FileDescriptorProto other;
  other.set_name("other.proto");
  other.set_package("elsewhere");
  other.set_syntax("proto3");
  other.add_message_type()->set_name("Service_");
  ASSERT_NE(pool.BuildFile(other), nullptr);
  FileDescriptorProto proto;
  proto.set_name("imp.proto");
  proto.set_package("q");
  proto.set_syntax("proto3");
  proto.add_dependency("dep.proto");
  proto.add_dependency("other.proto");
  proto.add_service()->set_name("Stub");
  proto.add_service()->set_name("Service");
  const FileDescriptor* file = pool.BuildFile(proto);
  ASSERT_NE(file, nullptr);
  // Service_ in another package's namespace is no clash.
  EXPECT_EQ(CppServiceNames(file), (std::vector<std::string>{"Stub__", "Service_"}));
  EXPECT_EQ(MockStubClassName(file->service(0)), "MockStubStub_");
}

TEST(CppServiceHelperNames, StepAsideFromNamesOfTheNamespace) {
  FileDescriptorProto proto;
  proto.set_name("test.proto");
  proto.set_package("p");
  proto.set_syntax("proto3");
  auto* e = proto.add_enum_type();
  e->set_name("E");
  e->add_value()->set_name("kSMethodNames");
  e->mutable_value(0)->set_number(0);
  proto.add_message_type()->set_name("SMethodConfig1");
  for (const char* name : {"S", "T"}) {
    auto* s = proto.add_service();
    s->set_name(name);
    for (const char* method : {"A", "B"}) {
      auto* m = s->add_method();
      m->set_name(method);
      m->set_input_type(".p.SMethodConfig1");
      m->set_output_type(".p.SMethodConfig1");
    }
  }
  DescriptorPool pool;
  const FileDescriptor* file = pool.BuildFile(proto);
  ASSERT_NE(file, nullptr);
  const std::vector<ServiceHelperNames> h = CppServiceHelperNames(file);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].method_names, "kSMethodNames_");
  EXPECT_EQ(h[0].method_config_prefix, "SMethodConfig_");
  EXPECT_EQ(h[1].method_names, "kTMethodNames");
  EXPECT_EQ(h[1].method_config_prefix, "TMethodConfig");
}

TEST(CppMethodNames, AppendsUnderscoreToMacros) {
  DescriptorPool pool;
  const FileDescriptor* file =
      BuildFile(&pool, "p", "S", {"assert", "EOF", "INT_MAX", "CallbackService", "Get"});
  EXPECT_EQ(CppMethodNames(file->service(0)),
            (std::vector<std::string>{"assert_", "EOF_", "INT_MAX_", "CallbackService_", "Get"}));
}

TEST(CppMethodNames, ReservesTheServiceClassName) {
  DescriptorPool pool;
  // Service "Stub" is class Stub_, so neither "Stub" nor "Stub_" may name a
  // method.
  const FileDescriptor* file = BuildFile(&pool, "p", "Stub", {"Stub", "Stub_", "Get"});
  EXPECT_EQ(CppMethodNames(file->service(0)),
            (std::vector<std::string>{"Stub__", "Stub___", "Get"}));
}

TEST(MockStubClassName, IsMockServiceStubAfterTheProtoName) {
  DescriptorPool pool;
  EXPECT_EQ(MockStubClassName(BuildFile(&pool, "a.b", "Store", {})->service(0)), "MockStoreStub");
  // After the .proto name, as gRPC does, not the mangled class delete_.
  DescriptorPool pool2;
  EXPECT_EQ(MockStubClassName(BuildFile(&pool2, "", "delete", {})->service(0)), "MockdeleteStub");
}

// Builds a file in package p with service `service` and the rest of
// FileDescriptorProto text `rest`.
const FileDescriptor* BuildFileFromText(DescriptorPool* pool, const std::string& service,
                                        const std::string& rest) {
  FileDescriptorProto proto;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "name: 'test.proto' package: 'p' syntax: 'proto3' service { name: '" + service + "' } " +
          rest,
      &proto))
      << rest;
  const FileDescriptor* file = pool->BuildFile(proto);
  EXPECT_NE(file, nullptr) << rest;
  return file;
}

TEST(MockStubClassName, StepsAsideFromNamesInTheSameNamespace) {
  // Every kind of name protobuf's C++ generator, or ours, puts at namespace
  // scope, each named like the mock of the service.
  struct Case {
    const char* service;
    const char* rest;
    const char* mock;
  };
  for (const Case& c : {
           Case{"S", "message_type { name: 'MockSStub' }", "MockSStub_"},
           Case{"S", "enum_type { name: 'MockSStub' value { name: 'X' number: 0 } }",
                "MockSStub_"},
           // A top-level enum's values are unscoped.
           Case{"S", "enum_type { name: 'E' value { name: 'MockSStub' number: 0 } }",
                "MockSStub_"},
           Case{"S", "service { name: 'MockSStub' }", "MockSStub_"},
           Case{"S", "message_type { name: 'MockSStub' } message_type { name: 'MockSStub_' }",
                "MockSStub__"},
           // Nested types are Outer_Inner, nested enum values Outer_E_VALUE.
           Case{"A_B", "message_type { name: 'MockA' nested_type { name: 'BStub' } }",
                "MockA_BStub_"},
           Case{"A_B",
                "message_type { name: 'MockA' enum_type { name: 'BStub' "
                "value { name: 'X' number: 0 } } }",
                "MockA_BStub_"},
           Case{"E_X",
                "message_type { name: 'Mock' enum_type { name: 'E' "
                "value { name: 'XStub' number: 0 } } }",
                "MockE_XStub"},
           Case{"E_X",
                "message_type { name: 'M' enum_type { name: 'Mock' "
                "value { name: 'E_XStub' number: 0 } } }",
                "MockE_XStub"},
       }) {
    DescriptorPool pool;
    const FileDescriptor* file = BuildFileFromText(&pool, c.service, c.rest);
    ASSERT_NE(file, nullptr);
    EXPECT_EQ(MockStubClassName(file->service(0)), c.mock) << c.rest;
  }
}

TEST(PackageNamespaces, SplitsOnDots) {
  DescriptorPool pool;
  EXPECT_EQ(PackageNamespaces(BuildFile(&pool, "a.b.c", "S", {})),
            (std::vector<std::string>{"a", "b", "c"}));
  DescriptorPool pool2;
  EXPECT_TRUE(PackageNamespaces(BuildFile(&pool2, "", "S", {})).empty());
}

TEST(QualifiedServiceClass, HasLeadingColons) {
  DescriptorPool pool;
  EXPECT_EQ(QualifiedServiceClass(BuildFile(&pool, "a.b", "S", {})->service(0)), "::a::b::S");
  DescriptorPool pool2;
  EXPECT_EQ(QualifiedServiceClass(BuildFile(&pool2, "", "S", {})->service(0)), "::S");
}

TEST(StripProtoExtension, RemovesOnlyTrailingProto) {
  EXPECT_EQ(StripProtoExtension("foo/bar.proto"), "foo/bar");
  EXPECT_EQ(StripProtoExtension("foo.proto.txt"), "foo.proto.txt");
  EXPECT_EQ(StripProtoExtension(".proto"), ".proto");
  // protoc's C++ generator strips the legacy .protodevel too.
  EXPECT_EQ(StripProtoExtension("foo/bar.protodevel"), "foo/bar");
}

TEST(HeaderGuard, EscapesNonIdentifierCharacters) {
  EXPECT_EQ(HeaderGuard("foo/bar.proto"), "RDMARPC_GENERATED_foo_2fbar_2eproto_INCLUDED");
  EXPECT_EQ(HeaderGuard("foo_bar.proto"), "RDMARPC_GENERATED_foo_5fbar_2eproto_INCLUDED");
  EXPECT_NE(HeaderGuard("foo/bar.proto"), HeaderGuard("foo_bar.proto"));
}

TEST(MockHeaderGuard, DiffersFromEveryHeaderGuard) {
  EXPECT_EQ(MockHeaderGuard("foo/bar.proto"),
            "RDMARPC_GENERATED_foo_2fbar_2eproto_MOCK_INCLUDED");
  // A .proto whose escaped name ends in what the mock guard appends.
  EXPECT_NE(MockHeaderGuard("foo/bar.proto"), HeaderGuard("foo/bar.proto_MOCK"));
  EXPECT_NE(MockHeaderGuard("foo/bar.proto"), HeaderGuard("foo/bar.proto.MOCK"));
}

}  // namespace
}  // namespace compiler
}  // namespace rdmarpc
