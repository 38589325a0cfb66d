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
  const std::string token = MakeHmacConnectionToken(7, kAliceSecret, absl::Now(), kNonce);
  EXPECT_EQ(token.size(), kHmacConnectionTokenBytes);
  EXPECT_LE(token.size(), kMaxConnectionTokenBytes);
  EXPECT_FALSE(absl::StrContains(token, kAliceSecret.substr(0, 8)));
  AuthContext context;
  ASSERT_TRUE(auth.Authenticate(token, "127.0.0.1:1", &context).ok());
  EXPECT_EQ(context.GetPeerIdentity(), std::vector<std::string>{"alice"});
  EXPECT_EQ(context.FindPropertyValues(kHmacKeyIdProperty), std::vector<std::string>{"7"});
}

TEST(HmacConnectionToken, ReplayForgeryExpiryAndUnknownKeysAreRefused) {
  absl::Time now = NowMs();
  HmacConnectionAuthenticator auth(Keys(), absl::Seconds(30), [&now] { return now; });
  auto check = [&auth](const std::string& token) {
    AuthContext c;
    return auth.Authenticate(token, "127.0.0.1:1", &c);
  };
  const std::string token = MakeHmacConnectionToken(7, kAliceSecret, now, kNonce);
  ASSERT_TRUE(check(token).ok());
  // The same token again: a replay.
  now += absl::Seconds(1);
  absl::Status s = check(token);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(s.message(), "connection token for key 7 was used before (a replay)");
  // Another nonce is fine; the same nonce for another key too.
  EXPECT_TRUE(check(MakeHmacConnectionToken(7, kAliceSecret, now, "abcdefgh")).ok());
  EXPECT_TRUE(check(MakeHmacConnectionToken(8, kBobSecret, now, kNonce)).ok());
  // Bob's id with Alice's secret, and a flipped bit of the tag.
  s = check(MakeHmacConnectionToken(8, kAliceSecret, now, "nonce--1"));
  EXPECT_EQ(s.message(), "connection token for key 8 has a wrong MAC");
  std::string flipped = MakeHmacConnectionToken(7, kAliceSecret, now, "nonce--2");
  flipped.back() ^= 1;
  EXPECT_EQ(check(flipped).message(), "connection token for key 7 has a wrong MAC");
  // Changing the time breaks the MAC too (it is signed).
  std::string moved = MakeHmacConnectionToken(7, kAliceSecret, now, "nonce--3");
  moved[2] ^= 1;
  EXPECT_EQ(check(moved).code(), absl::StatusCode::kUnauthenticated);
  // 31 s old, and 31 s ahead; 30 s either way still passes.
  for (absl::Duration skew : {absl::Seconds(-31), absl::Seconds(31)}) {
    s = check(MakeHmacConnectionToken(7, kAliceSecret, now + skew, "nonce--4"));
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
    EXPECT_TRUE(absl::StrContains(s.message(), ", 31s from this host's clock (window 30s)")) << s;
  }
  EXPECT_TRUE(
      check(MakeHmacConnectionToken(7, kAliceSecret, now - absl::Seconds(30), "old-30s!")).ok());
  EXPECT_TRUE(
      check(MakeHmacConnectionToken(7, kAliceSecret, now + absl::Seconds(30), "new-30s!")).ok());
  s = check(MakeHmacConnectionToken(9, kAliceSecret, now, "nonce--5"));
  EXPECT_EQ(s.message(), "unknown key id 9");
  EXPECT_EQ(check("").message(), "connection token of 0 bytes; an HMAC token has 34");
}

TEST(HmacCallSignature, BoundToItsKeyMethodAndTime) {
  absl::Time now = NowMs();
  HmacAuthMetadataProcessor processor(Keys(), absl::Minutes(5), [&now] { return now; });
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
  const std::string good = MakeHmacCallAuthorization(7, kAliceSecret, kMethod, now, kNonce);
  EXPECT_FALSE(absl::StrContains(good, absl::BytesToHexString(kAliceSecret)));
  {
    AuthContext c;
    AuthMetadataProcessor::OutputMetadata response;
    ASSERT_TRUE(run(good, kMethod, &c, &response).ok());
    EXPECT_EQ(c.GetPeerIdentity(), std::vector<std::string>{"alice"});
    EXPECT_EQ(c.FindPropertyValues(kHmacKeyIdProperty), std::vector<std::string>{"7"});
    EXPECT_EQ(response.find("x-authenticated-as")->second, "alice");
  }
  AuthContext c;
  AuthMetadataProcessor::OutputMetadata response;
  // The same signature for another method; the wrong secret; an unknown
  // key: all read the same to the caller.
  absl::Status s = run(good, "/rdmarpc.examples.EchoService/Other", &c, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(s.message(), "RDMARPC-HMAC-SHA256 signature not valid");
  s = run(MakeHmacCallAuthorization(7, kBobSecret, kMethod, now, kNonce), kMethod, &c, &response);
  EXPECT_EQ(s.message(), "RDMARPC-HMAC-SHA256 signature not valid");
  s = run(MakeHmacCallAuthorization(9, kAliceSecret, kMethod, now, kNonce), kMethod, &c, &response);
  EXPECT_EQ(s.message(), "RDMARPC-HMAC-SHA256 signature not valid");
  // Another key id on the same signature (the id is signed).
  std::string other_key = good;
  other_key.replace(other_key.find("key=7"), 5, "key=8");
  EXPECT_EQ(run(other_key, kMethod, &c, &response).message(),
            "RDMARPC-HMAC-SHA256 signature not valid");
  // 6 minutes old.
  s = run(MakeHmacCallAuthorization(7, kAliceSecret, kMethod, now - absl::Minutes(6), kNonce),
          kMethod, &c, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(absl::StrContains(s.message(), ", 6m from this host's clock (window 5m)")) << s;
  // Malformed: not the signer's own digits, a field twice, a field short.
  std::string padded_ts = good;
  padded_ts.replace(padded_ts.find(",ts="), 4, ",ts=0");
  std::string plus_key = good;
  plus_key.replace(plus_key.find("key=7"), 5, "key=+7");
  for (const std::string& bad :
       {padded_ts, plus_key, std::string("RDMARPC-HMAC-SHA256 key=7,ts=x")}) {
    EXPECT_EQ(run(bad, kMethod, &c, &response).message(),
              "malformed authorization: expected key=ID,ts=MS,nonce=HEX16,sig=HEX64")
        << bad;
  }
  EXPECT_EQ(run(good + ",key=7", kMethod, &c, &response).message(),
            "malformed authorization: field 'key' given twice");
  {
    AuthMetadataProcessor::InputMetadata md = {
        {":path", kMethod}, {"authorization", good}, {"authorization", good}};
    AuthMetadataProcessor::OutputMetadata consumed;
    EXPECT_EQ(processor.Process(md, &c, &consumed, &response).message(),
              "more than one authorization entry");
  }
  s = run("", kMethod, &c, &response);
  EXPECT_EQ(s.message(), "no RDMARPC-HMAC-SHA256 authorization metadata");
  EXPECT_EQ(response.find("www-authenticate")->second, "RDMARPC-HMAC-SHA256");
  // A connection that authenticated with bob's key, a call signed with
  // alice's.
  AuthContext bobs;
  bobs.AddProperty(kHmacKeyNameProperty, "bob");
  bobs.AddProperty(kHmacKeyIdProperty, "8");
  bobs.SetPeerIdentityPropertyName(kHmacKeyNameProperty);
  s = run(good, kMethod, &bobs, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "call signed with key 7 on a connection of key 8");
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
