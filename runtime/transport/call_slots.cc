// call_slots.cc: the client's table of calls in flight on one connection.
// A slot's index and generation travel in imm_data, so a response finds its
// call without parsing, and a response for a retired slot (deadline) is
// recognised as stale by its generation.
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
  uint16_t idx;
  if (!free_slots_.empty()) {
    idx = free_slots_.back();
    free_slots_.pop_back();
  } else if (slots_.size() < static_cast<size_t>(kMaxSlots)) {
    idx = static_cast<uint16_t>(slots_.size());
    slots_.emplace_back();
  } else {
    sink->OnFailure(absl::ResourceExhaustedError(
        absl::StrCat("connection to ", peer_name_, " has ", kMaxSlots, " calls in flight")));
    return 0;
  }
  Slot& s = slots_[idx];
  s.busy = true;
  s.sent = false;
  s.sink = sink;
  s.stream = request.stream;
  s.request = std::move(request);
  ++busy_slots_;
  loop_->CallStarted();
  // Generation 0 is never used so that handle 0 means "no call".
  const uint32_t handle = (static_cast<uint32_t>(s.generation) << 16) | idx;
  sink->OnQueued(handle);
  if (state_ == ConnState::kEstablished && out_queue_.empty() && CanPostMessage()) {
    // Fast path: straight into the send queue (no out_queue_ node); the
    // doorbell rings at the end of the loop step, with whatever else
    // became ready. SendRequest may fail the call (and recycle the slot).
    SendRequest(handle);
    ScheduleEndOfStep();
    return LiveSlot(idx, static_cast<uint16_t>(handle >> 16)) != nullptr ? handle : 0;
  }
  OutItem item;
  item.kind = OutKind::kRequest;
  item.handle = handle;
  out_queue_.push_back(std::move(item));
  // Sent at the end of the loop step, with whatever else became ready.
  if (state_ == ConnState::kEstablished) ScheduleEndOfStep();
  return handle;
}

Connection::Slot* Connection::LiveSlot(uint16_t slot, uint16_t gen) {
  if (slot >= slots_.size()) return nullptr;
  Slot& s = slots_[slot];
  if (!s.busy || s.generation != gen) return nullptr;
  return &s;
}

void Connection::FinishSlot(uint16_t idx, bool rekey) {
  Slot& s = slots_[idx];
  if (pool_ != nullptr) {
    // A buffer the server could still READ or WRITE (the call ended without
    // its response) must not be reused with the same rkey.
    const bool exposed = rekey && s.sent;
    if (exposed && usable()) {
      // The connection lives on: the server was sent kCancel and answers
      // it once. Re-keying now would turn its late READ of the request or
      // WRITE of the response into a remote access error that kills the
      // connection for every other call on it, so both buffers are kept out
      // of use until that answer (or the connection's end) shows the server
      // is done with them.
      std::vector<LargeBuffer*>& held =
          quarantine_[(static_cast<uint32_t>(s.generation) << 16) | idx];
      if (s.request_buffer != nullptr) held.push_back(s.request_buffer);
      if (s.reply_buffer != nullptr) held.push_back(s.reply_buffer);
    } else {
      for (LargeBuffer* b : {s.request_buffer, s.reply_buffer}) {
        if (b == nullptr) continue;
        exposed ? pool_->RekeyAndPut(b) : pool_->Put(b);
      }
    }
  }
  s.request_buffer = nullptr;
  s.reply_buffer = nullptr;
  if (s.stream) DropStreamIn(s.in);
  s.in.pulls = 0;
  s.stream = false;
  s.busy = false;
  s.sent = false;
  s.sink = nullptr;
  s.request = OutgoingRequest();
  s.generation = static_cast<uint16_t>((s.generation + 1) & kGenerationMask);
  if (s.generation == 0) s.generation = 1;
  --busy_slots_;
  loop_->CallFinished();
  free_slots_.push_back(idx);
}

void Connection::ReleaseQuarantined(uint16_t slot, uint16_t gen) {
  if (quarantine_.empty()) return;
  auto it = quarantine_.find((static_cast<uint32_t>(gen) << 16) | slot);
  if (it == quarantine_.end()) return;
  // The server answered this retired call: it will not read or write these
  // buffers again.
  if (pool_ != nullptr) {
    for (LargeBuffer* b : it->second) pool_->Put(b);
  }
  quarantine_.erase(it);
}

void Connection::CancelCall(uint32_t handle) {
  const uint16_t idx = static_cast<uint16_t>(handle & 0xFFFF);
  const uint16_t gen = static_cast<uint16_t>(handle >> 16);
  Slot* s = LiveSlot(idx, gen);
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
  for (ReadCtx& ctx : pending_reads_) {
    if (ctx.is_request && ctx.token.slot == imm.slot && ctx.token.generation == imm.generation) {
      ctx.cancelled = true;
      return;
    }
  }
  for (auto& [seq, ctx] : reads_) {
    if (ctx.is_request && ctx.token.slot == imm.slot && ctx.token.generation == imm.generation) {
      ctx.cancelled = true;
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
