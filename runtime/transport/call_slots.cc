// call_slots.cc: a client call's life on one connection — started in a
// StreamTable slot (stream_table.h), cancelled, finished (its buffers put
// back, or quarantined until the server's late answer) — and the server's
// side of a cancel.
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "runtime/transport/connection.h"

namespace rdmarpc {
namespace internal {

uint32_t Connection::StartCall(OutgoingRequest request, ResponseSink* sink) {
  if (!usable()) {
    sink->OnFailure(close_reason_.ok()
                        ? absl::UnavailableError(
                              absl::StrCat("connection to ", peer_name_, " is closed"))
                        : absl::UnavailableError(close_reason_.message()));
    return 0;
  }
  const uint32_t handle = streams_.Open();
  if (handle == 0) {
    sink->OnFailure(absl::ResourceExhaustedError(
        absl::StrCat("connection to ", peer_name_, " has ", kMaxSlots, " calls in flight")));
    return 0;
  }
  const uint16_t idx = HandleSlot(handle);
  Slot& s = streams_.slot(idx);
  s.sink = sink;
  s.stream = request.stream;
  s.request = std::move(request);
  loop_->CallStarted();
  sink->OnQueued(handle);
  if (state_ == ConnState::kEstablished && out_queue_.empty() && CanPostMessage()) {
    // Fast path: straight into the send queue (no out_queue_ node); the
    // doorbell rings at the end of the loop step, with whatever else
    // became ready. SendRequest may fail the call (and recycle the slot).
    SendRequest(handle);
    ScheduleEndOfStep();
    return streams_.Live(handle) != nullptr ? handle : 0;
  }
  OutItem item;
  item.kind = OutKind::kRequest;
  item.handle = handle;
  out_queue_.push_back(std::move(item));
  // Sent at the end of the loop step, with whatever else became ready.
  if (state_ == ConnState::kEstablished) ScheduleEndOfStep();
  return handle;
}

void Connection::FinishSlot(uint16_t idx, bool rekey) {
  Slot& s = streams_.slot(idx);
  if (pool_ != nullptr) {
    // A buffer the server could still READ or WRITE (the call ended without
    // its response) must not be reused while its rkey opens it.
    const bool exposed = rekey && s.sent;
    if (exposed && usable()) {
      // The connection lives on: the server was sent kCancel and answers
      // it once. Re-keying now would turn its late READ of the request or
      // WRITE of the response into a remote access error that kills the
      // connection for every other call on it, so both buffers are kept out
      // of use until that answer (or the connection's end) shows the server
      // is done with them.
      streams_.Quarantine(idx, s.generation, s.request_buffer, s.reply_buffer, s.attachment_buffer);
    } else {
      for (LargeBuffer* b : {s.request_buffer, s.reply_buffer, s.attachment_buffer}) {
        if (b != nullptr) RevokeAndPut(b, exposed);
      }
    }
  }
  s.request_buffer = nullptr;
  s.reply_buffer = nullptr;
  s.attachment_buffer = nullptr;
  if (s.stream) DropStreamIn(s.in);
  streams_.Free(idx);
  loop_->CallFinished();
}

void Connection::ReleaseQuarantined(uint16_t slot, uint16_t gen) {
  if (streams_.quarantined_calls() == 0) return;
  // The server answered this retired call: it will not read or write these
  // buffers again.
  for (LargeBuffer* b : streams_.TakeQuarantined(slot, gen)) RevokeAndPut(b, /*rekey=*/false);
}

void Connection::RevokeAndPut(LargeBuffer* b, bool rekey) {
  if (pool_ == nullptr || b == nullptr) return;
  // Without windows every exposure ends with a new registration, so the
  // rkey the peer saw opens nothing once the stream ended.
  rekey |= exposures_.exposed(b);
  exposures_.Revoke(&send_queue_, b, usable() && qp_.get() != nullptr);
  if (rekey && !exposures_.windows()) {
    pool_->RekeyAndPut(b);
  } else {
    pool_->Put(b);
  }
}

void Connection::CancelCall(uint32_t handle) {
  const uint16_t idx = HandleSlot(handle);
  const uint16_t gen = HandleGeneration(handle);
  Slot* s = streams_.Live(idx, gen);
  if (s == nullptr) return;
  if (s->sent && usable()) {
    OutItem item;
    item.kind = OutKind::kCancel;
    item.slot = idx;
    item.generation = gen;
    out_queue_.push_back(std::move(item));
    ScheduleEndOfStep();
  }
  FinishSlot(idx, /*rekey=*/true);
}

void Connection::OnCancelFrame(const Imm& imm) {
  for (auto& [id, ctx] : reads_) {
    if (ctx.is_request && ctx.token.slot == imm.slot && ctx.token.generation == imm.generation) {
      // No more of it is pulled; answered CANCELLED once its pieces in
      // flight ended (PostRendezvousChunks, OnChunkDone).
      ctx.cancelled = true;
      if (ctx.progress.outstanding == 0 && !ctx.progress.all_posted()) ScheduleEndOfStep();
      return;
    }
  }
  for (auto& [id, ctx] : delayed_reads_) {
    if (ctx.token.slot == imm.slot && ctx.token.generation == imm.generation) {
      ctx.cancelled = true;
      return;
    }
  }
  RequestToken token;
  token.slot = imm.slot;
  token.generation = imm.generation;
  if (handler_ != nullptr) handler_->OnCancel(this, token);
}

}  // namespace internal
}  // namespace rdmarpc
