// connection.h: one RC connection (QP + cm id) and the message protocol on
// it, for either role.
//
// Client role: StartCall/CancelCall; responses reach the call's ResponseSink.
// Server role: requests reach ConnectionHandler::OnRequest; the handler
// answers with SendResponse (then or later, on the loop thread).
//
// A Connection is made of small types, each with its own header: the send
// queue (send_queue.h: signalling, doorbells, send buffers), the receive
// ring (receive_ring.h), the stream table (stream_table.h: client calls,
// server streams, handles, quarantine), the handshake (handshake.h), the
// credit window (credits.h), the buffers exposed to the peer and their
// memory windows (exposure_table.h). Its own files: set-up, close and teardown
// (connection.cc), the eager path and message decoding (eager.cc), streams
// (streams.cc), rendezvous (rendezvous.cc), a call's life (call_slots.cc),
// credit return (credit_return.cc) and keepalive (keepalive.cc). Servers
// get connections from a Listener (listener.h).
//
// Threads: everything here runs on the thread holding the owning EventLoop's
// poller (its own thread, or a caller leading a synchronous call; see
// event_loop.h); other threads use EventLoop::Post. Lifetime: the EventLoop
// owns the Connection (it is the loop's LoopClient). After
// ConnectionHandler::OnClosed the handler must forget the pointer.
#ifndef RDMARPC_RUNTIME_TRANSPORT_CONNECTION_H_
#define RDMARPC_RUNTIME_TRANSPORT_CONNECTION_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/event_loop.h"
#include "runtime/transport/exposure_table.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/credits.h"
#include "runtime/transport/device.h"
#include "runtime/transport/header.h"
#include "runtime/transport/rendezvous_pacer.h"
#include "runtime/transport/receive_ring.h"
#include "runtime/transport/socket_address.h"
#include "runtime/transport/send_queue.h"
#include "runtime/transport/shared_receive_queue.h"
#include "runtime/transport/stream_table.h"
#include "runtime/transport/transport.h"
#include "runtime/verbs/verbs.h"

