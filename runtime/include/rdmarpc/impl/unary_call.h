// rdmarpc/impl/unary_call.h: client-side entry points used by generated
// stubs. Not for direct use; call the generated `S::Stub` methods instead.
#ifndef RDMARPC_IMPL_UNARY_CALL_H_
#define RDMARPC_IMPL_UNARY_CALL_H_

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/export.h"

namespace rdmarpc {
namespace internal {

// A method's call policies (runtime/rpc/service_config.h).
struct MethodConfig;

// For generated stubs: the policies a method's IDL options set, from one
// gRPC methodConfig object without "name" (the form protoc-gen-rdmarpc
// writes: {"retryPolicy": {...}} or {"hedgingPolicy": {...}}). Parsed once
// per call site (a function-local static) and never freed. nullptr (and an
// ERROR line) when `json` does not parse, which the generator's own checks
// rule out: the method's calls then carry no policy.
RDMARPC_EXPORT const MethodConfig* IdlMethodConfig(const char* json);

// Sends `request` to `method` ("/package.Service/Method") and blocks until the
// response is parsed into `*response` or the call fails. Any thread may call.
// When no other thread polls the channel's completion queue, the calling
// thread does (so the response costs no cross-thread wake-up): it busy-polls
// while its call is in flight, at most 2 ms without a completion, then sleeps
// until the channel's engine thread finishes the call. While it polls it may
// run the completion callbacks of this channel's asynchronous calls. A small
// request is serialised straight into registered memory when it is sent, so
// `request` must not change until this returns.
//
// Returns the server method's status, or:
//   DEADLINE_EXCEEDED  context->deadline() passed first;
//   UNAVAILABLE        no connection could be made, or it was lost (safe to
//                      retry idempotent calls);
//   RESOURCE_EXHAUSTED the request or response is larger than
//                      max_message_bytes (message names both sizes);
//   UNIMPLEMENTED      the server has no such method;
//   INTERNAL           a payload did not parse;
//   INVALID_ARGUMENT   `method` is longer than 1024 bytes (message names its
//                      length), refused before anything is sent;
//   FAILED_PRECONDITION called from a completion callback of a call on the
//                      same channel (it runs on the thread polling the
//                      channel, which would have to deliver this call's
//                      response).
// `idl_config` (may be nullptr) is the method's IDL policy
// (IdlMethodConfig); the channel's service config, when it names the
// method, takes its place. Under a retry or hedging policy (unary calls,
// requests up to ChannelOptions::per_rpc_retry_buffer_bytes) the call may
// be sent up to maxAttempts times (runtime/rpc/retrying_call.h); the status
// is the winning or last attempt's, DEADLINE_EXCEEDED naming the last
// failure when the deadline passed while waiting to retry. `request` is
// serialised once, before the first attempt.
RDMARPC_EXPORT absl::Status BlockingUnaryCall(Channel* channel, absl::string_view method,
                                              ClientContext* context,
                                              const google::protobuf::MessageLite& request,
                                              google::protobuf::MessageLite* response,
                                              const MethodConfig* idl_config = nullptr);

// As BlockingUnaryCall, but returns at once; `done` runs exactly once, on the
// thread polling the channel — a channel engine thread, or a thread waiting
// in BlockingUnaryCall on the same channel (or inline on the caller when the
// call fails before anything is sent) — with the same statuses. `request` is serialised before
// this returns and may be freed then; `context` and `response` must stay
// alive until `done` runs. `done` must not drop the last reference to
// `channel` (its engine thread cannot join itself) and should not block.
RDMARPC_EXPORT void AsyncUnaryCall(Channel* channel, absl::string_view method,
                                   ClientContext* context,
                                   const google::protobuf::MessageLite& request,
                                   google::protobuf::MessageLite* response,
                                   absl::AnyInvocable<void(absl::Status) &&> done,
                                   const MethodConfig* idl_config = nullptr);

// As AsyncUnaryCall, but `done` never runs on the calling thread: a call
// refused before anything is sent gets `done` on one of the channel's engine
// threads too (the reactor rule: no reaction inside a Start call).
RDMARPC_EXPORT void AsyncUnaryCallNeverInline(Channel* channel, absl::string_view method,
                                              ClientContext* context,
                                              const google::protobuf::MessageLite& request,
                                              google::protobuf::MessageLite* response,
                                              absl::AnyInvocable<void(absl::Status) &&> done,
                                              const MethodConfig* idl_config = nullptr);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_IMPL_UNARY_CALL_H_
