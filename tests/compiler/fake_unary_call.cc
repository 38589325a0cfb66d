#include "fake_unary_call.h"

#include <utility>

#include "rdmarpc/impl/unary_call.h"

namespace fake_call {
namespace {

RecordedCall& MutableLastCall() {
  static RecordedCall* const call = new RecordedCall;
  return *call;
}

absl::Status& FakeStatus() {
  static absl::Status* const status = new absl::Status;
  return *status;
}

void Record(bool async, rdmarpc::Channel* channel, absl::string_view method,
            rdmarpc::ClientContext* context,
            const google::protobuf::MessageLite& request,
            google::protobuf::MessageLite* response,
            const rdmarpc::internal::MethodConfig* idl_config) {
  RecordedCall& call = MutableLastCall();
  ++call.calls;
  call.async = async;
  call.channel = channel;
  call.method = std::string(method);
  call.deadline = context->deadline();
  call.request = &request;
  call.response = response;
  // IdlMethodConfig below hands out its JSON's address as the config.
  call.idl_config_json =
      idl_config == nullptr ? "" : *reinterpret_cast<const std::string*>(idl_config);
}

}  // namespace

const RecordedCall& LastCall() { return MutableLastCall(); }

void Reset(absl::Status status) {
  MutableLastCall() = RecordedCall();
  FakeStatus() = std::move(status);
}

}  // namespace fake_call

namespace rdmarpc {
namespace internal {

// The entry points generated stubs call, defined here instead of in the
// runtime library. The "config" is the JSON itself, never freed (as the
// runtime's).
const MethodConfig* IdlMethodConfig(const char* json) {
  return reinterpret_cast<const MethodConfig*>(new std::string(json));
}

absl::Status BlockingUnaryCall(Channel* channel, absl::string_view method,
                               ClientContext* context,
                               const google::protobuf::MessageLite& request,
                               google::protobuf::MessageLite* response,
                               const MethodConfig* idl_config) {
  fake_call::Record(false, channel, method, context, request, response, idl_config);
  return fake_call::FakeStatus();
}

void AsyncUnaryCall(Channel* channel, absl::string_view method, ClientContext* context,
                    const google::protobuf::MessageLite& request,
                    google::protobuf::MessageLite* response,
                    absl::AnyInvocable<void(absl::Status) &&> done,
                    const MethodConfig* idl_config) {
  fake_call::Record(true, channel, method, context, request, response, idl_config);
  std::move(done)(fake_call::FakeStatus());
}

}  // namespace internal
}  // namespace rdmarpc
