// rdmarpc::reflection::ProtoServerReflection: grpc.reflection.v1 and v1alpha
// over real connections (softrdma on 127.0.0.1) with the stubs generated
// from gRPC's reflection.proto files, against a server with an echo and a
// key-value service, grpc.health.v1.Health and the reflection services.
#include "reflection/proto_server_reflection.h"

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1/reflection.rdmarpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.rdmarpc.pb.h"
#include "gtest/gtest.h"
#include "health/health_check_service.h"
#include "rdmarpc/rdmarpc.h"
#include "reflection_test_extensions.pb.h"
#include "reflection_test_service.rdmarpc.pb.h"
#include "reflection_test_types.pb.h"

namespace {

using google::protobuf::FileDescriptorProto;
using rdmarpc::reflection::ProtoServerReflection;

constexpr char kServiceFile[] = "reflection_test_service.proto";
constexpr char kTypesFile[] = "reflection_test_types.proto";
constexpr char kExtensionsFile[] = "reflection_test_extensions.proto";
constexpr char kTimestampFile[] = "google/protobuf/timestamp.proto";
// gRPC's codes, as ErrorResponse.error_code carries them.
constexpr int kNotFound = 5;
constexpr int kUnimplemented = 12;

// The two protocol versions: the same messages in two packages.
struct V1 {
  using ServerReflection = ::grpc::reflection::v1::ServerReflection;
  using Request = ::grpc::reflection::v1::ServerReflectionRequest;
  using Response = ::grpc::reflection::v1::ServerReflectionResponse;
};
struct V1Alpha {
  using ServerReflection = ::grpc::reflection::v1alpha::ServerReflection;
  using Request = ::grpc::reflection::v1alpha::ServerReflectionRequest;
  using Response = ::grpc::reflection::v1alpha::ServerReflectionResponse;
};

class EchoImpl final : public rdmarpc::reflection_test::Echo::Service {};
class KvStoreImpl final : public rdmarpc::reflection_test::KvStore::Service {};

// Echo, KvStore, health and reflection on 127.0.0.1.
class ReflectionServer {
 public:
  explicit ReflectionServer(rdmarpc::ServerOptions options = {}) : server_(options) {
    EXPECT_TRUE(server_.AddService(&echo_).ok());
    EXPECT_TRUE(server_.AddService(&kvstore_).ok());
    EXPECT_TRUE(server_.AddService(&health_).ok());
    absl::Status added = reflection_.AddToServer(&server_);
    EXPECT_TRUE(added.ok()) << added;
    absl::Status started = server_.Start("127.0.0.1:0");
    EXPECT_TRUE(started.ok()) << started;
  }
  ~ReflectionServer() {
    server_.Shutdown(absl::Seconds(1));
    server_.Wait();
  }

  rdmarpc::Server* server() { return &server_; }
  ProtoServerReflection* reflection() { return &reflection_; }
  std::shared_ptr<rdmarpc::Channel> NewChannel() const {
    absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel =
        rdmarpc::CreateChannel(absl::StrCat("127.0.0.1:", server_.port()));
    EXPECT_TRUE(channel.ok()) << channel.status();
    return *channel;
  }

 private:
  // Services outlive the server: declared first, destroyed last.
  EchoImpl echo_;
  KvStoreImpl kvstore_;
  rdmarpc::HealthCheckService health_;
  ProtoServerReflection reflection_;
  rdmarpc::Server server_;
};

// One ServerReflectionInfo call, asked one request at a time.
template <class V>
class ReflectionStream {
 public:
  explicit ReflectionStream(typename V::ServerReflection::Stub* stub) {
    context_.set_timeout(absl::Seconds(20));
    stream_ = stub->ServerReflectionInfo(&context_);
  }

  // Writes `request` and reads its answer (a default Response, and a test
  // failure, when none comes).
  typename V::Response Ask(const typename V::Request& request) {
    typename V::Response response;
    EXPECT_TRUE(stream_->Write(request));
    EXPECT_TRUE(stream_->Read(&response)) << stream_->Finish();
    return response;
  }

  void Cancel() { context_.TryCancel(); }
  // Reads once more: false when the server ended the call; then its status.
  absl::Status WaitForEnd() {
    typename V::Response extra;
    EXPECT_FALSE(stream_->Read(&extra)) << extra.DebugString();
    return stream_->Finish();
  }

  // Half-closes and returns the call's status, once the server ended it
  // with no further message.
  absl::Status Close() {
    EXPECT_TRUE(stream_->WritesDone());
    return WaitForEnd();
  }

