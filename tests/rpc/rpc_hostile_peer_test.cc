// A hostile client against a real server (raw_peer.h speaks the handshake,
// then sends what each case says). Each case: only the offender's
// connection closes, with a WARNING that names it and says what was wrong;
// the server's memory is out of its reach (RDMA operations on guessed keys
// fail at the offender); and a well-behaved client's calls, before and
// after, all succeed.
#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/rpc/metadata.h"
#include "runtime/transport/connection.h"
#include "runtime/transport/engine_stats.h"
#include "tests/rpc/raw_peer.h"
#include "tests/rpc/stream_service.h"
#include "tests/rpc/test_service.h"
#include "tests/rpc/warning_sink.h"

namespace rdmarpc {
namespace test {
namespace {

using internal::MsgKind;
using internal::WireHeader;

class HostilePeer : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.AddService(&service_).ok());
    ASSERT_TRUE(server_.AddService(&streams_).ok());
    ASSERT_TRUE(server_.Start("127.0.0.1:0").ok());
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server_.port()));
    ASSERT_TRUE(ch.ok());
    good_ = *ch;
    ExpectGoodClientServed(10);
  }

  // `n` calls of the well-behaved client, each checked.
  void ExpectGoodClientServed(int n) {
    int ok = 0;
    for (int i = 0; i < n; ++i) {
      ClientContext ctx;
      ctx.set_deadline(absl::Now() + absl::Seconds(10));
      EchoRequest req;
      req.set_text(absl::StrCat("good ", i));
      EchoResponse resp;
      if (Echo(good_.get(), &ctx, req, &resp).ok() && resp.text() == req.text()) ++ok;
    }
    EXPECT_EQ(ok, n);
  }

  // The peer is dropped by the server, which logs why, naming it.
  void ExpectOffenderDropped(RawPeer* peer, absl::string_view why) {
    EXPECT_TRUE(peer->WaitClosedByServer(absl::Seconds(10)));
    std::string line;
    for (int i = 0; i < 200 && line.empty(); ++i) {
      std::vector<std::string> lines = log_.LinesWith(peer->LocalAddress());
      if (!lines.empty()) line = lines[0];
      if (line.empty()) absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_TRUE(absl::StrContains(line, why)) << "log line: '" << line << "', want '" << why << "'";
    ExpectGoodClientServed(20);
  }

  // A unary request for Echo with `text` on `slot`/generation 1.
  static std::string EchoRequestBytes(const std::string& text, WireHeader* h) {
    EchoRequest req;
    req.set_text(text);
    const std::string payload = req.SerializeAsString();
    h->kind = MsgKind::kRequest;
    h->aux_len = static_cast<uint16_t>(std::strlen(kEchoMethod));
    h->payload_len = static_cast<uint32_t>(payload.size());
    return RawPeer::Message(*h, kEchoMethod, payload);
  }

  WarningSink log_;
  EchoService service_;
  StreamService streams_;
  Server server_;
  std::shared_ptr<Channel> good_;
};

TEST_F(HostilePeer, ItsOwnValidCallIsAnswered) {
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_.port()));
  WireHeader h;
  ASSERT_EQ(peer.Send(EchoRequestBytes("from raw", &h), RawPeer::Imm(MsgKind::kRequest, 3, 1)),
            IBV_WC_SUCCESS);
  RawPeer::Answer a;
  ASSERT_TRUE(peer.ReceiveMessage(&a, absl::Seconds(10)));
  const internal::ParsedMessage* m = &a.message;
  EXPECT_EQ(m->header.kind, MsgKind::kResponse);
  EXPECT_EQ(m->header.status_code, 0u);
  EchoResponse resp;
  ASSERT_TRUE(resp.ParseFromArray(m->payload.data(), static_cast<int>(m->payload.size())));
  EXPECT_EQ(resp.text(), "from raw");
  EXPECT_EQ(a.imm, RawPeer::Imm(MsgKind::kResponse, 3, 1));
}

