// header.h: the wire formats — imm_data, the compact message header and rendezvous
// descriptors (the rdma_cm private data is in handshake.h). All integers are
// little-endian on the wire (imm_data itself is carried in network order).
#ifndef RDMARPC_RUNTIME_TRANSPORT_HEADER_H_
#define RDMARPC_RUNTIME_TRANSPORT_HEADER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmarpc {
namespace internal {

enum class MsgKind : uint8_t {
  kRequest = 1,          // client → server, SEND_WITH_IMM
  kResponse = 2,         // server → client, SEND_WITH_IMM
  kCredit = 3,           // either way: only returns credits
  kRelease = 4,          // client → server: done pulling an exposed response
  kResponseWritten = 5,  // server → client, WRITE_WITH_IMM into the reply buffer
  // client → server: the call in imm_data's slot and generation was abandoned
  // (cancelled, or its deadline passed). The server still answers it once
  // (then CANCELLED), so the client knows when the buffers it exposed for
  // the call are no longer touched.
  kCancel = 6,
  // either way, on a stream (a request with kFlagStream opened it): one
  // message (eager, or kFlagPayloadRemote: the receiver pulls it and sends
  // kRelease with `ref`), or with kFlagNoMessage none; kFlagEndStream from
  // the client is its half-close. The server ends a stream with kResponse
  // (its payload then holds the status details, not a message).
  kStreamMessage = 7,
  // either way, on a stream: the receiver consumed messages; `ref` more may
  // be sent (per-stream flow control, see kStreamWindow).
  kWindow = 8,
  // server → client, on a stream: the server's initial metadata, before any
  // message.
  kHeaders = 9,
  // server → client: the server is draining (HTTP/2's GOAWAY): start no new
  // call on this connection; calls in flight finish. client → server, in
  // answer: no call will follow it on this connection. Only between peers
  // whose handshake has kFeatureDrain (handshake.h).
  kGoAway = 10,
};
bool IsValidKind(uint8_t kind);

// The 32 bits of imm_data: kind (4) | generation (12) | slot (16).
struct Imm {
  MsgKind kind = MsgKind::kCredit;
  uint16_t generation = 0;  // 12 bits used
  uint16_t slot = 0;
};
inline constexpr uint16_t kGenerationMask = 0x0FFF;
uint32_t EncodeImm(const Imm& imm);  // host order; caller applies htonl
absl::StatusOr<Imm> DecodeImm(uint32_t host_order);

// Remote buffer descriptor: where a peer may READ or WRITE.
struct RemoteBuffer {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;  // bytes
};
inline constexpr size_t kRemoteBufferBytes = 16;

enum HeaderFlags : uint8_t {
  kFlagPayloadRemote = 1,  // payload not inline: a RemoteBuffer follows aux
  kFlagReplyBuffer = 2,    // request advertises a reply buffer (RemoteBuffer)
  kFlagStream = 4,         // request opens a stream (any kind but unary)
  kFlagEndStream = 8,      // client: no message follows on this stream
  kFlagNoMessage = 16,     // request or stream frame carries no message
  // The metadata (meta_len bytes) is the start of the payload rather than
  // part of the prefix: metadata too large for the eager prefix travels
  // with the payload, eagerly or by rendezvous.
  kFlagMetaInPayload = 32,
  // A response: the server did not start the call (it is draining), so the
  // client may send it elsewhere. Only to peers with kFeatureDrain.
  kFlagRefused = 64,
  // A request, response or stream message carries an attachment
  // (AttachmentDescriptor after the other descriptors): bytes beside the
  // message that the transport moves without parsing, inline after the
  // payload or, remote, pulled by the receiver with RDMA READ straight
  // from the sender's buffer. Only to peers with kFeatureAttachment (on a
  // stream message or a stream's opening request: kFeatureStreamAttachment;
  // handshake.h).
  kFlagAttachment = 128,
};
inline constexpr uint8_t kKnownFlags = kFlagPayloadRemote | kFlagReplyBuffer | kFlagStream |
                                       kFlagEndStream | kFlagNoMessage | kFlagMetaInPayload |
                                       kFlagRefused | kFlagAttachment;
// The attachment of a message with kFlagAttachment: `length` bytes, inline
// (they follow the payload) or remote (`remote` names them; the receiver
// pulls them, then the receiver of a response or stream message sends
// kRelease with the header's `ref`). Encoded as u32 length | u32 mode (0 inline, 1 remote) |
// RemoteBuffer (zero when inline).
struct AttachmentDescriptor {
  uint32_t length = 0;  // bytes
  bool remote = false;
  RemoteBuffer buffer;  // valid when remote; buffer.length == length
};
inline constexpr size_t kAttachmentDescriptorBytes = 8 + kRemoteBufferBytes;
struct WireHeader;
// With kFlagMetaInPayload, splits a whole payload (`*payload`, e.g. pulled
// by RDMA READ) into its metadata and the message; false when the payload
// is shorter than meta_len. Without the flag: nothing to do, true.
bool SplitMetaInPayload(const WireHeader& h, absl::string_view* payload, absl::string_view* meta);

inline constexpr uint16_t kHeaderMagic = 0x5252;  // "RR"
inline constexpr size_t kWireHeaderBytes = 32;
inline constexpr uint64_t kNoTimeout = ~uint64_t{0};

// Decoded header; the encoded layout is fixed at kWireHeaderBytes:
//  0 u16 magic | 2 u8 kind | 3 u8 flags | 4 u16 credits | 6 u16 aux_len |
//  8 u32 status_code | 12 u32 payload_len | 16 u64 timeout_us | 24 u32 ref |
//  28 u32 meta_len
// followed by aux_len bytes of aux (method name in a request, status message
// in a response), meta_len bytes of metadata (opaque to the transport:
// runtime/rpc encodes it), then the RemoteBuffers the flags announce
// (payload first, then reply buffer), then the AttachmentDescriptor with
// kFlagAttachment, then payload_len bytes of payload unless it is remote,
// then an inline attachment's bytes.
struct WireHeader {
  MsgKind kind = MsgKind::kCredit;
  uint8_t flags = 0;
  uint16_t credits = 0;      // receive buffers re-posted since the last return
  uint16_t aux_len = 0;
  uint32_t status_code = 0;  // absl::StatusCode of a response
  uint32_t payload_len = 0;  // protobuf bytes
  uint64_t timeout_us = kNoTimeout;
  uint32_t ref = 0;          // exposed buffer id (kRelease), window (kWindow)
  uint32_t meta_len = 0;     // metadata bytes after aux
};

// A parsed message as it lies in a buffer; views point into that buffer.
struct ParsedMessage {
  WireHeader header;
  absl::string_view aux;
  absl::string_view meta;
  RemoteBuffer payload_remote;  // valid with kFlagPayloadRemote
  RemoteBuffer reply_buffer;    // valid with kFlagReplyBuffer
  absl::string_view payload;    // empty when the payload is remote
  AttachmentDescriptor attachment;     // valid with kFlagAttachment
  absl::string_view attachment_bytes;  // an inline attachment (empty otherwise)
  bool has_attachment() const { return (header.flags & kFlagAttachment) != 0; }
};

// OK for a frame whose attachment is where one may be: a request or a
// stream message that carries a message (kRequest or kStreamMessage
// without kFlagNoMessage: a unary request, a server-streaming call's
// opening request, a stream message), or a response (the connection also
// refuses one on a stream's trailers); inline only beside an inline
// payload. INVALID_ARGUMENT naming the kind and flags otherwise.
absl::Status CheckAttachmentFrame(const ParsedMessage& m);

// Bytes Encode writes before the payload.
size_t EncodedPrefixBytes(const WireHeader& h);
// Writes header, aux, metadata and descriptors into `out` (capacity >=
// EncodedPrefixBytes). Returns bytes written. header.aux_len must equal
// aux.size() and header.meta_len meta.size(); `attachment` is written
// only with kFlagAttachment.
size_t EncodePrefix(const WireHeader& h, absl::string_view aux, const RemoteBuffer& payload_remote,
                    const RemoteBuffer& reply_buffer, char* out,
                    absl::string_view meta = absl::string_view(),
                    const AttachmentDescriptor& attachment = AttachmentDescriptor());
// The whole encoded size (prefix + inline payload) of the message whose
// first bytes are `start` (at least its prefix): how a client learns the
// size of a response pushed into its reply buffer, whose last piece (the
// WRITE_WITH_IMM, header first) reports only its own byte_len.
// INVALID_ARGUMENT as DecodeMessage for a bad header, or when `start` is
// shorter than the prefix.
absl::StatusOr<size_t> EncodedMessageBytes(absl::string_view start);
// Parses `bytes` (one received message). INVALID_ARGUMENT (naming the field
// and values) for a bad magic, unknown kind, unknown flags, lengths that
// overrun `bytes`, or an attachment descriptor whose mode is neither
// inline nor remote, whose remote length is 0 or disagrees with its
// length, or which is inline but names a remote buffer (its last 16 bytes
// not zero).
absl::StatusOr<ParsedMessage> DecodeMessage(absl::string_view bytes);


}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_HEADER_H_