namespace rdmarpc {
namespace internal {

// The --rdmarpc_rendezvous_* flags' values (rendezvous.cc); RendezvousPacer
// clamps them (at least 1 byte and 1 piece, at most kSendQueueDepth / 4
// pieces in flight).
size_t DefaultRendezvousChunkBytes();
int DefaultRendezvousChunksInFlight();
size_t DefaultRendezvousBulkChunkBytes();
int DefaultRendezvousBulkChunksInFlight();

class Connection;

struct ConnectionOptions {
  size_t eager_limit_bytes = 8 * 1024;
  size_t recv_buffer_bytes = 8 * 1024;  // our receive buffers (advertised)
  int recv_depth = 64;                  // our receives (credits we grant)
  size_t max_message_bytes = 64 * 1024 * 1024;
  // Most registered memory this connection exposes to its peer at once
  // (request and reply buffers of calls, responses and stream messages
  // waiting to be pulled; exposure_table.h), in bytes; 0 = no cap. A
  // message that would pass it fails RESOURCE_EXHAUSTED on its own call.
  size_t max_exposed_bytes = 0;
  absl::Duration connect_timeout = absl::Seconds(20);  // ChannelOptions's
  // Client: with calls in flight and nothing received for this long, probe
  // the server (keepalive.cc) so a silently dead one fails the calls with
  // UNAVAILABLE after the QP's transport timeout. Zero turns it off.
  absl::Duration keepalive_interval = absl::Seconds(1);
  // Rendezvous payloads move in pieces: `rendezvous_chunk_bytes` each, at
  // most `rendezvous_chunks_in_flight` at once while small messages flow on
  // the connection, the bulk pair otherwise (transport.h:
  // kRendezvousChunkBytes; --rdmarpc_rendezvous_* override them
  // process-wide).
  size_t rendezvous_chunk_bytes = DefaultRendezvousChunkBytes();
  int rendezvous_chunks_in_flight = DefaultRendezvousChunksInFlight();
  size_t rendezvous_bulk_chunk_bytes = DefaultRendezvousBulkChunkBytes();
  int rendezvous_bulk_chunks_in_flight = DefaultRendezvousBulkChunksInFlight();
  // Client: asked on the loop thread once per connection attempt, when the
  // route is resolved, with the server's "ip:port"; what it returns goes in
  // the connect request's private data (at most kMaxConnectTokenBytes,
  // handshake.h). An error ends the attempt with that status. Unset: no
  // token.
  std::function<absl::StatusOr<std::string>(absl::string_view peer)> connect_token;
  // Receive from the loop's shared receive queue
  // (shared_receive_queue.h) instead of a ring of recv_depth buffers of the
  // connection's own; recv_depth is then the most credits the peer may
  // hold, `srq_min_credits` the credits it is always granted (and starts
  // with), and the queue shares `srq_extra_buffers` beyond those floors.
  // On a device without SRQs (EnsureSrq: UNIMPLEMENTED) the connection
  // gets its ring after all, with a warning logged once per process.
  // Every connection of one loop must agree on these and recv_buffer_bytes.
  bool shared_receive_queue = false;
  int srq_min_credits = 4;
  int srq_extra_buffers = 512;
  // Test hook (server): asked once per rendezvous request; a positive result
  // delays posting its RDMA READ by that much (timer, loop keeps running).
  absl::Duration (*request_read_delay)() = nullptr;
};

// Handshake steps, as in brpc's RDMA endpoint (what each exchange of
// private data means: handshake.h).
enum class ConnState {
  kResolvingAddr,   // client: rdma_resolve_addr posted
  kResolvingRoute,  // client: rdma_resolve_route posted
  kConnecting,      // client: rdma_connect posted, waiting for ESTABLISHED
  kAccepting,       // server: rdma_accept posted
  kEstablished,
  kClosing,         // disconnected; waiting for flushes
  kClosed,          // QP and id destroyed
};
const char* ConnStateName(ConnState s);

// One connection as /statusz shows it (Connection::Describe): a copy taken
// on its loop, plain values.
// The code a call or stream ends with when this side could not expose its
// data for the peer to pull: RESOURCE_EXHAUSTED as it came (the exposure
// cap, a full pool: retry once others finished), INTERNAL for anything else
// (a registration the device refused). Never the registration's own
// INVALID_ARGUMENT or OUT_OF_RANGE, which would tell the caller its request
// was at fault.
inline absl::StatusCode ExposeFailureCode(absl::StatusCode code) {
  return code == absl::StatusCode::kResourceExhausted ? code : absl::StatusCode::kInternal;
}

struct ConnectionStatus {
  std::string engine;        // the loop's name
  std::string peer;          // host:port
  bool is_client = false;
  std::string state;         // ConnStateName
  std::string device;        // "<device> port <n>", or "-" before the route
  uint32_t qp_num = 0;
  // From ibv_query_qp: RESET, INIT, RTR, RTS, SQD, SQE, ERR; "-" without a QP.
  std::string qp_state;
  int send_credits = 0;      // credits this side may still spend
  int credits_owed = 0;      // receives re-posted, not yet returned to the peer
  int peer_recv_depth = 0;   // credits the peer granted at the handshake
  int local_recv_depth = 0;  // credits this side granted (ring depth, or SRQ in_use)
  bool shared_receive_queue = false;  // receives from its loop's SRQ
  size_t streams_in_flight = 0;     // calls (client) or streams (server) open
  size_t queued_frames = 0;         // waiting for a credit or a send buffer
  size_t rendezvous_in_flight = 0;  // READ pulls and WRITE pushes not ended
  size_t exposed_buffers = 0;       // registered buffers the peer may read or write
  size_t exposed_bytes = 0;         // their bytes
  size_t max_exposed_bytes = 0;     // the cap on them (ConnectionOptions's; 0: none)
  bool memory_windows = false;      // exposed through type-2 windows (else MR rkeys)
  uint64_t messages_sent = 0;       // SEND_WITH_IMM messages posted
  uint64_t messages_received = 0;   // receive completions
  uint64_t bytes_sent = 0;          // those messages, rendezvous pushes and buffers exposed
                                    // for the peer to pull, in bytes
  uint64_t bytes_received = 0;      // messages received and rendezvous pulls, in bytes
  int64_t credit_stall_us = 0;      // time spent waiting for credits, in µs
  uint64_t wc_errors = 0;           // completions in error (flushes excluded)
  std::string last_error;           // the first error completion's status, or the close reason
};

// What a server needs to answer one request.
struct RequestToken {
  uint16_t slot = 0;
  uint16_t generation = 0;
  bool has_reply_buffer = false;
  RemoteBuffer reply_buffer;
  // The client's stream handle (slot and generation).
  uint32_t handle() const { return PackHandle(slot, generation); }
};

struct IncomingRequest {
  absl::string_view method;
  absl::string_view payload;  // valid during OnRequest only
  absl::string_view meta;     // the client's metadata (opaque), likewise
  uint64_t timeout_us = kNoTimeout;
  RequestToken token;
  // A stream (kFlagStream): more messages may follow (OnStreamMessage)
  // until end_stream; has_message says whether `payload` is one.
  bool stream = false;
  bool has_message = true;
  bool end_stream = true;
  // Non-null when `payload` was pulled by rendezvous into a registered
  // buffer of its own: the handler may move the buffer out and keep it
  // (then `payload`, not `meta`, stays valid while it holds it, e.g. to
  // parse a large request on another thread). Otherwise freed after
  // OnRequest.
  PooledBuffer* payload_buffer = nullptr;
  // The request's attachment (header.h: kFlagAttachment), the handler's to
  // keep; empty without one. Unary and server-streaming requests only.
  Attachment attachment;
  // `payload` was pulled by rendezvous together with the attachment, into
  // the memory `attachment` holds (ahead of its bytes): it stays valid
  // while a copy of `attachment` is held, e.g. to parse a large request on
  // another thread.
  bool payload_in_attachment = false;
};

class ConnectionHandler {
 public:
  virtual ~ConnectionHandler() = default;
  virtual void OnEstablished(Connection*) {}
  virtual void OnRequest(Connection*, const IncomingRequest&) {}
  // The client abandoned the request `token` names (kCancel). Delivered only
  // for a request OnRequest already saw and that was not answered yet; the
  // handler must still answer it exactly once (SendResponse, any code: the
  // client only waits for it to reuse its buffers).
  virtual void OnCancel(Connection*, const RequestToken&) {}
  // Streams only, in the order the client sent them: one message (when
  // has_message; `payload` is valid during the call only), and whether the
  // client half-closed with it.
  // `attachment`: the bytes the client sent beside the message (empty
  // without one), the handler's to keep. A `payload` pulled with it lies in
  // the attachment's memory: use it before letting go of `attachment`.
  virtual void OnStreamMessage(Connection*, const RequestToken&, absl::string_view /*payload*/,
                               bool /*has_message*/, bool /*end_stream*/,
                               Attachment /*attachment*/) {}
  // Streams only: the client consumed `messages` more of ours.
  virtual void OnWindow(Connection*, const RequestToken&, uint32_t /*messages*/) {}
  // The connection failed or closed; every call on it already got OnFailure.
  virtual void OnClosed(Connection*, const absl::Status&) {}
  // kGoAway arrived (header.h). Client: the server is draining; start no
  // new call on this connection (its calls in flight finish; the server
  // closes it). Server: the client answered a SendGoAway; no call follows.
  virtual void OnGoAway(Connection*) {}
};

// Longest status message sent, in bytes: keeps every response prefix eager.
inline constexpr size_t kMaxStatusMessage = 1024;

// Where a large response must be serialised to be sent without a copy: at
// this offset of a LargeBuffer (room for the header in front).
inline constexpr size_t kRegisteredResponseOffset = kWireHeaderBytes;

class Connection final : public CmEventHandler, public LoopClient {
 public:
  // Client: starts resolving `dst`; the connection is adopted by `loop`.
  // Returns the connection (in kResolvingAddr) or why it could not start.
  static absl::StatusOr<Connection*> Connect(EventLoop* loop, DeviceResources* device,
                                             const SocketAddress& dst, std::string peer_name,
                                             const ConnectionOptions& options,
                                             ConnectionHandler* handler);
  // Server: `id` (a connect request already migrated to loop's event
  // channel) is set up and accepted. On error the id is rejected/destroyed.
  // `peer_identity` is what the listener's token check made of the
  // client's connection token (Listener::Options::check_token; opaque here,
  // runtime/rpc's AuthContext), nullptr without one.
  static absl::StatusOr<Connection*> Accept(EventLoop* loop, DeviceResources* device,
                                            rdma_cm_id* id, const HandshakeData& peer,
                                            const ConnectionOptions& options,
                                            ConnectionHandler* handler,
                                            std::shared_ptr<const void> peer_identity = nullptr);
  ~Connection() override;

