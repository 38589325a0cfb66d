// rdmarpc::reflection::ReflectionBackend: the descriptor lookups of server
// reflection, without a server: over a pool built here (so every file and
// import is known exactly) and over the generated pool.
#include "reflection/reflection_backend.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "reflection_test_service.pb.h"

namespace {

using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptorProto;
using rdmarpc::reflection::ReflectionBackend;

// The names of serialised FileDescriptorProtos, in order.
std::vector<std::string> Names(const absl::StatusOr<std::vector<std::string>>& files) {
  EXPECT_TRUE(files.ok()) << files.status();
  std::vector<std::string> names;
  if (!files.ok()) return names;
  for (const std::string& bytes : *files) {
    FileDescriptorProto file;
    EXPECT_TRUE(file.ParseFromString(bytes));
    names.push_back(file.name());
  }
  return names;
}

// top.proto imports left.proto and right.proto, both of which import
// base.proto; ext.proto extends base.Msg with 7 and 3.
class ReflectionBackendOverBuiltPool : public ::testing::Test {
 protected:
  ReflectionBackendOverBuiltPool() {
    for (const char* text : {
             R"pb(name: "base.proto" package: "p" syntax: "proto2"
                  message_type { name: "Msg" extension_range { start: 1 end: 100 } })pb",
             R"pb(name: "left.proto" package: "p" dependency: "base.proto"
                  message_type { name: "Left" })pb",
             R"pb(name: "right.proto" package: "p" dependency: "base.proto"
                  enum_type { name: "Side" value { name: "SIDE_UNKNOWN" number: 0 } })pb",
             R"pb(name: "top.proto" package: "p" dependency: "left.proto"
                  dependency: "right.proto"
                  service { name: "Top" method { name: "Go" input_type: ".p.Left"
                                                 output_type: ".p.Left" } })pb",
             R"pb(name: "ext.proto" package: "p" syntax: "proto2" dependency: "base.proto"
                  extension { name: "seven" number: 7 label: LABEL_OPTIONAL type: TYPE_INT32
                              extendee: ".p.Msg" }
                  extension { name: "three" number: 3 label: LABEL_OPTIONAL type: TYPE_INT32
                              extendee: ".p.Msg" })pb",
         }) {
      FileDescriptorProto file;
      EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &file)) << text;
      EXPECT_NE(pool_.BuildFile(file), nullptr) << file.name();
    }
  }

  DescriptorPool pool_;
  ReflectionBackend backend_{&pool_};
};

TEST_F(ReflectionBackendOverBuiltPool, FileThenImportsDepthFirstEachOnce) {
  EXPECT_EQ(Names(backend_.FileByFilename("top.proto")),
            (std::vector<std::string>{"top.proto", "left.proto", "base.proto", "right.proto"}));
  EXPECT_EQ(Names(backend_.FileByFilename("base.proto")), (std::vector<std::string>{"base.proto"}));
}

TEST_F(ReflectionBackendOverBuiltPool, SymbolsOfEachKindFindTheirFile) {
  const std::vector<std::string> top = {"top.proto", "left.proto", "base.proto", "right.proto"};
  EXPECT_EQ(Names(backend_.FileContainingSymbol("p.Top")), top);
  EXPECT_EQ(Names(backend_.FileContainingSymbol("p.Top.Go")), top);
  EXPECT_EQ(Names(backend_.FileContainingSymbol("p.Side")),
            (std::vector<std::string>{"right.proto", "base.proto"}));
  EXPECT_EQ(Names(backend_.FileContainingSymbol("p.SIDE_UNKNOWN")),
            (std::vector<std::string>{"right.proto", "base.proto"}));
  EXPECT_EQ(Names(backend_.FileContainingSymbol("p.seven")),
            (std::vector<std::string>{"ext.proto", "base.proto"}));
}

TEST_F(ReflectionBackendOverBuiltPool, FileBytesAreThePoolsFileDescriptorProto) {
  absl::StatusOr<std::vector<std::string>> files = backend_.FileByFilename("left.proto");
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(files->size(), 2u);
  FileDescriptorProto want;
  pool_.FindFileByName("left.proto")->CopyTo(&want);
  EXPECT_EQ((*files)[0], want.SerializeAsString());
}

TEST_F(ReflectionBackendOverBuiltPool, ExtensionsByNumber) {
  EXPECT_EQ(Names(backend_.FileContainingExtension("p.Msg", 3)),
            (std::vector<std::string>{"ext.proto", "base.proto"}));
  absl::StatusOr<std::vector<int32_t>> numbers = backend_.AllExtensionNumbersOfType("p.Msg");
  ASSERT_TRUE(numbers.ok()) << numbers.status();
  EXPECT_EQ(*numbers, (std::vector<int32_t>{3, 7}));
  numbers = backend_.AllExtensionNumbersOfType("p.Left");
  ASSERT_TRUE(numbers.ok());
  EXPECT_EQ(*numbers, std::vector<int32_t>{});
}

TEST_F(ReflectionBackendOverBuiltPool, UnknownNamesAreNotFoundNamingThem) {
  EXPECT_EQ(backend_.FileByFilename("nope.proto").status(),
            absl::NotFoundError("File not found: nope.proto"));
  EXPECT_EQ(backend_.FileContainingSymbol("p.Nope").status(),
            absl::NotFoundError("Symbol not found: p.Nope"));
  EXPECT_EQ(backend_.FileContainingExtension("p.Nope", 3).status(),
            absl::NotFoundError("Type not found: p.Nope"));
  EXPECT_EQ(backend_.FileContainingExtension("p.Msg", 4).status(),
            absl::NotFoundError("Extension not found: p.Msg has no extension 4"));
  EXPECT_EQ(backend_.AllExtensionNumbersOfType("p.Nope").status(),
            absl::NotFoundError("Type not found: p.Nope"));
}

TEST_F(ReflectionBackendOverBuiltPool, ListServicesWithoutAServerIsNotFound) {
  EXPECT_EQ(backend_.ListServices().status(),
            absl::NotFoundError("Services not found: no server was set"));
}

TEST(ReflectionBackend, GeneratedPoolFindsLinkedFilesWithTheirImports) {
  // Referenced, so the linker keeps the file's registration.
  ASSERT_NE(rdmarpc::reflection_test::PutRequest::descriptor(), nullptr);
  ReflectionBackend backend(DescriptorPool::generated_pool());
  EXPECT_EQ(Names(backend.FileContainingSymbol("rdmarpc.reflection_test.KvStore.Watch")),
            (std::vector<std::string>{"reflection_test_service.proto",
                                      "reflection_test_types.proto",
                                      "google/protobuf/timestamp.proto"}));
}

}  // namespace
