// handshake.h: the rdma_cm private data of connect, accept and reject —
// its encoding (HandshakeData), and building and checking it, once for
// both roles. The steps a connection goes through are its ConnState
// (connection.h); this file decides what each exchange of private data
// means.
//
//   client                                   server (listener)
//   rdma_connect(Offer)              ──►     CheckRequest: reject (Reject) or
//                                            accept (Offer)
//   ESTABLISHED: CheckAccept         ◄──
//   REJECTED:    Rejected → Status   ◄──
//
// Both sides then know the peer's receive-ring depth (initial credits) and
// receive-buffer size (the largest SEND it takes). A client may add a
// connection token to its Offer (ChannelOptions::connection_credentials);
// the listener checks it before it creates a QP or registers anything for
// the connection, and rejects with kRejectUnauthenticated or
// kRejectPermissionDenied.
#ifndef RDMARPC_RUNTIME_TRANSPORT_HANDSHAKE_H_
#define RDMARPC_RUNTIME_TRANSPORT_HANDSHAKE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmarpc {
namespace internal {

// rdma_cm private data of connect, accept and reject (20 bytes; rdma_cm
// allows 56 on connect, 196 on accept and 148 on reject: the IB CM's REQ,
// REP and REJ private data less rdma_cm's own header, IBTA vol. 1 12.6 and
// librdmacm's rdma_connect(3)). Little-endian:
//  0 u16 version | 2 u16 recv_depth | 4 u32 recv_buffer_bytes |
//  8 u32 features | 12 u32 reject_reason | 16 u32 "RDMA" marker
// and, in a connect request only, an optional connection token:
//  20 u8 token length L | 21 L bytes of token
// A request without a token is 20 bytes long, or padded with zeros (the IB
// CM delivers the whole 56 bytes), which reads as L = 0.
struct HandshakeData {
  uint16_t version = 0;
  uint16_t recv_depth = 0;          // receives pre-posted = initial credits
  uint32_t recv_buffer_bytes = 0;   // largest SEND the peer may post to us
  uint32_t features = 0;
  uint32_t reject_reason = 0;       // in a reject: a kReject* value
  std::string token;                // connect request: the connection token
};
inline constexpr size_t kHandshakeBytes = 20;
inline constexpr size_t kMaxConnectPrivateDataBytes = 56;
// Longest connection token (bytes) that fits beside the handshake.
inline constexpr size_t kMaxConnectTokenBytes = kMaxConnectPrivateDataBytes - kHandshakeBytes - 1;
// Feature bits (HandshakeData::features), offered by both sides.
// kFeatureDrain: the side understands kGoAway and kFlagRefused (header.h).
inline constexpr uint32_t kFeatureDrain = 1;
// kFeatureAttachment: the side takes requests and responses with
// kFlagAttachment (header.h).
inline constexpr uint32_t kFeatureAttachment = 2;
// kFeatureStreamAttachment: the side also takes stream messages
// (kStreamMessage) with kFlagAttachment.
inline constexpr uint32_t kFeatureStreamAttachment = 4;
inline constexpr uint32_t kOfferedFeatures =
    kFeatureDrain | kFeatureAttachment | kFeatureStreamAttachment;
inline constexpr uint32_t kRejectVersion = 1;
inline constexpr uint32_t kRejectShuttingDown = 2;
// The server could not set the connection up (CQ full, registration refused).
inline constexpr uint32_t kRejectNoResources = 3;
// The server's connection authenticator refused the request's token:
// missing or not valid (UNAUTHENTICATED), or valid but not allowed
// (PERMISSION_DENIED).
inline constexpr uint32_t kRejectUnauthenticated = 4;
inline constexpr uint32_t kRejectPermissionDenied = 5;
// Smallest receive buffer a peer may advertise: room for a header, a
// descriptor pair and a short status message.
inline constexpr uint32_t kMinRecvBufferBytes = 256;

void EncodeHandshake(const HandshakeData& h, char out[kHandshakeBytes]);
// INVALID_ARGUMENT when the data is short, not rdmarpc's, or (with
// `connect_request`) its token's length overruns it. Only a connect
// request carries a token; the bytes after the 20 of an accept or reject
// are ignored.
absl::StatusOr<HandshakeData> DecodeHandshake(const void* data, size_t len,
                                              bool connect_request = false);

class Handshake {
 public:
  // Private data to hand to rdma_connect, rdma_accept or rdma_reject.
  class PrivateData {
   public:
    const char* data() const { return bytes_.data(); }
    uint8_t size() const { return size_; }

   private:
    friend class Handshake;
    std::array<char, kMaxConnectPrivateDataBytes> bytes_{};
    uint8_t size_ = kHandshakeBytes;
  };

  // What a side sends with rdma_connect or rdma_accept: the protocol
  // version it speaks, its receive ring (`recv_depth` buffers of
  // `recv_buffer_bytes`) and kOfferedFeatures; a client also its
  // connection `token`, at most kMaxConnectTokenBytes long (the caller
  // checks; a longer one is a bug and is cut to that length).
  static PrivateData Offer(uint16_t version, int recv_depth, size_t recv_buffer_bytes,
                           absl::string_view token = {});
  // What a server sends with rdma_reject: its version and `reason` (a
  // kReject* value, or 0 for "malformed request").
  static PrivateData Reject(uint16_t version, uint32_t reason);

  // Server: checks a connect request's private data against the `version`
  // this server speaks. On error, `*reject_reason` is what to reject with
  // (kRejectVersion for another version, else 0) and the status says why:
  // INVALID_ARGUMENT (not rdmarpc's, or a ring below kMinRecvDepth x
  // kMinRecvBufferBytes), FAILED_PRECONDITION (another version).
  static absl::StatusOr<HandshakeData> CheckRequest(absl::string_view private_data,
                                                    uint16_t version, uint32_t* reject_reason);
  // Client: checks the server's accept (the ESTABLISHED event's private
  // data) from `peer`. FAILED_PRECONDITION when it speaks another version
  // (naming both); UNAVAILABLE when the data is not rdmarpc's or its ring
  // is too small.
  static absl::StatusOr<HandshakeData> CheckAccept(absl::string_view private_data,
                                                   absl::string_view peer);
  // Client: what a REJECTED event from `peer` means, from its private data
  // and rdma_cm's `cm_status`: FAILED_PRECONDITION (another version, naming
  // both), UNAVAILABLE (shutting down; nothing listening; rejected),
  // RESOURCE_EXHAUSTED (the server has no room for a connection),
  // UNAUTHENTICATED / PERMISSION_DENIED (the server's connection
  // authenticator refused this client's token).
  static absl::Status Rejected(absl::string_view private_data, int cm_status,
                               absl::string_view peer);
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_HANDSHAKE_H_
