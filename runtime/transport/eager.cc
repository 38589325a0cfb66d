// eager.cc: the eager path — SEND_WITH_IMM of header + payload into a
// pre-posted receive, posted through the SendQueue (send_queue.h) — and the
// receive side's message decoding. Credit return is in credit_return.cc, a
// client call's life in call_slots.cc (its slot in stream_table.h), large
// payloads in rendezvous.cc.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "runtime/transport/connection.h"
#include "runtime/transport/transport_stats.h"

namespace rdmarpc {
namespace internal {
namespace {
// Send-queue entries one message may take: its SEND and the BIND_MWs of the
// (at most two) buffers it exposes (exposure_table.h).
constexpr int kWrsPerMessage = 3;
// How long a QP found in the error state waits for the peer's DISCONNECTED
// before the connection closes as failed (NoteQpError).
constexpr absl::Duration kQpErrorGrace = absl::Seconds(1);
}  // namespace

size_t Connection::EagerLimit() const {
  return std::min<size_t>(options_.eager_limit_bytes, peer_.recv_buffer_bytes);
}

bool Connection::CanPostMessage() {
  return credits_.has_value() && credits_->CanSendMessage() &&
         send_queue_.room() >= kWrsPerMessage && send_queue_.has_send_buffer();
}

void Connection::SendResponse(const RequestToken& token, absl::StatusCode code, std::string message,
                              std::string payload, std::string meta, Attachment attachment) {
  QueueResponse(token, code, std::move(message), std::move(payload), std::move(meta),
                /*refused=*/false, std::move(attachment));
}

void Connection::QueueResponse(const RequestToken& token, absl::StatusCode code,
                               std::string message, std::string payload, std::string meta,
                               bool refused, Attachment attachment) {
  if (!usable()) return;
  // The handler's answer for a stream whose trailers the transport queued
  // already (FailStreamItem): dropped.
  if (!failed_streams_.empty() && SettleFailedStream(token.handle(), /*trailers_sent=*/false)) {
    return;
  }
  if (StreamIn* in = streams_.FindServerStream(token.handle()); in != nullptr) {
    // A stream's trailers: frames of it that still arrive are dropped.
    DropStreamIn(*in);
    streams_.EraseServerStream(token.handle());
    attachment = Attachment();  // trailers carry none
  }
  // An error drops it; 0 bytes are no attachment (buffer.h).
  if (code != absl::StatusCode::kOk || attachment.length == 0) attachment = Attachment();
  if (attachment && !peer_takes_attachments()) {
    code = absl::StatusCode::kFailedPrecondition;
    message = absl::StrCat("response attachment of ", attachment.length, " bytes: client ",
                           peer_name_, " does not take attachments (an older rdmarpc)");
    payload.clear();
    attachment = Attachment();
  }
  if (attachment.length > options_.max_message_bytes) {
    code = absl::StatusCode::kResourceExhausted;
    message = absl::StrCat("response attachment of ", attachment.length,
                           " bytes exceeds max_message_bytes ", options_.max_message_bytes);
    payload.clear();
    attachment = Attachment();
  }
  if (message.size() > kMaxStatusMessage) message.resize(kMaxStatusMessage);
  if (payload.size() > options_.max_message_bytes) {
    message = absl::StrCat("response of ", payload.size(), " bytes exceeds max_message_bytes ",
                           options_.max_message_bytes);
    code = absl::StatusCode::kResourceExhausted;
    payload.clear();
  }
  OutItem item;
  item.kind = OutKind::kResponse;
  item.token = token;
  item.code = code;
  item.message = std::move(message);
  item.payload = std::move(payload);
  item.meta = std::move(meta);
  item.refused = refused;
  item.attachment = std::move(attachment);
  out_queue_.push_back(std::move(item));
  ScheduleEndOfStep();
}

void Connection::RefuseRequest(const RequestToken& token, std::string message) {
  const bool marked = peer_drains() && streams_.FindServerStream(token.handle()) == nullptr;
  QueueResponse(token, absl::StatusCode::kUnavailable, std::move(message), std::string(),
                std::string(), marked);
}

bool Connection::SendGoAway() {
  if (!usable() || is_client_ || !peer_drains()) return false;
  if (goaway_sent_) return !goaway_received_;
  goaway_sent_ = true;
  OutItem item;
  item.kind = OutKind::kGoAway;
  out_queue_.push_back(std::move(item));
  ScheduleEndOfStep();
  return true;
}

void Connection::OnGoAwayFrame() {
  // A server hears only answers to its own kGoAway.
  if (goaway_received_ || (!is_client_ && !goaway_sent_)) return;
  goaway_received_ = true;
  if (is_client_) {
    // The answer: nothing of ours follows it here.
    OutItem item;
    item.kind = OutKind::kGoAway;
    out_queue_.push_back(std::move(item));
    ScheduleEndOfStep();
  }
  if (handler_ != nullptr) handler_->OnGoAway(this);
}

bool Connection::TrySendResponseInPlace(const RequestToken& token, size_t size,
                                        PayloadWriteFn write, const void* source) {
  if (!usable() || !out_queue_.empty() || !CanPostMessage() ||
      (state_ != ConnState::kEstablished && state_ != ConnState::kAccepting) ||
      !SendsEagerly(kWireHeaderBytes + size, EagerLimit()) ||
      size > options_.max_message_bytes) {
    return false;
  }
  WireHeader h;
  h.kind = MsgKind::kResponse;
  h.status_code = static_cast<uint32_t>(absl::StatusCode::kOk);
  h.payload_len = static_cast<uint32_t>(size);
  PostEager(MsgKind::kResponse, token.slot, token.generation, h, {}, {}, {}, {}, write, source,
            size);
  ScheduleEndOfStep();  // the doorbell rings once this loop step ends
  return true;
}

void Connection::Flush() {
  if (state_ != ConnState::kEstablished && state_ != ConnState::kAccepting) return;
  exposures_.PostPendingInvalidations(&send_queue_);
  PostRendezvousChunks();
  while (!out_queue_.empty() && CanPostMessage()) {
    if (!SendOne(out_queue_.front())) break;
    out_queue_.pop_front();
  }
  if (!out_queue_.empty() || credit_stall_.stalled()) NoteCreditStall();
  Doorbell();
  if (close_when_sent_) MaybeFinishCloseWhenSent();
}

bool Connection::SendOne(OutItem& item) {
  switch (item.kind) {
    case OutKind::kRequest:
      return SendRequest(item.handle);
    case OutKind::kResponse:
      if (!failed_streams_.empty() && failed_streams_.contains(item.token.handle())) {
        if (!item.ends_failed_stream) {
          // The handler answered before FailStreamItem ended the stream.
          SettleFailedStream(item.token.handle(), /*trailers_sent=*/false);
          return true;
        }
        if (!SendResponseItem(item)) return false;
        SettleFailedStream(item.token.handle(), /*trailers_sent=*/true);
        return true;
      }
      return SendResponseItem(item);
    case OutKind::kRelease: {
      WireHeader h;
      h.kind = MsgKind::kRelease;
      h.ref = item.ref;
      PostEager(MsgKind::kRelease, 0, 0, h, {}, {}, {}, {});
      return true;
    }
    case OutKind::kCancel: {
      WireHeader h;
      h.kind = MsgKind::kCancel;
      PostEager(MsgKind::kCancel, item.slot, item.generation, h, {}, {}, {}, {});
      return true;
    }
    case OutKind::kGoAway: {
      WireHeader h;
      h.kind = MsgKind::kGoAway;
      PostEager(MsgKind::kGoAway, 0, 0, h, {}, {}, {}, {});
      return true;
    }
    case OutKind::kStreamMessage:
    case OutKind::kWindow:
    case OutKind::kHeaders:
      return SendStreamItem(item);
  }
  return true;
}

WireHeader Connection::RequestHeader(const OutgoingRequest& r, uint8_t flags,
                                    size_t payload_size) {
  WireHeader h;
  h.kind = MsgKind::kRequest;
  h.flags = flags;
  h.aux_len = static_cast<uint16_t>(r.method.size());
  h.meta_len = static_cast<uint32_t>(r.meta.size());
  h.payload_len = static_cast<uint32_t>(payload_size);
  if (r.meta_in_payload != 0) {
    h.flags |= kFlagMetaInPayload;
    h.meta_len = r.meta_in_payload;
  }
  if (r.deadline != absl::InfiniteFuture()) {
    // Taken now, as the request goes on the wire: time spent connecting or
    // queued behind other requests is not offered to the server.
    h.timeout_us = static_cast<uint64_t>(
        std::max<int64_t>(0, absl::ToInt64Microseconds(r.deadline - absl::Now())));
  }
  return h;
}

WireHeader Connection::ResponseHeader(const OutItem& item, uint8_t flags,
                                     uint32_t meta_in_payload, size_t payload_size) {
  WireHeader h;
  h.kind = MsgKind::kResponse;
  h.flags = flags;
  h.status_code = static_cast<uint32_t>(item.code);
  h.aux_len = static_cast<uint16_t>(item.message.size());
  h.meta_len = static_cast<uint32_t>(item.meta.size());
  if (meta_in_payload != 0) {
    h.flags |= kFlagMetaInPayload;
    h.meta_len = meta_in_payload;
  }
  h.payload_len = static_cast<uint32_t>(payload_size);
  return h;
}

bool Connection::SendRequest(uint32_t handle) {
  const uint16_t idx = HandleSlot(handle);
  const uint16_t gen = HandleGeneration(handle);
  Slot* s = streams_.Live(idx, gen);
  if (s == nullptr) return true;  // cancelled while queued
  OutgoingRequest& r = s->request;
  const size_t descriptors =
      2 * kRemoteBufferBytes + (r.attachment.length > 0 ? kAttachmentDescriptorBytes : 0);
  if (!r.meta.empty() &&
      !SendsEagerly(kWireHeaderBytes + r.method.size() + r.meta.size() + descriptors,
                    EagerLimit())) {
    // Too large for the eager prefix: the metadata leads the payload and
    // travels with it (runtime/rpc passes a request with metadata as bytes).
    r.payload.insert(0, r.meta);
    r.meta_in_payload = static_cast<uint32_t>(r.meta.size());
    r.meta.clear();
  }
  if (r.attachment.length > 0) {  // a 0-byte attachment is not sent (buffer.h)
    SendRequestWithAttachment(s, idx, gen);
    return true;
  }
  const size_t payload_size = r.payload_size();
  const uint8_t flags =
      r.stream ? static_cast<uint8_t>(kFlagStream | (r.no_message ? kFlagNoMessage : 0) |
                                      (r.end_stream ? kFlagEndStream : 0))
               : 0;
  WireHeader h = RequestHeader(r, flags, payload_size);
  const size_t eager_total = kWireHeaderBytes + r.method.size() + r.meta.size() + payload_size;
  if (SendsEagerly(eager_total, EagerLimit())) {
    if (r.write != nullptr) {
      if (r.write_copies) loop_->stats().payload_bytes_copied.Add(payload_size);
      PostEager(MsgKind::kRequest, idx, gen, h, r.method, {}, {}, {}, r.write, r.source,
                payload_size, r.meta);
    } else {
      PostEager(MsgKind::kRequest, idx, gen, h, r.method, {}, {}, r.payload_view(), nullptr,
                nullptr, 0, r.meta);
    }
    s->sent = true;
    s->sink->OnSent();
    // A unary call keeps a small payload until its answer, to be sent
    // again if the server refuses it (ResponseSink::OnRefused).
    if (r.stream || !r.keep_for_retry || r.payload.size() > kRetryBufferBytes) {
      r.payload = std::string();
    }
    r.registered.reset();
    return true;
  }
  // Rendezvous: expose the payload, and (unary) a reply buffer sized like
  // the request (rule in transport.h); a stream's replies are stream frames.
  h.flags |= kFlagPayloadRemote;
  if (!r.stream) h.flags |= kFlagReplyBuffer;
  if (!SendsEagerly(EncodedPrefixBytes(h), EagerLimit()) || pool_ == nullptr) {
    ResponseSink* sink = s->sink;
    FinishSlot(idx, false);
    sink->OnFailure(absl::InvalidArgumentError(absl::StrCat(
        "method name of ", h.aux_len, " bytes and metadata of ", h.meta_len,
        " bytes do not fit the eager limit ", EagerLimit())));
    return true;
  }
  // The request, and a unary call's reply buffer (sized like the request),
  // must fit under the connection's exposure cap. (Expose checks again
  // with the reply buffer's capacity, which the pool rounds up.)
  if (absl::Status room = exposures_.CheckRoom(payload_size + (r.stream ? 0 : eager_total));
      !room.ok()) {
    ResponseSink* sink = s->sink;
    FinishSlot(idx, false);
    sink->OnFailure(absl::ResourceExhaustedError(
        absl::StrCat("request of ", payload_size, " bytes to ", peer_name_, ": ", room.message())));
    return true;
  }
  PooledBuffer req = std::move(r.registered);
  if (!req) {
    absl::StatusOr<LargeBuffer*> got = pool_->Get(payload_size);
    if (!got.ok()) {
      ResponseSink* sink = s->sink;
      FinishSlot(idx, false);
      sink->OnFailure(got.status());
      return true;
    }
    req = PooledBuffer(pool_, *got);
    if (r.write != nullptr) {
      r.write(r.source, req->data);  // serialisation, unless write_copies
      if (r.write_copies) loop_->stats().payload_bytes_copied.Add(payload_size);
    } else {
      std::memcpy(req->data, r.payload.data(), payload_size);
      loop_->stats().payload_bytes_copied.Add(payload_size);
    }
  }
  RemoteBuffer rb;
  if (!r.stream) {
    absl::StatusOr<LargeBuffer*> reply = pool_->Get(eager_total);
    if (!reply.ok()) {
      ResponseSink* sink = s->sink;
      FinishSlot(idx, false);
      sink->OnFailure(reply.status());
      return true;
    }
    s->reply_buffer = *reply;
    // A response that does not fit is exposed for us to pull instead.
    rb = RemoteBuffer{(*reply)->addr(), 0,
                      static_cast<uint32_t>(std::min((*reply)->capacity, kMaxWindowBytes))};
  }
  s->request_buffer = req.release();
  RemoteBuffer pr{s->request_buffer->addr(), 0, h.payload_len};
  // Each buffer is reachable by the server for this call only: the request
  // for its RDMA READ, the reply buffer for its RDMA WRITE.
  absl::StatusOr<uint32_t> rkey =
      exposures_.Expose(&send_queue_, s->request_buffer, pr.addr, pr.length,
                        IBV_ACCESS_REMOTE_READ);
  if (rkey.ok()) {
    pr.rkey = *rkey;
    if (s->reply_buffer != nullptr) {
      rkey = exposures_.Expose(&send_queue_, s->reply_buffer, rb.addr, rb.length,
                               IBV_ACCESS_REMOTE_WRITE);
      if (rkey.ok()) rb.rkey = *rkey;
    }
  }
  if (!rkey.ok()) {
    // Nothing was sent: FinishSlot revokes what was exposed.
    ResponseSink* sink = s->sink;
    FinishSlot(idx, false);
    sink->OnFailure(absl::Status(rkey.status().code(),
                                 absl::StrCat("request of ", payload_size, " bytes to ",
                                              peer_name_, ": ", rkey.status().message())));
    return true;
  }
  PostEager(MsgKind::kRequest, idx, gen, h, r.method, pr, rb, {}, nullptr, nullptr, 0, r.meta);
  s->sent = true;
  s->sink->OnSent();
  if (r.stream || !r.keep_for_retry || r.payload.size() > kRetryBufferBytes) {
    r.payload = std::string();
  }
  return true;
}

void Connection::SendRegisteredResponse(const RequestToken& token, PooledBuffer buffer,
                                        size_t len) {
  if (!usable()) return;
  if (len > options_.max_message_bytes) {
    SendResponse(token, absl::StatusCode::kResourceExhausted,
                 absl::StrCat("response of ", len, " bytes exceeds max_message_bytes ",
                              options_.max_message_bytes),
                 std::string());
    return;
  }
  OutItem item;
  item.kind = OutKind::kResponse;
  item.token = token;
  item.registered = std::move(buffer);
  item.registered_len = len;
  out_queue_.push_back(std::move(item));
  ScheduleEndOfStep();
}

bool Connection::SendResponseItem(OutItem& item) {
  if (item.attachment.length > 0) {  // a 0-byte attachment is not sent (buffer.h)
    SendResponseWithAttachment(item);
    return true;
  }
  // The status message rides in the eager header even when the payload is
  // large, so it must leave room for the header and a descriptor.
  const size_t max_message = EagerLimit() - kWireHeaderBytes - 2 * kRemoteBufferBytes;
  uint32_t meta_in_payload = 0;
  if (item.meta.size() > max_message / 2) {
    // Too large for the eager prefix: the metadata leads the payload.
    if (item.registered) {
      item.payload.assign(item.registered->data + kRegisteredResponseOffset, item.registered_len);
      loop_->stats().payload_bytes_copied.Add(item.registered_len);
      item.registered.reset();
    }
    item.payload.insert(0, item.meta);
    meta_in_payload = static_cast<uint32_t>(item.meta.size());
    item.meta.clear();
  }
  if (item.message.size() > max_message - item.meta.size()) {
    item.message.resize(max_message - item.meta.size());
  }
  const size_t head = item.message.size() + item.meta.size();  // after the header
  const size_t payload_size = item.registered ? item.registered_len : item.payload.size();
  const absl::string_view payload =
      item.registered
          ? absl::string_view(item.registered->data + kRegisteredResponseOffset, payload_size)
          : absl::string_view(item.payload);
  WireHeader h =
      ResponseHeader(item, item.refused ? kFlagRefused : 0, meta_in_payload, payload_size);
  const size_t total = kWireHeaderBytes + head + payload_size;
  if (SendsEagerly(total, EagerLimit())) {
    PostEager(MsgKind::kResponse, item.token.slot, item.token.generation, h, item.message, {}, {},
              payload, nullptr, nullptr, 0, item.meta);
    return true;
  }
  // Large: the payload must sit in registered memory with room for the
  // header in front (so one WRITE_WITH_IMM carries both).
  PooledBuffer b;
  if (item.registered && head == 0) {
    b = std::move(item.registered);
  } else {
    absl::StatusOr<LargeBuffer*> got =
        pool_ != nullptr ? pool_->Get(kRegisteredResponseOffset + head + payload_size)
                         : absl::StatusOr<LargeBuffer*>(absl::InternalError("no buffer pool"));
    if (!got.ok()) {
      h.status_code = static_cast<uint32_t>(ExposeFailureCode(got.status().code()));
      std::string msg(got.status().message().substr(0, kMaxStatusMessage));
      h.aux_len = static_cast<uint16_t>(msg.size());
      h.meta_len = 0;
      h.payload_len = 0;
      PostEager(MsgKind::kResponse, item.token.slot, item.token.generation, h, msg, {}, {}, {});
      return true;
    }
    b = PooledBuffer(pool_, *got);
    std::memmove(b->data + kWireHeaderBytes + head, payload.data(), payload_size);
  }
  if (item.token.has_reply_buffer && total <= item.token.reply_buffer.length) {
    // Push: header + payload straight into the client's reply buffer.
    // No credits in this header: a client whose call already ended ignores
    // it, and credits must never be lost.
    h.credits = 0;
    EncodePrefix(h, item.message, {}, {}, b->data, item.meta);
    credits_->Consume();  // for the last piece, the WRITE_WITH_IMM
    StartPush(std::move(b), static_cast<uint32_t>(total), item.token.reply_buffer,
              EncodeImm({MsgKind::kResponseWritten, item.token.generation, item.token.slot}));
    return true;
  }
  // Expose: the client pulls with RDMA READ and sends kRelease.
  RemoteBuffer pr{b->addr() + kWireHeaderBytes + head, 0, h.payload_len};
  absl::StatusOr<uint32_t> rkey =
      exposures_.Expose(&send_queue_, b.get(), pr.addr, pr.length, IBV_ACCESS_REMOTE_READ);
  if (!rkey.ok()) {
    // The call ends with the reason instead (the buffer goes back with b).
    h.status_code = static_cast<uint32_t>(ExposeFailureCode(rkey.status().code()));
    std::string msg =
        absl::StrCat("response of ", payload_size, " bytes to ", peer_name_, ": ",
                     rkey.status().message().substr(0, kMaxStatusMessage));
    h.aux_len = static_cast<uint16_t>(msg.size());
    h.flags &= static_cast<uint8_t>(~kFlagMetaInPayload);
    h.meta_len = 0;
    h.payload_len = 0;
    PostEager(MsgKind::kResponse, item.token.slot, item.token.generation, h, msg, {}, {}, {});
    return true;
  }
  pr.rkey = *rkey;
  const uint32_t ref = next_ref_++;
  exposed_[ref] = b.release();
  h.flags |= kFlagPayloadRemote;
  h.ref = ref;
  bytes_sent_ += h.payload_len;  // the peer pulls them
  PostEager(MsgKind::kResponse, item.token.slot, item.token.generation, h, item.message, pr, {},
            {}, nullptr, nullptr, 0, item.meta);
  return true;
}

void Connection::PostEager(MsgKind kind, uint16_t slot, uint16_t gen, WireHeader h,
                           absl::string_view aux, const RemoteBuffer& payload_remote,
                           const RemoteBuffer& reply, absl::string_view payload,
                           PayloadWriteFn write, const void* source, size_t payload_size,
                           absl::string_view meta, const AttachmentDescriptor& attachment,
                           absl::string_view inline_attachment) {
  if (IsSmallMessage(kind, h.flags)) NoteSmallMessage();  // rendezvous pacing
  const int buf = send_queue_.TakeSendBuffer();
  CHECK_GE(buf, 0) << "caller checks CanPostMessage";
  char* out = send_queue_.send_buffer(buf);
  // Owed credits ride in this header: no separate kCredit message while
  // traffic flows both ways.
  h.credits = credits_->TakeOwed();
  h.aux_len = static_cast<uint16_t>(aux.size());
  if (!(h.flags & kFlagMetaInPayload)) h.meta_len = static_cast<uint32_t>(meta.size());
  const size_t prefix = EncodePrefix(h, aux, payload_remote, reply, out, meta, attachment);
  if (write != nullptr) {
    if (payload_size > 0) write(source, out + prefix);  // serialised in place
  } else {
    payload_size = payload.size();
    if (payload_size > 0) {
      std::memcpy(out + prefix, payload.data(), payload_size);
      loop_->stats().payload_bytes_copied.Add(payload_size);
    }
  }
  if (!inline_attachment.empty()) {
    std::memcpy(out + prefix + payload_size, inline_attachment.data(), inline_attachment.size());
    loop_->stats().payload_bytes_copied.Add(inline_attachment.size());
  }
  const size_t len = prefix + payload_size + inline_attachment.size();
  DCHECK_LE(len, EagerLimit());
  ibv_sge sge{reinterpret_cast<uint64_t>(out), static_cast<uint32_t>(len),
              send_queue_.send_lkey(buf)};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htonl(EncodeImm({kind, gen, slot}));
  if (len <= max_inline_) wr.send_flags |= IBV_SEND_INLINE;
  credits_->Consume();
  SqEntry e;
  e.send_buffer = buf;
  send_queue_.PostWr(&wr, e, /*force_signal=*/false);
  ++messages_sent_;
  bytes_sent_ += len;
}

void Connection::NoteCreditStall() {
  const bool stalled = state_ != ConnState::kClosed && !out_queue_.empty() &&
                       credits_.has_value() && !credits_->CanSendMessage();
  credit_stall_.Update(stalled, absl::ToUnixNanos(absl::Now()), &loop_->stats());
}

void Connection::NoteQpError() {
  if (qp_error_noted_) return;
  qp_error_noted_ = true;
  // A receive flushed while we did not close: the QP is in the error state.
  // A peer's disconnect does that just before its DISCONNECTED event
  // arrives (then that closes us, as an orderly end); a refused RDMA access
  // of the peer's to our memory does it with no event at all, and nothing
  // else would fail this connection's calls before their deadlines.
  timers_.push_back(loop_->AddTimer(
      absl::Now() + kQpErrorGrace,
      [this] {
        if (!usable()) return;
        Close(absl::UnavailableError(absl::StrCat(
            "connection to ", peer_name_,
            " failed: its QP entered the error state with no disconnect from the peer "
            "(receives flushed); an RDMA access was refused, e.g. the peer used an rkey of a "
            "buffer no longer exposed to it")));
      },
      /*needs_completions=*/false));
}

void Connection::NoteWcError(const ibv_wc& wc) {
  ++wc_errors_;
  if (first_wc_error_.empty()) first_wc_error_ = ibv_wc_status_str(wc.status);
}

void Connection::Doorbell() {
  // A piece that never entered the QP ends failed; Close below follows.
  const int rc = send_queue_.Doorbell(
      [this](uint64_t /*seq*/, const SqEntry& e) { PutWrBuffers(e, /*executed=*/false); });
  if (rc != 0) {
    // A post error means the QP is unusable.
    Close(absl::UnavailableError(absl::StrCat("connection to ", peer_name_, ": ",
                                              ErrnoToStatus("ibv_post_send", rc).message())));
  }
}

void Connection::OnCompletion(const ibv_wc& wc) {
  if (ReceiveRing::IsReceive(wc.wr_id)) {
    OnRecvCompletion(wc);
  } else {
    OnSendCompletion(wc);
  }
}

void Connection::OnSendCompletion(const ibv_wc& wc) {
  const uint64_t seq = wc.wr_id;
  if (!send_queue_.outstanding(seq)) return;
  if (SqEntry& e = send_queue_.entry(seq); e.bulk_id != 0) {
    const SqEntry piece = e;
    e.bulk_id = 0;
    OnChunkDone(piece, &wc);
  }
  if (SqEntry& e = send_queue_.entry(seq); e.window != nullptr && wc.status != IBV_WC_SUCCESS) {
    // A LOCAL_INV that failed or was flushed: its window is not reused.
    const SqEntry inv = e;
    e.window = nullptr;
    exposures_.OnRetired(inv, /*executed=*/false);
  }
  if (wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR) {
    NoteWcError(wc);
    // Close logs the cause at WARNING: the peer sees only "peer
    // disconnected", so this side's log is the one place that names it (e.g.
    // a transport timeout).
    Close(absl::UnavailableError(absl::StrCat("connection to ", peer_name_, " failed: ",
                                              ibv_wc_status_str(wc.status))));
  }
  // In-order SQ completion: this one retires every WR up to it.
  // Every piece is signalled: one retired here lost its own completion
  // (an RC send queue never does that), so it counts as failed and the
  // connection is not to be trusted any more.
  bool lost_piece = false;
  send_queue_.RetireThrough(seq, [this, &lost_piece](const SqEntry& e) {
    lost_piece |= e.bulk_id != 0;
    PutWrBuffers(e, /*executed=*/true);
  });
  if (lost_piece && usable()) {
    Close(absl::InternalError(absl::StrCat("connection to ", peer_name_,
                                           ": a rendezvous piece was retired without its "
                                           "completion")));
  }
  if (close_when_sent_) MaybeFinishCloseWhenSent();
  MaybeFinishClose();
}

void Connection::OnRecvCompletion(const ibv_wc& wc) {
  ++recvs_seen_;  // the peer is alive (keepalive.cc)
  int idx;
  if (srq_ != nullptr) {
    srq_->OnCompleted();
    idx = SharedReceiveQueue::BufferIndex(wc.wr_id);
    // The loop's buffer goes back whatever happens to this message (a
    // flushed one too: the SRQ outlives this QP).
    srq_->Consumed(idx);
    loop_->NoteHeldReceives(this);
  } else {
    receive_ring_.OnCompleted();
    idx = ReceiveRing::BufferIndex(wc.wr_id);
  }
  if (wc.status != IBV_WC_SUCCESS) {
    if (wc.status != IBV_WC_WR_FLUSH_ERR) {
      NoteWcError(wc);
      Close(absl::UnavailableError(absl::StrCat("connection to ", peer_name_,
                                                " failed on receive: ",
                                                ibv_wc_status_str(wc.status))));
    } else if (usable()) {
      NoteQpError();
    }
    MaybeFinishClose();
    return;
  }
  if (!usable()) {
    MaybeFinishClose();
    return;
  }
  if (!credits_.has_value()) {
    // A client's message before its ESTABLISHED (the window comes with it).
    // librdmacm moves the QP to RTR inside the rdma_get_cm_event call that
    // returns ESTABLISHED, which this loop handles before it polls again,
    // so only a provider that breaks that order gets here.
    Close(absl::UnavailableError(absl::StrCat("protocol error from ", peer_name_,
                                              ": a message arrived in state ",
                                              ConnStateName(state_),
                                              ", before the connection was established")));
    return;
  }
  if (srq_ != nullptr) {
    // One credit spent; what the share allows comes back (owed).
    const int granted = srq_->OnMessage(&srq_share_);
    if (granted < 0) {
      Close(absl::UnavailableError(absl::StrCat(
          "protocol error from ", peer_name_,
          ": a message beyond the credits granted on the shared receive queue")));
      return;
    }
    credits_->OnReposted(granted);
    credits_->SetPeerWindow(srq_share_.in_use);
  } else {
    receive_ring_.Consumed(idx);
    loop_->NoteHeldReceives(this);
  }
  bytes_received_ += wc.byte_len;
  if (!(wc.wc_flags & IBV_WC_WITH_IMM)) {
    Close(absl::UnavailableError(absl::StrCat("protocol error from ", peer_name_,
                                              ": message without imm_data")));
    return;
  }
  absl::StatusOr<Imm> imm = DecodeImm(ntohl(wc.imm_data));
  if (!imm.ok()) {
    Close(absl::UnavailableError(absl::StrCat("protocol error from ", peer_name_, ": ",
                                              imm.status().message())));
    return;
  }
  if (state_ == ConnState::kAccepting) SetState(ConnState::kEstablished);
  absl::string_view bytes;
  if (imm->kind == MsgKind::kResponseWritten) {
    Slot* s = streams_.Live(imm->slot, imm->generation);
    if (s == nullptr) {
      // Stale: the call ended (deadline) before the data landed in its
      // quarantined reply buffer, which may now be reused. (This header
      // carries no credits, see SendResponseItem.)
      ReleaseQuarantined(imm->slot, imm->generation);
      return;
    }
    if (s->reply_buffer == nullptr) {
      // A live call that advertised no reply buffer (a stream), or whose
      // buffer went back when the server exposed its response instead:
      // nothing may be written for it. Never leave the call waiting.
      Close(absl::UnavailableError(absl::StrCat(
          "protocol error from ", peer_name_, ": response written for call slot ", imm->slot,
          " which has no reply buffer")));
      return;
    }
    // The last piece of the push carries the header; the message's size
    // comes from it (rendezvous.cc: StartPush).
    absl::StatusOr<size_t> total = EncodedMessageBytes(absl::string_view(
        s->reply_buffer->data, std::min<size_t>(wc.byte_len, s->reply_buffer->capacity)));
    if (!total.ok() || *total > s->reply_buffer->capacity || *total < wc.byte_len) {
      // Cannot happen with a correct peer (the device bounds the WRITE by
      // our rkey's region); never leave the call waiting silently.
      Close(absl::UnavailableError(absl::StrCat(
          "protocol error from ", peer_name_, ": response written into a reply buffer of ",
          s->reply_buffer->capacity, " bytes (last piece ", wc.byte_len, " bytes): ",
          total.ok() ? absl::StrCat("message of ", *total, " bytes")
                     : std::string(total.status().message()))));
      return;
    }
    // Trusted as far as the buffer goes: a peer that writes less than its
    // header announces delivers stale bytes of this (reused, not zeroed)
    // buffer to its own call only; the device bounded the WRITE by our rkey.
    bytes = absl::string_view(s->reply_buffer->data, *total);
  } else {
    bytes = srq_ != nullptr ? srq_->data(idx, wc.byte_len) : receive_ring_.data(idx, wc.byte_len);
  }
  absl::StatusOr<ParsedMessage> m = DecodeMessage(bytes);
  if (!m.ok()) {
    Close(absl::UnavailableError(absl::StrCat("protocol error from ", peer_name_, ": ",
                                              m.status().message())));
    return;
  }
  HandleMessage(*imm, *m);
}

void Connection::HandleMessage(const Imm& imm, const ParsedMessage& m) {
  credits_->OnReturned(m.header.credits);
  if (imm.kind != MsgKind::kResponseWritten && IsSmallMessage(m.header.kind, m.header.flags)) {
    NoteSmallMessage();  // rendezvous pacing
  }
  if (imm.kind == MsgKind::kResponseWritten &&
      (m.header.kind != MsgKind::kResponse ||
       (m.header.flags & (kFlagPayloadRemote | kFlagAttachment)))) {
    // The message lies in our reply buffer: it can only be the response
    // itself (a descriptor there would send us pulling into the buffer
    // the message is read from).
    Close(absl::UnavailableError(absl::StrCat(
        "protocol error from ", peer_name_, ": response written into a reply buffer has kind ",
        static_cast<int>(m.header.kind), " and flags 0x", absl::Hex(m.header.flags))));
    return;
  }
  if (m.header.kind != imm.kind && imm.kind != MsgKind::kResponseWritten) {
    Close(absl::UnavailableError(absl::StrCat(
        "protocol error from ", peer_name_, ": imm_data kind ", static_cast<int>(imm.kind),
        " disagrees with header kind ", static_cast<int>(m.header.kind))));
    return;
  }
  // Requests and cancels only go client → server; responses and initial
  // metadata the other way; stream messages, windows and releases either way.
  const bool wrong_way =
      is_client_ ? (m.header.kind == MsgKind::kRequest || m.header.kind == MsgKind::kCancel)
                 : (m.header.kind == MsgKind::kResponse ||
                    m.header.kind == MsgKind::kResponseWritten ||
                    m.header.kind == MsgKind::kHeaders);
  if (wrong_way) {
    Close(absl::UnavailableError(absl::StrCat("protocol error from ", peer_name_,
                                              ": unexpected message kind ",
                                              static_cast<int>(m.header.kind))));
    return;
  }
  if (m.has_attachment()) {
    // Checked here, once, before any kind is handled or deferred: only a
    // request or stream message with a message, or a unary call's
    // response, may carry one.
    absl::Status bad = CheckAttachmentFrame(m);
    if (bad.ok() && m.header.kind == MsgKind::kResponse) {
      if (const Slot* s = streams_.Live(imm.slot, imm.generation); s != nullptr && s->stream) {
        bad = absl::InvalidArgumentError(
            absl::StrCat("attachment on the trailers of stream ", imm.slot, ".", imm.generation));
      }
    }
    if (!bad.ok()) {
      Close(absl::UnavailableError(
          absl::StrCat("protocol error from ", peer_name_, ": ", bad.message())));
      return;
    }
  }
  switch (m.header.kind) {
    case MsgKind::kCredit:
      return;
    case MsgKind::kRelease:
      OnRelease(m.header.ref);
      return;
    case MsgKind::kCancel:
      OnCancelFrame(imm);
      return;
    case MsgKind::kRequest: {
      if (m.header.flags & kFlagStream) {
        // A stream opens: its later frames are delivered in order.
        const uint32_t key = PackHandle(imm.slot, imm.generation);
        if (!streams_.OpenServerStream(key)) {
          Close(absl::UnavailableError(absl::StrCat("protocol error from ", peer_name_,
                                                    ": stream ", key, " opened twice")));
          return;
        }
        // The peer reuses the handle (its generation wrapped): what was
        // left of an earlier stream the cap ended there is moot.
        if (!failed_streams_.empty()) failed_streams_.erase(key);
      }
      if (m.has_attachment() && m.attachment.remote) {
        StartAttachmentPull(imm, m, /*is_request=*/true);
        return;
      }
      if (m.header.flags & kFlagPayloadRemote) {
        StartRequestPull(imm, m);
        return;
      }
      RequestToken token;
      token.slot = imm.slot;
      token.generation = imm.generation;
      token.has_reply_buffer = (m.header.flags & kFlagReplyBuffer) != 0;
      token.reply_buffer = m.reply_buffer;
      DeliverRequest(token, m.aux, m.payload, m.header.timeout_us, m.header.flags, m.meta, nullptr,
                     m.has_attachment() && m.attachment.length > 0  // 0 bytes: none
                         ? CopyToAttachment(m.attachment_bytes.data(), m.attachment_bytes.size())
                         : Attachment());
      return;
    }
    case MsgKind::kResponse:
    case MsgKind::kResponseWritten:
      if (is_client_ && DeferIfBehind(imm, m)) return;
      HandleResponse(imm, m);
      return;
    case MsgKind::kStreamMessage:
    case MsgKind::kHeaders:
      if (DeferIfBehind(imm, m)) return;
      HandleStreamFrame(imm, m);
      return;
    case MsgKind::kWindow:
      HandleWindow(imm, m);
      return;
    case MsgKind::kGoAway:
      OnGoAwayFrame();
      return;
  }
}

void Connection::HandleResponse(const Imm& imm, const ParsedMessage& m) {
  Slot* s = streams_.Live(imm.slot, imm.generation);
  if (s == nullptr) ReleaseQuarantined(imm.slot, imm.generation);
  if (m.has_attachment() && m.attachment.remote) {  // checked by HandleMessage
    if (s == nullptr) {
      QueueRelease(m.header.ref);  // a retired call: the server may free both
      return;
    }
    StartAttachmentPull(imm, m, /*is_request=*/false);
    return;
  }
  if (m.header.flags & kFlagPayloadRemote) {
    if (s == nullptr) {
      // Late response to a retired call: let the server free its buffer.
      QueueRelease(m.header.ref);
      return;
    }
    StartResponsePull(PackHandle(imm.slot, imm.generation), m);
    return;
  }
  if (s == nullptr) return;  // stale: the call was retired by its deadline
  ResponseSink* sink = s->sink;
  const auto code = static_cast<absl::StatusCode>(m.header.status_code);
  if (m.header.payload_len > options_.max_message_bytes) {
    FinishSlot(imm.slot, false);
    sink->OnFailure(absl::ResourceExhaustedError(
        absl::StrCat("response of ", m.header.payload_len, " bytes exceeds max_message_bytes ",
                     options_.max_message_bytes)));
    return;
  }
  if (imm.kind == MsgKind::kResponseWritten) {
    // The payload lives in the reply buffer: deliver before recycling it.
    // The server's access ends now; the pool takes the buffer back from
    // the sink only once that took effect (without windows: the buffer is
    // re-registered before the sink sees it).
    const bool was_exposed = exposures_.exposed(s->reply_buffer);
    exposures_.Revoke(&send_queue_, s->reply_buffer, usable());
    if (was_exposed && exposures_.windows()) {
      // Its LOCAL_INV goes to the device now, not at the end of this loop
      // step, so the server's access ends (on a NIC: once the WQE ran, a
      // few µs) before the sink parses what it wrote; a write of its in that
      // gap could change only this call's own response.
      Doorbell();
      s = streams_.Live(imm.slot, imm.generation);
      if (s == nullptr) return;  // a failed post closed the connection and the call
    }
    if (was_exposed && !exposures_.windows()) {
      if (absl::Status rekeyed = pool_->Rekey(s->reply_buffer); !rekeyed.ok()) {
        s->reply_buffer = nullptr;  // freed by Rekey
        FinishSlot(imm.slot, false);
        sink->OnFailure(absl::ResourceExhaustedError(absl::StrCat(
            "re-registering the reply buffer of a call to ", peer_name_, ": ",
            rekeyed.message())));
        return;
      }
    }
    PooledBuffer reply(pool_, s->reply_buffer);  // the sink may keep it
    s->reply_buffer = nullptr;
    FinishSlot(imm.slot, false);
    if (!m.meta.empty()) sink->OnResponseMetadata(m.meta);
    sink->OnResponseInBuffer(code, m.aux, m.payload, &reply);
    return;
  }
  if ((m.header.flags & kFlagRefused) && !s->stream && code == absl::StatusCode::kUnavailable) {
    // Not started by the server: the call may go elsewhere.
    OutgoingRequest request = std::move(s->request);
    FinishSlot(imm.slot, false);
    sink->OnRefused(absl::UnavailableError(m.aux), std::move(request));
    return;
  }
  FinishSlot(imm.slot, false);
  if (m.has_attachment() && m.attachment.length > 0) {  // 0 bytes: none (buffer.h)
    sink->OnResponseAttachment(
        CopyToAttachment(m.attachment_bytes.data(), m.attachment_bytes.size()));
  }
  if (!m.meta.empty()) sink->OnResponseMetadata(m.meta);
  sink->OnResponse(code, m.aux, m.payload);
}

}  // namespace internal
}  // namespace rdmarpc
