// attachments.cc: unary requests and responses, and stream messages, that
// carry an attachment (header.h: kFlagAttachment), bytes beside the message
// that the transport moves without serialising them. When the whole message fits the eager
// limit the attachment rides inline (copied into the send buffer, like any
// small message); otherwise the sender exposes the user's own memory
// (LargeBufferPool::Lend: no copy) and the receiver pulls it with RDMA
// READ into a pool buffer that becomes the receiving user's attachment.
// A request's attachment stays exposed until the call's answer, or for a
// server-streaming call until the server's first frame on the stream (and
// is quarantined with the call's other buffers when it is cancelled); a
// response's or a stream message's until the peer's kRelease. A stream
// message's pull is ordered with its stream's other frames as any large
// stream frame's is (streams.cc).
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/transport/connection.h"

namespace rdmarpc {
namespace internal {

void Connection::FailUnsentCall(uint16_t idx, absl::Status why) {
  ResponseSink* sink = streams_.slot(idx).sink;
  FinishSlot(idx, false);
  sink->OnFailure(std::move(why));
}

void Connection::SendRequestWithAttachment(Slot* s, uint16_t idx, uint16_t gen) {
  OutgoingRequest& r = s->request;
  const Attachment& a = r.attachment;
  if (r.stream && r.no_message) {
    FailUnsentCall(idx, absl::InvalidArgumentError(absl::StrCat(
                            "request attachment of ", a.length, " bytes on a client- or "
                            "bidirectional-streaming call to ", peer_name_,
                            ": such calls carry attachments on their messages (Write with a "
                            "Buffer), not on the opening request")));
    return;
  }
  if (r.stream && !peer_takes_stream_attachments()) {
    FailUnsentCall(idx, absl::FailedPreconditionError(absl::StrCat(
                            "request attachment of ", a.length, " bytes on a streaming call: "
                            "server ", peer_name_,
                            " does not take attachments on streams (an older rdmarpc)")));
    return;
  }
  if (!peer_takes_attachments()) {
    FailUnsentCall(idx, absl::FailedPreconditionError(absl::StrCat(
                            "request attachment of ", a.length, " bytes: server ", peer_name_,
                            " does not take attachments (an older rdmarpc)")));
    return;
  }
  if (a.length > options_.max_message_bytes) {
    FailUnsentCall(idx, absl::ResourceExhaustedError(absl::StrCat(
                            "request attachment of ", a.length,
                            " bytes exceeds max_message_bytes ", options_.max_message_bytes)));
    return;
  }
  const size_t payload_size = r.payload_size();
  // A server-streaming call's opening request carries its one message
  // (and the client's half-close) beside the attachment.
  const uint8_t stream_flags =
      r.stream ? static_cast<uint8_t>(kFlagStream | (r.end_stream ? kFlagEndStream : 0)) : 0;
  WireHeader h = RequestHeader(r, kFlagAttachment | stream_flags, payload_size);
  const size_t prefix =
      kWireHeaderBytes + r.method.size() + r.meta.size() + kAttachmentDescriptorBytes;
  AttachmentDescriptor ad;
  ad.length = static_cast<uint32_t>(a.length);
  const bool payload_inline = SendsEagerly(prefix + payload_size, EagerLimit());
  const bool all_inline = SendsEagerly(prefix + payload_size + a.length, EagerLimit());
  RemoteBuffer pr;
  if (!all_inline) {
    ad.remote = true;
    if (pool_ == nullptr) {
      FailUnsentCall(idx, absl::InternalError(absl::StrCat(
                              "request attachment of ", a.length, " bytes to ", peer_name_,
                              ": the connection has no buffer pool to expose it from")));
      return;
    }
    if (!SendsEagerly(prefix + kRemoteBufferBytes, EagerLimit())) {
      FailUnsentCall(idx, absl::InvalidArgumentError(absl::StrCat(
                              "method name of ", h.aux_len, " bytes and metadata of ",
                              r.meta.size(), " bytes do not fit the eager limit ", EagerLimit())));
      return;
    }
    if (absl::Status room =
            exposures_.CheckRoom(a.length + (payload_inline ? 0 : payload_size));
        !room.ok()) {
      FailUnsentCall(idx, absl::ResourceExhaustedError(absl::StrCat(
                              "request attachment of ", a.length, " bytes to ", peer_name_, ": ",
                              room.message())));
      return;
    }
    absl::StatusOr<LargeBuffer*> lent = pool_->Lend(a.region, a.offset, a.length);
    if (!lent.ok()) {
      FailUnsentCall(idx, absl::Status(lent.status().code(),
                                       absl::StrCat("request attachment of ", a.length,
                                                    " bytes: ", lent.status().message())));
      return;
    }
    s->attachment_buffer = *lent;
    if (!payload_inline) {
      PooledBuffer req = std::move(r.registered);
      if (!req) {
        absl::StatusOr<LargeBuffer*> got = pool_->Get(payload_size);
        if (!got.ok()) {
          FailUnsentCall(idx, got.status());
          return;
        }
        req = PooledBuffer(pool_, *got);
        if (r.write != nullptr) {
          r.write(r.source, req->data);
          if (r.write_copies) loop_->stats().payload_bytes_copied.Add(payload_size);
        } else {
          std::memcpy(req->data, r.payload.data(), payload_size);
          loop_->stats().payload_bytes_copied.Add(payload_size);
        }
      }
      s->request_buffer = req.release();
      h.flags |= kFlagPayloadRemote;
    }
    // Both reachable by the server for this call only, to READ.
    absl::StatusOr<uint32_t> rkey =
        exposures_.Expose(&send_queue_, s->attachment_buffer, s->attachment_buffer->addr(),
                          ad.length, IBV_ACCESS_REMOTE_READ);
    if (rkey.ok()) {
      ad.buffer = RemoteBuffer{s->attachment_buffer->addr(), *rkey, ad.length};
      if (s->request_buffer != nullptr) {
        pr = RemoteBuffer{s->request_buffer->addr(), 0, h.payload_len};
        rkey = exposures_.Expose(&send_queue_, s->request_buffer, pr.addr, pr.length,
                                 IBV_ACCESS_REMOTE_READ);
        if (rkey.ok()) pr.rkey = *rkey;
      }
    }
    if (!rkey.ok()) {
      // Nothing was sent: FinishSlot revokes what was exposed.
      FailUnsentCall(idx, absl::Status(rkey.status().code(),
                                       absl::StrCat("request attachment of ", a.length,
                                                    " bytes to ", peer_name_, ": ",
                                                    rkey.status().message())));
      return;
    }
  }
  const absl::string_view inline_attachment =
      all_inline ? absl::string_view(a.data(), a.length) : absl::string_view();
  if (payload_inline && r.write != nullptr) {
    if (r.write_copies) loop_->stats().payload_bytes_copied.Add(payload_size);
    PostEager(MsgKind::kRequest, idx, gen, h, r.method, pr, {}, {}, r.write, r.source,
              payload_size, r.meta, ad, inline_attachment);
  } else {
    PostEager(MsgKind::kRequest, idx, gen, h, r.method, pr, {},
              payload_inline ? r.payload_view() : absl::string_view(), nullptr, nullptr, 0,
              r.meta, ad, inline_attachment);
  }
  s->sent = true;
  s->sink->OnSent();
  // Kept for a transparent retry elsewhere as SendRequest keeps it (the
  // attachment is the caller's and stays in the request; a stream's goes
  // at the server's first frame, as streams are never sent again).
  if (!r.keep_for_retry || r.payload.size() > kRetryBufferBytes) r.payload = std::string();
  r.registered.reset();
}

void Connection::SendResponseWithAttachment(OutItem& item) {
  const Attachment a = std::move(item.attachment);
  const size_t max_head =
      EagerLimit() - kWireHeaderBytes - kRemoteBufferBytes - kAttachmentDescriptorBytes;
  if (item.registered) {
    item.payload.assign(item.registered->data + kRegisteredResponseOffset, item.registered_len);
    loop_->stats().payload_bytes_copied.Add(item.registered_len);
    item.registered.reset();
  }
  uint32_t meta_in_payload = 0;
  if (item.meta.size() > max_head / 2) {
    // Too large for the eager prefix: the metadata leads the payload.
    item.payload.insert(0, item.meta);
    meta_in_payload = static_cast<uint32_t>(item.meta.size());
    item.meta.clear();
  }
  if (item.message.size() > max_head - item.meta.size()) {
    item.message.resize(max_head - item.meta.size());
  }
  WireHeader h = ResponseHeader(item, kFlagAttachment, meta_in_payload, item.payload.size());
  const size_t prefix =
      kWireHeaderBytes + item.message.size() + item.meta.size() + kAttachmentDescriptorBytes;
  AttachmentDescriptor ad;
  ad.length = static_cast<uint32_t>(a.length);
  const uint16_t slot = item.token.slot;
  const uint16_t gen = item.token.generation;
  if (SendsEagerly(prefix + item.payload.size() + a.length, EagerLimit())) {
    PostEager(MsgKind::kResponse, slot, gen, h, item.message, {}, {}, item.payload, nullptr,
              nullptr, 0, item.meta, ad, absl::string_view(a.data(), a.length));
    return;
  }
  const bool payload_inline = SendsEagerly(prefix + item.payload.size(), EagerLimit());
  RemoteBuffer pr;
  if (absl::Status exposed = ExposeForPull(a, item.payload, payload_inline, &h, &ad, &pr);
      !exposed.ok()) {
    // The call ends with that instead (nothing of it exposed any more).
    WireHeader e;
    e.kind = MsgKind::kResponse;
    e.status_code = static_cast<uint32_t>(ExposeFailureCode(exposed.code()));
    const std::string msg =
        absl::StrCat("response attachment of ", a.length, " bytes to ", peer_name_, ": ",
                     exposed.message().substr(0, kMaxStatusMessage));
    e.aux_len = static_cast<uint16_t>(msg.size());
    PostEager(MsgKind::kResponse, slot, gen, e, msg, {}, {}, {});
    return;
  }
  PostEager(MsgKind::kResponse, slot, gen, h, item.message, pr, {},
            payload_inline ? absl::string_view(item.payload) : absl::string_view(), nullptr,
            nullptr, 0, item.meta, ad);
}

absl::Status Connection::ExposeForPull(const Attachment& a, absl::string_view payload,
                                       bool payload_inline, WireHeader* h,
                                       AttachmentDescriptor* ad, RemoteBuffer* pr) {
  if (pool_ == nullptr) return absl::InternalError("the connection has no buffer pool");
  if (absl::Status room = exposures_.CheckRoom(a.length + (payload_inline ? 0 : payload.size()));
      !room.ok()) {
    return room;
  }
  absl::StatusOr<LargeBuffer*> lent = pool_->Lend(a.region, a.offset, a.length);
  if (!lent.ok()) return lent.status();
  absl::StatusOr<uint32_t> rkey =
      exposures_.Expose(&send_queue_, *lent, (*lent)->addr(), a.length, IBV_ACCESS_REMOTE_READ);
  if (!rkey.ok()) {
    RevokeAndPut(*lent, /*rekey=*/false);
    return rkey.status();
  }
  ad->remote = true;
  ad->buffer = RemoteBuffer{(*lent)->addr(), *rkey, static_cast<uint32_t>(a.length)};
  LargeBuffer* payload_buffer = nullptr;
  if (!payload_inline) {
    absl::StatusOr<LargeBuffer*> got = pool_->Get(payload.size());
    if (!got.ok()) {
      RevokeAndPut(*lent, /*rekey=*/false);
      return got.status();
    }
    payload_buffer = *got;
    std::memcpy(payload_buffer->data, payload.data(), payload.size());
    loop_->stats().payload_bytes_copied.Add(payload.size());
    *pr = RemoteBuffer{payload_buffer->addr(), 0, static_cast<uint32_t>(payload.size())};
    rkey = exposures_.Expose(&send_queue_, payload_buffer, pr->addr, pr->length,
                             IBV_ACCESS_REMOTE_READ);
    if (!rkey.ok()) {
      RevokeAndPut(*lent, /*rekey=*/false);
      RevokeAndPut(payload_buffer, /*rekey=*/false);
      return rkey.status();
    }
    pr->rkey = *rkey;
    h->flags |= kFlagPayloadRemote;
  }
  const uint32_t ref = next_ref_++;
  exposed_attachments_[ref] = *lent;
  if (payload_buffer != nullptr) exposed_[ref] = payload_buffer;
  h->ref = ref;
  bytes_sent_ += a.length + (payload_inline ? 0 : payload.size());  // the peer pulls them
  return absl::OkStatus();
}

void Connection::StartAttachmentPull(const Imm& imm, const ParsedMessage& m, bool is_request) {
  ReadCtx ctx;
  ctx.has_attachment = true;
  ctx.attachment_remote = m.attachment.buffer;
  ctx.header = m.header;
  ctx.meta = std::string(m.meta);
  if (m.header.flags & kFlagPayloadRemote) {
    ctx.remote = m.payload_remote;
  } else {
    // Kept aside: the receive buffer is re-posted before the pull ends.
    // DecodeMessage already took any metadata off its front.
    ctx.inline_payload = std::string(m.payload);
    ctx.header.flags &= static_cast<uint8_t>(~kFlagMetaInPayload);
  }
  const size_t total = size_t{ctx.remote.length} + ctx.attachment_remote.length;
  absl::Status refused;
  if (ctx.remote.length > options_.max_message_bytes ||
      ctx.attachment_remote.length > options_.max_message_bytes) {
    // The message's size as announced, whether it is pulled or came inline.
    refused = absl::ResourceExhaustedError(absl::StrCat(
        is_request ? "request" : "response", " of ", m.header.payload_len,
        " bytes with an attachment of ", ctx.attachment_remote.length,
        " bytes exceeds max_message_bytes ", options_.max_message_bytes));
  }
  absl::StatusOr<LargeBuffer*> buf = absl::InternalError("no buffer pool");
  if (refused.ok() && pool_ != nullptr) buf = pool_->Get(total);
  if (refused.ok() && !buf.ok()) refused = buf.status();
  if (is_request) {
    ctx.is_request = true;
    ctx.token.slot = imm.slot;
    ctx.token.generation = imm.generation;
    ctx.token.has_reply_buffer = (m.header.flags & kFlagReplyBuffer) != 0;
    ctx.token.reply_buffer = m.reply_buffer;
    if (!refused.ok()) {
      SendResponse(ctx.token, refused.code(), std::string(refused.message()), std::string());
      return;
    }
    ctx.method = std::string(m.aux);
    ctx.timeout_us = m.header.timeout_us;
    ctx.end_stream = true;
    if (m.header.flags & kFlagStream) {
      // A server-streaming call's opening request: the stream's later
      // frames wait for this pull (in-order delivery).
      ctx.end_stream = (m.header.flags & kFlagEndStream) != 0;
      ctx.handle = PackHandle(imm.slot, imm.generation);
      ++streams_.ServerStream(ctx.handle).pulls;
    }
  } else {
    const uint32_t handle = PackHandle(imm.slot, imm.generation);
    Slot& slot = streams_.slot(imm.slot);
    // Answered: the server reads our request's buffers no more (see
    // StartResponsePull).
    for (LargeBuffer** b : {&slot.request_buffer, &slot.reply_buffer, &slot.attachment_buffer}) {
      if (*b == nullptr) continue;
      RevokeAndPut(*b, /*rekey=*/false);
      *b = nullptr;
    }
    if (!refused.ok()) {
      QueueRelease(m.header.ref);
      ResponseSink* sink = slot.sink;
      FinishSlot(imm.slot, false);
      sink->OnFailure(refused);
      return;
    }
    ctx.handle = handle;
    ctx.ref = m.header.ref;
    ctx.code = static_cast<absl::StatusCode>(m.header.status_code);
    ctx.message = std::string(m.aux);
  }
  ctx.buffer = *buf;
  PostRead(std::move(ctx));
}

void Connection::SendStreamMessageWithAttachment(OutItem& item) {
  const Attachment a = std::move(item.attachment);
  const char* const to = is_client_ ? "server " : "client ";
  if (!peer_takes_stream_attachments()) {
    FailStream(item, absl::FailedPreconditionError(absl::StrCat(
                         "stream message attachment of ", a.length, " bytes: ", to, peer_name_,
                         " does not take attachments on streams (an older rdmarpc)")));
    return;
  }
  if (a.length > options_.max_message_bytes) {
    FailStream(item, absl::ResourceExhaustedError(absl::StrCat(
                         "stream message attachment of ", a.length,
                         " bytes exceeds max_message_bytes ", options_.max_message_bytes)));
    return;
  }
  WireHeader h;
  h.kind = MsgKind::kStreamMessage;
  h.flags = static_cast<uint8_t>(item.flags | kFlagAttachment);
  h.payload_len = static_cast<uint32_t>(item.payload.size());
  const size_t prefix = kWireHeaderBytes + kAttachmentDescriptorBytes;
  AttachmentDescriptor ad;
  ad.length = static_cast<uint32_t>(a.length);
  if (SendsEagerly(prefix + item.payload.size() + a.length, EagerLimit())) {
    PostEager(MsgKind::kStreamMessage, item.slot, item.generation, h, {}, {}, {}, item.payload,
              nullptr, nullptr, 0, {}, ad, absl::string_view(a.data(), a.length));
    return;
  }
  const bool payload_inline = SendsEagerly(prefix + item.payload.size(), EagerLimit());
  RemoteBuffer pr;
  if (absl::Status exposed = ExposeForPull(a, item.payload, payload_inline, &h, &ad, &pr);
      !exposed.ok()) {
    // The stream ends with that instead (nothing of it exposed any more).
    FailStream(item, absl::Status(ExposeFailureCode(exposed.code()),
                                  absl::StrCat("stream message attachment of ",
                                                               a.length, " bytes to ",
                                                               peer_name_, ": ",
                                                               exposed.message())));
    return;
  }
  PostEager(MsgKind::kStreamMessage, item.slot, item.generation, h, {}, pr, {},
            payload_inline ? absl::string_view(item.payload) : absl::string_view(), nullptr,
            nullptr, 0, {}, ad);
}

void Connection::StartStreamAttachmentPull(const Imm& imm, const ParsedMessage& m,
                                           StreamIn* in) {
  ReadCtx ctx;
  ctx.stream_message = true;
  ctx.has_attachment = true;
  ctx.attachment_remote = m.attachment.buffer;
  ctx.header = m.header;
  ctx.end_stream = (m.header.flags & kFlagEndStream) != 0;
  if (m.header.flags & kFlagPayloadRemote) {
    ctx.remote = m.payload_remote;
  } else {
    ctx.inline_payload = std::string(m.payload);  // the receive buffer is re-posted
  }
  const size_t total = size_t{ctx.remote.length} + ctx.attachment_remote.length;
  absl::StatusOr<LargeBuffer*> buf =
      pool_ != nullptr ? pool_->Get(total)
                       : absl::StatusOr<LargeBuffer*>(absl::InternalError("no buffer pool"));
  if (!buf.ok()) {
    RefuseStreamFrame(imm, m, absl::ResourceExhaustedError(absl::StrCat(
                                  "no registered buffer to pull a stream message of ",
                                  m.header.payload_len, " bytes with an attachment of ",
                                  ctx.attachment_remote.length, " bytes from ", peer_name_, ": ",
                                  buf.status().message())));
    return;
  }
  ctx.buffer = *buf;
  PostStreamPull(imm, in, std::move(ctx));
}

Attachment Connection::PulledAttachment(const ReadCtx& ctx) {
  Attachment a;
  a.region = std::make_shared<ExternalRegion>(device_->keepalive(), pool_, ctx.buffer,
                                              ctx.remote.length, ctx.attachment_remote.length);
  a.length = ctx.attachment_remote.length;
  return a;
}

}  // namespace internal
}  // namespace rdmarpc
