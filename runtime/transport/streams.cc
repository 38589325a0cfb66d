// streams.cc: streams of frames on one connection — messages either way
// after the opening request, per-stream flow-control windows, the server's
// initial metadata, and in-order delivery when a frame must be pulled.
//
// A stream is a client slot opened by a request with kFlagStream; both
// sides name it by (slot, generation) in imm_data. Frames of one stream
// arrive in order (one RC QP), but a large one is a descriptor that must be
// pulled with RDMA READ before it can be delivered; frames of that stream
// that arrive meanwhile are copied aside (StreamIn::deferred) and handled
// once the pull completed, so the receiver sees every stream in order.
// Other streams are not held up.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "runtime/transport/connection.h"
#include "runtime/transport/transport_stats.h"

namespace rdmarpc {
namespace internal {

void Connection::SendStreamMessage(uint32_t handle, std::string payload, bool no_message,
                                   bool end_stream, Attachment attachment) {
  const uint16_t idx = HandleSlot(handle);
  const uint16_t gen = HandleGeneration(handle);
  Slot* s = streams_.Live(idx, gen);
  if (!usable() || s == nullptr || !s->stream) return;
  OutItem item;
  item.kind = OutKind::kStreamMessage;
  item.handle = handle;
  item.slot = idx;
  item.generation = gen;
  item.payload = std::move(payload);
  item.flags = static_cast<uint8_t>((no_message ? kFlagNoMessage : 0) |
                                    (end_stream ? kFlagEndStream : 0));
  if (!no_message) item.attachment = std::move(attachment);
  out_queue_.push_back(std::move(item));
  ScheduleEndOfStep();
}

void Connection::GrantWindow(uint32_t handle, uint32_t messages) {
  const uint16_t idx = HandleSlot(handle);
  const uint16_t gen = HandleGeneration(handle);
  if (!usable() || streams_.Live(idx, gen) == nullptr) return;
  OutItem item;
  item.kind = OutKind::kWindow;
  item.handle = handle;
  item.slot = idx;
  item.generation = gen;
  item.ref = messages;
  out_queue_.push_back(std::move(item));
  ScheduleEndOfStep();
}

void Connection::SendStreamHeaders(const RequestToken& token, std::string meta) {
  if (!usable() || streams_.FindServerStream(token.handle()) == nullptr) return;
  OutItem item;
  item.kind = OutKind::kHeaders;
  item.token = token;
  item.slot = token.slot;
  item.generation = token.generation;
  item.meta = std::move(meta);
  out_queue_.push_back(std::move(item));
  ScheduleEndOfStep();
}

void Connection::SendStreamMessage(const RequestToken& token, std::string payload,
                                   Attachment attachment) {
  if (!usable() || streams_.FindServerStream(token.handle()) == nullptr) return;
  OutItem item;
  item.kind = OutKind::kStreamMessage;
  item.token = token;
  item.slot = token.slot;
  item.generation = token.generation;
  item.payload = std::move(payload);
  item.attachment = std::move(attachment);
  out_queue_.push_back(std::move(item));
  ScheduleEndOfStep();
}

void Connection::GrantWindow(const RequestToken& token, uint32_t messages) {
  if (!usable() || streams_.FindServerStream(token.handle()) == nullptr) return;
  OutItem item;
  item.kind = OutKind::kWindow;
  item.token = token;
  item.slot = token.slot;
  item.generation = token.generation;
  item.ref = messages;
  out_queue_.push_back(std::move(item));
  ScheduleEndOfStep();
}

bool Connection::SendStreamItem(OutItem& item) {
  if (is_client_ && streams_.Live(item.slot, item.generation) == nullptr) return true;  // call ended
  if (!is_client_ && !failed_streams_.empty() &&
      failed_streams_.contains(PackHandle(item.slot, item.generation))) {
    return true;  // FailStreamItem ended the stream
  }
  WireHeader h;
  switch (item.kind) {
    case OutKind::kWindow:
      h.kind = MsgKind::kWindow;
      h.ref = item.ref;
      PostEager(MsgKind::kWindow, item.slot, item.generation, h, {}, {}, {}, {});
      return true;
    case OutKind::kHeaders:
      h.kind = MsgKind::kHeaders;
      h.meta_len = static_cast<uint32_t>(item.meta.size());
      if (SendsEagerly(EncodedPrefixBytes(h), EagerLimit())) {
        PostEager(MsgKind::kHeaders, item.slot, item.generation, h, {}, {}, {}, {}, nullptr,
                  nullptr, 0, item.meta);
        return true;
      }
      // Too large for the eager prefix: the metadata is the payload,
      // exposed and pulled as a large stream message is.
      h.flags = kFlagMetaInPayload;
      item.payload = std::move(item.meta);
      break;
    default:
      break;
  }
  const MsgKind kind = item.kind == OutKind::kHeaders ? MsgKind::kHeaders : MsgKind::kStreamMessage;
  if (kind == MsgKind::kStreamMessage && item.attachment.length > 0) {  // 0 bytes: none
    SendStreamMessageWithAttachment(item);
    return true;
  }
  if (kind == MsgKind::kStreamMessage) h.flags = item.flags;
  h.kind = kind;
  h.payload_len = static_cast<uint32_t>(item.payload.size());
  if (kind == MsgKind::kHeaders) h.meta_len = h.payload_len;
  if (kind == MsgKind::kStreamMessage &&
      SendsEagerly(kWireHeaderBytes + item.payload.size(), EagerLimit())) {
    PostEager(MsgKind::kStreamMessage, item.slot, item.generation, h, {}, {}, {}, item.payload);
    return true;
  }
  // Large: exposed in registered memory; the peer pulls it and releases it.
  if (absl::Status room = exposures_.CheckRoom(item.payload.size()); !room.ok()) {
    FailStreamItem(item, room);
    return true;
  }
  absl::StatusOr<LargeBuffer*> got =
      pool_ != nullptr ? pool_->Get(item.payload.size())
                       : absl::StatusOr<LargeBuffer*>(absl::InternalError("no buffer pool"));
  if (!got.ok()) {
    // Only this stream fails; the connection's others go on.
    FailStreamItem(item, got.status());
    return true;
  }
  absl::StatusOr<uint32_t> rkey = exposures_.Expose(&send_queue_, *got, (*got)->addr(),
                                                    h.payload_len, IBV_ACCESS_REMOTE_READ);
  if (!rkey.ok()) {
    pool_->Put(*got);
    FailStreamItem(item, rkey.status());
    return true;
  }
  std::memcpy((*got)->data, item.payload.data(), item.payload.size());
  loop_->stats().payload_bytes_copied.Add(item.payload.size());
  const uint32_t ref = next_ref_++;
  exposed_[ref] = *got;
  h.flags |= kFlagPayloadRemote;
  h.ref = ref;
  bytes_sent_ += h.payload_len;  // the peer pulls them
  RemoteBuffer pr{(*got)->addr(), *rkey, h.payload_len};
  PostEager(kind, item.slot, item.generation, h, {}, pr, {}, {});
  return true;
}

void Connection::FailStreamItem(const OutItem& item, const absl::Status& why) {
  FailStream(item, absl::Status(ExposeFailureCode(why.code()), absl::StrCat("stream frame of ", item.payload.size(),
                                                         " bytes on the connection to ",
                                                         peer_name_, ": ", why.message())));
}

void Connection::FailStream(const OutItem& item, absl::Status status) {
  if (is_client_) {
    // The call ends here; the server is told with kCancel.
    Slot* s = streams_.Live(item.slot, item.generation);
    if (s == nullptr) return;
    ResponseSink* sink = s->sink;
    CancelCall(PackHandle(item.slot, item.generation));
    sink->OnFailure(status);
    return;
  }
  // The stream ends with these trailers instead of the handler's; its
  // frames queued behind this one are dropped. A handler that has not
  // answered yet is told as for a cancel (its writes fail from now on), and
  // its answer, when it comes, is dropped too.
  if (!usable() || failed_streams_.contains(PackHandle(item.slot, item.generation))) return;
  RequestToken token;
  token.slot = item.slot;
  token.generation = item.generation;
  bool handler_answered = false;  // its answer waits in out_queue_
  for (const OutItem& queued : out_queue_) {
    handler_answered |= queued.kind == OutKind::kResponse && queued.token.slot == token.slot &&
                        queued.token.generation == token.generation;
  }
  QueueResponse(token, status.code(), std::string(status.message()), std::string(),
                std::string(), /*refused=*/false);
  out_queue_.back().ends_failed_stream = true;
  failed_streams_[token.handle()] = FailedStream{};
  if (!handler_answered && handler_ != nullptr) handler_->OnCancel(this, token);
}

void Connection::RefuseStreamFrame(const Imm& imm, const ParsedMessage& m, absl::Status status) {
  if ((m.header.flags & kFlagPayloadRemote) || (m.has_attachment() && m.attachment.remote)) {
    QueueRelease(m.header.ref);
  }
  OutItem item;
  item.slot = imm.slot;
  item.generation = imm.generation;
  FailStream(item, std::move(status));
}

bool Connection::SettleFailedStream(uint32_t handle, bool trailers_sent) {
  auto it = failed_streams_.find(handle);
  if (it == failed_streams_.end()) return false;
  (trailers_sent ? it->second.trailers_sent : it->second.answer_dropped) = true;
  if (it->second.trailers_sent && it->second.answer_dropped) failed_streams_.erase(it);
  return true;
}

void Connection::QueueRelease(uint32_t ref) {
  OutItem rel;
  rel.kind = OutKind::kRelease;
  rel.ref = ref;
  out_queue_.push_back(std::move(rel));
  ScheduleEndOfStep();
}

void Connection::DropStreamIn(StreamIn& in) {
  for (const DeferredFrame& f : in.deferred) {
    if (f.exposes_peer_buffer() &&
        (f.header.kind == MsgKind::kStreamMessage || f.header.kind == MsgKind::kHeaders ||
         f.header.kind == MsgKind::kResponse)) {
      QueueRelease(f.header.ref);
    }
    // The server's answer was here already: it touches the call's buffers
    // no more, and no other answer will come for the cancel.
    if (is_client_ && f.header.kind == MsgKind::kResponse) {
      ReleaseQuarantined(f.imm.slot, f.imm.generation);
    }
  }
  in.deferred.clear();
}

StreamIn* Connection::FindStreamIn(const Imm& imm) {
  if (is_client_) {
    Slot* s = streams_.Live(imm.slot, imm.generation);
    return s != nullptr && s->stream ? &s->in : nullptr;
  }
  return streams_.FindServerStream(PackHandle(imm.slot, imm.generation));
}

bool Connection::DeferIfBehind(const Imm& imm, const ParsedMessage& m) {
  StreamIn* in = FindStreamIn(imm);
  if (in == nullptr || (in->pulls == 0 && in->deferred.empty())) return false;
  if (in->deferred.size() >= kMaxDeferredFrames) {
    // More than a stream's window (and its window grants) behind one pull:
    // only a broken or hostile peer does this.
    Close(absl::UnavailableError(absl::StrCat(
        "protocol error from ", peer_name_, ": more than ", kMaxDeferredFrames,
        " frames of one stream behind a pull")));
    return true;
  }
  DeferredFrame f;
  f.imm = imm;
  f.header = m.header;
  f.aux = std::string(m.aux);
  f.meta = std::string(m.meta);
  f.payload = std::string(m.payload);
  f.payload_remote = m.payload_remote;
  f.reply_buffer = m.reply_buffer;
  f.attachment = m.attachment;
  f.attachment_bytes = std::string(m.attachment_bytes);
  in->deferred.push_back(std::move(f));
  return true;
}

void Connection::RunDeferred(uint32_t key) {
  const Imm probe{MsgKind::kStreamMessage, HandleGeneration(key), HandleSlot(key)};
  while (true) {
    StreamIn* in = FindStreamIn(probe);
    if (in == nullptr || in->pulls > 0 || in->deferred.empty() || !usable()) return;
    DeferredFrame f = std::move(in->deferred.front());
    in->deferred.pop_front();
    const ParsedMessage m = f.View();
    if (f.header.kind == MsgKind::kResponse) {
      HandleResponse(f.imm, m);
    } else {
      HandleStreamFrame(f.imm, m);
    }
  }
}

void Connection::HandleWindow(const Imm& imm, const ParsedMessage& m) {
  if (is_client_) {
    Slot* s = streams_.Live(imm.slot, imm.generation);
    if (s != nullptr && s->stream) s->sink->OnWindow(m.header.ref);
    return;
  }
  if (streams_.FindServerStream(PackHandle(imm.slot, imm.generation)) == nullptr ||
      handler_ == nullptr) {
    return;
  }
  RequestToken token;
  token.slot = imm.slot;
  token.generation = imm.generation;
  handler_->OnWindow(this, token, m.header.ref);
}

void Connection::HandleStreamFrame(const Imm& imm, const ParsedMessage& m) {
  StreamIn* in = FindStreamIn(imm);
  if (in == nullptr) {
    // The stream ended here (answered, cancelled, retired by its deadline):
    // drop the frame, but let the peer reuse a buffer it exposed for it.
    if ((m.header.flags & kFlagPayloadRemote) || (m.has_attachment() && m.attachment.remote)) {
      QueueRelease(m.header.ref);
    }
    return;
  }
  if (is_client_) {
    // The server handles a stream's opening request only once it pulled
    // what the request exposed, and sends nothing on the stream before: it
    // reads those buffers no more, so a long stream does not hold them.
    Slot* s = streams_.Live(imm.slot, imm.generation);
    for (LargeBuffer** b : {&s->request_buffer, &s->attachment_buffer}) {
      if (*b == nullptr) continue;
      RevokeAndPut(*b, /*rekey=*/false);
      *b = nullptr;
    }
    s->request.attachment = Attachment();  // a stream is never sent again
  }
  if (m.header.kind == MsgKind::kHeaders && !(m.header.flags & kFlagPayloadRemote)) {
    if (is_client_) streams_.Live(imm.slot, imm.generation)->sink->OnStreamHeaders(m.meta);
    return;
  }
  const bool end_stream = (m.header.flags & kFlagEndStream) != 0;
  const bool has_message = (m.header.flags & kFlagNoMessage) == 0;
  if (m.header.payload_len > options_.max_message_bytes ||
      (m.has_attachment() && m.attachment.length > options_.max_message_bytes)) {
    // The peer's limit is larger than ours.
    RefuseStreamFrame(imm, m, absl::ResourceExhaustedError(absl::StrCat(
                                  "stream message of ", m.header.payload_len, " bytes",
                                  m.has_attachment()
                                      ? absl::StrCat(" with an attachment of ",
                                                     m.attachment.length, " bytes")
                                      : std::string(),
                                  " from ", peer_name_, " exceeds max_message_bytes ",
                                  options_.max_message_bytes)));
    return;
  }
  if (m.has_attachment() && m.attachment.remote) {
    StartStreamAttachmentPull(imm, m, in);
    return;
  }
  if (m.header.flags & kFlagPayloadRemote) {
    absl::StatusOr<LargeBuffer*> buf =
        pool_ != nullptr ? pool_->Get(m.header.payload_len)
                         : absl::StatusOr<LargeBuffer*>(absl::InternalError("no buffer pool"));
    if (!buf.ok()) {
      RefuseStreamFrame(imm, m, absl::ResourceExhaustedError(absl::StrCat(
                                    "no registered buffer to pull a stream message of ",
                                    m.header.payload_len, " bytes from ", peer_name_, ": ",
                                    buf.status().message())));
      return;
    }
    ReadCtx ctx;
    ctx.stream_message = true;
    ctx.header = m.header;  // kHeaders: the pulled bytes are the metadata
    ctx.end_stream = end_stream;
    ctx.buffer = *buf;
    ctx.remote = m.payload_remote;
    PostStreamPull(imm, in, std::move(ctx));
    return;
  }
  Attachment attachment;
  if (has_message && m.has_attachment() && m.attachment.length > 0) {  // 0 bytes: none
    attachment = CopyToAttachment(m.attachment_bytes.data(), m.attachment_bytes.size());
  }
  if (is_client_) {
    if (has_message) {
      streams_.Live(imm.slot, imm.generation)->sink->OnStreamMessage(m.payload,
                                                                     std::move(attachment));
    }
    return;
  }
  if (handler_ == nullptr) return;
  RequestToken token;
  token.slot = imm.slot;
  token.generation = imm.generation;
  handler_->OnStreamMessage(this, token, m.payload, has_message, end_stream,
                            std::move(attachment));
}

void Connection::PostStreamPull(const Imm& imm, StreamIn* in, ReadCtx ctx) {
  ctx.token.slot = imm.slot;
  ctx.token.generation = imm.generation;
  ctx.handle = PackHandle(imm.slot, imm.generation);
  ctx.ref = ctx.header.ref;
  ++in->pulls;  // the stream's later frames wait for it
  PostRead(std::move(ctx));
}

void Connection::OnStreamPullDone(const ReadCtx& ctx, absl::string_view payload,
                                  Attachment attachment) {
  QueueRelease(ctx.ref);
  const Imm imm{MsgKind::kStreamMessage, ctx.token.generation, ctx.token.slot};
  StreamIn* in = FindStreamIn(imm);
  if (in == nullptr) return;  // the stream ended while we pulled
  --in->pulls;
  if (ctx.header.kind == MsgKind::kHeaders) {
    if (is_client_) streams_.Live(imm.slot, imm.generation)->sink->OnStreamHeaders(payload);
  } else if (is_client_) {
    streams_.Live(imm.slot, imm.generation)->sink->OnStreamMessage(payload, std::move(attachment));
  } else if (handler_ != nullptr) {
    handler_->OnStreamMessage(this, ctx.token, payload, /*has_message=*/true, ctx.end_stream,
                              std::move(attachment));
  }
  RunDeferred(ctx.handle);
}

}  // namespace internal
}  // namespace rdmarpc
