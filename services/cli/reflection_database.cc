#include "cli/reflection_database.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rdmarpc {
namespace cli {

namespace {

using grpc::reflection::v1::ServerReflectionRequest;
using grpc::reflection::v1::ServerReflectionResponse;

constexpr char kV1Method[] = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
constexpr char kV1AlphaMethod[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

// The server's error_response as a Status of the code it sent.
absl::Status ErrorOf(const ServerReflectionResponse& response) {
  return absl::Status(static_cast<absl::StatusCode>(response.error_response().error_code()),
                      response.error_response().error_message());
}

}  // namespace

ReflectionDatabase::ReflectionDatabase(std::shared_ptr<Channel> channel, absl::Duration timeout)
    : channel_(std::move(channel)), timeout_(timeout) {}

ReflectionDatabase::~ReflectionDatabase() {
  if (stream_ != nullptr && stream_status_.ok()) {
    stream_->WritesDone();
    stream_->Finish().IgnoreError();  // every answer was read already
  }
}

absl::StatusOr<ServerReflectionResponse> ReflectionDatabase::Ask(
    const ServerReflectionRequest& request) {
  if (!stream_status_.ok()) return stream_status_;
  const bool first = stream_ == nullptr;
  if (first) {
    context_ = std::make_unique<ClientContext>();
    if (timeout_ != absl::InfiniteDuration()) context_->set_timeout(timeout_);
    // v1 and v1alpha are the same messages under two service names.
    stream_ = std::make_unique<ClientReaderWriter<ServerReflectionRequest, ServerReflectionResponse>>(
        channel_.get(), use_v1alpha_ ? kV1AlphaMethod : kV1Method, context_.get());
  }
  ServerReflectionResponse response;
  if (stream_->Write(request) && stream_->Read(&response)) return response;
  stream_status_ = stream_->Finish();
  if (stream_status_.ok()) {
    stream_status_ = absl::InternalError("grpc.reflection stream ended without an answer");
  }
  if (first && !use_v1alpha_ && stream_status_.code() == absl::StatusCode::kUnimplemented) {
    // A server older than gRPC's v1 (as grpc_cli and grpcurl do): ask again
    // under v1alpha. The deadline starts over with the new stream.
    use_v1alpha_ = true;
    stream_.reset();
    stream_status_ = absl::OkStatus();
    return Ask(request);
  }
  return stream_status_;
}

absl::StatusOr<std::vector<std::string>> ReflectionDatabase::ListServices() {
  ServerReflectionRequest request;
  request.set_list_services("");
  absl::StatusOr<ServerReflectionResponse> response = Ask(request);
  if (!response.ok()) return response.status();
  if (response->has_error_response()) return ErrorOf(*response);
  std::vector<std::string> names;
  for (const auto& service : response->list_services_response().service()) {
    names.push_back(service.name());
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool ReflectionDatabase::TakeFiles(const absl::StatusOr<ServerReflectionResponse>& response,
                                   google::protobuf::FileDescriptorProto* output) {
  if (!response.ok()) {
    last_error_ = response.status();
    return false;
  }
  if (response->has_error_response()) {
    last_error_ = ErrorOf(*response);
    return false;
  }
  const auto& files = response->file_descriptor_response().file_descriptor_proto();
  if (files.empty()) {
    last_error_ = absl::InternalError("grpc.reflection answered with no file");
    return false;
  }
  for (int i = 0; i < files.size(); ++i) {
    google::protobuf::FileDescriptorProto file;
    if (!file.ParseFromString(files[i])) {
      last_error_ = absl::InternalError(
          absl::StrCat("grpc.reflection sent a FileDescriptorProto that does not parse (",
                       files[i].size(), " bytes)"));
      return false;
    }
    // A file the pool was given once must come back the same, so the
    // first copy stays.
    auto it = files_.try_emplace(file.name(), std::move(file)).first;
    if (i == 0) *output = it->second;
  }
  return true;
}

bool ReflectionDatabase::FindFileByName(const std::string& filename,
                                        google::protobuf::FileDescriptorProto* output) {
  auto it = files_.find(filename);
  if (it != files_.end()) {
    *output = it->second;
    return true;
  }
  ServerReflectionRequest request;
  request.set_file_by_filename(filename);
  return TakeFiles(Ask(request), output);
}

bool ReflectionDatabase::FindFileContainingSymbol(const std::string& symbol_name,
                                                  google::protobuf::FileDescriptorProto* output) {
  ServerReflectionRequest request;
  request.set_file_containing_symbol(symbol_name);
  return TakeFiles(Ask(request), output);
}

bool ReflectionDatabase::FindFileContainingExtension(
    const std::string& /*containing_type*/, int /*field_number*/,
    google::protobuf::FileDescriptorProto* /*output*/) {
  return false;
}

}  // namespace cli
}  // namespace rdmarpc
