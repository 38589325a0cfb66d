#include "reflection/proto_server_reflection.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpc/reflection/v1/reflection.pb.h"
#include "grpc/reflection/v1alpha/reflection.pb.h"
#include "rdmarpc/impl/method_handler.h"

namespace rdmarpc {
namespace reflection {
namespace {

// v1 and v1alpha have the same messages, fields and numbers under two
// package names, so one template answers both (as gRPC's
// ProtoServerReflectionBackend does).
template <class Response>
void FillFiles(absl::StatusOr<std::vector<std::string>> files, Response* response,
               absl::Status* status) {
  if (!files.ok()) {
    *status = files.status();
    return;
  }
  auto* out = response->mutable_file_descriptor_response();
  for (std::string& file : *files) out->add_file_descriptor_proto(std::move(file));
}

// One answer: `response` (cleared) for `request`.
template <class Request, class Response>
void Answer(const ReflectionBackend& backend, const Request& request, Response* response) {
  absl::Status status;
  switch (request.message_request_case()) {
    case Request::kFileByFilename:
      FillFiles(backend.FileByFilename(request.file_by_filename()), response, &status);
      break;
    case Request::kFileContainingSymbol:
      FillFiles(backend.FileContainingSymbol(request.file_containing_symbol()), response, &status);
      break;
    case Request::kFileContainingExtension:
      FillFiles(backend.FileContainingExtension(
                    request.file_containing_extension().containing_type(),
                    request.file_containing_extension().extension_number()),
                response, &status);
      break;
    case Request::kAllExtensionNumbersOfType: {
      absl::StatusOr<std::vector<int32_t>> numbers =
          backend.AllExtensionNumbersOfType(request.all_extension_numbers_of_type());
      if (!numbers.ok()) {
        status = numbers.status();
        break;
      }
      auto* out = response->mutable_all_extension_numbers_response();
      out->set_base_type_name(request.all_extension_numbers_of_type());
      for (int32_t number : *numbers) out->add_extension_number(number);
      break;
    }
    case Request::kListServices: {
      absl::StatusOr<std::vector<std::string>> names = backend.ListServices();
      if (!names.ok()) {
        status = names.status();
        break;
      }
      auto* out = response->mutable_list_services_response();
      for (std::string& name : *names) out->add_service()->set_name(std::move(name));
      break;
    }
    case Request::MESSAGE_REQUEST_NOT_SET:
      // Also a request kind newer than this server's reflection.proto (its
      // field parses as unknown).
      status = absl::UnimplementedError(
          "ServerReflectionRequest sets none of the message_request fields this server knows");
      break;
  }
  if (!status.ok()) {
    auto* error = response->mutable_error_response();
    error->set_error_code(static_cast<int32_t>(status.code()));
    error->set_error_message(std::string(status.message()));
  }
  response->set_valid_host(request.host());
  *response->mutable_original_request() = request;
}

// One ServerReflectionInfo call: read a request, write its answer, read the
// next. One operation is outstanding at a time, so the reactions (on the
// call's worker, one at a time) never race over request_ and response_.
template <class Request, class Response>
class InfoReactor final : public ServerBidiReactor<Request, Response> {
 public:
  explicit InfoReactor(const ReflectionBackend* backend) : backend_(backend) {
    this->StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed after its last request (or the call was
      // cancelled, and this status is dropped).
      this->Finish(absl::OkStatus());
      return;
    }
    response_.Clear();
    Answer(*backend_, request_, &response_);
    this->StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      this->Finish(absl::CancelledError("ServerReflectionInfo: the response could not be sent"));
      return;
    }
    this->StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  const ReflectionBackend* const backend_;
  Request request_;
  Response response_;
};

// One of the two services: its one method, ServerReflectionInfo, registered
// by hand under the name the .proto gives it.
template <class Request, class Response>
class InfoService final : public Service {
 public:
  explicit InfoService(const ReflectionBackend* backend)
      : Service(Request::descriptor()->file()->service(0)->full_name()), backend_(backend) {
    const google::protobuf::MethodDescriptor* method = Request::descriptor()->file()->service(0)->method(0);
    // The method only makes the reactor: it runs on the worker (no pool
    // thread, so a new stream is answered while every handler thread is
    // busy), and the stream then holds no thread.
    AddMethod(std::make_unique<
              internal::CallbackBidiStreamingMethodHandler<InfoService, Request, Response>>(
        absl::StrCat("/", full_name(), "/", method->name()), this,
        &InfoService::ServerReflectionInfo, /*run_inline=*/true));
  }

 private:
  ServerBidiReactor<Request, Response>* ServerReflectionInfo(CallbackServerContext* /*context*/) {
    return new InfoReactor<Request, Response>(backend_);
  }

  const ReflectionBackend* const backend_;
};

}  // namespace

ProtoServerReflection::ProtoServerReflection(const google::protobuf::DescriptorPool* pool)
    : backend_(pool),
      v1_(std::make_unique<InfoService<::grpc::reflection::v1::ServerReflectionRequest,
                                       ::grpc::reflection::v1::ServerReflectionResponse>>(
          &backend_)),
      v1alpha_(std::make_unique<InfoService<::grpc::reflection::v1alpha::ServerReflectionRequest,
                                            ::grpc::reflection::v1alpha::ServerReflectionResponse>>(
          &backend_)) {}

ProtoServerReflection::~ProtoServerReflection() = default;

absl::Status ProtoServerReflection::AddToServer(Server* server) { return Add(server, true); }

absl::Status ProtoServerReflection::AddV1AlphaOnlyToServer(Server* server) {
  return Add(server, false);
}

absl::Status ProtoServerReflection::Add(Server* server, bool with_v1) {
  if (added_) {
    return absl::FailedPreconditionError("ProtoServerReflection was added to a server already");
  }
  for (const std::string& name : server->GetServiceNames()) {
    if (name == v1_->full_name() || name == v1alpha_->full_name()) {
      return absl::AlreadyExistsError(absl::StrCat("service ", name, " is already registered"));
    }
  }
  backend_.set_server(server);
  // Server::AddService fails here only after Start (FAILED_PRECONDITION),
  // and then for both alike: the first failure leaves neither added.
  absl::Status status = with_v1 ? server->AddService(v1_.get()) : absl::OkStatus();
  if (!status.ok()) return status;
  status = server->AddService(v1alpha_.get());
  if (!status.ok()) return status;
  added_ = true;
  return absl::OkStatus();
}

}  // namespace reflection
}  // namespace rdmarpc
