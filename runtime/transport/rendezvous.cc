// rendezvous.cc: large payloads. The server pulls a large request with RDMA
// READ; the client pulls a large response the server exposed (then sends
// kRelease); the server pushes a large response into the client's reply
// buffer (RDMA WRITEs, the last WITH_IMM; queued by eager.cc's response
// path). Every transfer moves in pieces (transport.h:
// kRendezvousChunkBytes), posted in order from one queue.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "runtime/transport/connection.h"

DEFINE_uint64(rdmarpc_rendezvous_chunk_bytes, rdmarpc::internal::kRendezvousChunkBytes,
              "Bytes per RDMA READ / WRITE piece of an rdmarpc rendezvous transfer (large "
              "messages move in pieces so small frames of other calls on the connection go "
              "between them). See transport.h (kRendezvousChunkBytes) for the default.");
DEFINE_int32(rdmarpc_rendezvous_chunks_in_flight, rdmarpc::internal::kRendezvousChunksInFlight,
             "Rendezvous pieces an rdmarpc connection keeps in flight at once while small "
             "messages flow on it (1 to 64).");
DEFINE_uint64(rdmarpc_rendezvous_bulk_chunk_bytes, rdmarpc::internal::kRendezvousBulkChunkBytes,
              "Bytes per rendezvous piece on an rdmarpc connection that carries only large "
              "messages (see transport.h, kRendezvousBulkChunkBytes).");
DEFINE_int32(rdmarpc_rendezvous_bulk_chunks_in_flight,
             rdmarpc::internal::kRendezvousBulkChunksInFlight,
             "Rendezvous pieces in flight at once on an rdmarpc connection that carries only "
             "large messages (1 to 64).");

