// stream_table.cc: StreamTable (see stream_table.h).
#include "runtime/transport/stream_table.h"

namespace rdmarpc {
namespace internal {

uint32_t StreamTable::Open() {
  uint16_t idx;
  if (!free_slots_.empty()) {
    idx = free_slots_.back();
    free_slots_.pop_back();
  } else if (slots_.size() < max_slots_) {
    idx = static_cast<uint16_t>(slots_.size());
    slots_.emplace_back();
  } else {
    return 0;
  }
  Slot& s = slots_[idx];
  s.busy = true;
  s.sent = false;
  ++busy_;
  return PackHandle(idx, s.generation);
}

void StreamTable::Free(uint16_t index) {
  Slot& s = slots_[index];
  s.request_buffer = nullptr;
  s.reply_buffer = nullptr;
  s.attachment_buffer = nullptr;
  s.in.pulls = 0;
  s.in.deferred.clear();
  s.stream = false;
  s.busy = false;
  s.sent = false;
  s.sink = nullptr;
  s.request = OutgoingRequest();
  s.generation = NextGeneration(s.generation);
  --busy_;
  free_slots_.push_back(index);
}

void StreamTable::Quarantine(uint16_t slot, uint16_t gen, LargeBuffer* request, LargeBuffer* reply,
                             LargeBuffer* attachment) {
  std::vector<LargeBuffer*>& held = quarantine_[PackHandle(slot, gen)];
  if (request != nullptr) held.push_back(request);
  if (reply != nullptr) held.push_back(reply);
  if (attachment != nullptr) held.push_back(attachment);
}

std::vector<LargeBuffer*> StreamTable::TakeQuarantined(uint16_t slot, uint16_t gen) {
  if (quarantine_.empty()) return {};
  auto node = quarantine_.extract(PackHandle(slot, gen));
  if (node.empty()) return {};
  return std::move(node.mapped());
}

}  // namespace internal
}  // namespace rdmarpc
