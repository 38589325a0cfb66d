// attachment_access.h: rdmarpc::Buffer (rdmarpc/buffer.h) as the
// transport's Attachment (buffer_pool.h) and back; both share one region.
#ifndef RDMARPC_RUNTIME_RPC_ATTACHMENT_ACCESS_H_
#define RDMARPC_RUNTIME_RPC_ATTACHMENT_ACCESS_H_

#include <utility>

#include "rdmarpc/buffer.h"
#include "runtime/transport/buffer_pool.h"

namespace rdmarpc {
namespace internal {

class AttachmentAccess {
 public:
  // An empty Buffer (no memory) is no attachment.
  static Attachment ToTransport(const Buffer& b) {
    Attachment a;
    a.region = b.region_;
    a.offset = b.offset_;
    a.length = b.size_;
    return a;
  }
  // A server call ends with `request` (its context's request attachment;
  // `response` its response attachment): a received attachment that
  // something beyond the call still holds (the handler stored it, or the
  // transport sends it back) leaves its pool's limit (ExternalRegion::
  // KeptPastItsCall). `call_refs`: references the caller itself still
  // holds for the call (the transport's request, in an inline call). The
  // count is a snapshot: a holder dropping it at the same time only leaves
  // it exempt until it is back in the pool.
  static void EndOfServerCall(const Buffer& request, const Buffer& response, long call_refs = 0) {
    if (request.region_ == nullptr) return;
    const long context_refs = response.region_ == request.region_ ? 2 : 1;
    if (request.region_.use_count() > context_refs + call_refs) {
      request.region_->KeptPastItsCall();
    }
  }
  static Buffer FromTransport(Attachment a) {
    Buffer b;
    b.region_ = std::move(a.region);
    b.offset_ = a.offset;
    b.size_ = a.length;
    return b;
  }
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_ATTACHMENT_ACCESS_H_