// A client that sends its connect request and never finishes the handshake
// (no RTU) holds the server's accepted connection only until the RTU timeout
// (softrdma's SetRtuTimeoutMillis; the IB CM's REP retries on a NIC), when
// the server's connection fails and is freed.
TEST_F(HostilePeer, AConnectNeverFinishedIsFreedAtTheRtuTimeout) {
  const int accepting = static_cast<int>(internal::ConnState::kAccepting);
  const int64_t closed_before = internal::SumEngineStats().connections_closed;
  ASSERT_EQ(internal::SumEngineStats().connections_in_state[accepting], 0);
  softrdma::SetRtuTimeoutMillis(500);
  RawPeer peer;
  const bool started = peer.StartConnect(server_.port());
  const absl::Time start = absl::Now();
  int64_t seen_accepting = 0;
  while (absl::Now() - start < absl::Seconds(10)) {
    const internal::EngineTotals t = internal::SumEngineStats();
    seen_accepting = std::max(seen_accepting, t.connections_in_state[accepting]);
    if (seen_accepting > 0 && t.connections_in_state[accepting] == 0) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  softrdma::SetRtuTimeoutMillis(0);
  ASSERT_TRUE(started);
  EXPECT_EQ(seen_accepting, 1);
  const internal::EngineTotals t = internal::SumEngineStats();
  EXPECT_EQ(t.connections_in_state[accepting], 0);
  EXPECT_EQ(t.connections_closed - closed_before, 1);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  ExpectGoodClientServed(20);
}

TEST_F(HostilePeer, GarbageBytesCloseItsConnectionOnly) {
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_.port()));
  std::string garbage(100, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 37 + 11);
  peer.Send(garbage, RawPeer::Imm(MsgKind::kRequest, 1, 1));
  ExpectOffenderDropped(&peer, "protocol error from " + peer.LocalAddress() + ": ");
}

TEST_F(HostilePeer, ASendWithoutImmDataClosesItsConnectionOnly) {
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_.port()));
  WireHeader h;
  peer.Send(EchoRequestBytes("x", &h), 0, /*with_imm=*/false);
  ExpectOffenderDropped(&peer, "message without imm_data");
}

TEST_F(HostilePeer, AnUnknownImmKindClosesItsConnectionOnly) {
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_.port()));
  WireHeader h;
  peer.Send(EchoRequestBytes("x", &h), 0xF0000001u);  // kind 15
  ExpectOffenderDropped(&peer, "protocol error from " + peer.LocalAddress());
}

TEST_F(HostilePeer, LengthsThatOverrunTheMessageCloseItsConnectionOnly) {
  for (int field = 0; field < 2; ++field) {
    RawPeer peer;
    ASSERT_TRUE(peer.Connect(server_.port()));
    WireHeader h;
    std::string bytes = EchoRequestBytes("overrun", &h);
    // payload_len (offset 12) or aux_len (offset 6) far past what was sent.
    if (field == 0) {
      const uint32_t big = 1u << 20;
      std::memcpy(&bytes[12], &big, 4);
    } else {
      const uint16_t big = 60000;
      std::memcpy(&bytes[6], &big, 2);
    }
    peer.Send(bytes, RawPeer::Imm(MsgKind::kRequest, 1, 1));
    ExpectOffenderDropped(&peer, "protocol error from " + peer.LocalAddress());
  }
}

TEST_F(HostilePeer, MessagesTheServerNeverTakesCloseItsConnectionOnly) {
  // A response sent to the server, and imm_data disagreeing with the header.
  for (int c = 0; c < 2; ++c) {
    RawPeer peer;
    ASSERT_TRUE(peer.Connect(server_.port()));
    WireHeader h;
    std::string bytes = EchoRequestBytes("x", &h);
    if (c == 0) {
      h = WireHeader();
      h.kind = MsgKind::kResponse;
      bytes = RawPeer::Message(h, "", "");
      peer.Send(bytes, RawPeer::Imm(MsgKind::kResponse, 1, 1));
      ExpectOffenderDropped(&peer, "unexpected message kind 2");
    } else {
      peer.Send(bytes, RawPeer::Imm(MsgKind::kStreamMessage, 1, 1));
      ExpectOffenderDropped(&peer, "imm_data kind 7 disagrees with header kind 1");
    }
  }
}

TEST_F(HostilePeer, AStreamOpenedTwiceClosesItsConnectionOnly) {
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_.port()));
  WireHeader h;
  // A bidi stream stays open while its client sends nothing more.
  h.flags = internal::kFlagStream | internal::kFlagNoMessage;
  h.kind = MsgKind::kRequest;
  h.aux_len = static_cast<uint16_t>(std::strlen(kChatMethod));
  const std::string open = RawPeer::Message(h, kChatMethod, "");
  peer.Send(open, RawPeer::Imm(MsgKind::kRequest, 5, 2));
  peer.Send(open, RawPeer::Imm(MsgKind::kRequest, 5, 2));
  ExpectOffenderDropped(&peer, "opened twice");
}

