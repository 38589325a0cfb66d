// header.cc: encode/decode of the fixed wire formats in header.h.
#include "runtime/transport/header.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/transport/little_endian.h"

namespace rdmarpc {
namespace internal {
namespace {

void PutRemote(char* out, const RemoteBuffer& b) {
  PutLittleEndian<uint64_t>(out, b.addr);
  PutLittleEndian<uint32_t>(out + 8, b.rkey);
  PutLittleEndian<uint32_t>(out + 12, b.length);
}
RemoteBuffer GetRemote(const char* in) {
  RemoteBuffer b;
  b.addr = GetLittleEndian<uint64_t>(in);
  b.rkey = GetLittleEndian<uint32_t>(in + 8);
  b.length = GetLittleEndian<uint32_t>(in + 12);
  return b;
}

}  // namespace

bool IsValidKind(uint8_t kind) { return kind >= 1 && kind <= 10; }

uint32_t EncodeImm(const Imm& imm) {
  return (static_cast<uint32_t>(imm.kind) << 28) |
         (static_cast<uint32_t>(imm.generation & kGenerationMask) << 16) | imm.slot;
}

absl::StatusOr<Imm> DecodeImm(uint32_t v) {
  const uint8_t kind = static_cast<uint8_t>(v >> 28);
  if (!IsValidKind(kind)) {
    return absl::InvalidArgumentError(absl::StrCat("imm_data 0x", absl::Hex(v),
                                                   " has unknown message kind ", kind));
  }
  Imm imm;
  imm.kind = static_cast<MsgKind>(kind);
  imm.generation = static_cast<uint16_t>((v >> 16) & kGenerationMask);
  imm.slot = static_cast<uint16_t>(v & 0xFFFF);
  return imm;
}

size_t EncodedPrefixBytes(const WireHeader& h) {
  size_t n = kWireHeaderBytes + h.aux_len + ((h.flags & kFlagMetaInPayload) ? 0 : h.meta_len);
  if (h.flags & kFlagPayloadRemote) n += kRemoteBufferBytes;
  if (h.flags & kFlagReplyBuffer) n += kRemoteBufferBytes;
  if (h.flags & kFlagAttachment) n += kAttachmentDescriptorBytes;
  return n;
}

size_t EncodePrefix(const WireHeader& h, absl::string_view aux, const RemoteBuffer& payload_remote,
                    const RemoteBuffer& reply_buffer, char* out, absl::string_view meta,
                    const AttachmentDescriptor& attachment) {
  PutLittleEndian<uint16_t>(out, kHeaderMagic);
  out[2] = static_cast<char>(h.kind);
  out[3] = static_cast<char>(h.flags);
  PutLittleEndian<uint16_t>(out + 4, h.credits);
  PutLittleEndian<uint16_t>(out + 6, static_cast<uint16_t>(aux.size()));
  PutLittleEndian<uint32_t>(out + 8, h.status_code);
  PutLittleEndian<uint32_t>(out + 12, h.payload_len);
  PutLittleEndian<uint64_t>(out + 16, h.timeout_us);
  PutLittleEndian<uint32_t>(out + 24, h.ref);
  const bool meta_in_payload = (h.flags & kFlagMetaInPayload) != 0;
  PutLittleEndian<uint32_t>(out + 28, meta_in_payload ? h.meta_len : static_cast<uint32_t>(meta.size()));
  size_t off = kWireHeaderBytes;
  if (!aux.empty()) std::memcpy(out + off, aux.data(), aux.size());
  off += aux.size();
  if (!meta_in_payload) {
    if (!meta.empty()) std::memcpy(out + off, meta.data(), meta.size());
    off += meta.size();
  }
  if (h.flags & kFlagPayloadRemote) {
    PutRemote(out + off, payload_remote);
    off += kRemoteBufferBytes;
  }
  if (h.flags & kFlagReplyBuffer) {
    PutRemote(out + off, reply_buffer);
    off += kRemoteBufferBytes;
  }
  if (h.flags & kFlagAttachment) {
    PutLittleEndian<uint32_t>(out + off, attachment.length);
    PutLittleEndian<uint32_t>(out + off + 4, attachment.remote ? 1 : 0);
    PutRemote(out + off + 8, attachment.remote ? attachment.buffer : RemoteBuffer());
    off += kAttachmentDescriptorBytes;
  }
  return off;
}

namespace {

// The fixed 32-byte header at the start of `bytes`: checks the size, the
// magic, the kind and the flags. INVALID_ARGUMENT names what is wrong.
absl::Status DecodeFixedHeader(absl::string_view bytes, WireHeader* h) {
  if (bytes.size() < kWireHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("message of ", bytes.size(),
                                                   " bytes is shorter than the ",
                                                   kWireHeaderBytes, "-byte header"));
  }
  const char* p = bytes.data();
  const uint16_t magic = GetLittleEndian<uint16_t>(p);
  if (magic != kHeaderMagic) {
    return absl::InvalidArgumentError(absl::StrCat("header magic 0x", absl::Hex(magic),
                                                   " is not 0x", absl::Hex(kHeaderMagic)));
  }
  const uint8_t kind = static_cast<uint8_t>(p[2]);
  if (!IsValidKind(kind)) {
    return absl::InvalidArgumentError(absl::StrCat("header has unknown message kind ", kind));
  }
  h->kind = static_cast<MsgKind>(kind);
  h->flags = static_cast<uint8_t>(p[3]);
  if (h->flags & ~kKnownFlags) {
    return absl::InvalidArgumentError(absl::StrCat("header has unknown flags 0x",
                                                   absl::Hex(h->flags)));
  }
  h->credits = GetLittleEndian<uint16_t>(p + 4);
  h->aux_len = GetLittleEndian<uint16_t>(p + 6);
  h->status_code = GetLittleEndian<uint32_t>(p + 8);
  h->payload_len = GetLittleEndian<uint32_t>(p + 12);
  h->timeout_us = GetLittleEndian<uint64_t>(p + 16);
  h->ref = GetLittleEndian<uint32_t>(p + 24);
  h->meta_len = GetLittleEndian<uint32_t>(p + 28);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ParsedMessage> DecodeMessage(absl::string_view bytes) {
  ParsedMessage m;
  WireHeader& h = m.header;
  if (absl::Status s = DecodeFixedHeader(bytes, &h); !s.ok()) return s;
  const char* p = bytes.data();
  if (!(h.flags & kFlagMetaInPayload) && h.meta_len > bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("header announces ", h.meta_len,
                                                   " bytes of metadata but the message has ",
                                                   bytes.size()));
  }
  const size_t prefix = EncodedPrefixBytes(h);
  if (prefix > bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("header announces ", prefix,
                                                   " bytes of header, aux and descriptors but the "
                                                   "message has ", bytes.size()));
  }
  size_t off = kWireHeaderBytes;
  m.aux = bytes.substr(off, h.aux_len);
  off += h.aux_len;
  if (!(h.flags & kFlagMetaInPayload)) {
    m.meta = bytes.substr(off, h.meta_len);
    off += h.meta_len;
  } else if (h.meta_len > h.payload_len) {
    return absl::InvalidArgumentError(absl::StrCat("header announces ", h.meta_len,
                                                   " bytes of metadata in a payload of ",
                                                   h.payload_len));
  }
  if (h.flags & kFlagPayloadRemote) {
    m.payload_remote = GetRemote(p + off);
    off += kRemoteBufferBytes;
    if (m.payload_remote.length != h.payload_len) {
      return absl::InvalidArgumentError(absl::StrCat("remote payload descriptor of ",
                                                     m.payload_remote.length,
                                                     " bytes disagrees with payload_len ",
                                                     h.payload_len));
    }
  }
  if (h.flags & kFlagReplyBuffer) {
    m.reply_buffer = GetRemote(p + off);
    off += kRemoteBufferBytes;
  }
  size_t inline_attachment = 0;
  if (h.flags & kFlagAttachment) {
    m.attachment.length = GetLittleEndian<uint32_t>(p + off);
    const uint32_t mode = GetLittleEndian<uint32_t>(p + off + 4);
    if (mode > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("attachment descriptor has unknown mode ", mode));
    }
    m.attachment.remote = mode == 1;
    if (m.attachment.remote) {
      if (m.attachment.length == 0) {
        // Never sent: a 0-byte attachment is no attachment.
        return absl::InvalidArgumentError("remote attachment descriptor of 0 bytes");
      }
      m.attachment.buffer = GetRemote(p + off + 8);
      if (m.attachment.buffer.length != m.attachment.length) {
        return absl::InvalidArgumentError(
            absl::StrCat("remote attachment descriptor of ", m.attachment.buffer.length,
                         " bytes disagrees with the attachment's length ", m.attachment.length));
      }
    } else {
      // Inline: the descriptor's RemoteBuffer is zero (EncodePrefix writes
      // it so); anything else is a malformed frame, not a hint to ignore.
      const RemoteBuffer unused = GetRemote(p + off + 8);
      if (unused.addr != 0 || unused.rkey != 0 || unused.length != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inline attachment descriptor of ", m.attachment.length,
            " bytes names a remote buffer (addr 0x", absl::Hex(unused.addr), ", rkey 0x",
            absl::Hex(unused.rkey), ", length ", unused.length, ")"));
      }
      inline_attachment = m.attachment.length;
    }
    off += kAttachmentDescriptorBytes;
  }
  const size_t inline_payload = (h.flags & kFlagPayloadRemote) ? 0 : size_t{h.payload_len};
  if (bytes.size() - off != inline_payload + inline_attachment) {
    return absl::InvalidArgumentError(
        absl::StrCat("header announces an inline payload of ", inline_payload,
                     " bytes and an inline "
                     "attachment of ",
                     inline_attachment, " bytes but ", bytes.size() - off, " follow"));
  }
  if (!(h.flags & kFlagPayloadRemote)) {
    m.payload = bytes.substr(off, inline_payload);
    SplitMetaInPayload(h, &m.payload, &m.meta);  // lengths checked above
  }
  if (inline_attachment > 0) m.attachment_bytes = bytes.substr(off + inline_payload);
  return m;
}