  // --- client role ---
  // Queues the request (sent once established and credits allow). Tells the
  // sink its handle (OnQueued) first; the sink may get OnFailure/OnResponse
  // before this returns, so callers must not touch it afterwards. Returns the
  // handle, or 0 when it failed at once.
  uint32_t StartCall(OutgoingRequest request, ResponseSink* sink);
  // Retires the call: its sink is never called again. A request already sent
  // is cancelled on the server (kCancel); the buffers it exposed stay out of
  // use until the server's answer for that slot and generation arrives (the
  // server may still be reading or writing them), or are revoked when the
  // connection ends first (exposure_table.h). A request not sent yet is dropped. No-op for a
  // finished call.
  void CancelCall(uint32_t handle);

  // Streams (client role): queues one message (or, with no_message, none)
  // after what was queued before, and the client's half-close with it when
  // end_stream. Dropped when the call ended meanwhile. A message above the
  // eager limit is exposed and pulled by the server. `attachment` (with a
  // message only; 0 bytes are none) goes beside it as a unary request's
  // does (SendRequestWithAttachment): inline when the whole frame fits the
  // eager limit, else exposed until the server's kRelease. A failure to
  // send it ends the stream (FailStream): FAILED_PRECONDITION for a server
  // without kFeatureStreamAttachment, RESOURCE_EXHAUSTED above
  // max_message_bytes or the exposure cap.
  void SendStreamMessage(uint32_t handle, std::string payload, bool no_message, bool end_stream,
                         Attachment attachment = Attachment());
  // Streams (client role): we consumed `messages` more of the server's.
  void GrantWindow(uint32_t handle, uint32_t messages);

