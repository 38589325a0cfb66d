// Exposure scoped to one stream (runtime/transport/exposure_table.h): a
// buffer the runtime exposes is reachable only by the peer it was exposed
// to, only over the bytes advertised, only with the access that peer
// needs, and only until its stream ends. Played by raw verbs peers
// (raw_peer.h) against a real Server and a real Channel, with type-2 memory
// windows (softrdma has them) and, where the guarantee holds there too,
// with --rdmarpc_memory_windows=false (the MRs' own rkeys, re-registered
// when an exposure ends).
//
// Every refused access fails at the offender with IBV_WC_REM_ACCESS_ERR;
// the victim's QP enters the error state and its connection closes with a
// WARNING naming the offender; other clients' calls all succeed.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gflags/gflags.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/raw_peer.h"
#include "tests/rpc/stream_service.h"
#include "tests/rpc/test_service.h"
#include "tests/rpc/warning_sink.h"

DECLARE_bool(rdmarpc_memory_windows);

namespace rdmarpc {
namespace test {
namespace {

using internal::MsgKind;
using internal::WireHeader;

constexpr int kReplyBytes = 100000;  // above the eager limit: exposed for a pull
constexpr char kWindowLost[] = "its QP entered the error state";

// The whole message a raw peer received, and the descriptor of its payload.
struct Exposed {
  RawPeer::Answer answer;
  internal::RemoteBuffer remote;
  uint32_t ref = 0;
};

class ServerExposure : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    FLAGS_rdmarpc_memory_windows = GetParam();
    ASSERT_TRUE(server_.AddService(&service_).ok());
    ASSERT_TRUE(server_.Start("127.0.0.1:0").ok());
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server_.port()));
    ASSERT_TRUE(ch.ok());
    good_ = *ch;
    ExpectGoodClientServed(5);
  }
  void TearDown() override { FLAGS_rdmarpc_memory_windows = true; }

  void ExpectGoodClientServed(int n) {
    int ok = 0;
    for (int i = 0; i < n; ++i) {
      ClientContext ctx;
      ctx.set_deadline(absl::Now() + absl::Seconds(10));
      EchoRequest req;
      req.set_text(absl::StrCat("good ", i));
      req.set_reply_bytes(i % 2 == 0 ? kReplyBytes : 0);
      EchoResponse resp;
      if (Echo(good_.get(), &ctx, req, &resp).ok() && resp.text() == req.text() &&
          resp.data().size() == (i % 2 == 0 ? size_t{kReplyBytes} : 0)) {
        ++ok;
      }
    }
    EXPECT_EQ(ok, n);
  }

  // A server with `service`, capped at `cap` bytes exposed per connection.
  static std::unique_ptr<Server> StartCapped(Service* service, size_t cap) {
    ServerOptions so;
    so.max_exposed_bytes_per_connection = cap;
    auto server = std::make_unique<Server>(so);
    EXPECT_TRUE(server->AddService(service).ok());
    EXPECT_TRUE(server->Start("127.0.0.1:0").ok());
    return server;
  }

  // Sends an eager request for `method` with `req` on `slot` (generation 1).
  static void SendRequest(RawPeer* peer, const char* method, const EchoRequest& req, uint16_t slot,
                          uint8_t flags = 0) {
    const std::string payload = req.SerializeAsString();
    WireHeader h;
    h.kind = MsgKind::kRequest;
    h.flags = flags;
    h.aux_len = static_cast<uint16_t>(std::strlen(method));
    h.payload_len = static_cast<uint32_t>(payload.size());
    ASSERT_EQ(
        peer->Send(RawPeer::Message(h, method, payload), RawPeer::Imm(MsgKind::kRequest, slot, 1)),
        IBV_WC_SUCCESS);
  }

  // kRelease(ref): the peer is done with the server's exposed buffer.
  static void SendRelease(RawPeer* peer, uint32_t ref) {
    WireHeader rel;
    rel.kind = MsgKind::kRelease;
    rel.ref = ref;
    ASSERT_EQ(peer->Send(RawPeer::Message(rel, "", ""), RawPeer::Imm(MsgKind::kRelease, 0, 0)),
              IBV_WC_SUCCESS);
  }

  // Echo with a response of kReplyBytes, too large to go eagerly.
  static EchoRequest PullMe() {
    EchoRequest req;
    req.set_text("pull me");
    req.set_reply_bytes(kReplyBytes);
    return req;
  }

  // An eager Echo request on `slot` whose response (kReplyBytes of data)
  // the server exposes for this peer to pull.
  static void AskForExposedResponse(RawPeer* peer, uint16_t slot, Exposed* out) {
    SendRequest(peer, kEchoMethod, PullMe(), slot);
    ASSERT_TRUE(peer->ReceiveMessage(&out->answer, absl::Seconds(10)));
    const internal::ParsedMessage& m = out->answer.message;
    ASSERT_EQ(m.header.kind, MsgKind::kResponse);
    ASSERT_TRUE(m.header.flags & internal::kFlagPayloadRemote);
    out->remote = m.payload_remote;
    out->ref = m.header.ref;
  }

  // The response's bytes, read through its descriptor, parse as the
  // expected EchoResponse.
  static void ExpectPullable(RawPeer* peer, const Exposed& e) {
    ASSERT_EQ(peer->Rdma(IBV_WR_RDMA_READ, e.remote.addr, e.remote.rkey, e.remote.length),
              IBV_WC_SUCCESS);
    EchoResponse resp;
    ASSERT_TRUE(resp.ParseFromString(std::string(peer->ReadResult(e.remote.length))));
    EXPECT_EQ(resp.text(), "pull me");
    EXPECT_EQ(resp.data(), std::string(kReplyBytes, 'r'));
  }

  // The server closes the victim connection, logging why and naming `peer`.
  void ExpectServerDropped(RawPeer* peer) {
    EXPECT_TRUE(peer->WaitClosedByServer(absl::Seconds(10)));
    std::string line;
    for (int i = 0; i < 300 && line.empty(); ++i) {
      for (const std::string& l : log_.LinesWith(peer->LocalAddress())) {
        if (absl::StrContains(l, kWindowLost)) line = l;
      }
      if (line.empty()) absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_TRUE(absl::StrContains(line, kWindowLost)) << "no log line for " << peer->LocalAddress();
  }

  WarningSink log_;
  EchoService service_;
  Server server_;
  std::shared_ptr<Channel> good_;
};

