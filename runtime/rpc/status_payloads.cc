// status_payloads.cc: see status_payloads.h.
#include "runtime/rpc/status_payloads.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/strings/cord.h"

namespace rdmarpc {
namespace internal {
namespace {

void PutU32(std::string* out, uint32_t v) {
  char b[4];
  absl::little_endian::Store32(b, v);
  out->append(b, 4);
}

// Takes a length-prefixed field off the front of `*in`.
bool TakeField(absl::string_view* in, absl::string_view* field) {
  if (in->size() < 4) return false;
  const uint32_t len = absl::little_endian::Load32(in->data());
  in->remove_prefix(4);
  if (len > in->size()) return false;
  *field = in->substr(0, len);
  in->remove_prefix(len);
  return true;
}

}  // namespace

std::string EncodeStatusPayloads(const absl::Status& status) {
  std::string out;
  status.ForEachPayload([&out](absl::string_view type_url, const absl::Cord& value) {
    PutU32(&out, static_cast<uint32_t>(type_url.size()));
    out.append(type_url.data(), type_url.size());
    PutU32(&out, static_cast<uint32_t>(value.size()));
    for (absl::string_view chunk : value.Chunks()) out.append(chunk.data(), chunk.size());
  });
  return out;
}

bool DecodeStatusPayloads(absl::string_view bytes, absl::Status* status) {
  std::vector<std::pair<absl::string_view, absl::string_view>> payloads;
  while (!bytes.empty()) {
    absl::string_view type_url, value;
    if (!TakeField(&bytes, &type_url) || !TakeField(&bytes, &value)) return false;
    payloads.emplace_back(type_url, value);
  }
  for (const auto& [type_url, value] : payloads) {
    status->SetPayload(type_url, absl::Cord(value));
  }
  return true;
}

}  // namespace internal
}  // namespace rdmarpc