  // --- server role ---
  // Ends the request's call (a stream: its trailers; then `payload` holds
  // the status details, `meta` the trailing metadata). `attachment` (an OK
  // unary response only; dropped otherwise) goes beside the payload: inline
  // when the whole response fits the eager limit, else exposed for the
  // client to pull straight from its region until the client's kRelease.
  // To a peer without kFeatureAttachment the call ends FAILED_PRECONDITION
  // instead.
  void SendResponse(const RequestToken& token, absl::StatusCode code, std::string message,
                    std::string payload, std::string meta = std::string(),
                    Attachment attachment = Attachment());
  // The peer's handshake offered kFeatureAttachment.
  bool peer_takes_attachments() const { return (peer_.features & kFeatureAttachment) != 0; }
  // The peer's handshake offered kFeatureStreamAttachment.
  bool peer_takes_stream_attachments() const {
    return (peer_.features & kFeatureStreamAttachment) != 0;
  }
  // Answers UNAVAILABLE with `message` for a request the server did not
  // start (it is draining): marked kFlagRefused when the client understands
  // it, so it may send the call elsewhere.
  void RefuseRequest(const RequestToken& token, std::string message);
  // Server: tells the client the server is draining (kGoAway). True when
  // the client understands it and will answer (OnGoAway), false when it
  // cannot (a peer without kFeatureDrain, or the connection is closing).
  bool SendGoAway();
  // The peer's handshake offered kFeatureDrain.
  bool peer_drains() const { return (peer_.features & kFeatureDrain) != 0; }
  // Client: the server sent kGoAway. Server: the client answered ours.
  bool goaway_received() const { return goaway_received_; }
  // Server: SendGoAway returned true and the client has not answered yet.
  bool goaway_unanswered() const { return goaway_sent_ && !goaway_received_; }
  // Streams (server role): initial metadata, then messages, in order.
  // Dropped when the stream ended (answered or cancelled).
  void SendStreamHeaders(const RequestToken& token, std::string meta);
  // `attachment` as for the client's SendStreamMessage; a failure to send
  // it ends the stream with trailers of that status.
  void SendStreamMessage(const RequestToken& token, std::string payload,
                         Attachment attachment = Attachment());
  void GrantWindow(const RequestToken& token, uint32_t messages);
  // An OK response of `size` bytes that `write(source, out)` serialises: when
  // it fits the eager limit and can be posted now (nothing queued ahead,
  // a credit and a send buffer free) it is serialised straight into the
  // registered send buffer and posted with this step's doorbell, and this
  // returns true. Otherwise returns false and nothing happened: the caller
  // falls back to SendResponse / SendRegisteredResponse. `source` is only
  // used during this call.
  bool TrySendResponseInPlace(const RequestToken& token, size_t size, PayloadWriteFn write,
                              const void* source);
  // An OK response already serialised into registered memory at
  // kRegisteredResponseOffset of `buffer` (`len` bytes); saves a copy.
  void SendRegisteredResponse(const RequestToken& token, PooledBuffer buffer, size_t len);
  // Largest message sent eagerly to this peer (0 before the handshake).
  size_t eager_limit() const { return credits_.has_value() ? EagerLimit() : 0; }
  // Whether a message of `body_bytes` after the fixed header (aux,
  // metadata and inline payload; e.g. an OK response's payload) goes
  // eagerly on a connection whose eager_limit() is `eager_limit`
  // (SendsEagerly in transport.h). Any thread.
  static bool MessageSendsEagerly(size_t body_bytes, size_t eager_limit) {
    return SendsEagerly(kWireHeaderBytes + body_bytes, eager_limit);
  }
  // The pool large buffers come from (nullptr before the QP exists).
  LargeBufferPool* large_pool() const { return pool_; }

  // Fails every call with `reason` (code UNAVAILABLE recommended), tells the
  // handler, disconnects and frees everything once the device is done.
  void Close(absl::Status reason);
  // Closes once everything queued was sent and acknowledged by the peer
  // (a signalled zero-length RDMA WRITE posted behind it completed: on an
  // RC QP that retires every WR before it), the peer released every buffer
  // exposed to it (it pulled the large replies) and our own pulls ended; or
  // after `bound`, whichever comes first: replies posted just before are
  // delivered, not flushed.
  void CloseWhenSent(absl::Status reason, absl::Duration bound);
  // Close(reason) for a close this process decided (a server shutting down,
  // a channel destroyed): logged at VLOG(1) only. Close() from anywhere else,
  // and CloseWhenSent, count as the loss or set-up failure they are and are
  // logged at WARNING (at most one line per peer a second, log_limiter.h);
  // a client's orderly disconnect, as the server sees it, is not.
  void Shutdown(absl::Status reason);
  // Destroys at once (loop stopping). QP first, so the device stops.
  void ForceDestroy() override;

  bool usable() const { return state_ != ConnState::kClosing && state_ != ConnState::kClosed; }
  ConnState state() const { return state_; }
  const std::string& peer() const { return peer_name_; }
  // Server: see Accept; set before the connection's first request, then
  // never changed (any thread may read it).
  const std::shared_ptr<const void>& peer_identity() const { return peer_identity_; }
  // The rdma_cm id (for fault injection in tests); nullptr once destroyed.
  rdma_cm_id* cm_id() const { return id_.get(); }
  size_t calls_in_flight() const { return streams_.busy(); }
  // A snapshot for /statusz. Loop thread only.
  ConnectionStatus Describe() const;