 private:
  rdmarpc::ClientContext context_;
  std::unique_ptr<rdmarpc::ClientReaderWriterInterface<typename V::Request, typename V::Response>>
      stream_;
};

template <class V>
class ProtoServerReflectionTest : public ::testing::Test {
 protected:
  ProtoServerReflectionTest()
      : channel_(server_.NewChannel()), stub_(V::ServerReflection::NewStub(channel_)) {}

  // Asks one request on a stream of its own and closes it cleanly.
  typename V::Response AskOnce(const typename V::Request& request) {
    ReflectionStream<V> stream(stub_.get());
    typename V::Response response = stream.Ask(request);
    EXPECT_TRUE(stream.Close().ok());
    return response;
  }
  typename V::Response AskSymbol(const std::string& symbol) {
    typename V::Request request;
    request.set_file_containing_symbol(symbol);
    return AskOnce(request);
  }
  typename V::Response AskFile(const std::string& filename) {
    typename V::Request request;
    request.set_file_by_filename(filename);
    return AskOnce(request);
  }

  ReflectionServer server_;
  std::shared_ptr<rdmarpc::Channel> channel_;
  std::unique_ptr<typename V::ServerReflection::Stub> stub_;
};

// The names of a file_descriptor_response's files, in order; each must
// parse as a FileDescriptorProto.
template <class Response>
std::vector<std::string> FileNames(const Response& response) {
  EXPECT_EQ(response.message_response_case(), Response::kFileDescriptorResponse)
      << response.DebugString();
  std::vector<std::string> names;
  for (const std::string& bytes : response.file_descriptor_response().file_descriptor_proto()) {
    FileDescriptorProto file;
    EXPECT_TRUE(file.ParseFromString(bytes));
    names.push_back(file.name());
  }
  return names;
}

// What the server should send for `file`: its FileDescriptorProto, as
// the generated pool of this binary has it.
std::string Serialized(const google::protobuf::FileDescriptor* file) {
  FileDescriptorProto proto;
  file->CopyTo(&proto);
  return proto.SerializeAsString();
}

const std::vector<std::string> kServiceFiles = {kServiceFile, kTypesFile, kTimestampFile};
const std::vector<std::string> kTypesFiles = {kTypesFile, kTimestampFile};

using Versions = ::testing::Types<V1, V1Alpha>;
class VersionNames {
 public:
  template <class V>
  static std::string GetName(int) {
    return std::is_same<V, V1>::value ? "V1" : "V1Alpha";
  }
};
TYPED_TEST_SUITE(ProtoServerReflectionTest, Versions, VersionNames);

TYPED_TEST(ProtoServerReflectionTest, ListServicesNamesEveryServiceSorted) {
  typename TypeParam::Request request;
  request.set_list_services("");
  typename TypeParam::Response response = this->AskOnce(request);
  ASSERT_EQ(response.message_response_case(), TypeParam::Response::kListServicesResponse)
      << response.DebugString();
  std::vector<std::string> names;
  for (const auto& service : response.list_services_response().service()) {
    names.push_back(service.name());
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "grpc.health.v1.Health",
                       "grpc.reflection.v1.ServerReflection",
                       "grpc.reflection.v1alpha.ServerReflection",
                       "rdmarpc.reflection_test.Echo",
                       "rdmarpc.reflection_test.KvStore",
                   }));
}

TYPED_TEST(ProtoServerReflectionTest, ServiceSymbolGivesItsFileThenEachImportOnce) {
  typename TypeParam::Response response = this->AskSymbol("rdmarpc.reflection_test.KvStore");
  // timestamp.proto is imported twice (directly and by the types file) and
  // sent once, after the types file that imports it first.
  EXPECT_EQ(FileNames(response), kServiceFiles);
  const auto& files = response.file_descriptor_response().file_descriptor_proto();
  ASSERT_EQ(files.size(), 3);
  const google::protobuf::FileDescriptor* service_file =
      rdmarpc::reflection_test::PutRequest::descriptor()->file();
  EXPECT_EQ(files[0], Serialized(service_file));
  EXPECT_EQ(files[1], Serialized(service_file->dependency(0)));
  EXPECT_EQ(files[2], Serialized(service_file->dependency(1)));
  FileDescriptorProto proto;
  ASSERT_TRUE(proto.ParseFromString(files[0]));
  ASSERT_EQ(proto.service_size(), 2);
  EXPECT_EQ(proto.service(1).name(), "KvStore");
  ASSERT_EQ(proto.service(1).method_size(), 3);
  EXPECT_EQ(proto.service(1).method(2).name(), "Watch");
  EXPECT_EQ(proto.service(1).method(2).input_type(), ".rdmarpc.reflection_test.GetRequest");
  EXPECT_EQ(proto.service(1).method(2).output_type(), ".rdmarpc.reflection_test.Entry");
  EXPECT_TRUE(proto.service(1).method(2).server_streaming());
}

