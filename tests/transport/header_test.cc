// Wire header, imm_data and handshake codecs.
#include "runtime/transport/header.h"

#include <string>

#include "gtest/gtest.h"

namespace rdmarpc {
namespace internal {
namespace {

std::string Encode(const WireHeader& h, absl::string_view aux, const RemoteBuffer& pr,
                   const RemoteBuffer& rb, absl::string_view payload) {
  std::string out(EncodedPrefixBytes(h) + payload.size(), '\0');
  const size_t n = EncodePrefix(h, aux, pr, rb, out.data());
  EXPECT_EQ(n, EncodedPrefixBytes(h));
  out.replace(n, payload.size(), payload.data(), payload.size());
  return out;
}

TEST(Imm, RoundTripsKindGenerationSlot) {
  Imm imm{MsgKind::kResponseWritten, 0xABC, 0xFEDC};
  const uint32_t v = EncodeImm(imm);
  EXPECT_EQ(v, 0x5ABCFEDCu);
  absl::StatusOr<Imm> back = DecodeImm(v);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->kind, MsgKind::kResponseWritten);
  EXPECT_EQ(back->generation, 0xABC);
  EXPECT_EQ(back->slot, 0xFEDC);
}

TEST(Imm, GenerationIsMaskedToTwelveBits) {
  Imm imm{MsgKind::kRequest, 0x1FFF, 7};
  absl::StatusOr<Imm> back = DecodeImm(EncodeImm(imm));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->generation, 0xFFF);
}

TEST(Imm, RejectsUnknownKind) {
  EXPECT_EQ(DecodeImm(0x00000001u).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeImm(0xF0000001u).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireHeader, EagerRequestRoundTrip) {
  WireHeader h;
  h.kind = MsgKind::kRequest;
  h.credits = 17;
  h.aux_len = 6;
  h.payload_len = 5;
  h.timeout_us = 123456789;
  const std::string bytes = Encode(h, "/a.B/C", {}, {}, "hello");
  EXPECT_EQ(bytes.size(), kWireHeaderBytes + 6 + 5);
  absl::StatusOr<ParsedMessage> m = DecodeMessage(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->header.kind, MsgKind::kRequest);
  EXPECT_EQ(m->header.credits, 17);
  EXPECT_EQ(m->header.timeout_us, 123456789u);
  EXPECT_EQ(m->aux, "/a.B/C");
  EXPECT_EQ(m->payload, "hello");
}

TEST(WireHeader, RendezvousDescriptorsRoundTrip) {
  WireHeader h;
  h.kind = MsgKind::kRequest;
  h.flags = kFlagPayloadRemote | kFlagReplyBuffer;
  h.aux_len = 1;
  h.payload_len = 1 << 20;
  RemoteBuffer pr{0x7f0000001000, 0x1234, 1 << 20};
  RemoteBuffer rb{0x7f0000200000, 0x5678, 2 << 20};
  const std::string bytes = Encode(h, "m", pr, rb, "");
  EXPECT_EQ(bytes.size(), kWireHeaderBytes + 1 + 2 * kRemoteBufferBytes);
  absl::StatusOr<ParsedMessage> m = DecodeMessage(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload_remote.addr, pr.addr);
  EXPECT_EQ(m->payload_remote.rkey, pr.rkey);
  EXPECT_EQ(m->payload_remote.length, pr.length);
  EXPECT_EQ(m->reply_buffer.addr, rb.addr);
  EXPECT_EQ(m->reply_buffer.rkey, rb.rkey);
  EXPECT_EQ(m->reply_buffer.length, rb.length);
  EXPECT_TRUE(m->payload.empty());
}

TEST(WireHeader, ResponseCarriesStatus) {
  WireHeader h;
  h.kind = MsgKind::kResponse;
  h.status_code = 5;
  h.aux_len = 9;
  const std::string bytes = Encode(h, "not found", {}, {}, "");
  absl::StatusOr<ParsedMessage> m = DecodeMessage(bytes);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->header.status_code, 5u);
  EXPECT_EQ(m->aux, "not found");
}

TEST(WireHeader, EncodedMessageBytesComesFromThePrefixAlone) {
  // A pushed response: only its first piece (header first) is at hand.
  WireHeader h;
  h.kind = MsgKind::kResponse;
  h.aux_len = 2;
  h.payload_len = 100000;
  std::string bytes = Encode(h, "ok", {}, {}, std::string(100000, 'p'));
  std::string prefix_only(bytes.data(), EncodedPrefixBytes(h));
  absl::StatusOr<size_t> n = EncodedMessageBytes(bytes.substr(0, 4096));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, kWireHeaderBytes + 2 + 100000);
  EXPECT_EQ(EncodedMessageBytes(prefix_only).value(), *n);
  // Shorter than its prefix, or not a header at all: INVALID_ARGUMENT.
  absl::StatusOr<size_t> short_prefix = EncodedMessageBytes(bytes.substr(0, kWireHeaderBytes + 1));
  EXPECT_EQ(short_prefix.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_prefix.status().message().find("34 bytes"), absl::string_view::npos)
      << short_prefix.status();
  EXPECT_EQ(EncodedMessageBytes(std::string(40, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodedMessageBytes(std::string(31, '\0')).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A remote payload is not part of the message.
  h.flags = kFlagPayloadRemote;
  const std::string remote = Encode(h, "ok", RemoteBuffer{1, 2, 100000}, {}, "");
  EXPECT_EQ(EncodedMessageBytes(remote).value(), kWireHeaderBytes + 2 + kRemoteBufferBytes);
}

TEST(WireHeader, RejectsShortMessage) {
  absl::StatusOr<ParsedMessage> m = DecodeMessage(std::string(31, '\0'));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("31 bytes"), absl::string_view::npos);
}

TEST(WireHeader, RejectsBadMagic) {
  WireHeader h;
  h.kind = MsgKind::kCredit;
  std::string bytes = Encode(h, "", {}, {}, "");
  bytes[0] = 'X';
  EXPECT_EQ(DecodeMessage(bytes).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireHeader, RejectsUnknownKindAndFlags) {
  WireHeader h;
  h.kind = MsgKind::kCredit;
  std::string bytes = Encode(h, "", {}, {}, "");
  std::string goaway = bytes;
  goaway[2] = 10;  // kGoAway, the last kind
  absl::StatusOr<ParsedMessage> m = DecodeMessage(goaway);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->header.kind, MsgKind::kGoAway);
  std::string bad_kind = bytes;
  bad_kind[2] = 11;
  EXPECT_EQ(DecodeMessage(bad_kind).status().code(), absl::StatusCode::kInvalidArgument);
  std::string refused = bytes;
  refused[3] = static_cast<char>(kFlagRefused);
  EXPECT_TRUE(DecodeMessage(refused).ok());
  // Every bit is a flag now; kFlagAttachment (the last) without the
  // descriptor it announces is a prefix that overruns the message.
  EXPECT_EQ(kKnownFlags, 0xFF);
  std::string no_descriptor = bytes;
  no_descriptor[3] = static_cast<char>(kFlagAttachment);
  absl::StatusOr<ParsedMessage> short_prefix = DecodeMessage(no_descriptor);
  EXPECT_EQ(short_prefix.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_prefix.status().message().find("56 bytes of header"), absl::string_view::npos)
      << short_prefix.status();
}

// A request with `payload` inline and an attachment descriptor `ad`
// (followed by `inline_attachment` when it is inline).
std::string EncodeWithAttachment(WireHeader h, absl::string_view payload,
                                 const AttachmentDescriptor& ad,
                                 absl::string_view inline_attachment) {
  h.flags |= kFlagAttachment;
  h.payload_len = static_cast<uint32_t>(payload.size());
  std::string out(EncodedPrefixBytes(h), '\0');
  EXPECT_EQ(EncodePrefix(h, "", {}, {}, out.data(), {}, ad), out.size());
  return out + std::string(payload) + std::string(inline_attachment);
}

TEST(WireHeader, InlineAttachmentFollowsThePayload) {
  WireHeader h;
  h.kind = MsgKind::kRequest;
  AttachmentDescriptor ad;
  ad.length = 5;
  const std::string bytes = EncodeWithAttachment(h, "msg", ad, "ABCDE");
  EXPECT_EQ(bytes.size(), kWireHeaderBytes + kAttachmentDescriptorBytes + 3 + 5);
  absl::StatusOr<ParsedMessage> m = DecodeMessage(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->has_attachment());
  EXPECT_FALSE(m->attachment.remote);
  EXPECT_EQ(m->attachment.length, 5u);
  EXPECT_EQ(m->payload, "msg");
  EXPECT_EQ(m->attachment_bytes, "ABCDE");
  EXPECT_TRUE(CheckAttachmentFrame(*m).ok());
  absl::StatusOr<size_t> total = EncodedMessageBytes(bytes);
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_EQ(*total, bytes.size());
  // One byte of the attachment missing, or one too many.
  EXPECT_EQ(DecodeMessage(bytes.substr(0, bytes.size() - 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeMessage(bytes + "x").status().code(), absl::StatusCode::kInvalidArgument);
  // An inline descriptor's RemoteBuffer is zero: one that names a buffer
  // is refused, so every accepted frame encodes back to its own bytes.
  for (size_t byte : {size_t{8}, size_t{16}, size_t{23}}) {
    std::string named = bytes;
    named[kWireHeaderBytes + byte] = 1;
    absl::StatusOr<ParsedMessage> bad = DecodeMessage(named);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << byte;
    EXPECT_NE(bad.status().message().find("inline attachment descriptor of 5 bytes names a "
                                          "remote buffer"),
              absl::string_view::npos)
        << bad.status();
  }
}

TEST(WireHeader, RemoteAttachmentCarriesItsDescriptor) {
  WireHeader h;
  h.kind = MsgKind::kResponse;
  h.ref = 42;
  AttachmentDescriptor ad;
  ad.length = 1 << 20;
  ad.remote = true;
  ad.buffer = RemoteBuffer{0x7f0012340000, 0xbeef, 1 << 20};
  const std::string bytes = EncodeWithAttachment(h, "m", ad, "");
  absl::StatusOr<ParsedMessage> m = DecodeMessage(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->attachment.remote);
  EXPECT_EQ(m->attachment.buffer.addr, 0x7f0012340000u);
  EXPECT_EQ(m->attachment.buffer.rkey, 0xbeefu);
  EXPECT_EQ(m->attachment.buffer.length, 1u << 20);
  EXPECT_EQ(m->payload, "m");
  EXPECT_TRUE(m->attachment_bytes.empty());
  EXPECT_EQ(m->header.ref, 42u);
  // A descriptor whose region disagrees with the length, or an unknown
  // mode, is refused.
  AttachmentDescriptor lying = ad;
  lying.buffer.length = 100;
  absl::StatusOr<ParsedMessage> bad = DecodeMessage(EncodeWithAttachment(h, "m", lying, ""));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("100 bytes disagrees"), absl::string_view::npos)
      << bad.status();
  std::string mode = bytes;
  mode[kWireHeaderBytes + 4] = 2;
  bad = DecodeMessage(mode);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("unknown mode 2"), absl::string_view::npos) << bad.status();
  // A remote attachment of 0 bytes is never sent (nothing to pull).
  AttachmentDescriptor empty;
  empty.remote = true;
  bad = DecodeMessage(EncodeWithAttachment(h, "m", empty, ""));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("remote attachment descriptor of 0 bytes"),
            absl::string_view::npos)
      << bad.status();
}

TEST(WireHeader, AttachmentsGoOnlyBesideAMessageOrOnAResponse) {
  AttachmentDescriptor ad;
  // Frames that carry a message (or a response) may carry one.
  struct Case {
    MsgKind kind;
    uint8_t flags;
    absl::StatusCode want;
  };
  const Case cases[] = {
      {MsgKind::kRequest, 0, absl::StatusCode::kOk},  // unary
      {MsgKind::kRequest, kFlagStream | kFlagEndStream, absl::StatusCode::kOk},  // server streaming
      {MsgKind::kResponse, 0, absl::StatusCode::kOk},
      {MsgKind::kStreamMessage, 0, absl::StatusCode::kOk},
      {MsgKind::kStreamMessage, kFlagEndStream, absl::StatusCode::kOk},
      // No message beside it: a client- or bidi-streaming call's opening
      // request, a half-close alone.
      {MsgKind::kRequest, kFlagStream | kFlagNoMessage, absl::StatusCode::kInvalidArgument},
      {MsgKind::kStreamMessage, kFlagNoMessage | kFlagEndStream,
       absl::StatusCode::kInvalidArgument},
      {MsgKind::kHeaders, 0, absl::StatusCode::kInvalidArgument},
      {MsgKind::kRelease, 0, absl::StatusCode::kInvalidArgument},
      {MsgKind::kWindow, 0, absl::StatusCode::kInvalidArgument},
      {MsgKind::kCancel, 0, absl::StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    WireHeader h;
    h.kind = c.kind;
    h.flags = c.flags;
    absl::StatusOr<ParsedMessage> m = DecodeMessage(EncodeWithAttachment(h, "", ad, ""));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(CheckAttachmentFrame(*m).code(), c.want)
        << "kind " << static_cast<int>(c.kind) << " flags " << int{c.flags};
  }
  absl::StatusOr<ParsedMessage> m;
  // Inline beside a remote payload: the sender never does that.
  WireHeader remote;
  remote.kind = MsgKind::kRequest;
  remote.flags = kFlagPayloadRemote | kFlagAttachment;
  remote.payload_len = 4096;
  std::string out(EncodedPrefixBytes(remote), '\0');
  EncodePrefix(remote, "", RemoteBuffer{0x1000, 1, 4096}, {}, out.data(), {}, ad);
  m = DecodeMessage(out);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::Status s = CheckAttachmentFrame(*m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("beside a remote payload of 4096 bytes"), absl::string_view::npos)
      << s;
}

TEST(WireHeader, StreamFrameCarriesMetadataBetweenAuxAndDescriptor) {
  WireHeader h;
  h.kind = MsgKind::kRequest;
  h.flags = kFlagStream | kFlagNoMessage | kFlagPayloadRemote;
  h.aux_len = 4;
  h.meta_len = 6;
  h.payload_len = 4096;
  const RemoteBuffer pr{0x1000, 0xabcd, 4096};
  std::string out(EncodedPrefixBytes(h), '\0');
  EXPECT_EQ(out.size(), kWireHeaderBytes + 4 + 6 + kRemoteBufferBytes);
  const absl::string_view meta("k\0v\xffxy", 6);
  ASSERT_EQ(EncodePrefix(h, "/a/b", pr, {}, out.data(), meta), out.size());
  absl::StatusOr<ParsedMessage> m = DecodeMessage(out);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->header.flags, kFlagStream | kFlagNoMessage | kFlagPayloadRemote);
  EXPECT_EQ(m->aux, "/a/b");
  EXPECT_EQ(m->meta, meta);
  EXPECT_EQ(m->payload_remote.addr, 0x1000u);
  EXPECT_EQ(m->payload_remote.rkey, 0xabcdu);
  EXPECT_EQ(m->header.meta_len, 6u);
}

TEST(WireHeader, RejectsMetadataThatOverrunsTheMessage) {
  WireHeader h;
  h.kind = MsgKind::kStreamMessage;
  std::string bytes = Encode(h, "", {}, {}, "");
  bytes[28] = 100;  // meta_len 100 in a 32-byte message
  absl::StatusOr<ParsedMessage> m = DecodeMessage(bytes);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("100 bytes of metadata"), absl::string_view::npos)
      << m.status();
}

TEST(WireHeader, RejectsLengthsThatOverrunTheMessage) {
  WireHeader h;
  h.kind = MsgKind::kRequest;
  h.aux_len = 3;
  h.payload_len = 4;
  std::string bytes = Encode(h, "abc", {}, {}, "wxyz");
  // Payload shorter than announced.
  EXPECT_EQ(DecodeMessage(bytes.substr(0, bytes.size() - 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Aux longer than the message.
  std::string long_aux = bytes;
  long_aux[6] = static_cast<char>(0xFF);
  long_aux[7] = static_cast<char>(0xFF);
  EXPECT_EQ(DecodeMessage(long_aux).status().code(), absl::StatusCode::kInvalidArgument);
  // Remote payload whose descriptor disagrees with payload_len.
  WireHeader r;
  r.kind = MsgKind::kRequest;
  r.flags = kFlagPayloadRemote;
  r.payload_len = 100;
  const std::string rb = Encode(r, "", RemoteBuffer{1, 2, 99}, {}, "");
  EXPECT_EQ(DecodeMessage(rb).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