TEST_F(HostilePeer, ACancelForAStreamItNeverOpenedChangesNothing) {
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_.port()));
  WireHeader cancel;
  cancel.kind = MsgKind::kCancel;
  ASSERT_EQ(peer.Send(RawPeer::Message(cancel, "", ""), RawPeer::Imm(MsgKind::kCancel, 77, 9)),
            IBV_WC_SUCCESS);
  // Its connection is still good for a call.
  WireHeader h;
  ASSERT_EQ(peer.Send(EchoRequestBytes("after cancel", &h), RawPeer::Imm(MsgKind::kRequest, 4, 1)),
            IBV_WC_SUCCESS);
  RawPeer::Answer a;
  ASSERT_TRUE(peer.ReceiveMessage(&a, absl::Seconds(10)));
  const internal::ParsedMessage* m = &a.message;
  EXPECT_EQ(m->header.status_code, 0u);
  EXPECT_EQ(a.imm, RawPeer::Imm(MsgKind::kResponse, 4, 1));
}

TEST_F(HostilePeer, AForgedPseudoHeaderInItsMetadataFailsItsCall) {
  // ":path" is what the server hands an auth metadata processor as the
  // method; a client's own copy must never reach it (or a handler).
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_.port()));
  EchoRequest req;
  req.set_text("forged");
  const std::string payload = req.SerializeAsString();
  const std::string meta =
      internal::EncodeMetadata({{":path", "/rdmarpc.test.EchoService/Allowed"}});
  WireHeader h;
  h.kind = MsgKind::kRequest;
  h.aux_len = static_cast<uint16_t>(std::strlen(kEchoMethod));
  h.meta_len = static_cast<uint32_t>(meta.size());
  h.payload_len = static_cast<uint32_t>(payload.size());
  std::string bytes(internal::EncodedPrefixBytes(h), '\0');
  internal::EncodePrefix(h, kEchoMethod, {}, {}, bytes.data(), meta);
  bytes += payload;
  ASSERT_EQ(peer.Send(bytes, RawPeer::Imm(MsgKind::kRequest, 6, 1)), IBV_WC_SUCCESS);
  RawPeer::Answer a;
  ASSERT_TRUE(peer.ReceiveMessage(&a, absl::Seconds(10)));
  const internal::ParsedMessage* m = &a.message;
  EXPECT_EQ(m->header.status_code, static_cast<uint32_t>(absl::StatusCode::kInternal));
  EXPECT_EQ(m->aux, "client metadata key ':path' is reserved (keys starting with ':')");
  EXPECT_EQ(service_.calls(), 10);  // the set-up's calls only
  ExpectGoodClientServed(10);
}

TEST_F(HostilePeer, ADescriptorPointingAnywhereClosesItsConnectionOnly) {
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_.port()));
  WireHeader h;
  h.kind = MsgKind::kRequest;
  h.flags = internal::kFlagPayloadRemote;
  h.aux_len = static_cast<uint16_t>(std::strlen(kEchoMethod));
  h.payload_len = 100000;
  internal::RemoteBuffer anywhere;
  anywhere.addr = 0x10000;  // the peer registered nothing there
  anywhere.rkey = 0xbad;
  anywhere.length = 100000;
  peer.Send(RawPeer::Message(h, kEchoMethod, "", anywhere), RawPeer::Imm(MsgKind::kRequest, 2, 1));
  // The server's READ fails at the offender's device: its QP, then its
  // connection, go.
  ExpectOffenderDropped(&peer, peer.LocalAddress());
  EXPECT_EQ(service_.calls(), 10 + 20);  // the offender's call never ran
}

TEST_F(HostilePeer, AnOversizedDescriptorFailsItsCallWithResourceExhausted) {
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_.port()));
  WireHeader h;
  h.kind = MsgKind::kRequest;
  h.flags = internal::kFlagPayloadRemote;
  h.aux_len = static_cast<uint16_t>(std::strlen(kEchoMethod));
  h.payload_len = 1u << 30;
  internal::RemoteBuffer huge;
  huge.addr = 0x10000;
  huge.rkey = 0xbad;
  huge.length = 1u << 30;
  ASSERT_EQ(
      peer.Send(RawPeer::Message(h, kEchoMethod, "", huge), RawPeer::Imm(MsgKind::kRequest, 2, 1)),
      IBV_WC_SUCCESS);
  RawPeer::Answer a;
  ASSERT_TRUE(peer.ReceiveMessage(&a, absl::Seconds(10)));
  const internal::ParsedMessage* m = &a.message;
  EXPECT_EQ(m->header.status_code, static_cast<uint32_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(m->aux, "request of 1073741824 bytes exceeds max_message_bytes 67108864");
  ExpectGoodClientServed(10);
}

