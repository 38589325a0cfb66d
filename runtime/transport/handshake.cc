// handshake.cc: the rdma_cm private data (see handshake.h).
#include "runtime/transport/handshake.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/transport/little_endian.h"
#include "runtime/transport/transport.h"

namespace rdmarpc {
namespace internal {
namespace {

constexpr uint32_t kMarker = 0x52444d41;  // "RDMA": the private data is ours

// rdma_cm's REJECTED status when nothing listens on the port: the IB CM's
// "invalid service ID" (IBTA spec table 112); RoCE reports the same.
constexpr int kCmRejectInvalidServiceId = 8;

bool RingTooSmall(const HandshakeData& h) {
  return h.recv_depth < kMinRecvDepth || h.recv_buffer_bytes < kMinRecvBufferBytes;
}

}  // namespace

void EncodeHandshake(const HandshakeData& h, char out[kHandshakeBytes]) {
  PutLittleEndian<uint16_t>(out, h.version);
  PutLittleEndian<uint16_t>(out + 2, h.recv_depth);
  PutLittleEndian<uint32_t>(out + 4, h.recv_buffer_bytes);
  PutLittleEndian<uint32_t>(out + 8, h.features);
  PutLittleEndian<uint32_t>(out + 12, h.reject_reason);
  PutLittleEndian<uint32_t>(out + 16, kMarker);
}

absl::StatusOr<HandshakeData> DecodeHandshake(const void* data, size_t len,
                                              bool connect_request) {
  if (data == nullptr || len < kHandshakeBytes) {
    return absl::InvalidArgumentError(absl::StrCat("handshake private data of ", len,
                                                   " bytes; need ", kHandshakeBytes));
  }
  const char* p = static_cast<const char*>(data);
  if (GetLittleEndian<uint32_t>(p + 16) != kMarker) {
    return absl::InvalidArgumentError("handshake private data is not from rdmarpc");
  }
  HandshakeData h;
  if (connect_request && len > kHandshakeBytes) {
    const size_t token_bytes = static_cast<uint8_t>(p[kHandshakeBytes]);
    if (kHandshakeBytes + 1 + token_bytes > len) {
      return absl::InvalidArgumentError(absl::StrCat("handshake token of ", token_bytes,
                                                     " bytes overruns private data of ", len,
                                                     " bytes"));
    }
    h.token.assign(p + kHandshakeBytes + 1, token_bytes);
  }
  h.version = GetLittleEndian<uint16_t>(p);
  h.recv_depth = GetLittleEndian<uint16_t>(p + 2);
  h.recv_buffer_bytes = GetLittleEndian<uint32_t>(p + 4);
  h.features = GetLittleEndian<uint32_t>(p + 8);
  h.reject_reason = GetLittleEndian<uint32_t>(p + 12);
  return h;
}

Handshake::PrivateData Handshake::Offer(uint16_t version, int recv_depth,
                                        size_t recv_buffer_bytes, absl::string_view token) {
  HandshakeData h;
  h.version = version;
  h.recv_depth = static_cast<uint16_t>(recv_depth);
  h.recv_buffer_bytes = static_cast<uint32_t>(recv_buffer_bytes);
  h.features = kOfferedFeatures;
  PrivateData out;
  EncodeHandshake(h, out.bytes_.data());
  if (!token.empty()) {
    token = token.substr(0, kMaxConnectTokenBytes);
    out.bytes_[kHandshakeBytes] = static_cast<char>(token.size());
    std::memcpy(out.bytes_.data() + kHandshakeBytes + 1, token.data(), token.size());
    out.size_ = static_cast<uint8_t>(kHandshakeBytes + 1 + token.size());
  }
  return out;
}

Handshake::PrivateData Handshake::Reject(uint16_t version, uint32_t reason) {
  HandshakeData h;
  h.version = version;
  h.reject_reason = reason;
  PrivateData out;
  EncodeHandshake(h, out.bytes_.data());
  return out;
}

absl::StatusOr<HandshakeData> Handshake::CheckRequest(absl::string_view private_data,
                                                      uint16_t version,
                                                      uint32_t* reject_reason) {
  *reject_reason = 0;
  absl::StatusOr<HandshakeData> h =
      DecodeHandshake(private_data.data(), private_data.size(), /*connect_request=*/true);
  if (!h.ok()) return h.status();
  if (h->version != version) {
    *reject_reason = kRejectVersion;
    return absl::FailedPreconditionError(
        absl::StrCat("client speaks protocol version ", h->version, "; this server speaks ",
                     version));
  }
  if (RingTooSmall(*h)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "client has recv_depth ", h->recv_depth, " and buffers of ", h->recv_buffer_bytes,
        " bytes (need >= ", kMinRecvDepth, " and >= ", kMinRecvBufferBytes, ")"));
  }
  return h;
}

absl::StatusOr<HandshakeData> Handshake::CheckAccept(absl::string_view private_data,
                                                     absl::string_view peer) {
  absl::StatusOr<HandshakeData> h = DecodeHandshake(private_data.data(), private_data.size());
  if (!h.ok()) {
    return absl::UnavailableError(
        absl::StrCat("handshake with ", peer, ": ", h.status().message()));
  }
  if (h->version != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "server ", peer, " speaks rdmarpc protocol version ", h->version,
        ", this client speaks version ", kProtocolVersion));
  }
  if (RingTooSmall(*h)) {
    return absl::UnavailableError(absl::StrCat(
        "server ", peer, " advertised recv_depth ", h->recv_depth, " and recv_buffer_bytes ",
        h->recv_buffer_bytes, "; need >= ", kMinRecvDepth, " and >= ", kMinRecvBufferBytes));
  }
  return h;
}

absl::Status Handshake::Rejected(absl::string_view private_data, int cm_status,
                                 absl::string_view peer) {
  absl::StatusOr<HandshakeData> h = DecodeHandshake(private_data.data(), private_data.size());
  if (h.ok() && h->reject_reason == kRejectVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "server ", peer, " speaks rdmarpc protocol version ", h->version,
        ", this client speaks version ", kProtocolVersion));
  }
  if (h.ok() && h->reject_reason == kRejectShuttingDown) {
    return absl::UnavailableError(absl::StrCat("server ", peer, " is shutting down"));
  }
  if (h.ok() && h->reject_reason == kRejectNoResources) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "server ", peer,
        " has no room for another connection (its completion queue, shared receive queue or "
        "registered memory is full)"));
  }
  if (h.ok() && h->reject_reason == kRejectUnauthenticated) {
    return absl::UnauthenticatedError(absl::StrCat(
        "server ", peer,
        " refused this client's connection token (missing or not valid; see "
        "ChannelOptions::connection_credentials and the server's log)"));
  }
  if (h.ok() && h->reject_reason == kRejectPermissionDenied) {
    return absl::PermissionDeniedError(absl::StrCat(
        "server ", peer, " does not allow this client to connect (its connection token was "
                         "valid but is not permitted; see the server's log)"));
  }
  if (cm_status == kCmRejectInvalidServiceId) {
    return absl::UnavailableError(absl::StrCat("no server listening on ", peer,
                                               " (rdma_cm reject status ", cm_status, ")"));
  }
  return absl::UnavailableError(absl::StrCat(
      "connection to ", peer, " rejected by the server (rdma_cm reject status ", cm_status, ")"));
}

}  // namespace internal
}  // namespace rdmarpc
