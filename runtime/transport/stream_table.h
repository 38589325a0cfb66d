// stream_table.h: the streams of one connection — the client's table of
// calls in flight (slots), the server's in-order state of its open streams,
// the packing of a stream's handle, and the buffers of abandoned calls kept
// out of use until the server's late answer.
//
// A client call (a unary call is a stream with one message each way) takes
// a slot; its index and the slot's generation name the stream on the wire
// (imm_data: 16 bits of slot, 12 of generation) and in a 32-bit handle
// (PackHandle), so a frame finds its stream without parsing and a frame for
// a retired call (deadline, cancel) is recognised as stale by its
// generation. Generations skip 0 so that handle 0 means "no call". The
// server names a client's stream by the same handle.
//
// Threads: the owning connection's loop (poller holder) only.
#ifndef RDMARPC_RUNTIME_TRANSPORT_STREAM_TABLE_H_
#define RDMARPC_RUNTIME_TRANSPORT_STREAM_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/header.h"
#include "runtime/transport/transport.h"

namespace rdmarpc {
namespace internal {

// A stream's handle: generation << 16 | slot (the one place it is packed).
inline constexpr uint32_t PackHandle(uint16_t slot, uint16_t generation) {
  return (static_cast<uint32_t>(generation) << 16) | slot;
}
inline constexpr uint16_t HandleSlot(uint32_t handle) {
  return static_cast<uint16_t>(handle & 0xFFFF);
}
inline constexpr uint16_t HandleGeneration(uint32_t handle) {
  return static_cast<uint16_t>(handle >> 16);
}
// The generation a slot takes after `g`: within imm_data's 12 bits, never 0.
inline constexpr uint16_t NextGeneration(uint16_t g) {
  const uint16_t next = static_cast<uint16_t>((g + 1) & kGenerationMask);
  return next == 0 ? 1 : next;
}
static_assert(NextGeneration(kGenerationMask) == 1 && NextGeneration(1) == 2);
static_assert(HandleSlot(PackHandle(7, 9)) == 7 && HandleGeneration(PackHandle(7, 9)) == 9);

// Serialises a payload of a known size straight into `out` (a registered
// send buffer with room for it): the zero-copy path for small messages.
// `source` is whatever the writer needs (e.g. a protobuf message).
using PayloadWriteFn = void (*)(const void* source, char* out);

struct OutgoingRequest {
  // Valid while the call is live (the caller's ClientCall holds the bytes).
  absl::string_view method;
  // The request, one of:
  //  * `write` + `source` (`source_size` bytes): serialised straight into the
  //    send buffer when the request is posted; `source` must stay valid while
  //    the call is live (a synchronous caller's own message);
  //  * already in registered memory: `registered` bytes [0, registered_len)
  //    (a large request, saves a copy);
  //  * in `payload` (copied into the send buffer: counted in EngineStats::payload_bytes_copied).
  PayloadWriteFn write = nullptr;
  const void* source = nullptr;
  size_t source_size = 0;
  // `write` copies bytes the caller serialised already (an asynchronous
  // call's own buffer, kept for its next call) rather than serialising:
  // counted in EngineStats::payload_bytes_copied as a `payload` is.
  bool write_copies = false;
  std::string payload;
  PooledBuffer registered;
  size_t registered_len = 0;
  // Opaque metadata sent with the request (runtime/rpc encodes it).
  std::string meta;
  // Bytes beside the message (header.h: kFlagAttachment), unary and
  // server-streaming calls only (a stream's later messages carry theirs:
  // Connection::SendStreamMessage): inline when the whole request fits the
  // eager limit, else exposed for the server to pull straight from the
  // region (no copy) until the call's answer, or for a stream until the
  // server's first frame on it (HandleStreamFrame). The region is kept
  // alive until then.
  Attachment attachment;
  // Opens a stream (kFlagStream): the request may carry no message
  // (no_message) and need not end the client's side (end_stream false);
  // SendStreamMessage adds messages. A unary request is neither.
  bool stream = false;
  bool no_message = false;
  bool end_stream = true;
  // A unary call whose channel may send it to another server: a posted
  // `payload` up to kRetryBufferBytes is kept until the answer
  // (ResponseSink::OnRefused).
  bool keep_for_retry = false;
  // Set by the transport: the metadata was moved to the front of `payload`.
  uint32_t meta_in_payload = 0;
  // The call's deadline; the time left until it travels in the header,
  // taken when the request is posted (so the server never sees more time
  // than the client has left). InfiniteFuture: none.
  absl::Time deadline = absl::InfiniteFuture();
  size_t payload_size() const {
    return write != nullptr ? source_size : registered ? registered_len : payload.size();
  }
  // Not for `write` requests.
  absl::string_view payload_view() const {
    return registered ? absl::string_view(registered->data, registered_len)
                      : absl::string_view(payload);
  }
};

// The client call waiting on a response. Loop thread.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // The call's handle (for CancelCall), given before anything is sent.
  virtual void OnQueued(uint32_t /*handle*/) {}
  // The request was posted to the QP (it may reach the server now).
  virtual void OnSent() {}
  // Streams only (OutgoingRequest::stream), in the order the server sent
  // them, before OnResponse: its initial metadata (opaque bytes), each of
  // its messages, and how many more of ours it will take (kWindow). Views
  // are valid during the call only. OnResponse ends a stream; its payload
  // is then the status details, not a message.
  virtual void OnStreamHeaders(absl::string_view /*meta*/) {}
  // Just before OnResponse / OnResponseInBuffer, when the response carries
  // an attachment: its bytes, which the sink may keep (they are its own,
  // pulled from the server or copied out of the receive buffer).
  virtual void OnResponseAttachment(Attachment /*attachment*/) {}
  // Just before OnResponse, when the response carries metadata (opaque).
  virtual void OnResponseMetadata(absl::string_view /*meta*/) {}
  // `attachment`: the bytes sent beside the message (empty without), the
  // sink's to keep. A `payload` pulled with it lies in the attachment's
  // memory: use it before letting go of `attachment`.
  virtual void OnStreamMessage(absl::string_view /*payload*/, Attachment /*attachment*/) {}
  virtual void OnWindow(uint32_t /*messages*/) {}
  // `message` and `payload` are valid during the call only.
  virtual void OnResponse(absl::StatusCode code, absl::string_view message,
                          absl::string_view payload) = 0;
  // As OnResponse, for a response that arrived by rendezvous: `payload`
  // lies in `*buffer`, which the sink may move out and keep (the view then
  // stays valid while it holds the buffer, e.g. to parse it on another
  // thread than the loop's; the buffer may be reset on any thread, its
  // pool is thread-safe and lives as long as the Channel). Default:
  // OnResponse.
  virtual void OnResponseInBuffer(absl::StatusCode code, absl::string_view message,
                                  absl::string_view payload, PooledBuffer* /*buffer*/) {
    OnResponse(code, message, payload);
  }
  // The call failed in the transport (UNAVAILABLE, RESOURCE_EXHAUSTED, ...).
  virtual void OnFailure(absl::Status status) = 0;
  // The call never started on a server, so it may be sent elsewhere (gRPC's
  // transparent retry): the connection failed before the request was
  // posted (OnNotSent), or the server answered that it did not start it, as
  // a draining server does (OnRefused, `status` its answer, UNAVAILABLE).
  // `request` comes back as the sink gave it, less what the transport let
  // go once it was on the wire: a posted eager `payload` above
  // kRetryBufferBytes and a posted `registered` buffer are empty. Unary
  // calls only. Defaults: OnFailure(status).
  virtual void OnNotSent(absl::Status status, OutgoingRequest /*request*/) {
    OnFailure(std::move(status));
  }
  virtual void OnRefused(absl::Status status, OutgoingRequest /*request*/) {
    OnFailure(std::move(status));
  }
};

// The largest posted request payload a unary call keeps until its answer,
// so a refused call can be sent again (gRPC's per-RPC retry buffer,
// grpc.per_rpc_retry_buffer_size, has the same default: 256 KiB).
inline constexpr size_t kRetryBufferBytes = 256 * 1024;

// A frame of a stream that arrived while an earlier one of the same
// stream was still being pulled: kept (copied) and handled in order.
struct DeferredFrame {
  Imm imm;
  WireHeader header;
  std::string aux, meta, payload;
  RemoteBuffer payload_remote, reply_buffer;
  AttachmentDescriptor attachment;
  std::string attachment_bytes;  // an inline attachment
  ParsedMessage View() const {
    ParsedMessage m;
    m.header = header;
    m.aux = aux;
    m.meta = meta;
    m.payload = payload;
    m.payload_remote = payload_remote;
    m.reply_buffer = reply_buffer;
    m.attachment = attachment;
    m.attachment_bytes = attachment_bytes;
    return m;
  }
  // The frame names a buffer of the peer's (a remote payload or
  // attachment) that it holds until our kRelease.
  bool exposes_peer_buffer() const {
    return (header.flags & kFlagPayloadRemote) ||
           ((header.flags & kFlagAttachment) && attachment.remote);
  }
};
// Frames of one stream a well-behaved peer can have in flight behind one
// pull: a window of messages, as many window grants, headers, trailers
// (runtime/rpc's window is 16 messages; 4x that leaves room).
inline constexpr size_t kMaxDeferredFrames = 64;
// In-order delivery state of one stream (either role).
struct StreamIn {
  int pulls = 0;  // a READ of one of its frames is in flight (0 or 1)
  std::deque<DeferredFrame> deferred;
};

class StreamTable {
 public:
  // One client call.
  struct Slot {
    uint16_t generation = 1;  // never 0, so handle 0 means "no call"
    bool busy = false;
    bool sent = false;
    ResponseSink* sink = nullptr;
    OutgoingRequest request;
    LargeBuffer* request_buffer = nullptr;
    LargeBuffer* reply_buffer = nullptr;
    LargeBuffer* attachment_buffer = nullptr;  // the request's attachment, exposed
    bool stream = false;  // opened with kFlagStream
    StreamIn in;          // streams only
  };

