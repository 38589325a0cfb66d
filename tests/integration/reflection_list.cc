// reflection_list: asks a server's grpc.reflection.v1 (or v1alpha)
// ServerReflection, on one stream, for its services and for the file of
// each symbol named, and prints the answers one per line, for
// reflection_e2e.sh:
//
//   reflection_list --server=127.0.0.1:7000 [--protocol=v1alpha] SYMBOL...
//   service grpc.health.v1.Health              (each listed service, in order)
//   ...
//   symbol SYMBOL: FILE [IMPORTED_FILE...]     (or "symbol SYMBOL: error CODE MESSAGE")
//
// Exits 0 once every request was answered and the stream ended OK, 1 on
// bad arguments, 2 when the call fails (the status goes to stderr).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gflags/gflags.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1/reflection.rdmarpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.rdmarpc.pb.h"
#include "rdmarpc/rdmarpc.h"

DEFINE_string(server, "", "HOST:PORT of the server");
DEFINE_string(protocol, "v1", "Protocol version: v1 or v1alpha");

namespace {

// The line of one answer.
template <class Response>
std::string Describe(const Response& response) {
  if (response.has_error_response()) {
    return absl::StrCat("error ", response.error_response().error_code(), " ",
                        response.error_response().error_message());
  }
  std::string line;
  for (const std::string& bytes : response.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    if (!file.ParseFromString(bytes)) return "a FileDescriptorProto that does not parse";
    absl::StrAppend(&line, line.empty() ? "" : " ", file.name());
  }
  return line;
}

template <class ServerReflection, class Request, class Response>
int Run(const std::vector<std::string>& symbols) {
  absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel = rdmarpc::CreateChannel(FLAGS_server);
  if (!channel.ok()) {
    fprintf(stderr, "reflection_list: %s\n", channel.status().ToString().c_str());
    return 2;
  }
  auto stub = ServerReflection::NewStub(*channel);
  rdmarpc::ClientContext context;
  context.set_timeout(absl::Seconds(20));
  auto stream = stub->ServerReflectionInfo(&context);
  std::vector<Request> requests(1 + symbols.size());
  requests[0].set_list_services("");
  for (size_t i = 0; i < symbols.size(); ++i) requests[i + 1].set_file_containing_symbol(symbols[i]);
  for (const Request& request : requests) {
    Response response;
    if (!stream->Write(request) || !stream->Read(&response)) break;
    if (response.has_list_services_response()) {
      for (const auto& service : response.list_services_response().service()) {
        printf("service %s\n", service.name().c_str());
      }
    } else {
      printf("symbol %s: %s\n", request.file_containing_symbol().c_str(),
             Describe(response).c_str());
    }
  }
  stream->WritesDone();
  absl::Status status = stream->Finish();
  if (!status.ok()) {
    fprintf(stderr, "reflection_list: %s\n", status.ToString().c_str());
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_server.empty()) {
    fprintf(stderr, "reflection_list: --server is required\n");
    return 1;
  }
  std::vector<std::string> symbols(argv + 1, argv + argc);
  if (FLAGS_protocol == "v1") {
    return Run<grpc::reflection::v1::ServerReflection, grpc::reflection::v1::ServerReflectionRequest,
               grpc::reflection::v1::ServerReflectionResponse>(symbols);
  }
  if (FLAGS_protocol == "v1alpha") {
    return Run<grpc::reflection::v1alpha::ServerReflection,
               grpc::reflection::v1alpha::ServerReflectionRequest,
               grpc::reflection::v1alpha::ServerReflectionResponse>(symbols);
  }
  fprintf(stderr, "reflection_list: --protocol is '%s', want v1 or v1alpha\n",
          FLAGS_protocol.c_str());
  return 1;
}
