// rdmarpc/buffer.h: bytes that travel beside a call's message without being
// serialised or copied by the runtime (brpc's attachments, Mercury's bulk
// handles).
//
// A unary call carries at most one attachment each way: set it with
// ClientContext::set_request_attachment / ServerContext::
// set_response_attachment, read it with ServerContext::request_attachment /
// ClientContext::response_attachment. On a stream each message may carry
// one: Write(message, buffer) and Read(&message, &buffer) of the readers,
// writers and reactors (rdmarpc/sync_stream.h, client_callback.h,
// server_callback.h); a server-streaming call's one request carries the
// ClientContext's request attachment, and a client-streaming call's one
// response the ServerContext's response attachment. Small attachments (the whole message
// within the eager limit, 8 KiB by default) ride in the message's SEND.
// Larger ones stay where they are: the runtime exposes the sender's Buffer
// to the peer (a memory window bound for that call where the device has
// them, else a registration of its own) and the peer's NIC pulls it with
// RDMA READ straight into registered memory that becomes the receiving
// user's Buffer. One pass over the bytes, by the NIC; none by the runtime.
// An attachment of 0 bytes is not sent: the peer sees none (an empty
// Buffer that holds no memory), as brpc's empty attachment is no attachment.
//
//   rdmarpc::Buffer value = rdmarpc::Buffer::Allocate(16 << 20);
//   FillWith(value.data(), value.size());
//   rdmarpc::ClientContext ctx;
//   ctx.set_request_attachment(value);
//   absl::Status s = stub->Put(&ctx, request, &response);
//
// Memory: Allocate returns page-aligned heap memory. Where the device has
// memory windows, the first large send over a Channel or Server registers
// the Buffer with that device once (kept while the Buffer lives) and each
// call binds a window on it, so reuse a Buffer across calls rather than
// allocating one per call; a received Buffer already lies in that device's
// registered memory, and sending it on over the same Channel or Server (an
// echo, a proxy) registers nothing. Without windows each large send
// registers the bytes for that send alone (remote READ only).
//
// Ownership and lifetime: a Buffer is a shared handle (copies share the
// bytes; the memory goes when the last copy and the runtime are done).
// The runtime holds the bytes of an attachment it sends until the peer
// read them (for a request, until the server answered, or for a
// server-streaming call's request until its first message or metadata
// arrived, which for a cancelled call or a losing hedged attempt may be
// after the call ended; for a response or a stream message, until the
// peer's release, which the sender's code cannot see), so the Buffer may
// be dropped at once. Treat a sent Buffer's bytes as read-only: the
// peer's NIC may read them until then. For memory to reuse, Wrap it: its release
// callback is the signal that no NIC reads it any more. A received Buffer
// may be kept after its Channel or Server is destroyed. It lies in a
// buffer of the receiver's pool of registered buffers (64 KiB granules;
// a large message pulled with it lies in the same buffer, ahead of it).
// On a server that buffer counts against ServerOptions::
// large_buffer_pool_bytes while its call runs; once the call ends with the
// Buffer still held by the handler's code (a stored value), the
// attachment's own bytes stop counting until the last copy is dropped
// (the message's part still counts). One sent back as the response's
// attachment stays counted until the client released it. A server that
// keeps many received attachments therefore holds that much registered
// (pinned) memory of its own. A stream message's attachment that a server
// handler read counts likewise until its call ends, then leaves the limit
// if the handler kept it (unless it wrote it back on the stream).
//
// Thread safety: a Buffer's methods are const and safe to call from any
// thread; the bytes themselves are the user's to synchronise.
#ifndef RDMARPC_BUFFER_H_
#define RDMARPC_BUFFER_H_

#include <cstddef>
#include <functional>
#include <memory>

#include "absl/strings/string_view.h"
#include "rdmarpc/export.h"

namespace rdmarpc {
namespace internal {
class ExternalRegion;
class AttachmentAccess;
}  // namespace internal

class RDMARPC_EXPORT Buffer {
 public:
  // An empty Buffer: no bytes, and as an attachment, none.
  Buffer() = default;

  // `bytes` of page-aligned memory, not zeroed. Aborts when the memory
  // cannot be allocated, as operator new does. Any thread.
  static Buffer Allocate(size_t bytes);
  // A Buffer holding a copy of `bytes` (a convenience for small values:
  // the copy is the caller's cost, not the transport's).
  static Buffer CopyOf(absl::string_view bytes);
  // Memory the caller owns: `size` bytes at `data`, which must stay valid
  // and unchanged until `release` runs. `release` runs once, on any thread,
  // when the last copy of the Buffer is gone and no NIC may read the bytes
  // any more (after every call it was attached to ended and each device
  // that registered it deregistered it). A null `release` is allowed when
  // the memory outlives every use.
  static Buffer Wrap(void* data, size_t size, std::function<void()> release);

  char* data() const;
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  absl::string_view view() const { return absl::string_view(data(), size_); }
  // Whether this Buffer holds memory (an empty Allocate(0) does too).
  explicit operator bool() const { return region_ != nullptr; }
  // `length` bytes at `offset` of this Buffer, sharing its memory (and
  // its registrations). Clamped to what this Buffer holds.
  Buffer Slice(size_t offset, size_t length) const;

 private:
  friend class internal::AttachmentAccess;
  std::shared_ptr<internal::ExternalRegion> region_;
  size_t offset_ = 0;
  size_t size_ = 0;
};

}  // namespace rdmarpc

#endif  // RDMARPC_BUFFER_H_