  // EventLoop upcalls (LoopClient's data-path members forward here).
  void OnCmEvent(const CmEvent& event) override;
  void OnCompletion(const ibv_wc& wc);
  void RunEndOfStep();
  // The device reported `qp` in error (EventLoop's async events): when it
  // is ours and we did not close, fails as a flushed receive does.
  void OnQpAsyncError(const ibv_qp* qp) {
    if (qp_ && qp_.get() == qp && usable()) NoteQpError();
  }
  // Going idle: re-post the receives held back for a batch at the next
  // RunEndOfStep. Returns true when there were any.
  bool RequestIdleRepost() {
    return srq_ != nullptr ? srq_->RequestIdleRepost() : receive_ring_.RequestIdleRepost();
  }

 private:
  using Slot = StreamTable::Slot;
  enum class OutKind {
    kRequest,
    kResponse,
    kRelease,
    kCancel,
    kStreamMessage,
    kWindow,
    kHeaders,
    kGoAway
  };
  struct OutItem {
    OutKind kind = OutKind::kRequest;
    uint32_t handle = 0;  // kRequest
    RequestToken token;   // kResponse
    absl::StatusCode code = absl::StatusCode::kOk;
    std::string message;
    std::string payload;
    PooledBuffer registered;  // kResponse: payload at kRegisteredResponseOffset
    size_t registered_len = 0;
    uint32_t ref = 0;  // kRelease
    uint16_t slot = 0;        // kCancel, kWindow and kStreamMessage of the client
    uint16_t generation = 0;  // likewise
    uint8_t flags = 0;        // kStreamMessage: kFlagNoMessage, kFlagEndStream
    std::string meta;         // kResponse, kHeaders
    bool refused = false;     // kResponse: with kFlagRefused
    bool ends_failed_stream = false;  // kResponse: FailStreamItem's trailers
    Attachment attachment;            // kResponse, kStreamMessage: beside the payload
  };
  // How far one rendezvous transfer got (rendezvous.cc moves it in pieces).
  struct ChunkProgress {
    uint32_t length = 0;   // bytes to move
    uint32_t posted = 0;   // bytes posted so far
    int outstanding = 0;   // pieces posted and not completed
    bool failed = false;   // a piece completed in error (or was flushed)
    bool all_posted() const { return posted == length; }
  };
  struct ReadCtx {
    bool is_request = false;
    LargeBuffer* buffer = nullptr;
    RemoteBuffer remote;
    // request pull (server)
    RequestToken token;
    std::string method;
    uint64_t timeout_us = kNoTimeout;
    bool cancelled = false;  // the client sent kCancel meanwhile
    // A stream frame's message (either role): delivered in order when
    // pulled, then kRelease(ref) tells the peer.
    bool stream_message = false;
    bool end_stream = false;
    std::string meta;  // the request's metadata (in the prefix)
    WireHeader header;  // the frame's header: kFlagMetaInPayload and meta_len
    // response pull (client)
    uint32_t handle = 0;
    uint32_t ref = 0;
    absl::StatusCode code = absl::StatusCode::kOk;
    std::string message;
    // An attachment pulled after the payload into the same buffer, at
    // offset remote.length (an inline payload is then kept in
    // inline_payload and remote.length is 0).
    bool has_attachment = false;
    RemoteBuffer attachment_remote;
    std::string inline_payload;
    ChunkProgress progress;  // length = remote.length + attachment_remote.length
  };
  // A large response pushed into the client's reply buffer: plain RDMA
  // WRITEs of [first_len, length), then one WRITE_WITH_IMM of [0, first_len)
  // that carries the header (so the client sees it only once every piece
  // before it was placed: RC completes in order).
  struct PushCtx {
    LargeBuffer* buffer = nullptr;  // header + payload, ours until every piece ended
    RemoteBuffer remote;            // the client's reply buffer
    uint32_t first_len = 0;         // bytes the WRITE_WITH_IMM carries
    uint32_t imm = 0;               // host order
    ChunkProgress progress;
  };

  Connection(EventLoop* loop, DeviceResources* device, const ConnectionOptions& options,
             ConnectionHandler* handler, std::string peer_name, bool is_client);
  // Moves to `next`, keeping the engine's connections-by-state gauge.
  void SetState(ConnState next);
  // Credit stalls: Flush calls this after sending what it could.
  void NoteCreditStall();
  // An error completion (not a flush), for Describe.
  void NoteWcError(const ibv_wc& wc);
  // A receive was flushed on a connection not closing: closes it as failed
  // unless the peer's disconnect does first (eager.cc).
  void NoteQpError();