TYPED_TEST(ProtoServerReflectionTest, MethodSymbolGivesTheServiceFile) {
  EXPECT_EQ(FileNames(this->AskSymbol("rdmarpc.reflection_test.KvStore.Get")), kServiceFiles);
  EXPECT_EQ(FileNames(this->AskSymbol("rdmarpc.reflection_test.Echo.Echo")), kServiceFiles);
}

TYPED_TEST(ProtoServerReflectionTest, MessageSymbolGivesItsFile) {
  EXPECT_EQ(FileNames(this->AskSymbol("rdmarpc.reflection_test.PutRequest")), kServiceFiles);
  EXPECT_EQ(FileNames(this->AskSymbol("rdmarpc.reflection_test.Entry")), kTypesFiles);
}

TYPED_TEST(ProtoServerReflectionTest, NestedEnumFieldAndEnumValueSymbolsGiveTheirFile) {
  EXPECT_EQ(FileNames(this->AskSymbol("rdmarpc.reflection_test.Entry.Kind")), kTypesFiles);
  EXPECT_EQ(FileNames(this->AskSymbol("rdmarpc.reflection_test.Entry.key")), kTypesFiles);
  // An enum value is scoped beside its enum, as in C++.
  EXPECT_EQ(FileNames(this->AskSymbol("rdmarpc.reflection_test.Entry.COUNTER")), kTypesFiles);
}

TYPED_TEST(ProtoServerReflectionTest, ExtensionSymbolGivesTheFileDeclaringIt) {
  EXPECT_EQ(FileNames(this->AskSymbol("rdmarpc.reflection_test.version")),
            (std::vector<std::string>{kExtensionsFile, kTypesFile, kTimestampFile}));
}

TYPED_TEST(ProtoServerReflectionTest, HealthAndReflectionDescribeThemselves) {
  EXPECT_EQ(FileNames(this->AskSymbol("grpc.health.v1.Health.Watch")),
            (std::vector<std::string>{"grpc/health/v1/health.proto"}));
  EXPECT_EQ(FileNames(this->AskSymbol("grpc.reflection.v1.ServerReflection")),
            (std::vector<std::string>{"grpc/reflection/v1/reflection.proto"}));
  EXPECT_EQ(
      FileNames(this->AskSymbol("grpc.reflection.v1alpha.ServerReflection.ServerReflectionInfo")),
      (std::vector<std::string>{"grpc/reflection/v1alpha/reflection.proto"}));
}

TYPED_TEST(ProtoServerReflectionTest, FileByFilenameGivesTheFileThenItsImports) {
  EXPECT_EQ(FileNames(this->AskFile(kServiceFile)), kServiceFiles);
  EXPECT_EQ(FileNames(this->AskFile(kTimestampFile)), (std::vector<std::string>{kTimestampFile}));
  typename TypeParam::Response response = this->AskFile("grpc/health/v1/health.proto");
  EXPECT_EQ(FileNames(response), (std::vector<std::string>{"grpc/health/v1/health.proto"}));
  ASSERT_EQ(response.file_descriptor_response().file_descriptor_proto_size(), 1);
  EXPECT_EQ(response.file_descriptor_response().file_descriptor_proto(0),
            Serialized(grpc::health::v1::HealthCheckRequest::descriptor()->file()));
}

TYPED_TEST(ProtoServerReflectionTest, UnknownSymbolIsNotFoundNamingIt) {
  typename TypeParam::Response response = this->AskSymbol("rdmarpc.reflection_test.NoSuchThing");
  ASSERT_EQ(response.message_response_case(), TypeParam::Response::kErrorResponse);
  EXPECT_EQ(response.error_response().error_code(), kNotFound);
  EXPECT_EQ(response.error_response().error_message(),
            "Symbol not found: rdmarpc.reflection_test.NoSuchThing");
  EXPECT_EQ(response.original_request().file_containing_symbol(),
            "rdmarpc.reflection_test.NoSuchThing");
}

TYPED_TEST(ProtoServerReflectionTest, UnknownFileIsNotFoundNamingIt) {
  typename TypeParam::Response response = this->AskFile("no/such.proto");
  ASSERT_EQ(response.message_response_case(), TypeParam::Response::kErrorResponse);
  EXPECT_EQ(response.error_response().error_code(), kNotFound);
  EXPECT_EQ(response.error_response().error_message(), "File not found: no/such.proto");
}

