// rendezvous.cc: large payloads. The server pulls a large request with RDMA
// READ; the client pulls a large response the server exposed (then sends
// kRelease). Pushes (WRITE_WITH_IMM into the advertised reply buffer) are
// posted from eager.cc's response path.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "runtime/transport/connection.h"

namespace rdmarpc {
namespace internal {

void Connection::StartRequestPull(const Imm& imm, const ParsedMessage& m) {
  RequestToken token;
  token.slot = imm.slot;
  token.generation = imm.generation;
  token.has_reply_buffer = (m.header.flags & kFlagReplyBuffer) != 0;
  token.reply_buffer = m.reply_buffer;
  const size_t len = m.header.payload_len;
  if (len > options_.max_message_bytes) {
    SendResponse(token, absl::StatusCode::kResourceExhausted,
                 absl::StrCat("request of ", len, " bytes exceeds max_message_bytes ",
                              options_.max_message_bytes),
                 std::string());
    return;
  }
  absl::StatusOr<LargeBuffer*> buf =
      pool_ != nullptr ? pool_->Get(len)
                       : absl::StatusOr<LargeBuffer*>(absl::InternalError("no buffer pool"));
  if (!buf.ok()) {
    SendResponse(token, buf.status().code(), std::string(buf.status().message()), std::string());
    return;
  }
  ReadCtx ctx;
  ctx.is_request = true;
  ctx.buffer = *buf;
  ctx.remote = m.payload_remote;
  ctx.token = token;
  ctx.method = std::string(m.aux);
  ctx.meta = std::string(m.meta);
  ctx.header = m.header;
  ctx.timeout_us = m.header.timeout_us;
  ctx.end_stream = (m.header.flags & kFlagEndStream) != 0;
  ctx.stream_message = false;
  if (m.header.flags & kFlagStream) {
    // Later frames of this stream wait for this pull (in-order delivery).
    ctx.handle = PackHandle(imm.slot, imm.generation);
    ++streams_.ServerStream(ctx.handle).pulls;
  }
  const absl::Duration delay = options_.request_read_delay != nullptr
                                   ? options_.request_read_delay()
                                   : absl::ZeroDuration();
  if (delay > absl::ZeroDuration()) {
    // Test hook: post the READ later without blocking this loop. The
    // connection keeps the context, so its buffer is freed with it.
    const uint64_t id = next_delayed_++;
    delayed_reads_.emplace(id, std::move(ctx));
    timers_.push_back(loop_->AddTimer(absl::Now() + delay, [this, id] {
      auto node = delayed_reads_.extract(id);
      if (node.empty()) return;
      if (!usable() || node.mapped().cancelled) {
        if (pool_ != nullptr) pool_->Put(node.mapped().buffer);
        if (usable()) {
          SendResponse(node.mapped().token, absl::StatusCode::kCancelled,
                       "cancelled by the client", std::string());
          Flush();
        }
        return;
      }
      PostRead(std::move(node.mapped()));
      Flush();
    }));
    return;
  }
  PostRead(std::move(ctx));
}

void Connection::StartResponsePull(uint32_t handle, const ParsedMessage& m) {
  const uint16_t idx = HandleSlot(handle);
  const size_t len = m.header.payload_len;
  auto release = [this, ref = m.header.ref] {
    OutItem rel;
    rel.kind = OutKind::kRelease;
    rel.ref = ref;
    out_queue_.push_back(std::move(rel));
  };
  Slot& slot = streams_.slot(idx);
  ResponseSink* sink = slot.sink;
  // The server exposed its response instead of writing it into our reply
  // buffer, so it will never write there for this call: recycle it now.
  // (Were it kept until the READ ends, a deadline passing during the READ
  // would quarantine it for the rest of the connection's life: no later
  // response comes to release it.)
  if (slot.reply_buffer != nullptr) {
    if (pool_ != nullptr) pool_->Put(slot.reply_buffer);
    slot.reply_buffer = nullptr;
  }
  if (len > options_.max_message_bytes) {
    release();
    FinishSlot(idx, false);
    sink->OnFailure(absl::ResourceExhaustedError(absl::StrCat(
        "response of ", len, " bytes exceeds max_message_bytes ", options_.max_message_bytes)));
    return;
  }
  absl::StatusOr<LargeBuffer*> buf =
      pool_ != nullptr ? pool_->Get(len)
                       : absl::StatusOr<LargeBuffer*>(absl::InternalError("no buffer pool"));
  if (!buf.ok()) {
    release();
    FinishSlot(idx, false);
    sink->OnFailure(buf.status());
    return;
  }
  ReadCtx ctx;
  ctx.is_request = false;
  ctx.buffer = *buf;
  ctx.remote = m.payload_remote;
  ctx.handle = handle;
  ctx.ref = m.header.ref;
  ctx.code = static_cast<absl::StatusCode>(m.header.status_code);
  ctx.message = std::string(m.aux);
  ctx.meta = std::string(m.meta);
  ctx.header = m.header;
  PostRead(std::move(ctx));
}

void Connection::PostRead(ReadCtx ctx) {
  pending_reads_.push_back(std::move(ctx));
  FlushReads();
}

void Connection::FlushReads() {
  // READs need send-queue room but no credit: they consume no receive.
  while (!pending_reads_.empty() && usable() && qp_ &&
         send_queue_.has_room()) {
    ReadCtx ctx = std::move(pending_reads_.front());
    pending_reads_.pop_front();
    ibv_sge sge{ctx.buffer->addr(), ctx.remote.length, ctx.buffer->lkey()};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.wr.rdma.remote_addr = ctx.remote.addr;
    wr.wr.rdma.rkey = ctx.remote.rkey;
    const uint64_t seq = send_queue_.next_seq();
    reads_.emplace(seq, std::move(ctx));
    SqEntry e;
    e.is_read = true;
    send_queue_.PostWr(&wr, e, /*force_signal=*/true);
  }
  Doorbell();
}

void Connection::OnReadCompletion(uint64_t seq, const ibv_wc& wc) {
  auto node = reads_.extract(seq);
  ReadCtx& ctx = node.mapped();
  if (wc.status != IBV_WC_SUCCESS) {
    LOG_IF(WARNING, wc.status != IBV_WC_WR_FLUSH_ERR)
        << "RDMA READ of " << ctx.remote.length << " bytes from " << peer_name_
        << " failed: " << ibv_wc_status_str(wc.status);
    if (pool_ != nullptr) pool_->Put(ctx.buffer);
    return;  // OnSendCompletion closes the connection
  }
  if (ctx.stream_message) {
    OnStreamPullDone(ctx, absl::string_view(ctx.buffer->data, ctx.remote.length));
    if (pool_ != nullptr) pool_->Put(ctx.buffer);
    return;
  }
  if (ctx.is_request && ctx.cancelled) {
    // Abandoned by the client while we pulled it: answer so the client may
    // reuse the buffers it exposed; the handler never sees it.
    if (pool_ != nullptr) pool_->Put(ctx.buffer);
    SendResponse(ctx.token, absl::StatusCode::kCancelled, "cancelled by the client",
                 std::string());
    return;
  }
  if (ctx.is_request) {
    const bool stream = ctx.handle != 0;  // StreamKey, set for a stream's opening request
    StreamIn* in = nullptr;
    if (stream) {
      in = streams_.FindServerStream(PackHandle(ctx.token.slot, ctx.token.generation));
      if (in != nullptr) --in->pulls;
    }
    const uint8_t flags = static_cast<uint8_t>((stream ? kFlagStream : 0) |
                                               (ctx.end_stream ? kFlagEndStream : 0));
    absl::string_view payload(ctx.buffer->data, ctx.remote.length);
    absl::string_view meta = ctx.meta;
    if (!SplitMetaInPayload(ctx.header, &payload, &meta)) {
      if (pool_ != nullptr) pool_->Put(ctx.buffer);
      Close(absl::UnavailableError(absl::StrCat("protocol error from ", peer_name_, ": request of ",
                                                payload.size(), " bytes is shorter than its "
                                                "metadata of ", ctx.header.meta_len)));
      return;
    }
    DeliverRequest(ctx.token, ctx.method, payload, ctx.timeout_us, flags, meta);
    if (pool_ != nullptr) pool_->Put(ctx.buffer);
    if (stream) RunDeferred(PackHandle(ctx.token.slot, ctx.token.generation));
    return;
  }
  OutItem rel;
  rel.kind = OutKind::kRelease;
  rel.ref = ctx.ref;
  out_queue_.push_back(std::move(rel));
  const uint16_t idx = HandleSlot(ctx.handle);
  const uint16_t gen = HandleGeneration(ctx.handle);
  if (Slot* s = streams_.Live(idx, gen); s != nullptr) {
    ResponseSink* sink = s->sink;
    FinishSlot(idx, false);
    absl::string_view payload(ctx.buffer->data, ctx.remote.length);
    absl::string_view meta = ctx.meta;
    if (!SplitMetaInPayload(ctx.header, &payload, &meta)) {
      sink->OnFailure(absl::UnavailableError(absl::StrCat(
          "protocol error from ", peer_name_, ": response of ", payload.size(),
          " bytes is shorter than its metadata of ", ctx.header.meta_len)));
    } else {
      if (!meta.empty()) sink->OnResponseMetadata(meta);
      sink->OnResponse(ctx.code, ctx.message, payload);
    }
  }
  if (pool_ != nullptr) pool_->Put(ctx.buffer);
}

void Connection::OnRelease(uint32_t ref) {
  auto it = exposed_.find(ref);
  if (it == exposed_.end()) return;
  if (pool_ != nullptr) pool_->Put(it->second);
  exposed_.erase(it);
  if (close_when_sent_) MaybeFinishCloseWhenSent();
}

void Connection::DeliverRequest(const RequestToken& token, absl::string_view method,
                                absl::string_view payload, uint64_t timeout_us, uint8_t flags,
                                absl::string_view meta) {
  if (handler_ == nullptr) return;
  IncomingRequest req;
  req.method = method;
  req.payload = payload;
  req.meta = meta;
  req.timeout_us = timeout_us;
  req.token = token;
  req.stream = (flags & kFlagStream) != 0;
  req.has_message = !(flags & kFlagNoMessage);
  req.end_stream = !req.stream || (flags & kFlagEndStream) != 0;
  handler_->OnRequest(this, req);
}

}  // namespace internal
}  // namespace rdmarpc