  // Handshake (connection.cc).
  absl::Status SetupQp();
  void OnEstablished(const std::string& private_data);
  void Destroy();
  void MaybeFinishClose();
  // Close: posts a signalled marker WR whose flush retires every send before
  // it, so teardown need not wait kFlushWait for CQEs that never come.
  void PostDrainMarker();
  // CloseWhenSent: posts the marker once the out queue is empty, closes
  // once it completed.
  // Close's log line: WARNING for a set-up failure or a loss (rate-limited
  // per peer), VLOG(1) otherwise.
  void LogClose(ConnState before, const absl::Status& reason) const;
  void MaybeFinishCloseWhenSent();
  // Keepalive (keepalive.cc), client role, from OnEstablished.
  void StartKeepalive();
  void OnKeepaliveTimer();

  // Sending (eager.cc).
  size_t EagerLimit() const;
  // Registers more send buffers when none is free (SendQueue).
  bool CanPostMessage();
  void Flush();
  bool SendOne(OutItem& item);  // false: leave it queued (out of resources)
  bool SendRequest(uint32_t handle);
  bool SendResponseItem(OutItem& item);
  // SendRequest for a request with an attachment (attachments.cc).
  void SendRequestWithAttachment(Slot* s, uint16_t idx, uint16_t gen);
  // The header of request `r` with `flags` and a payload of `payload_size`
  // bytes: method and metadata lengths (or metadata in the payload), and
  // the time left to its deadline, taken now, as it goes on the wire.
  static WireHeader RequestHeader(const OutgoingRequest& r, uint8_t flags, size_t payload_size);
  // The header of response `item` with `flags`, its metadata in the prefix
  // or (`meta_in_payload` bytes) in front of a payload of `payload_size`
  // bytes.
  static WireHeader ResponseHeader(const OutItem& item, uint8_t flags, uint32_t meta_in_payload,
                                   size_t payload_size);
  // A call that cannot start ends with `why` (nothing of it was sent).
  void FailUnsentCall(uint16_t idx, absl::Status why);
  // `payload` is copied (and counted); a non-null `write` serialises
  // `payload_size` bytes from `source` in place instead.
  void PostEager(MsgKind kind, uint16_t slot, uint16_t gen, WireHeader h, absl::string_view aux,
                 const RemoteBuffer& payload_remote, const RemoteBuffer& reply,
                 absl::string_view payload, PayloadWriteFn write = nullptr,
                 const void* source = nullptr, size_t payload_size = 0,
                 absl::string_view meta = absl::string_view(),
                 const AttachmentDescriptor& attachment = AttachmentDescriptor(),
                 absl::string_view inline_attachment = absl::string_view());
  void RepostReceives();
  // Shared receive queue: re-posts its pending buffers (for every
  // connection of the loop) and serves starved shares.
  void RepostSharedReceives();
  // SrqShare::on_granted: `n` credits granted to a starved share.
  static void OnSrqGranted(SrqShare* share, int n);
  // Posts the WRs queued on send_queue_ (one ibv_post_send); a failed post
  // closes the connection.
  void Doorbell();
  // A WR retired without its own completion, never posted, or dropped: a
  // rendezvous piece counts as ended (failed).
  // `executed`: a successful completion retired it (a LOCAL_INV's window
  // may be reused).
  void PutWrBuffers(const SqEntry& e, bool executed) {
    if (e.bulk_id != 0) OnChunkDone(e, nullptr);
    if (e.window != nullptr) exposures_.OnRetired(e, executed);
  }
  // The peer's access to `b` ends (exposure_table.h), then `b` goes back
  // to the pool; `rekey`: without windows, re-register it first (the peer
  // may still hold its rkey).
  void RevokeAndPut(LargeBuffer* b, bool rekey);
  void SendCreditMessage();
  void OnSendCompletion(const ibv_wc& wc);
  void OnRecvCompletion(const ibv_wc& wc);
  void HandleMessage(const Imm& imm, const ParsedMessage& m);
  void HandleResponse(const Imm& imm, const ParsedMessage& m);
  void FinishSlot(uint16_t slot, bool rekey);
  void ReleaseQuarantined(uint16_t slot, uint16_t gen);
  // Server: kCancel for (slot, gen). A request still being pulled is
  // answered CANCELLED when its READ ends instead of being delivered.
  void OnCancelFrame(const Imm& imm);
  void OnGoAwayFrame();
  // SendResponse, and RefuseRequest with `refused`.
  void QueueResponse(const RequestToken& token, absl::StatusCode code, std::string message,
                     std::string payload, std::string meta, bool refused,
                     Attachment attachment = Attachment());
  // Exposes the OK response `item`'s attachment for the client's pull and
  // posts the response with its descriptor (SendResponseItem). A failure
  // ends the call with its status instead.
  void SendResponseWithAttachment(OutItem& item);
  // Starts pulling a message's remote attachment (and a remote payload
  // before it) into one pool buffer: a request (server) or a response
  // (client, `handle`). An inline payload is copied aside first.
  void StartAttachmentPull(const Imm& imm, const ParsedMessage& m, bool is_request);
  // The attachment a finished pull read (at offset remote.length of its
  // buffer, which the attachment then owns).
  Attachment PulledAttachment(const ReadCtx& ctx);
  // Exposes `a` (lent: no copy) for the peer's RDMA READ until its
  // kRelease under a new ref, and, unless `payload_inline`, a pool copy of
  // `payload` beside it: fills `*ad` (remote) and `*pr`, sets h->ref and,
  // for the payload, kFlagPayloadRemote. On failure (RESOURCE_EXHAUSTED:
  // the exposure cap or the pool; OUT_OF_RANGE: a region or window the
  // device cannot cover; INTERNAL without a pool; a registration's error)
  // nothing stays exposed.
  absl::Status ExposeForPull(const Attachment& a, absl::string_view payload, bool payload_inline,
                             WireHeader* h, AttachmentDescriptor* ad, RemoteBuffer* pr);
  // Posts the stream message `item` with its attachment: inline, or
  // exposed (and a payload above the eager limit with it) until the
  // peer's kRelease under the frame's ref. A failure ends the stream
  // (FailStream) with its status.
  void SendStreamMessageWithAttachment(OutItem& item);
  // Starts pulling a stream message's remote attachment (and a remote
  // payload before it), delivered in order by OnStreamPullDone.
  void StartStreamAttachmentPull(const Imm& imm, const ParsedMessage& m, StreamIn* in);