TYPED_TEST(ProtoServerReflectionTest, FileContainingExtensionGivesTheFileDeclaringIt) {
  typename TypeParam::Request request;
  request.mutable_file_containing_extension()->set_containing_type("rdmarpc.reflection_test.Entry");
  request.mutable_file_containing_extension()->set_extension_number(150);
  EXPECT_EQ(FileNames(this->AskOnce(request)),
            (std::vector<std::string>{kExtensionsFile, kTypesFile, kTimestampFile}));
}

TYPED_TEST(ProtoServerReflectionTest, UnknownExtensionOrTypeIsNotFound) {
  typename TypeParam::Request request;
  request.mutable_file_containing_extension()->set_containing_type("rdmarpc.reflection_test.Entry");
  request.mutable_file_containing_extension()->set_extension_number(101);
  typename TypeParam::Response response = this->AskOnce(request);
  ASSERT_EQ(response.message_response_case(), TypeParam::Response::kErrorResponse);
  EXPECT_EQ(response.error_response().error_code(), kNotFound);
  EXPECT_EQ(response.error_response().error_message(),
            "Extension not found: rdmarpc.reflection_test.Entry has no extension 101");

  request.mutable_file_containing_extension()->set_containing_type("no.Such");
  response = this->AskOnce(request);
  ASSERT_EQ(response.message_response_case(), TypeParam::Response::kErrorResponse);
  EXPECT_EQ(response.error_response().error_code(), kNotFound);
  EXPECT_EQ(response.error_response().error_message(), "Type not found: no.Such");
}

TYPED_TEST(ProtoServerReflectionTest, AllExtensionNumbersOfTypeAscending) {
  typename TypeParam::Request request;
  request.set_all_extension_numbers_of_type("rdmarpc.reflection_test.Entry");
  typename TypeParam::Response response = this->AskOnce(request);
  ASSERT_EQ(response.message_response_case(),
            TypeParam::Response::kAllExtensionNumbersResponse)
      << response.DebugString();
  EXPECT_EQ(response.all_extension_numbers_response().base_type_name(),
            "rdmarpc.reflection_test.Entry");
  EXPECT_EQ(std::vector<int>(response.all_extension_numbers_response().extension_number().begin(),
                             response.all_extension_numbers_response().extension_number().end()),
            (std::vector<int>{100, 150}));

  request.set_all_extension_numbers_of_type("rdmarpc.reflection_test.PutRequest");
  response = this->AskOnce(request);
  ASSERT_EQ(response.message_response_case(),
            TypeParam::Response::kAllExtensionNumbersResponse);
  EXPECT_EQ(response.all_extension_numbers_response().extension_number_size(), 0);

  request.set_all_extension_numbers_of_type("no.Such");
  response = this->AskOnce(request);
  ASSERT_EQ(response.message_response_case(), TypeParam::Response::kErrorResponse);
  EXPECT_EQ(response.error_response().error_code(), kNotFound);
  EXPECT_EQ(response.error_response().error_message(), "Type not found: no.Such");
}

TYPED_TEST(ProtoServerReflectionTest, RequestWithoutAKnownFieldIsUnimplemented) {
  typename TypeParam::Request request;
  request.set_host("only-a-host");
  typename TypeParam::Response response = this->AskOnce(request);
  ASSERT_EQ(response.message_response_case(), TypeParam::Response::kErrorResponse);
  EXPECT_EQ(response.error_response().error_code(), kUnimplemented);
  EXPECT_EQ(response.valid_host(), "only-a-host");
}

// Several requests on one stream, each answered in turn with its request
// and host echoed; then the client half-closes and the call ends OK.
TYPED_TEST(ProtoServerReflectionTest, OneStreamAnswersEachRequestInOrder) {
  std::vector<typename TypeParam::Request> requests(5);
  requests[0].set_list_services("*");
  requests[1].set_file_containing_symbol("rdmarpc.reflection_test.Echo");
  requests[2].set_file_containing_symbol("no.Such");
  requests[3].set_file_by_filename(kTypesFile);
  // Asked again on the same stream: every answer carries all its files.
  requests[4].set_file_containing_symbol("rdmarpc.reflection_test.Echo");
  for (size_t i = 0; i < requests.size(); ++i) requests[i].set_host(absl::StrCat("host-", i));

  ReflectionStream<TypeParam> stream(this->stub_.get());
  std::vector<typename TypeParam::Response> responses;
  for (const auto& request : requests) responses.push_back(stream.Ask(request));
  EXPECT_TRUE(stream.Close().ok());

  ASSERT_EQ(responses.size(), 5u);
  for (size_t i = 0; i < responses.size(); ++i) {
    EXPECT_EQ(responses[i].valid_host(), absl::StrCat("host-", i));
    EXPECT_EQ(responses[i].original_request().SerializeAsString(), requests[i].SerializeAsString())
        << i;
  }
  EXPECT_EQ(responses[0].list_services_response().service_size(), 5);
  EXPECT_EQ(FileNames(responses[1]), kServiceFiles);
  EXPECT_EQ(responses[2].error_response().error_code(), kNotFound);
  EXPECT_EQ(FileNames(responses[3]), kTypesFiles);
  EXPECT_EQ(FileNames(responses[4]), kServiceFiles);
}

