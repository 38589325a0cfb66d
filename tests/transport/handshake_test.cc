// Handshake: the private data round trip, and one test per failure point of
// each exchange (server: connect request; client: accept and reject).
#include "runtime/transport/handshake.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "runtime/transport/transport.h"

namespace rdmarpc {
namespace internal {
namespace {

std::string Bytes(const Handshake::PrivateData& d) { return std::string(d.data(), d.size()); }

std::string Encoded(const HandshakeData& h) {
  char buf[kHandshakeBytes];
  EncodeHandshake(h, buf);
  return std::string(buf, sizeof(buf));
}

TEST(Handshake, RoundTripAndRejectsForeignData) {
  HandshakeData h;
  h.version = 7;
  h.recv_depth = 64;
  h.recv_buffer_bytes = 8192;
  h.features = 3;
  h.reject_reason = kRejectVersion;
  char buf[kHandshakeBytes];
  EncodeHandshake(h, buf);
  absl::StatusOr<HandshakeData> back = DecodeHandshake(buf, sizeof(buf));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->version, 7);
  EXPECT_EQ(back->recv_depth, 64);
  EXPECT_EQ(back->recv_buffer_bytes, 8192u);
  EXPECT_EQ(back->features, 3u);
  EXPECT_EQ(back->reject_reason, kRejectVersion);
  EXPECT_FALSE(DecodeHandshake(buf, 10).ok());
  buf[16] ^= 1;
  EXPECT_FALSE(DecodeHandshake(buf, sizeof(buf)).ok());
  EXPECT_FALSE(DecodeHandshake(nullptr, 0).ok());
}

TEST(Handshake, OfferCarriesVersionAndRing) {
  absl::StatusOr<HandshakeData> h = DecodeHandshake(
      Handshake::Offer(kProtocolVersion, 64, 8192).data(), kHandshakeBytes);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->version, kProtocolVersion);
  EXPECT_EQ(h->recv_depth, 64);
  EXPECT_EQ(h->recv_buffer_bytes, 8192u);
  EXPECT_EQ(h->reject_reason, 0u);
  // Both sides offer draining (kGoAway, kFlagRefused).
  EXPECT_EQ(h->features, kFeatureDrain | kFeatureAttachment | kFeatureStreamAttachment);
}

TEST(Handshake, OfferCarriesTheConnectionToken) {
  const Handshake::PrivateData pd = Handshake::Offer(kProtocolVersion, 64, 8192, "tok-123");
  EXPECT_EQ(pd.size(), kHandshakeBytes + 1 + 7);
  absl::StatusOr<HandshakeData> h =
      DecodeHandshake(pd.data(), pd.size(), /*connect_request=*/true);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->token, "tok-123");
  // Read as an accept or reject, the same bytes carry no token.
  EXPECT_EQ(DecodeHandshake(pd.data(), pd.size())->token, "");
  EXPECT_EQ(h->recv_depth, 64);
  // The longest token fills rdma_cm's 56 bytes exactly.
  const std::string longest(kMaxConnectTokenBytes, 'L');
  const Handshake::PrivateData full = Handshake::Offer(kProtocolVersion, 64, 8192, longest);
  EXPECT_EQ(full.size(), kMaxConnectPrivateDataBytes);
  EXPECT_EQ(DecodeHandshake(full.data(), full.size(), true)->token, longest);
}

TEST(Handshake, ZeroPaddedRequestHasNoToken) {
  // The IB CM hands the listener all 56 bytes of a REQ's private data.
  const Handshake::PrivateData pd = Handshake::Offer(kProtocolVersion, 64, 8192);
  EXPECT_EQ(pd.size(), kHandshakeBytes);
  std::string padded(pd.data(), pd.size());
  padded.resize(kMaxConnectPrivateDataBytes, '\0');
  absl::StatusOr<HandshakeData> h = DecodeHandshake(padded.data(), padded.size(), true);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->token, "");
}

TEST(Handshake, TokenLengthOverrunningThePrivateDataIsRefused) {
  const Handshake::PrivateData pd = Handshake::Offer(kProtocolVersion, 64, 8192, "abc");
  std::string bytes(pd.data(), pd.size());
  bytes[kHandshakeBytes] = 4;  // one more than follows
  absl::StatusOr<HandshakeData> h = DecodeHandshake(bytes.data(), bytes.size(), true);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(h.status().message(), "handshake token of 4 bytes overruns private data of 24 bytes");
}

TEST(Handshake, RefusedTokensRejectAsUnauthenticatedOrPermissionDenied) {
  const Handshake::PrivateData unauth =
      Handshake::Reject(kProtocolVersion, kRejectUnauthenticated);
  absl::Status s = Handshake::Rejected(std::string(unauth.data(), unauth.size()), 28, "srv:1");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "server srv:1 refused")) << s;
  const Handshake::PrivateData denied =
      Handshake::Reject(kProtocolVersion, kRejectPermissionDenied);
  s = Handshake::Rejected(std::string(denied.data(), denied.size()), 28, "srv:1");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
}