  // Streams (streams.cc).
  // The in-order state of a live stream, or nullptr (not a stream, ended).
  StreamIn* FindStreamIn(const Imm& imm);
  // True when `imm`'s stream has a pull in flight or frames waiting: the
  // frame is then copied behind them.
  bool DeferIfBehind(const Imm& imm, const ParsedMessage& m);
  // Handles the frames of `key` that wait, until one needs a pull.
  void RunDeferred(uint32_t key);
  // Handles one stream frame (kStreamMessage, kHeaders) in order.
  void HandleStreamFrame(const Imm& imm, const ParsedMessage& m);
  void HandleWindow(const Imm& imm, const ParsedMessage& m);
  bool SendStreamItem(OutItem& item);
  // A large stream message that cannot be exposed (the cap, a full pool, a
  // registration that failed): its stream ends with `why`'s message, the
  // frame's size and the peer, as RESOURCE_EXHAUSTED or INTERNAL
  // (ExposeFailureCode; FailStream).
  void FailStreamItem(const OutItem& item, const absl::Status& why);
  // Ends the stream of `item` (its slot and generation) with `status`,
  // e.g. instead of sending it or for a frame above max_message_bytes
  // (client: the call fails and the server gets kCancel; server: trailers
  // with that status, once, and the handler is told as for a cancel).
  void FailStream(const OutItem& item, absl::Status status);
  // A stream frame this side will not take (too large, no buffer to pull
  // it into): the peer may reuse what it exposed for it (kRelease), and
  // only its stream ends, with `status` (FailStream).
  void RefuseStreamFrame(const Imm& imm, const ParsedMessage& m, absl::Status status);
  // A stream FailStreamItem ended: notes that its trailers went out
  // (`trailers_sent`) or that the handler's answer was dropped, and forgets
  // the stream once both happened. False when `handle` is no such stream.
  bool SettleFailedStream(uint32_t handle, bool trailers_sent);
  // Tells the peer it may reuse a buffer it exposed (kRelease).
  void QueueRelease(uint32_t ref);
  // Forgets a stream's in-order state; frames still waiting that name a
  // peer buffer release it.
  void DropStreamIn(StreamIn& in);
  // Posts the pull of stream frame `ctx` (its header, buffer and remote
  // parts set) for `imm`'s stream, whose later frames wait for it.
  void PostStreamPull(const Imm& imm, StreamIn* in, ReadCtx ctx);
  // A pulled stream frame's turn: delivered with `attachment` (empty
  // without one), then the frames deferred behind it.
  void OnStreamPullDone(const ReadCtx& ctx, absl::string_view payload, Attachment attachment);

  // Rendezvous (rendezvous.cc).
  void StartRequestPull(const Imm& imm, const ParsedMessage& m);
  void StartResponsePull(uint32_t handle, const ParsedMessage& m);
  void PostRead(ReadCtx ctx);
  // Queues a large response for a push into the client's reply buffer.
  void StartPush(PooledBuffer buffer, uint32_t total, const RemoteBuffer& remote, uint32_t imm);
  // Posts the next pieces of queued transfers, in order, while fewer than
  // rendezvous_chunks_in_flight are in flight and the SQ has room.
  void PostRendezvousChunks();
  // A piece's completion (or its undo when ibv_post_send refused it).
  void OnChunkDone(const SqEntry& entry, const ibv_wc* wc);
  // True when nobody takes what the pull reads any more (a cancelled
  // request, an ended stream, a retired call): it stops being pulled, and
  // OnReadDone drops it (answering or releasing as the peer needs).
  bool PullAbandoned(const ReadCtx& ctx);
  // A pull whose pieces all ended: delivers (or drops) what it read.
  void OnReadDone(uint64_t id);
  void OnRelease(uint32_t ref);
  void DeliverRequest(const RequestToken& token, absl::string_view method,
                      absl::string_view payload, uint64_t timeout_us, uint8_t flags,
                      absl::string_view meta, PooledBuffer* payload_buffer = nullptr,
                      Attachment attachment = Attachment(), bool payload_in_attachment = false);