TEST_P(ServerExposure, AReleasedResponseIsOutOfReachOfItsOldRkey) {
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_.port()));
  Exposed e;
  AskForExposedResponse(&peer, 1, &e);
  ExpectPullable(&peer, e);
  // kRelease, then a call whose answer comes after the server handled it
  // (the invalidation is on the server's send queue ahead of that answer).
  SendRelease(&peer, e.ref);
  Exposed next;
  AskForExposedResponse(&peer, 2, &next);
  EXPECT_EQ(peer.Rdma(IBV_WR_RDMA_READ, e.remote.addr, e.remote.rkey, 64), IBV_WC_REM_ACCESS_ERR);
  ExpectServerDropped(&peer);
  ExpectGoodClientServed(10);
}

TEST_P(ServerExposure, AWindowOpensOnlyTheBytesAdvertisedForReading) {
  if (!GetParam()) GTEST_SKIP() << "an MR's rkey opens the whole buffer, read and write";
  struct Case {
    const char* what;
    ibv_wr_opcode op;
    int64_t offset;  // from the start of the window
    uint32_t length;
  };
  const Case cases[] = {
      {"the header in front", IBV_WR_RDMA_READ, -64, 64},
      {"across its start", IBV_WR_RDMA_READ, -8, 64},
      {"past its end", IBV_WR_RDMA_READ, kReplyBytes - 8, 64},
      {"a write", IBV_WR_RDMA_WRITE, 0, 64},
      {"a fetch-and-add", IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8},
      {"a compare-and-swap", IBV_WR_ATOMIC_CMP_AND_SWP, 0, 8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    RawPeer peer;
    ASSERT_TRUE(peer.Connect(server_.port()));
    Exposed e;
    AskForExposedResponse(&peer, 1, &e);
    EchoResponse expected;
    expected.set_text("pull me");
    expected.set_data(std::string(kReplyBytes, 'r'));
    EXPECT_EQ(e.remote.length, expected.ByteSizeLong());  // the window is the payload
    peer.SetWriteSource(std::string(64, 'X'));
    EXPECT_EQ(peer.Rdma(c.op, e.remote.addr + c.offset, e.remote.rkey, c.length),
              IBV_WC_REM_ACCESS_ERR);
    // The server's buffer (this process's memory) is as it was: the
    // response, byte for byte (it is still exposed, so still allocated).
    EchoResponse resp;
    ASSERT_TRUE(resp.ParseFromArray(reinterpret_cast<const void*>(e.remote.addr),
                                    static_cast<int>(e.remote.length)));
    EXPECT_EQ(resp.data(), std::string(kReplyBytes, 'r'));
    ExpectServerDropped(&peer);
  }
  ExpectGoodClientServed(10);
}

TEST_P(ServerExposure, AWindowWorksOnlyOnTheConnectionItWasExposedTo) {
  if (!GetParam()) GTEST_SKIP() << "an MR's rkey works from any QP of its PD";
  RawPeer owner;
  ASSERT_TRUE(owner.Connect(server_.port()));
  Exposed e;
  AskForExposedResponse(&owner, 1, &e);
  {
    RawPeer thief;
    ASSERT_TRUE(thief.Connect(server_.port()));
    EXPECT_EQ(thief.Rdma(IBV_WR_RDMA_READ, e.remote.addr, e.remote.rkey, e.remote.length),
              IBV_WC_REM_ACCESS_ERR);
    ExpectServerDropped(&thief);
  }
  // The owner's window and connection are untouched.
  ExpectPullable(&owner, e);
  ExpectGoodClientServed(10);
}

TEST_P(ServerExposure, ResponsesOverTheConnectionsCapFailOnlyThemselves) {
  // A second server, capped at 150 KiB exposed per connection: one exposed
  // response of kReplyBytes fits, two do not.
  EchoService service;
  std::unique_ptr<Server> capped = StartCapped(&service, 150 * 1024);
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(capped->port()));
  Exposed first;
  AskForExposedResponse(&peer, 1, &first);
  // Not pulled, not released: the next one would pass the cap.
  SendRequest(&peer, kEchoMethod, PullMe(), 2);
  RawPeer::Answer refused;
  ASSERT_TRUE(peer.ReceiveMessage(&refused, absl::Seconds(10)));
  EXPECT_EQ(refused.imm, RawPeer::Imm(MsgKind::kResponse, 2, 1));
  EXPECT_EQ(refused.message.header.status_code,
            static_cast<uint32_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_FALSE(refused.message.header.flags & internal::kFlagPayloadRemote);
  EXPECT_EQ(refused.message.aux,
            absl::StrCat("response of ", first.remote.length, " bytes to ", peer.LocalAddress(),
                         ": exposing ", first.remote.length,
                         " more bytes would pass the connection's cap of ", 150 * 1024,
                         " exposed bytes (", first.remote.length,
                         " bytes exposed in 1 buffer; max_exposed_bytes_per_connection)"));
  // The first is still there to pull; once released, a third fits again.
  ExpectPullable(&peer, first);
  SendRelease(&peer, first.ref);
  Exposed third;
  AskForExposedResponse(&peer, 3, &third);
  ExpectPullable(&peer, third);
}

TEST_P(ServerExposure, AStreamMessageOverTheCapEndsItsStreamResourceExhausted) {
  StreamService streams;
  std::unique_ptr<Server> capped = StartCapped(&streams, 150 * 1024);
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(capped->port()));
  // Expand: three messages of kReplyBytes, each exposed for a pull this
  // peer never makes.
  EchoRequest req;
  req.set_tag(3);
  req.set_reply_bytes(kReplyBytes);
  constexpr uint8_t kServerStream = internal::kFlagStream | internal::kFlagEndStream;
  SendRequest(&peer, kExpandMethod, req, 4, kServerStream);
  std::vector<MsgKind> kinds;
  std::string trailers_message;
  uint32_t trailers_code = 0;
  uint32_t first_length = 0;
  // Frames until the trailers (each within 10 s), then any that follow
  // within 1 s.
  for (bool ended = false;;) {
    RawPeer::Answer a;
    if (!peer.ReceiveMessage(&a, ended ? absl::Seconds(1) : absl::Seconds(10))) break;
    ended |= a.message.header.kind == MsgKind::kResponse;
    kinds.push_back(a.message.header.kind);
    if (a.message.header.kind == MsgKind::kStreamMessage && first_length == 0) {
      EXPECT_TRUE(a.message.header.flags & internal::kFlagPayloadRemote);
      first_length = a.message.payload_remote.length;
    }
    if (a.message.header.kind == MsgKind::kResponse) {
      trailers_code = a.message.header.status_code;
      trailers_message = std::string(a.message.aux);
    }
  }
  // One message exposed, then the trailers: no second answer, no frame
  // after them.
  ASSERT_FALSE(kinds.empty());
  if (kinds.front() == MsgKind::kHeaders) kinds.erase(kinds.begin());
  EXPECT_EQ(kinds, (std::vector<MsgKind>{MsgKind::kStreamMessage, MsgKind::kResponse}));
  EXPECT_EQ(trailers_code, static_cast<uint32_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(trailers_message,
            absl::StrCat("stream frame of ", first_length, " bytes on the connection to ",
                         peer.LocalAddress(), ": exposing ", first_length,
                         " more bytes would pass the connection's cap of ", 150 * 1024,
                         " exposed bytes (", first_length,
                         " bytes exposed in 1 buffer; max_exposed_bytes_per_connection)"));
  // The connection carries on: a small stream on it ends OK.
  EchoRequest small;
  small.set_tag(1);
  small.set_reply_bytes(100);
  SendRequest(&peer, kExpandMethod, small, 5, kServerStream);
  uint32_t code = 99;
  for (int i = 0; i < 4 && code == 99; ++i) {
    RawPeer::Answer a;
    ASSERT_TRUE(peer.ReceiveMessage(&a, absl::Seconds(10)));
    EXPECT_EQ(internal::DecodeImm(a.imm)->slot, 5) << "a frame of the ended stream";
    if (a.message.header.kind == MsgKind::kResponse) code = a.message.header.status_code;
  }
  EXPECT_EQ(code, 0u);
}

INSTANTIATE_TEST_SUITE_P(Exposure, ServerExposure, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Windows" : "MrRkeys";
                         });

