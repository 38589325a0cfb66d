#include "test_service_impl.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rdmarpc_interop {
namespace {

using grpc::testing::EchoStatus;
using grpc::testing::Empty;
using grpc::testing::Payload;
using grpc::testing::PayloadType;
using grpc::testing::ResponseParameters;
using grpc::testing::SimpleRequest;
using grpc::testing::SimpleResponse;
using grpc::testing::StreamingInputCallRequest;
using grpc::testing::StreamingInputCallResponse;
using grpc::testing::StreamingOutputCallRequest;
using grpc::testing::StreamingOutputCallResponse;

// The metadata keys of the Echo Metadata feature.
constexpr absl::string_view kEchoInitialKey = "x-grpc-test-echo-initial";
constexpr absl::string_view kEchoTrailingKey = "x-grpc-test-echo-trailing-bin";

// Sends back the client's echo entries: kEchoInitialKey as initial metadata,
// kEchoTrailingKey as trailing metadata, each under the same key.
void EchoMetadata(rdmarpc::ServerContext* context) {
  for (const auto& [key, value] : context->client_metadata()) {
    if (key == kEchoInitialKey) context->AddInitialMetadata(key, value);
    if (key == kEchoTrailingKey) context->AddTrailingMetadata(key, value);
  }
}

// The status a request's response_status asks for. The code is passed on as
// sent: gRPC's codes and absl's are the same numbers.
absl::Status EchoedStatus(const EchoStatus& echo) {
  return absl::Status(static_cast<absl::StatusCode>(echo.code()), echo.message());
}

// Fills `payload` with `size` zero bytes of `type`. COMPRESSABLE is the only
// type messages.proto defines; an unknown one is INVALID_ARGUMENT, as the
// UnaryCall feature asks.
absl::Status FillPayload(PayloadType type, int32_t size, Payload* payload) {
  if (type != grpc::testing::COMPRESSABLE) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported response_type ", type));
  }
  if (size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative response size ", size));
  }
  payload->set_type(type);
  payload->mutable_body()->assign(static_cast<size_t>(size), '\0');
  return absl::OkStatus();
}

// The CompressedRequest feature: a request that says it was compressed must
// have been. rdmarpc never compresses, so such a request was not.
absl::Status CheckNotExpectingCompression(bool expect_compressed) {
  if (!expect_compressed) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "expect_compressed is set but the request was not compressed (rdmarpc does not "
      "compress messages)");
}

// Writes one response per entry of `request.response_parameters()`, each
// after sleeping its interval_us. `Writer` is a ServerWriter or a
// ServerReaderWriter. CANCELLED once a write fails (the client is gone).
template <class Writer>
absl::Status WriteResponses(const StreamingOutputCallRequest& request, Writer* writer) {
  for (const ResponseParameters& params : request.response_parameters()) {
    if (params.interval_us() > 0) absl::SleepFor(absl::Microseconds(params.interval_us()));
    StreamingOutputCallResponse response;
    absl::Status status =
        FillPayload(request.response_type(), params.size(), response.mutable_payload());
    if (!status.ok()) return status;
    if (!writer->Write(response)) return absl::CancelledError("the client went away");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TestServiceImpl::EmptyCall(rdmarpc::ServerContext* context, const Empty& /*request*/,
                                        Empty* /*response*/) {
  EchoMetadata(context);
  return absl::OkStatus();
}

absl::Status TestServiceImpl::UnaryCall(rdmarpc::ServerContext* context,
                                        const SimpleRequest& request, SimpleResponse* response) {
  EchoMetadata(context);
  if (request.has_response_status()) return EchoedStatus(request.response_status());
  absl::Status status = CheckNotExpectingCompression(request.expect_compressed().value());
  if (!status.ok()) return status;
  return FillPayload(request.response_type(), request.response_size(), response->mutable_payload());
}

absl::Status TestServiceImpl::StreamingOutputCall(
    rdmarpc::ServerContext* context, const StreamingOutputCallRequest& request,
    rdmarpc::ServerWriter<StreamingOutputCallResponse>* writer) {
  EchoMetadata(context);
  if (request.has_response_status()) return EchoedStatus(request.response_status());
  return WriteResponses(request, writer);
}

absl::Status TestServiceImpl::StreamingInputCall(
    rdmarpc::ServerContext* context, rdmarpc::ServerReader<StreamingInputCallRequest>* reader,
    StreamingInputCallResponse* response) {
  EchoMetadata(context);
  int64_t total = 0;
  StreamingInputCallRequest request;
  while (reader->Read(&request)) {
    absl::Status status = CheckNotExpectingCompression(request.expect_compressed().value());
    if (!status.ok()) return status;
    total += static_cast<int64_t>(request.payload().body().size());
  }
  if (context->IsCancelled()) return absl::CancelledError("the call was cancelled");
  response->set_aggregated_payload_size(static_cast<int32_t>(total));
  return absl::OkStatus();
}

absl::Status TestServiceImpl::FullDuplexCall(
    rdmarpc::ServerContext* context,
    rdmarpc::ServerReaderWriter<StreamingOutputCallResponse, StreamingOutputCallRequest>* stream) {
  EchoMetadata(context);
  StreamingOutputCallRequest request;
  while (stream->Read(&request)) {
    if (request.has_response_status()) return EchoedStatus(request.response_status());
    absl::Status status = WriteResponses(request, stream);
    if (!status.ok()) return status;
  }
  if (context->IsCancelled()) return absl::CancelledError("the call was cancelled");
  return absl::OkStatus();
}

absl::Status TestServiceImpl::HalfDuplexCall(
    rdmarpc::ServerContext* context,
    rdmarpc::ServerReaderWriter<StreamingOutputCallResponse, StreamingOutputCallRequest>* stream) {
  EchoMetadata(context);
  std::vector<StreamingOutputCallRequest> requests;
  StreamingOutputCallRequest request;
  while (stream->Read(&request)) {
    if (request.has_response_status()) return EchoedStatus(request.response_status());
    requests.push_back(request);
  }
  if (context->IsCancelled()) return absl::CancelledError("the call was cancelled");
  for (const StreamingOutputCallRequest& buffered : requests) {
    absl::Status status = WriteResponses(buffered, stream);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace rdmarpc_interop
