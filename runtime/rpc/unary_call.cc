// unary_call.cc: BlockingUnaryCall and AsyncUnaryCall.
#include "rdmarpc/impl/unary_call.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "runtime/rpc/channel_impl.h"

namespace rdmarpc {
namespace internal {

void AsyncUnaryCall(Channel* channel, absl::string_view method, ClientContext* context,
                    const google::protobuf::MessageLite& request,
                    google::protobuf::MessageLite* response,
                    absl::AnyInvocable<void(absl::Status) &&> done) {
  ChannelImpl* impl = channel->impl();
  const size_t size = request.ByteSizeLong();
  if (size > impl->options().max_message_bytes) {
    std::move(done)(absl::ResourceExhaustedError(
        absl::StrCat("request of ", size, " bytes exceeds max_message_bytes ",
                     impl->options().max_message_bytes)));
    return;
  }
  if (method.size() > 1024) {
    std::move(done)(absl::InvalidArgumentError(
        absl::StrCat("method name of ", method.size(), " bytes is longer than 1024")));
    return;
  }
  if (absl::Now() >= context->deadline()) {
    std::move(done)(absl::DeadlineExceededError(
        absl::StrCat("deadline passed before ", method, " was sent")));
    return;
  }
  auto* call = new ClientCall;
  call->method = std::string(method);
  bool serialized = false;
  // A request that will go by rendezvous is serialised straight into
  // registered memory when the channel already has its device (saves a copy).
  if (size + 32 + method.size() > impl->options().eager_limit_bytes) {
    if (LargeBufferPool* pool = impl->large_pool(); pool != nullptr) {
      absl::StatusOr<LargeBuffer*> buf = pool->Get(size);
      if (buf.ok()) {
        call->registered = PooledBuffer(pool, *buf);
        call->registered_len = size;
        request.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>((*buf)->data));
        serialized = true;
      }
    }
  }
  if (!serialized) {
    call->payload.resize(size);
    if (size > 0) {
      request.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(call->payload.data()));
    }
  }
  call->deadline = context->deadline();
  call->response = response;
  call->context = context;
  call->done = std::move(done);
  impl->Start(call);
}

absl::Status BlockingUnaryCall(Channel* channel, absl::string_view method, ClientContext* context,
                               const google::protobuf::MessageLite& request,
                               google::protobuf::MessageLite* response) {
  if (channel->impl()->OnEngineThread()) {
    // The response could only be delivered by this thread; waiting would
    // hang past any deadline (the deadline timer runs here too).
    return absl::FailedPreconditionError(absl::StrCat(
        "blocking call to ", method,
        " from a completion callback of the same channel would deadlock; use stub->async()"));
  }
  absl::Notification finished;
  absl::Status result;
  AsyncUnaryCall(channel, method, context, request, response, [&](absl::Status s) {
    result = std::move(s);
    finished.Notify();
  });
  finished.WaitForNotification();
  return result;
}

}  // namespace internal
}  // namespace rdmarpc
