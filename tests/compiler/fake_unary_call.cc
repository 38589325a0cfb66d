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
            google::protobuf::MessageLite* response) {
  RecordedCall& call = MutableLastCall();
  ++call.calls;
  call.async = async;
  call.channel = channel;
  call.method = std::string(method);
  call.deadline = context->deadline();
  call.request = &request;
  call.response = response;
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

// The two entry points generated stubs call, defined here instead of in the
// runtime library.
absl::Status BlockingUnaryCall(Channel* channel, absl::string_view method,
                               ClientContext* context,
                               const google::protobuf::MessageLite& request,
                               google::protobuf::MessageLite* response) {
  fake_call::Record(false, channel, method, context, request, response);
  return fake_call::FakeStatus();
}

void AsyncUnaryCall(Channel* channel, absl::string_view method, ClientContext* context,
                    const google::protobuf::MessageLite& request,
                    google::protobuf::MessageLite* response,
                    absl::AnyInvocable<void(absl::Status) &&> done) {
  fake_call::Record(true, channel, method, context, request, response);
  std::move(done)(fake_call::FakeStatus());
}

}  // namespace internal
}  // namespace rdmarpc