// A malicious server: it answers a call with a large request properly (it
// pulls the request and pushes the response into the client's reply
// buffer), then goes on writing into that reply buffer and reading the
// request after the call ended.
class MaliciousServer : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    FLAGS_rdmarpc_memory_windows = GetParam();
    ASSERT_TRUE(honest_server_.AddService(&service_).ok());
    ASSERT_TRUE(honest_server_.Start("127.0.0.1:0").ok());
    ASSERT_TRUE(raw_.Listen(&raw_port_));
  }
  void TearDown() override { FLAGS_rdmarpc_memory_windows = true; }

  WarningSink log_;
  EchoService service_;
  Server honest_server_;
  RawPeer raw_;
  int raw_port_ = 0;
};

TEST_P(MaliciousServer, CannotTouchACallsBuffersOnceTheCallEnded) {
  ChannelOptions opts;
  opts.pool_size = 1;
  auto victim = CreateChannel(absl::StrCat("127.0.0.1:", raw_port_), opts);
  ASSERT_TRUE(victim.ok());
  auto honest = CreateChannel(absl::StrCat("127.0.0.1:", honest_server_.port()), opts);
  ASSERT_TRUE(honest.ok());

  const std::string data(64 * 1024, 'q');  // rendezvous: request and reply buffers exposed
  absl::Status status;
  EchoResponse resp;
  std::thread caller([&] {
    ClientContext ctx;
    ctx.set_deadline(absl::Now() + absl::Seconds(20));
    EchoRequest req;
    req.set_text("large");
    req.set_data(data);
    status = Echo(victim->get(), &ctx, req, &resp);
  });
  ASSERT_TRUE(raw_.Accept(absl::Seconds(10)));
  RawPeer::Answer a;
  ASSERT_TRUE(raw_.ReceiveMessage(&a, absl::Seconds(10)));
  const internal::ParsedMessage& m = a.message;
  ASSERT_EQ(m.header.kind, MsgKind::kRequest);
  ASSERT_TRUE(m.header.flags & internal::kFlagPayloadRemote);
  ASSERT_TRUE(m.header.flags & internal::kFlagReplyBuffer);
  const internal::RemoteBuffer request = m.payload_remote;
  const internal::RemoteBuffer reply = m.reply_buffer;
  const internal::Imm imm = *internal::DecodeImm(a.imm);

  // While the call lives: the request reads, the reply buffer takes the
  // response.
  ASSERT_EQ(raw_.Rdma(IBV_WR_RDMA_READ, request.addr, request.rkey, request.length),
            IBV_WC_SUCCESS);
  EchoRequest got;
  ASSERT_TRUE(got.ParseFromString(std::string(raw_.ReadResult(request.length))));
  EXPECT_EQ(got.data(), data);
  EchoResponse answer;
  answer.set_text("pushed by the raw server");
  const std::string answer_bytes = answer.SerializeAsString();
  WireHeader h;
  h.kind = MsgKind::kResponse;
  h.payload_len = static_cast<uint32_t>(answer_bytes.size());
  const std::string pushed = RawPeer::Message(h, "", answer_bytes);
  ASSERT_EQ(raw_.WriteWithImm(pushed, reply.addr, reply.rkey,
                              RawPeer::Imm(MsgKind::kResponseWritten, imm.slot, imm.generation)),
            IBV_WC_SUCCESS);
  caller.join();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(resp.text(), "pushed by the raw server");

  // The call ended. A call on the honest channel runs while the victim's
  // buffers sit in its pool (one pool per channel; this shows nothing else
  // is disturbed).
  {
    ClientContext ctx;
    ctx.set_deadline(absl::Now() + absl::Seconds(10));
    EchoRequest req;
    req.set_text("honest");
    req.set_data(data);
    EchoResponse r;
    ASSERT_TRUE(Echo(honest->get(), &ctx, req, &r).ok());
    EXPECT_EQ(r.data(), data);
  }
  // The ended call's reply buffer is out of reach: the write fails at the
  // raw server and the victim's memory is not written. (The victim revoked
  // it as the response arrived; the pause lets its LOCAL_INV, posted at the
  // end of that loop step, run.)
  absl::SleepFor(absl::Milliseconds(100));
  raw_.SetWriteSource(std::string(64, 'E'));
  EXPECT_EQ(raw_.Rdma(IBV_WR_RDMA_WRITE, reply.addr, reply.rkey, 64), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(reply.addr), pushed.size()), pushed)
      << "the victim's reply buffer (cached in its channel's pool) was written";
  // The victim's connection to the raw server closes, saying why.
  std::string line;
  for (int i = 0; i < 500 && line.empty(); ++i) {
    for (const std::string& l : log_.LinesWith(absl::StrCat("127.0.0.1:", raw_port_))) {
      if (absl::StrContains(l, kWindowLost)) line = l;
    }
    if (line.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(absl::StrContains(line, kWindowLost));
  // The honest server's calls carry on.
  for (int i = 0; i < 10; ++i) {
    ClientContext ctx;
    ctx.set_deadline(absl::Now() + absl::Seconds(10));
    EchoRequest req;
    req.set_text(absl::StrCat("after ", i));
    EchoResponse r;
    EXPECT_TRUE(Echo(honest->get(), &ctx, req, &r).ok());
    EXPECT_EQ(r.text(), req.text());
  }
}

TEST_P(MaliciousServer, CannotReadARequestOnceTheCallEnded) {
  ChannelOptions opts;
  opts.pool_size = 1;
  auto victim = CreateChannel(absl::StrCat("127.0.0.1:", raw_port_), opts);
  ASSERT_TRUE(victim.ok());
  const std::string data(64 * 1024, 's');
  absl::Status status;
  std::thread caller([&] {
    ClientContext ctx;
    ctx.set_deadline(absl::Now() + absl::Seconds(20));
    EchoRequest req;
    req.set_data(data);
    EchoResponse resp;
    status = Echo(victim->get(), &ctx, req, &resp);
  });
  ASSERT_TRUE(raw_.Accept(absl::Seconds(10)));
  RawPeer::Answer a;
  ASSERT_TRUE(raw_.ReceiveMessage(&a, absl::Seconds(10)));
  const internal::RemoteBuffer request = a.message.payload_remote;
  const internal::Imm imm = *internal::DecodeImm(a.imm);
  // Answered without reading: an eager error response ends the call.
  WireHeader h;
  h.kind = MsgKind::kResponse;
  h.status_code = static_cast<uint32_t>(absl::StatusCode::kAborted);
  h.aux_len = 4;
  ASSERT_EQ(raw_.Send(RawPeer::Message(h, "nope", ""),
                      RawPeer::Imm(MsgKind::kResponse, imm.slot, imm.generation)),
            IBV_WC_SUCCESS);
  caller.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(status.message(), "nope");
  // Its request buffer was revoked with the call (the answer on the
  // victim's send queue ahead of any later message proves nothing here, so
  // the read is retried until the revocation took effect; the first
  // refused read ends the connection).
  ibv_wc_status read = IBV_WC_SUCCESS;
  for (int i = 0; i < 200 && read == IBV_WC_SUCCESS; ++i) {
    read = raw_.Rdma(IBV_WR_RDMA_READ, request.addr, request.rkey, request.length);
    if (read == IBV_WC_SUCCESS) absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(read, IBV_WC_REM_ACCESS_ERR);
}

// The client's cap: a server that holds calls (here: slow) holds their
// request and reply buffers; a call that would pass the cap fails at once,
// the others carry on.
TEST(ClientExposureCap, ACallOverTheConnectionsCapFailsResourceExhausted) {
  EchoService service;
  Server server;
  ASSERT_TRUE(server.AddService(&service).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  ChannelOptions opts;
  opts.pool_size = 1;
  opts.max_exposed_bytes_per_connection = 200 * 1024;
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()), opts);
  ASSERT_TRUE(ch.ok());
  const std::string data(60 * 1024, 'd');  // request ~60 KiB + reply buffer 64 KiB
  absl::Status slow_status;
  EchoResponse slow_resp;
  std::thread slow([&] {
    ClientContext ctx;
    ctx.set_deadline(absl::Now() + absl::Seconds(20));
    EchoRequest req;
    req.set_data(data);
    req.set_sleep_ms(1500);
    slow_status = Echo(ch->get(), &ctx, req, &slow_resp);
  });
  while (service.calls() == 0) absl::SleepFor(absl::Milliseconds(1));
  ClientContext ctx;
  ctx.set_deadline(absl::Now() + absl::Seconds(10));
  EchoRequest req;
  req.set_data(data);
  EchoResponse resp;
  const absl::Status over = Echo(ch->get(), &ctx, req, &resp);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_TRUE(absl::StrContains(over.message(),
                                "would pass the connection's cap of 204800 "
                                "exposed bytes"))
      << over;
  EXPECT_TRUE(absl::StrContains(over.message(), "exposed in 2 buffers")) << over;
  // A small call needs no exposure and goes through meanwhile.
  {
    ClientContext small_ctx;
    small_ctx.set_deadline(absl::Now() + absl::Seconds(10));
    EchoRequest small;
    small.set_text("small");
    EchoResponse small_resp;
    EXPECT_TRUE(Echo(ch->get(), &small_ctx, small, &small_resp).ok());
    EXPECT_EQ(small_resp.text(), "small");
  }
  slow.join();
  ASSERT_TRUE(slow_status.ok()) << slow_status;
  EXPECT_EQ(slow_resp.data(), data);
  // Its buffers came back: the same large call now fits.
  ClientContext again_ctx;
  again_ctx.set_deadline(absl::Now() + absl::Seconds(10));
  EchoResponse again;
  ASSERT_TRUE(Echo(ch->get(), &again_ctx, req, &again).ok());
  EXPECT_EQ(again.data(), data);
  EXPECT_EQ(service.calls(), 3);  // the refused call never reached the server
}

// A response too large for the call's reply buffer is exposed by the server
// and pulled: the client's request and reply buffers are revoked as it
// arrives, so a run of such calls never adds up against the cap.
TEST(ClientExposureCap, RequestAndReplyBuffersComeBackWhenTheResponseIsPulled) {
  EchoService service;
  Server server;
  ASSERT_TRUE(server.AddService(&service).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  ChannelOptions opts;
  opts.pool_size = 1;
  opts.max_exposed_bytes_per_connection = 300 * 1024;  // two calls' worth, not ten
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()), opts);
  ASSERT_TRUE(ch.ok());
  int ok = 0;
  for (int i = 0; i < 10; ++i) {
    ClientContext ctx;
    ctx.set_deadline(absl::Now() + absl::Seconds(10));
    EchoRequest req;
    req.set_text(absl::StrCat("pulled ", i));
    req.set_data(std::string(60 * 1024, 'p'));  // request and a 64 KiB reply buffer exposed
    req.set_reply_bytes(200000);                // does not fit the reply buffer
    EchoResponse resp;
    const absl::Status s = Echo(ch->get(), &ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << i << ": " << s;
    if (s.ok() && resp.text() == req.text() && resp.data() == std::string(200000, 'r')) ++ok;
  }
  EXPECT_EQ(ok, 10);
}

INSTANTIATE_TEST_SUITE_P(Exposure, MaliciousServer, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Windows" : "MrRkeys";
                         });

}  // namespace
}  // namespace test
}  // namespace rdmarpc
