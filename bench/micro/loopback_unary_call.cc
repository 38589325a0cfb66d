// loopback_unary_call.cc: the runtime's two call entry points
// (rdmarpc/impl/unary_call.h) replaced by a loopback for stub_bench.cc. The
// request is serialised as AsyncUnaryCall does (ByteSizeLong, then
// SerializeWithCachedSizesToArray into a buffer) and those bytes come back as
// the response, parsed as ClientCall::OnResponse does. Echo's request and
// response have the same wire format, so the parse is the real one.
//
// Like tests/compiler/fake_unary_call.cc, it must not be linked with the
// rdmarpc library. Not thread-safe (one buffer): single-threaded benchmarks.
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "rdmarpc/impl/unary_call.h"

namespace rdmarpc {
namespace internal {
namespace {

absl::Status Loopback(absl::string_view method, const google::protobuf::MessageLite& request,
                      google::protobuf::MessageLite* response) {
  static std::string* const wire = new std::string();
  const size_t size = request.ByteSizeLong();
  wire->resize(size);
  request.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(wire->data()));
  if (!response->ParseFromArray(wire->data(), static_cast<int>(wire->size()))) {
    return absl::InternalError(absl::StrCat("response of ", size, " bytes to ", method,
                                            " did not parse as ", response->GetTypeName()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BlockingUnaryCall(Channel* /*channel*/, absl::string_view method,
                               ClientContext* /*context*/,
                               const google::protobuf::MessageLite& request,
                               google::protobuf::MessageLite* response,
                               const MethodConfig* /*idl_config*/) {
  return Loopback(method, request, response);
}

void AsyncUnaryCall(Channel* /*channel*/, absl::string_view method, ClientContext* /*context*/,
                    const google::protobuf::MessageLite& request,
                    google::protobuf::MessageLite* response,
                    absl::AnyInvocable<void(absl::Status) &&> done,
                    const MethodConfig* /*idl_config*/) {
  std::move(done)(Loopback(method, request, response));
}

}  // namespace internal
}  // namespace rdmarpc
