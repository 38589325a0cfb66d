// buffer.cc: rdmarpc::Buffer over the transport's ExternalRegion.
#include "rdmarpc/buffer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "glog/logging.h"
#include "runtime/rpc/attachment_access.h"
#include "runtime/transport/buffer_pool.h"

namespace rdmarpc {

Buffer Buffer::Allocate(size_t bytes) {
  constexpr size_t kPage = 4096;
  void* p = nullptr;
  CHECK_EQ(posix_memalign(&p, kPage, bytes == 0 ? kPage : bytes), 0)
      << "rdmarpc::Buffer::Allocate: cannot allocate " << bytes << " bytes";
  internal::Attachment a;
  a.region = std::make_shared<internal::ExternalRegion>(
      static_cast<char*>(p), bytes, std::shared_ptr<void>(p, [](void* q) { std::free(q); }));
  a.length = bytes;
  return internal::AttachmentAccess::FromTransport(std::move(a));
}

Buffer Buffer::CopyOf(absl::string_view bytes) {
  Buffer b = Allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
  return b;
}

Buffer Buffer::Wrap(void* data, size_t size, std::function<void()> release) {
  internal::Attachment a;
  a.region = std::make_shared<internal::ExternalRegion>(
      static_cast<char*>(data), size,
      std::shared_ptr<void>(data, [release = std::move(release)](void*) {
        if (release) release();
      }));
  a.length = size;
  return internal::AttachmentAccess::FromTransport(std::move(a));
}

char* Buffer::data() const { return region_ != nullptr ? region_->data() + offset_ : nullptr; }

Buffer Buffer::Slice(size_t offset, size_t length) const {
  Buffer b = *this;
  if (offset > size_) offset = size_;
  if (length > size_ - offset) length = size_ - offset;
  b.offset_ = offset_ + offset;
  b.size_ = length;
  return b;
}

}  // namespace rdmarpc