// --- server: the connect request ---

TEST(Handshake, RequestAcceptedReturnsThePeersRing) {
  uint32_t reason = 99;
  absl::StatusOr<HandshakeData> h = Handshake::CheckRequest(
      Bytes(Handshake::Offer(kProtocolVersion, 16, 4096)), kProtocolVersion, &reason);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(reason, 0u);
  EXPECT_EQ(h->recv_depth, 16);
  EXPECT_EQ(h->recv_buffer_bytes, 4096u);
}

TEST(Handshake, RequestNotFromRdmarpcIsRejectedWithoutReason) {
  uint32_t reason = 99;
  absl::StatusOr<HandshakeData> h =
      Handshake::CheckRequest("short", kProtocolVersion, &reason);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reason, 0u);
}

TEST(Handshake, RequestOfAnotherVersionIsRejectedWithVersion) {
  uint32_t reason = 0;
  absl::StatusOr<HandshakeData> h = Handshake::CheckRequest(
      Bytes(Handshake::Offer(kProtocolVersion + 1, 16, 4096)), kProtocolVersion, &reason);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reason, kRejectVersion);
  EXPECT_NE(h.status().message().find(std::to_string(kProtocolVersion + 1)), std::string::npos);
}

TEST(Handshake, RequestWithTooFewReceivesIsRejected) {
  uint32_t reason = 99;
  absl::StatusOr<HandshakeData> h = Handshake::CheckRequest(
      Bytes(Handshake::Offer(kProtocolVersion, kMinRecvDepth - 1, 4096)), kProtocolVersion,
      &reason);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reason, 0u);
}

TEST(Handshake, RequestWithTooSmallBuffersIsRejected) {
  uint32_t reason = 99;
  absl::StatusOr<HandshakeData> h = Handshake::CheckRequest(
      Bytes(Handshake::Offer(kProtocolVersion, 16, kMinRecvBufferBytes - 1)), kProtocolVersion,
      &reason);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reason, 0u);
}

// --- client: the server's accept ---

TEST(Handshake, AcceptReturnsTheServersRing) {
  absl::StatusOr<HandshakeData> h =
      Handshake::CheckAccept(Bytes(Handshake::Offer(kProtocolVersion, 32, 1024)), "srv:1");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->recv_depth, 32);
  EXPECT_EQ(h->recv_buffer_bytes, 1024u);
}

TEST(Handshake, AcceptNotFromRdmarpcIsUnavailable) {
  absl::StatusOr<HandshakeData> h = Handshake::CheckAccept("", "srv:1");
  EXPECT_EQ(h.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(h.status().message().find("handshake with srv:1"), std::string::npos);
}

TEST(Handshake, AcceptOfAnotherVersionNamesBothVersions) {
  absl::StatusOr<HandshakeData> h =
      Handshake::CheckAccept(Bytes(Handshake::Offer(9, 32, 1024)), "srv:1");
  EXPECT_EQ(h.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(h.status().message(),
            "server srv:1 speaks rdmarpc protocol version 9, this client speaks version " +
                std::to_string(kProtocolVersion));
}

TEST(Handshake, AcceptWithTooSmallRingIsUnavailable) {
  EXPECT_EQ(Handshake::CheckAccept(Bytes(Handshake::Offer(kProtocolVersion, 2, 1024)), "s")
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(Handshake::CheckAccept(Bytes(Handshake::Offer(kProtocolVersion, 32, 255)), "s")
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
}

// --- client: the server's reject ---

TEST(Handshake, RejectedForVersionIsFailedPrecondition) {
  absl::Status s = Handshake::Rejected(Bytes(Handshake::Reject(5, kRejectVersion)), 28, "srv:1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("version 5"), std::string::npos);
}

TEST(Handshake, RejectedWhileShuttingDownIsUnavailable) {
  absl::Status s = Handshake::Rejected(
      Bytes(Handshake::Reject(kProtocolVersion, kRejectShuttingDown)), 28, "srv:1");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "server srv:1 is shutting down");
}

TEST(Handshake, RejectedForResourcesIsResourceExhausted) {
  absl::Status s = Handshake::Rejected(
      Bytes(Handshake::Reject(kProtocolVersion, kRejectNoResources)), 28, "srv:1");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
}

TEST(Handshake, RejectedWithNothingListeningNamesTheAddress) {
  absl::Status s = Handshake::Rejected("", 8, "127.0.0.1:9");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("no server listening on 127.0.0.1:9"), std::string::npos);
}

TEST(Handshake, RejectedForAnotherReasonIsUnavailable) {
  absl::Status s = Handshake::Rejected(Bytes(Handshake::Reject(kProtocolVersion, 0)), 28, "s");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("rejected by the server (rdma_cm reject status 28)"),
            std::string::npos);
  EXPECT_EQ(Handshake::Rejected(Encoded(HandshakeData{}), 28, "s").code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
