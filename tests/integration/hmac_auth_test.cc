// The shared-secret example's checks (examples/auth/hmac_auth.h): what a
// connection token and a call signature must be to get in, and the echo
// service behind both over softrdma.
#include "hmac_auth.h"

#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "echo.pb.h"
#include "echo.rdmarpc.pb.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"

namespace rdmarpc {
namespace examples {
namespace {

const std::string kAliceSecret = "alice's secret, 32 bytes long..";
const std::string kBobSecret = "bob's secret: also long enough!!";
const std::string kNonce = "12345678";
constexpr char kMethod[] = "/rdmarpc.examples.EchoService/Echo";

// Now, in whole milliseconds: what a token carries.
absl::Time NowMs() { return absl::FromUnixMillis(absl::ToUnixMillis(absl::Now())); }

HmacKeyring Keys() {
  HmacKeyring keys;
  EXPECT_TRUE(keys.Add(7, "alice", kAliceSecret).ok());
  EXPECT_TRUE(keys.Add(8, "bob", kBobSecret).ok());
  return keys;
}

TEST(HmacKeyring, RefusesShortSecretsAndRepeatedIds) {
  HmacKeyring keys;
  absl::Status s = keys.Add(1, "a", "short");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "secret of key 1 has 5 bytes; need at least 16");
  ASSERT_TRUE(keys.Add(1, "a", kAliceSecret).ok());
  EXPECT_EQ(keys.Add(1, "b", kBobSecret).message(), "key id 1 is given twice");
  EXPECT_EQ(keys.Find(1)->name, "a");
  EXPECT_EQ(keys.Find(2), nullptr);
}

TEST(HmacConnectionToken, GoodTokenNamesTheKeyAndTheSecretIsNotInIt) {
  HmacConnectionAuthenticator auth(Keys());
  const absl::Time now = NowMs();
  const std::string token = MakeHmacConnectionToken(7, kAliceSecret, now, kNonce);
  EXPECT_EQ(token.size(), kHmacConnectionTokenBytes);
  EXPECT_LE(token.size(), kMaxConnectionTokenBytes);
  EXPECT_FALSE(absl::StrContains(token, kAliceSecret.substr(0, 8)));
  AuthContext context;
  ASSERT_TRUE(auth.AuthenticateAt(token, now, &context).ok());
  EXPECT_EQ(context.GetPeerIdentity(), std::vector<std::string>{"alice"});
  EXPECT_EQ(context.FindPropertyValues("hmac_key_id"), std::vector<std::string>{"7"});
}

TEST(HmacConnectionToken, ReplayForgeryExpiryAndUnknownKeysAreRefused) {
  HmacConnectionAuthenticator auth(Keys(), absl::Seconds(30));
  const absl::Time now = NowMs();
  AuthContext c;
  const std::string token = MakeHmacConnectionToken(7, kAliceSecret, now, kNonce);
  ASSERT_TRUE(auth.AuthenticateAt(token, now, &c).ok());
  // The same token again: a replay.
  absl::Status s = auth.AuthenticateAt(token, now + absl::Seconds(1), &c);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(s.message(), "connection token for key 7 was used before (a replay)");
  // Another nonce is fine; the same nonce for another key too.
  EXPECT_TRUE(
      auth.AuthenticateAt(MakeHmacConnectionToken(7, kAliceSecret, now, "abcdefgh"), now, &c).ok());
  EXPECT_TRUE(
      auth.AuthenticateAt(MakeHmacConnectionToken(8, kBobSecret, now, kNonce), now, &c).ok());
  // Bob's id with Alice's secret, and a flipped bit of the tag.
  s = auth.AuthenticateAt(MakeHmacConnectionToken(8, kAliceSecret, now, "nonce--1"), now, &c);
  EXPECT_EQ(s.message(), "connection token for key 8 has a wrong MAC");
  std::string flipped = MakeHmacConnectionToken(7, kAliceSecret, now, "nonce--2");
  flipped.back() ^= 1;
  EXPECT_EQ(auth.AuthenticateAt(flipped, now, &c).message(),
            "connection token for key 7 has a wrong MAC");
  // Changing the time breaks the MAC too (it is signed).
  std::string moved = MakeHmacConnectionToken(7, kAliceSecret, now, "nonce--3");
  moved[2] ^= 1;
  EXPECT_EQ(auth.AuthenticateAt(moved, now, &c).code(), absl::StatusCode::kUnauthenticated);
  // 31 s old, and 31 s ahead.
  for (absl::Duration skew : {absl::Seconds(-31), absl::Seconds(31)}) {
    s = auth.AuthenticateAt(MakeHmacConnectionToken(7, kAliceSecret, now + skew, "nonce--4"), now,
                            &c);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
    EXPECT_TRUE(absl::StrContains(s.message(), "31s from this host's clock (window 30s)")) << s;
  }
  s = auth.AuthenticateAt(MakeHmacConnectionToken(9, kAliceSecret, now, "nonce--5"), now, &c);
  EXPECT_EQ(s.message(), "unknown key id 9");
  s = auth.AuthenticateAt("", now, &c);
  EXPECT_EQ(s.message(), "connection token of 0 bytes; an HMAC token has 34");
}

TEST(HmacCallSignature, BoundToItsMethodKeyAndTime) {
  HmacAuthMetadataProcessor processor(Keys(), absl::Minutes(5));
  auto run = [&](const std::string& authorization, const std::string& method, AuthContext* context,
                 AuthMetadataProcessor::OutputMetadata* response) {
    AuthMetadataProcessor::InputMetadata md = {{":path", method}};
    if (!authorization.empty()) md.emplace("authorization", authorization);
    AuthMetadataProcessor::OutputMetadata consumed;
    absl::Status s = processor.Process(md, context, &consumed, response);
    if (s.ok()) {
      EXPECT_EQ(consumed.count("authorization"), 1u);
    } else {
      EXPECT_TRUE(consumed.empty());
    }
    return s;
  };
  const absl::Time now = NowMs();
  const std::string good = MakeHmacCallAuthorization(7, kAliceSecret, kMethod, now, kNonce);
  EXPECT_FALSE(absl::StrContains(good, absl::BytesToHexString(kAliceSecret)));
  {
    AuthContext c;
    AuthMetadataProcessor::OutputMetadata response;
    ASSERT_TRUE(run(good, kMethod, &c, &response).ok());
    EXPECT_EQ(c.GetPeerIdentity(), std::vector<std::string>{"alice"});
    EXPECT_EQ(response.find("x-authenticated-as")->second, "alice");
  }
  AuthContext c;
  AuthMetadataProcessor::OutputMetadata response;
  // The same signature for another method.
  absl::Status s = run(good, "/rdmarpc.examples.EchoService/Other", &c, &response);
  EXPECT_EQ(s.message(), "signature of key 7 does not match /rdmarpc.examples.EchoService/Other");
  // Signed with the wrong secret; too old; unknown key; malformed; missing.
  s = run(MakeHmacCallAuthorization(7, kBobSecret, kMethod, now, kNonce), kMethod, &c, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  s = run(MakeHmacCallAuthorization(7, kAliceSecret, kMethod, now - absl::Minutes(6), kNonce),
          kMethod, &c, &response);
  // The processor reads the clock itself, a moment after `now`.
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(absl::StrContains(s.message(), ", 6m")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "from this host's clock (window 5m)")) << s;
  s = run(MakeHmacCallAuthorization(9, kAliceSecret, kMethod, now, kNonce), kMethod, &c, &response);
  EXPECT_EQ(s.message(), "unknown key id 9");
  s = run("RDMARPC-HMAC-SHA256 key=7,ts=x", kMethod, &c, &response);
  EXPECT_EQ(s.message(), "malformed authorization: expected key=ID,ts=MS,nonce=HEX16,sig=HEX64");
  s = run("", kMethod, &c, &response);
  EXPECT_EQ(s.message(), "no RDMARPC-HMAC-SHA256 authorization metadata");
  EXPECT_EQ(response.find("www-authenticate")->second, "RDMARPC-HMAC-SHA256");
  // A connection that authenticated as bob, a call signed by alice.
  AuthContext bobs;
  bobs.AddProperty(kHmacKeyNameProperty, "bob");
  bobs.SetPeerIdentityPropertyName(kHmacKeyNameProperty);
  s = run(good, kMethod, &bobs, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "call signed with key 7 (alice) on a connection of bob");
}

class EchoImpl final : public EchoService::Service {
 public:
  absl::Status Echo(ServerContext* context, const EchoRequest& request,
                    EchoResponse* response) override {
    response->set_payload(
        absl::StrCat(context->auth_context()->GetPeerIdentity()[0], ":", request.payload()));
    return absl::OkStatus();
  }
};

TEST(HmacAuthEndToEnd, BothLevelsLetInTheKeyHolderOnly) {
  EchoImpl echo;
  ServerOptions so;
  so.connection_authenticator = std::make_shared<HmacConnectionAuthenticator>(Keys());
  so.auth_metadata_processor = std::make_shared<HmacAuthMetadataProcessor>(Keys());
  Server server(so);
  ASSERT_TRUE(server.AddService(&echo).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const std::string target = absl::StrCat("127.0.0.1:", server.port());
  auto call = [&](uint16_t connect_key, const std::string& connect_secret, uint16_t call_key,
                  const std::string& call_secret, EchoResponse* response) {
    ChannelOptions co;
    co.connection_credentials =
        std::make_shared<HmacConnectionCredentials>(connect_key, connect_secret);
    co.call_credentials = std::make_shared<HmacCallCredentials>(call_key, call_secret);
    auto channel = CreateChannel(target, co);
    EXPECT_TRUE(channel.ok());
    auto stub = EchoService::NewStub(*channel);
    ClientContext ctx;
    ctx.set_deadline(absl::Now() + absl::Seconds(10));
    EchoRequest req;
    req.set_payload("hi");
    return stub->Echo(&ctx, req, response);
  };
  EchoResponse resp;
  ASSERT_TRUE(call(7, kAliceSecret, 7, kAliceSecret, &resp).ok());
  EXPECT_EQ(resp.payload(), "alice:hi");
  ASSERT_TRUE(call(8, kBobSecret, 8, kBobSecret, &resp).ok());
  EXPECT_EQ(resp.payload(), "bob:hi");
  EXPECT_EQ(call(7, kBobSecret, 7, kAliceSecret, &resp).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(call(7, kAliceSecret, 7, kBobSecret, &resp).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(call(8, kBobSecret, 7, kAliceSecret, &resp).code(),
            absl::StatusCode::kPermissionDenied);
  server.Shutdown(absl::Seconds(1));
  server.Wait();
}

}  // namespace
}  // namespace examples
}  // namespace rdmarpc