namespace rdmarpc {
namespace internal {

size_t DefaultRendezvousChunkBytes() {
  return FLAGS_rdmarpc_rendezvous_chunk_bytes;
}

int DefaultRendezvousChunksInFlight() {
  return FLAGS_rdmarpc_rendezvous_chunks_in_flight;
}

size_t DefaultRendezvousBulkChunkBytes() {
  return FLAGS_rdmarpc_rendezvous_bulk_chunk_bytes;
}

int DefaultRendezvousBulkChunksInFlight() {
  return FLAGS_rdmarpc_rendezvous_bulk_chunks_in_flight;
}

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
  auto release = [this, ref = m.header.ref] { QueueRelease(ref); };
  Slot& slot = streams_.slot(idx);
  ResponseSink* sink = slot.sink;
  // The server exposed its response instead of writing it into our reply
  // buffer, so it will never write there for this call, and having
  // answered it reads our request no more: revoke and recycle both now.
  // (Were they kept until the READ ends, a deadline passing during the READ
  // would quarantine them for the rest of the connection's life: no later
  // response comes to release them.)
  for (LargeBuffer** b : {&slot.request_buffer, &slot.reply_buffer, &slot.attachment_buffer}) {
    if (*b == nullptr) continue;
    RevokeAndPut(*b, /*rekey=*/false);
    *b = nullptr;
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
  const uint64_t id = next_transfer_id_++;
  ctx.progress.length = ctx.remote.length + (ctx.has_attachment ? ctx.attachment_remote.length : 0);
  EngineStats& stats = loop_->stats();
  stats.rendezvous_transfers[static_cast<int>(RendezvousDirection::kRead)].Add();
  stats.rendezvous_bytes[static_cast<int>(RendezvousDirection::kRead)].Add(ctx.progress.length);
  bytes_received_ += ctx.progress.length;
  reads_.emplace(id, std::move(ctx));
  transfer_queue_.push_back({id, /*read=*/true});
  PostRendezvousChunks();
}

void Connection::StartPush(PooledBuffer buffer, uint32_t total, const RemoteBuffer& remote,
                           uint32_t imm) {
  const uint64_t id = next_transfer_id_++;
  PushCtx ctx;
  ctx.remote = remote;
  ctx.imm = imm;
  // The header travels in the last piece, whole (chunk sizes below the
  // eager limit would otherwise split it).
  ctx.first_len = static_cast<uint32_t>(std::min<size_t>(
      total, std::max(pacer_.small_chunk_bytes(), EagerLimit())));
  ctx.progress.length = total;
  EngineStats& stats = loop_->stats();
  stats.rendezvous_transfers[static_cast<int>(RendezvousDirection::kWrite)].Add();
  stats.rendezvous_bytes[static_cast<int>(RendezvousDirection::kWrite)].Add(total);
  bytes_sent_ += total;
  ctx.buffer = buffer.release();
  pushes_.emplace(id, ctx);
  transfer_queue_.push_back({id, /*read=*/false});
  PostRendezvousChunks();
}

void Connection::PostRendezvousChunks() {
  // Pieces need send-queue room; only a push's last piece consumes a
  // receive at the peer, and its credit was taken when it was queued. The
  // pacer bounds pieces in flight: few and small while small messages flow
  // here, so they wait for little; large ones when only bulk moves.
  while (!transfer_queue_.empty() && pacer_.CanPost() && usable() && qp_ &&
         send_queue_.has_room()) {
    const QueuedTransfer q = transfer_queue_.front();
    ibv_sge sge{};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ChunkProgress* progress = nullptr;
    if (q.read) {
      auto it = reads_.find(q.id);
      if (it == reads_.end() || it->second.progress.failed) {
        transfer_queue_.pop_front();
        continue;
      }
      ReadCtx& ctx = it->second;
      if (PullAbandoned(ctx)) {
        // Nobody will take it: pull no more of it.
        transfer_queue_.pop_front();
        if (ctx.progress.outstanding == 0) OnReadDone(q.id);
        continue;
      }
      progress = &ctx.progress;
      // The payload's bytes, then an attachment's, into one buffer; a
      // piece never spans both (they lie in different remote regions).
      const bool in_payload = progress->posted < ctx.remote.length;
      const RemoteBuffer& from = in_payload ? ctx.remote : ctx.attachment_remote;
      const uint32_t from_offset =
          in_payload ? progress->posted : progress->posted - ctx.remote.length;
      const uint32_t len = static_cast<uint32_t>(pacer_.NextPieceBytes(from.length - from_offset));
      sge = ibv_sge{ctx.buffer->addr() + progress->posted, len, ctx.buffer->lkey()};
      wr.opcode = IBV_WR_RDMA_READ;
      wr.wr.rdma.remote_addr = from.addr + from_offset;
      wr.wr.rdma.rkey = from.rkey;
      progress->posted += len;
    } else {
      auto it = pushes_.find(q.id);
      if (it == pushes_.end() || it->second.progress.failed) {
        transfer_queue_.pop_front();
        continue;
      }
      PushCtx& ctx = it->second;
      progress = &ctx.progress;
      const uint32_t plain = progress->length - ctx.first_len;  // bytes of plain WRITEs
      if (progress->posted < plain) {
        const uint32_t len =
            static_cast<uint32_t>(pacer_.NextPieceBytes(plain - progress->posted));
        const uint64_t off = ctx.first_len + progress->posted;
        sge = ibv_sge{ctx.buffer->addr() + off, len, ctx.buffer->lkey()};
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.wr.rdma.remote_addr = ctx.remote.addr + off;
        progress->posted += len;
      } else {
        sge = ibv_sge{ctx.buffer->addr(), ctx.first_len, ctx.buffer->lkey()};
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htonl(ctx.imm);
        wr.wr.rdma.remote_addr = ctx.remote.addr;
        progress->posted += ctx.first_len;
      }
      wr.wr.rdma.rkey = ctx.remote.rkey;
    }
    if (progress->all_posted()) transfer_queue_.pop_front();
    ++progress->outstanding;
    pacer_.OnPosted();
    SqEntry e;
    e.bulk_id = q.id;
    e.bulk_read = q.read;
    send_queue_.PostWr(&wr, e, /*force_signal=*/true);
  }
  Doorbell();
}

void Connection::OnChunkDone(const SqEntry& entry, const ibv_wc* wc) {
  pacer_.OnEnded();
  const bool ok = wc != nullptr && wc->status == IBV_WC_SUCCESS;
  if (!entry.bulk_read) {
    auto it = pushes_.find(entry.bulk_id);
    if (it == pushes_.end()) return;
    PushCtx& ctx = it->second;
    --ctx.progress.outstanding;
    if (!ok) ctx.progress.failed = true;
    if (ctx.progress.outstanding > 0) return;
    // Nothing of it is in flight: done, failed, or its connection closed
    // with pieces never posted. The device no longer reads the buffer.
    if (ctx.progress.all_posted() || ctx.progress.failed || !usable()) {
      if (pool_ != nullptr) pool_->Put(ctx.buffer);
      pushes_.erase(it);
      // Not while SendQueue::Doorbell undoes a failed post (wc nullptr):
      // the close would post its marker from inside that Doorbell.
      if (close_when_sent_ && wc != nullptr) MaybeFinishCloseWhenSent();
    }
    return;
  }
  auto it = reads_.find(entry.bulk_id);
  if (it == reads_.end()) return;
  ReadCtx& ctx = it->second;
  --ctx.progress.outstanding;
  if (!ok) {
    if (!ctx.progress.failed && wc != nullptr) {
      LOG_IF(WARNING, wc->status != IBV_WC_WR_FLUSH_ERR)
          << "RDMA READ of " << ctx.remote.length << " bytes from " << peer_name_
          << " failed: " << ibv_wc_status_str(wc->status);
    }
    ctx.progress.failed = true;  // OnSendCompletion closes the connection
  }
  if (ctx.progress.outstanding > 0) return;
  if (ctx.progress.failed || !usable()) {
    if (pool_ != nullptr) pool_->Put(ctx.buffer);
    reads_.erase(it);
    return;
  }
  if (ctx.progress.all_posted() || PullAbandoned(ctx)) OnReadDone(entry.bulk_id);
}

bool Connection::PullAbandoned(const ReadCtx& ctx) {
  if (ctx.is_request) return ctx.cancelled;  // the client sent kCancel
  if (ctx.stream_message) {                  // its stream ended here
    return FindStreamIn(Imm{MsgKind::kStreamMessage, ctx.token.generation, ctx.token.slot}) ==
           nullptr;
  }
  // A response whose call was retired (cancelled, deadline).
  return streams_.Live(HandleSlot(ctx.handle), HandleGeneration(ctx.handle)) == nullptr;
}

void Connection::OnReadDone(uint64_t id) {
  auto node = reads_.extract(id);
  ReadCtx& ctx = node.mapped();
  if (ctx.stream_message) {
    absl::string_view payload(ctx.buffer->data, ctx.remote.length);
    if (ctx.has_attachment) {
      // The buffer becomes the attachment's; a payload pulled into it lies
      // ahead of the attachment's bytes and lives as long as it.
      if (ctx.remote.length == 0) payload = ctx.inline_payload;
      OnStreamPullDone(ctx, payload, PulledAttachment(ctx));
      return;
    }
    OnStreamPullDone(ctx, payload, Attachment());
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
    const bool stream = ctx.handle != 0;  // PackHandle, set for a stream's opening request
    StreamIn* in = nullptr;
    if (stream) {
      in = streams_.FindServerStream(PackHandle(ctx.token.slot, ctx.token.generation));
      if (in != nullptr) --in->pulls;
    }
    // kFlagNoMessage too: a stream opened without a message whose metadata
    // was too large for the prefix pulls only that metadata.
    const uint8_t flags = static_cast<uint8_t>((stream ? kFlagStream : 0) |
                                               (ctx.end_stream ? kFlagEndStream : 0) |
                                               (ctx.header.flags & kFlagNoMessage));
    absl::string_view payload(ctx.buffer->data, ctx.remote.length);
    if (ctx.has_attachment && ctx.remote.length == 0) payload = ctx.inline_payload;
    absl::string_view meta = ctx.meta;
    if (!SplitMetaInPayload(ctx.header, &payload, &meta)) {
      if (pool_ != nullptr) pool_->Put(ctx.buffer);
      Close(absl::UnavailableError(absl::StrCat("protocol error from ", peer_name_, ": request of ",
                                                payload.size(), " bytes is shorter than its "
                                                "metadata of ", ctx.header.meta_len)));
      return;
    }
    if (ctx.has_attachment) {
      // The buffer becomes the attachment's (the handler keeps it as long
      // as it likes); a payload pulled into it lies there too, ahead of
      // the attachment's bytes, and lives as long as the attachment.
      Attachment attachment = PulledAttachment(ctx);
      DeliverRequest(ctx.token, ctx.method, payload, ctx.timeout_us, flags, meta, nullptr,
                     std::move(attachment), /*payload_in_attachment=*/ctx.remote.length > 0);
      if (stream) RunDeferred(PackHandle(ctx.token.slot, ctx.token.generation));
      return;
    }
    // The handler may keep the buffer (and parse it on another thread).
    PooledBuffer owner(pool_, ctx.buffer);
    DeliverRequest(ctx.token, ctx.method, payload, ctx.timeout_us, flags, meta, &owner);
    owner.reset();
    if (stream) RunDeferred(PackHandle(ctx.token.slot, ctx.token.generation));
    return;
  }
  QueueRelease(ctx.ref);
  const uint16_t idx = HandleSlot(ctx.handle);
  const uint16_t gen = HandleGeneration(ctx.handle);
  Attachment attachment;
  PooledBuffer owner;  // the sink may keep it
  if (ctx.has_attachment) {
    attachment = PulledAttachment(ctx);  // owns the buffer now
  } else {
    owner = PooledBuffer(pool_, ctx.buffer);
  }
  if (Slot* s = streams_.Live(idx, gen); s != nullptr) {
    ResponseSink* sink = s->sink;
    FinishSlot(idx, false);
    absl::string_view payload(ctx.buffer->data, ctx.remote.length);
    if (ctx.has_attachment && ctx.remote.length == 0) payload = ctx.inline_payload;
    absl::string_view meta = ctx.meta;
    // A copy: `payload` lies in the attachment's buffer, which must outlive
    // OnResponseInBuffer even when the sink drops what it is given.
    if (attachment) sink->OnResponseAttachment(attachment);
    if (!SplitMetaInPayload(ctx.header, &payload, &meta)) {
      sink->OnFailure(absl::UnavailableError(absl::StrCat(
          "protocol error from ", peer_name_, ": response of ", payload.size(),
          " bytes is shorter than its metadata of ", ctx.header.meta_len)));
    } else {
      if (!meta.empty()) sink->OnResponseMetadata(meta);
      sink->OnResponseInBuffer(ctx.code, ctx.message, payload, &owner);
    }
  }
}

void Connection::OnRelease(uint32_t ref) {
  bool released = false;
  if (auto it = exposed_.find(ref); it != exposed_.end()) {
    RevokeAndPut(it->second, /*rekey=*/false);
    exposed_.erase(it);
    released = true;
  }
  if (!exposed_attachments_.empty()) {
    if (auto it = exposed_attachments_.find(ref); it != exposed_attachments_.end()) {
      RevokeAndPut(it->second, /*rekey=*/false);
      exposed_attachments_.erase(it);
      released = true;
    }
  }
  if (released && close_when_sent_) MaybeFinishCloseWhenSent();
}

void Connection::DeliverRequest(const RequestToken& token, absl::string_view method,
                                absl::string_view payload, uint64_t timeout_us, uint8_t flags,
                                absl::string_view meta, PooledBuffer* payload_buffer,
                                Attachment attachment, bool payload_in_attachment) {
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
  req.payload_buffer = payload_buffer;
  req.attachment = std::move(attachment);
  req.payload_in_attachment = payload_in_attachment && req.attachment;
  handler_->OnRequest(this, req);
}

}  // namespace internal
}  // namespace rdmarpc
