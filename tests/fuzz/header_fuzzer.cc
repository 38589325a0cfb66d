// header_fuzzer.cc: the transport's wire header (header.h) as a peer could
// send it: imm_data (the first 4 bytes) and one received message (the
// rest). Beyond not crashing: every view DecodeMessage returns lies inside
// the input, EncodedMessageBytes agrees with it, the payload and metadata
// add up to payload_len, an inline attachment is the last `length` bytes,
// and re-encoding the parsed prefix (attachment descriptor included) gives
// back the bytes it was parsed from.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "runtime/transport/header.h"

namespace {

using rdmarpc::internal::DecodeImm;
using rdmarpc::internal::DecodeMessage;
using rdmarpc::internal::EncodedMessageBytes;
using rdmarpc::internal::EncodedPrefixBytes;
using rdmarpc::internal::EncodeImm;
using rdmarpc::internal::EncodePrefix;
using rdmarpc::internal::kFlagMetaInPayload;
using rdmarpc::internal::kFlagPayloadRemote;
using rdmarpc::internal::ParsedMessage;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "header_fuzzer: %s\n", what);
    std::abort();
  }
}

bool Inside(absl::string_view part, absl::string_view whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t imm_bits;
  std::memcpy(&imm_bits, data, 4);
  if (auto imm = DecodeImm(imm_bits); imm.ok()) {
    Check(EncodeImm(*imm) == imm_bits, "imm_data does not round-trip");
  }
  const absl::string_view bytes(reinterpret_cast<const char*>(data) + 4, size - 4);
  auto parsed = DecodeMessage(bytes);
  auto total = EncodedMessageBytes(bytes);
  if (!parsed.ok()) return 0;
  const ParsedMessage& m = *parsed;
  Check(Inside(m.aux, bytes) && Inside(m.meta, bytes) && Inside(m.payload, bytes) &&
            Inside(m.attachment_bytes, bytes),
        "a view points outside the message");
  if (m.has_attachment() && !m.attachment.remote) {
    Check(m.attachment_bytes.size() == m.attachment.length,
          "inline attachment differs from its descriptor's length");
    Check(m.attachment.length == 0 ||
              m.attachment_bytes.data() + m.attachment_bytes.size() == bytes.data() + bytes.size(),
          "inline attachment is not the message's last bytes");
  } else {
    Check(m.attachment_bytes.empty(), "attachment bytes without an inline attachment");
  }
  Check(m.aux.size() == m.header.aux_len, "aux length differs from the header's");
  const size_t prefix = EncodedPrefixBytes(m.header);
  Check(prefix <= bytes.size(), "prefix longer than the message");
  Check(total.ok(), "EncodedMessageBytes refuses what DecodeMessage accepts");
  const bool meta_in_payload = (m.header.flags & kFlagMetaInPayload) != 0;
  if (!(m.header.flags & kFlagPayloadRemote)) {
    // An eager payload is the rest of the message; metadata sent in it was
    // split off its front.
    Check(*total == bytes.size(), "EncodedMessageBytes disagrees with the message's size");
    Check(m.payload.size() + (meta_in_payload ? m.meta.size() : 0) == m.header.payload_len,
          "payload and metadata do not add up to payload_len");
  } else if (m.has_attachment() && !m.attachment.remote) {
    // Inline attachment beside a remote payload: parsed (CheckAttachmentFrame
    // refuses it later), and its bytes are still all that follows.
    Check(*total == bytes.size(), "EncodedMessageBytes disagrees with the message's size");
  }
  std::string again(prefix, '\0');
  const size_t written =
      EncodePrefix(m.header, m.aux, m.payload_remote, m.reply_buffer, again.data(),
                   meta_in_payload ? absl::string_view() : m.meta, m.attachment);
  Check(written == prefix, "EncodePrefix wrote another length");
  Check(absl::string_view(again) == bytes.substr(0, prefix), "the prefix does not round-trip");
  return 0;
}
