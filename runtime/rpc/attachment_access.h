// attachment_access.h: rdmarpc::Buffer (rdmarpc/buffer.h) as the
// transport's Attachment (buffer_pool.h) and back; both share one region.
#ifndef RDMARPC_RUNTIME_RPC_ATTACHMENT_ACCESS_H_
#define RDMARPC_RUNTIME_RPC_ATTACHMENT_ACCESS_H_

#include <memory>
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
  // something beyond the call still holds (the handler stored it) leaves
  // its pool's limit (ExternalRegion::KeptPastItsCall). One sent back in
  // the response stays counted: the transport holds it until the client
  // releases it, and the call's end cannot tell a stored copy from that
  // one. `call_refs`: references the caller itself still holds for the
  // call (the transport's request, in an inline call). The count is a
  // snapshot: a holder dropping it at the same time only leaves it exempt
  // until it is back in the pool.
  static void ExemptIfKeptPastCall(const Buffer& request, const Buffer& response,
                                   long call_refs = 0) {
    if (request.region_ == nullptr || response.region_ == request.region_) return;
    if (request.region_.use_count() > 1 + call_refs) request.region_->KeptPastItsCall();
  }
  // A stream's received attachments, watched without keeping them: at the
  // call's end those something still holds (the handler stored them) leave
  // their pool's limit as a unary request's do.
  static std::weak_ptr<ExternalRegion> Watch(const Buffer& b) { return b.region_; }
  static bool Watches(const std::weak_ptr<ExternalRegion>& w, const Attachment& a) {
    return a.region != nullptr && !w.owner_before(a.region) && !a.region.owner_before(w);
  }
  static void ExemptIfStillHeld(const std::weak_ptr<ExternalRegion>& w) {
    std::shared_ptr<ExternalRegion> region = w.lock();
    if (region != nullptr && region.use_count() > 1) region->KeptPastItsCall();
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