  // At most `max_slots` calls at once (kMaxSlots: imm_data's 16 bits).
  explicit StreamTable(size_t max_slots = kMaxSlots) : max_slots_(max_slots) {}
  StreamTable(const StreamTable&) = delete;
  StreamTable& operator=(const StreamTable&) = delete;

  // --- client calls ---
  // Takes a free slot (busy, not sent) for a new call and returns its
  // handle; 0 when max_slots calls are open.
  uint32_t Open();
  // The call in `slot` if it is open with generation `gen`, else nullptr
  // (never opened, ended, or a stale frame of an earlier call).
  Slot* Live(uint16_t slot, uint16_t gen) {
    if (slot >= slots_.size()) return nullptr;
    Slot& s = slots_[slot];
    return s.busy && s.generation == gen ? &s : nullptr;
  }
  Slot* Live(uint32_t handle) { return Live(HandleSlot(handle), HandleGeneration(handle)); }
  // Slot `index` (< size()), open or not.
  Slot& slot(uint16_t index) { return slots_[index]; }
  // Slots made so far (open or free).
  size_t size() const { return slots_.size(); }
  // Calls open.
  size_t busy() const { return busy_; }
  // Ends the call in `index`: the slot is reset (the caller dealt with its
  // buffers and stream state), takes the next generation and is free again.
  void Free(uint16_t index);

