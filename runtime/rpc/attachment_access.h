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