// `h` with kFlagAttachment and descriptor `ad`: aux, inline payload, then
// `inline_attachment`.
std::string WithAttachment(WireHeader h, absl::string_view aux, absl::string_view payload,
                           const internal::AttachmentDescriptor& ad,
                           absl::string_view inline_attachment) {
  h.flags |= internal::kFlagAttachment;
  h.aux_len = static_cast<uint16_t>(aux.size());
  h.payload_len = static_cast<uint32_t>(payload.size());
  std::string out(internal::EncodedPrefixBytes(h), '\0');
  internal::EncodePrefix(h, aux, {}, {}, out.data(), {}, ad);
  return out + std::string(payload) + std::string(inline_attachment);
}

TEST_F(HostilePeer, AnInlineAttachmentBesideAUnaryRequestIsTaken) {
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_.port()));
  EchoRequest req;
  req.set_text("with bytes beside");
  WireHeader h;
  h.kind = MsgKind::kRequest;
  internal::AttachmentDescriptor ad;
  ad.length = 5;
  ASSERT_EQ(peer.Send(WithAttachment(h, kEchoMethod, req.SerializeAsString(), ad, "ABCDE"),
                      RawPeer::Imm(MsgKind::kRequest, 4, 1)),
            IBV_WC_SUCCESS);
  RawPeer::Answer a;
  ASSERT_TRUE(peer.ReceiveMessage(&a, absl::Seconds(10)));
  EXPECT_EQ(a.message.header.status_code, 0u);
  EchoResponse resp;
  ASSERT_TRUE(resp.ParseFromArray(a.message.payload.data(),
                                  static_cast<int>(a.message.payload.size())));
  EXPECT_EQ(resp.text(), "with bytes beside");
  EXPECT_EQ(service_.last_attachment(), "ABCDE");
  ExpectGoodClientServed(5);
}

TEST_F(HostilePeer, AttachmentsWhereNoneMayBeCloseItsConnectionOnly) {
  internal::AttachmentDescriptor three;
  three.length = 3;
  internal::AttachmentDescriptor empty_remote;
  empty_remote.remote = true;
  EchoRequest req;
  req.set_text("x");
  struct Case {
    const char* what;
    MsgKind kind;
    uint8_t flags;
    const char* method;
    std::string payload;
    internal::AttachmentDescriptor descriptor;
    const char* inline_bytes;
    uint16_t slot;
    const char* why;  // in the server's warning
  };
  const Case cases[] = {
      {"on a stream frame without a message", MsgKind::kStreamMessage,
       internal::kFlagNoMessage | internal::kFlagEndStream, "", "", three, "abc", 1,
       "attachment on a frame of kind 7 with flags 0x98"},
      {"on the request that opens a stream", MsgKind::kRequest,
       internal::kFlagStream | internal::kFlagNoMessage, kChatMethod, "", three, "abc", 2,
       "attachment on a frame of kind 1 with flags 0x94"},
      {"a remote attachment of 0 bytes", MsgKind::kRequest, 0, kEchoMethod,
       req.SerializeAsString(), empty_remote, "", 3, "remote attachment descriptor of 0 bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    RawPeer peer;
    ASSERT_TRUE(peer.Connect(server_.port()));
    WireHeader h;
    h.kind = c.kind;
    h.flags = c.flags;
    ASSERT_EQ(peer.Send(WithAttachment(h, c.method, c.payload, c.descriptor, c.inline_bytes),
                        RawPeer::Imm(c.kind, c.slot, 1)),
              IBV_WC_SUCCESS);
    ExpectOffenderDropped(&peer, c.why);
  }
  // The Echo offender's call never ran: only the good client's did (the
  // two stream offenders name Chat, which counts nothing).
  EXPECT_EQ(service_.calls(), 10 + 3 * 20);
}

TEST_F(HostilePeer, RdmaOnGuessedKeysFailsAtTheOffenderAndTouchesNothing) {
  const softrdma::Stats before = softrdma::GetStats();
  const ibv_wr_opcode ops[] = {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
                               IBV_WR_ATOMIC_FETCH_AND_ADD};
  int refused = 0;
  for (ibv_wr_opcode op : ops) {
    for (uint32_t rkey : {1u, 2u, 0x100u, 0xdeadbeefu}) {
      RawPeer peer;
      ASSERT_TRUE(peer.Connect(server_.port()));
      // Addresses the server's heap could be at; the key decides.
      const uint64_t addr = reinterpret_cast<uint64_t>(&service_) & ~uint64_t{7};
      ibv_wc_status s = peer.Rdma(op, addr, rkey, 64);
      if (s == IBV_WC_REM_ACCESS_ERR) ++refused;
      EXPECT_EQ(s, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(s) << " for opcode " << op;
    }
  }
  EXPECT_EQ(refused, 16);
  EXPECT_GE(softrdma::GetStats().rem_access_errors - before.rem_access_errors, 16u);
  ExpectGoodClientServed(20);
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