absl::StatusOr<size_t> EncodedMessageBytes(absl::string_view start) {
  WireHeader h;
  if (absl::Status s = DecodeFixedHeader(start, &h); !s.ok()) return s;
  const size_t prefix = EncodedPrefixBytes(h);
  if (prefix > start.size()) {
    return absl::InvalidArgumentError(absl::StrCat("header announces ", prefix,
                                                   " bytes of header, aux and descriptors but "
                                                   "only ", start.size(), " arrived with it"));
  }
  size_t inline_attachment = 0;
  if ((h.flags & kFlagAttachment) &&
      GetLittleEndian<uint32_t>(start.data() + prefix - kAttachmentDescriptorBytes + 4) == 0) {
    inline_attachment =
        GetLittleEndian<uint32_t>(start.data() + prefix - kAttachmentDescriptorBytes);
  }
  return prefix + ((h.flags & kFlagPayloadRemote) ? 0 : size_t{h.payload_len}) + inline_attachment;
}

absl::Status CheckAttachmentFrame(const ParsedMessage& m) {
  const WireHeader& h = m.header;
  // A request or stream message that carries a message (a stream's
  // opening request does for a server-streaming call), or a response.
  const bool with_message = (h.kind == MsgKind::kRequest || h.kind == MsgKind::kStreamMessage) &&
                            !(h.flags & kFlagNoMessage);
  if (!with_message && h.kind != MsgKind::kResponse) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attachment on a frame of kind ", static_cast<int>(h.kind), " with flags 0x",
        absl::Hex(h.flags), " (only requests and stream messages with a message, and responses)"));
  }
  if (!m.attachment.remote && (h.flags & kFlagPayloadRemote)) {
    return absl::InvalidArgumentError(absl::StrCat("inline attachment of ", m.attachment.length,
                                                   " bytes beside a remote payload of ",
                                                   h.payload_len, " bytes"));
  }
  return absl::OkStatus();
}

bool SplitMetaInPayload(const WireHeader& h, absl::string_view* payload, absl::string_view* meta) {
  if (!(h.flags & kFlagMetaInPayload)) return true;
  if (payload->size() < h.meta_len) return false;
  *meta = payload->substr(0, h.meta_len);
  payload->remove_prefix(h.meta_len);
  return true;
}

}  // namespace internal
}  // namespace rdmarpc