  // --- buffers of calls that ended before the server answered ---
  // Keeps `request` and `reply` (either may be null) of the call (slot,
  // gen) out of use: the server may still READ or WRITE them.
  void Quarantine(uint16_t slot, uint16_t gen, LargeBuffer* request, LargeBuffer* reply,
                  LargeBuffer* attachment = nullptr);
  // The server answered (slot, gen): its quarantined buffers, which it will
  // not touch again, are handed back (removed from the table). Empty when
  // there were none.
  std::vector<LargeBuffer*> TakeQuarantined(uint16_t slot, uint16_t gen);
  // The connection ends: calls `fn` for every quarantined buffer, then
  // forgets them.
  template <class Fn>
  void DrainQuarantine(Fn fn) {
    for (auto& [handle, buffers] : quarantine_) {
      for (LargeBuffer* b : buffers) fn(b);
    }
    quarantine_.clear();
  }
  size_t quarantined_calls() const { return quarantine_.size(); }

  // --- server: streams open on this connection (a request with
  // kFlagStream, not yet answered), by handle ---
  // False when `handle` is open already.
  bool OpenServerStream(uint32_t handle) { return server_streams_.try_emplace(handle).second; }
  // The stream's state, or nullptr when it is not open.
  StreamIn* FindServerStream(uint32_t handle) {
    if (server_streams_.empty()) return nullptr;  // unary traffic: no hashing
    auto it = server_streams_.find(handle);
    return it == server_streams_.end() ? nullptr : &it->second;
  }
  // The stream's state, opened if it was not.
  StreamIn& ServerStream(uint32_t handle) { return server_streams_[handle]; }
  void EraseServerStream(uint32_t handle) { server_streams_.erase(handle); }
  void ClearServerStreams() { server_streams_.clear(); }
  // Server streams open now (the client's calls are busy()).
  size_t server_streams() const { return server_streams_.size(); }

 private:
  const size_t max_slots_;
  std::vector<Slot> slots_;
  std::vector<uint16_t> free_slots_;
  size_t busy_ = 0;
  // By handle: buffers of calls retired before their answer.
  absl::flat_hash_map<uint32_t, std::vector<LargeBuffer*>> quarantine_;
  absl::flat_hash_map<uint32_t, StreamIn> server_streams_;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_STREAM_TABLE_H_