TYPED_TEST(ProtoServerReflectionTest, StreamClosedAtOnceEndsOk) {
  ReflectionStream<TypeParam> stream(this->stub_.get());
  EXPECT_TRUE(stream.Close().ok());
}

// A client that cancels mid-stream ends the call; the server's reactor is
// gone before the server shuts down (ASan reports it otherwise).
TEST(ProtoServerReflection, ClientCancelEndsTheStream) {
  ReflectionServer server;
  std::unique_ptr<V1::ServerReflection::Stub> stub =
      V1::ServerReflection::NewStub(server.NewChannel());
  ReflectionStream<V1> stream(stub.get());
  V1::Request request;
  request.set_list_services("");
  EXPECT_EQ(stream.Ask(request).list_services_response().service_size(), 5);
  stream.Cancel();
  EXPECT_EQ(stream.WaitForEnd().code(), absl::StatusCode::kCancelled);
}

// A stream the client keeps open ends when Server::Shutdown's grace runs
// out, as every callback call does: the client sees UNAVAILABLE.
TEST(ProtoServerReflection, ServerShutdownEndsAnOpenStream) {
  auto server = std::make_unique<ReflectionServer>();
  std::unique_ptr<V1::ServerReflection::Stub> stub =
      V1::ServerReflection::NewStub(server->NewChannel());
  ReflectionStream<V1> stream(stub.get());
  V1::Request request;
  request.set_list_services("");
  EXPECT_EQ(stream.Ask(request).list_services_response().service_size(), 5);
  server->server()->Shutdown(absl::Milliseconds(100));
  EXPECT_EQ(stream.WaitForEnd().code(), absl::StatusCode::kUnavailable);
  server.reset();
}

// Each open stream is a reactor, not a handler-pool thread: with one pool
// thread at most, three open streams are answered at the same time.
TEST(ProtoServerReflection, OpenStreamsHoldNoHandlerThread) {
  rdmarpc::ServerOptions options;
  options.handler_threads = 1;
  options.max_handler_threads = 1;
  ReflectionServer server(options);
  std::shared_ptr<rdmarpc::Channel> channel = server.NewChannel();
  std::unique_ptr<V1::ServerReflection::Stub> stub = V1::ServerReflection::NewStub(channel);
  std::vector<std::unique_ptr<ReflectionStream<V1>>> streams;
  V1::Request request;
  request.set_list_services("");
  for (int i = 0; i < 3; ++i) {
    streams.push_back(std::make_unique<ReflectionStream<V1>>(stub.get()));
    EXPECT_EQ(streams.back()->Ask(request).list_services_response().service_size(), 5) << i;
  }
  for (auto& stream : streams) EXPECT_TRUE(stream->Close().ok());
}

TEST(ProtoServerReflection, GetServiceNamesIsSortedAndIncludesReflection) {
  ReflectionServer server;
  EXPECT_EQ(server.server()->GetServiceNames(),
            (std::vector<std::string>{
                "grpc.health.v1.Health",
                ProtoServerReflection::kV1ServiceName,
                ProtoServerReflection::kV1AlphaServiceName,
                "rdmarpc.reflection_test.Echo",
                "rdmarpc.reflection_test.KvStore",
            }));
}

TEST(ProtoServerReflection, AddToServerTwiceOrAfterStartFails) {
  ReflectionServer server;
  // The same object again.
  EXPECT_EQ(server.reflection()->AddToServer(server.server()).code(),
            absl::StatusCode::kFailedPrecondition);
  // Another object on a server that has both names.
  ProtoServerReflection other;
  EXPECT_EQ(other.AddToServer(server.server()).code(), absl::StatusCode::kAlreadyExists);
  // A started server without them.
  rdmarpc::Server started;
  ASSERT_TRUE(started.Start("127.0.0.1:0").ok());
  EXPECT_EQ(other.AddToServer(&started).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(started.GetServiceNames(), std::vector<std::string>{});
  started.Shutdown(absl::Seconds(1));
  started.Wait();
}

}  // namespace