  DeviceResources* const device_;
  const ConnectionOptions options_;
  ConnectionHandler* handler_;
  const std::string peer_name_;
  std::shared_ptr<const void> peer_identity_;  // server: see Accept
  bool token_failed_ = false;  // client: options_.connect_token failed this attempt
  const bool is_client_;
  ConnState state_;
  absl::Status close_reason_;

  CmIdPtr id_;
  QpOwner qp_;
  uint32_t qp_num_ = 0;
  uint32_t max_inline_ = 0;
  int cq_entries_ = 0;  // reserved on the loop's CQ
  LargeBufferPool* pool_ = nullptr;
  ReceiveRing receive_ring_;  // unused with a shared receive queue
  SharedReceiveQueue* srq_ = nullptr;  // the loop's, from SetupQp to Destroy
  SrqShare srq_share_;
  SendQueue send_queue_;  // and the eager send buffers
  HandshakeData peer_;
  bool goaway_sent_ = false;
  bool goaway_received_ = false;
  std::optional<CreditWindow> credits_;

  std::deque<OutItem> out_queue_;
  // Rendezvous transfers by id, from queued to their last piece's end.
  absl::flat_hash_map<uint64_t, ReadCtx> reads_;
  absl::flat_hash_map<uint64_t, PushCtx> pushes_;
  struct QueuedTransfer {
    uint64_t id = 0;
    bool read = false;
  };
  // Transfers with pieces left to post, oldest first.
  std::deque<QueuedTransfer> transfer_queue_;
  uint64_t next_transfer_id_ = 1;
  RendezvousPacer pacer_;
  void NoteSmallMessage() { pacer_.NoteSmallMessage(); }
  static bool IsSmallMessage(MsgKind kind, uint8_t flags) {
    return (kind == MsgKind::kRequest || kind == MsgKind::kResponse ||
            kind == MsgKind::kStreamMessage) &&
           !(flags & kFlagPayloadRemote);
  }
  // READs held back by the test hook, by a local id.
  absl::flat_hash_map<uint64_t, ReadCtx> delayed_reads_;
  uint64_t next_delayed_ = 1;

  // Client calls, server streams, quarantined buffers.
  StreamTable streams_;

  // Buffers exposed to the peer until its kRelease: a server's large
  // responses and either side's large stream messages.
  absl::flat_hash_map<uint32_t, LargeBuffer*> exposed_;
  // Response and stream-message attachments (lent buffers) exposed until
  // the peer's kRelease, by the frame's ref (its payload, when exposed
  // too, is in exposed_ under the same ref).
  absl::flat_hash_map<uint32_t, LargeBuffer*> exposed_attachments_;
  // Every buffer the peer may reach (those above, and client calls'
  // request and reply buffers), its window, and the cap.
  ExposureTable exposures_;
  // Server: streams FailStreamItem ended with trailers of its own. Until
  // those trailers went out and the handler's own answer was dropped, the
  // stream's frames still queued or still to come are dropped too: one
  // reaching the exposure cap again would end the stream a second time.
  struct FailedStream {
    bool trailers_sent = false;
    bool answer_dropped = false;
  };
  absl::flat_hash_map<uint32_t, FailedStream> failed_streams_;
  uint32_t next_ref_ = 1;

  std::vector<EventLoop::TimerId> timers_;
  EventLoop::TimerId connect_timer_ = 0;
  EventLoop::TimerId keepalive_timer_ = 0;
  uint64_t recvs_seen_ = 0;           // receive completions, for the keepalive
  uint64_t recvs_at_last_probe_ = 0;  // recvs_seen_ when its timer was set
  bool close_when_sent_ = false;      // CloseWhenSent was called
  bool qp_error_noted_ = false;       // NoteQpError ran
  bool local_close_ = false;          // Shutdown or CloseWhenSent: not a loss
  bool peer_disconnected_ = false;    // RDMA_CM_EVENT_DISCONNECTED closed it
  absl::Status close_when_sent_reason_;
  bool drain_marker_posted_ = false;
  uint64_t drain_marker_seq_ = 0;
  bool probe_posted_ = false;         // a keepalive probe was ever posted
  uint64_t probe_seq_ = 0;            // the last probe's SQ sequence number

  // For Describe (loop thread only).
  uint64_t messages_sent_ = 0;
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
  uint64_t wc_errors_ = 0;
  std::string first_wc_error_;
  CreditStallTimer credit_stall_;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_CONNECTION_H_
