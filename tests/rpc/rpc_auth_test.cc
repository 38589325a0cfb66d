// Authentication (rdmarpc/security.h): connection tokens checked in the
// rdma_cm handshake before the server spends anything on the connection,
// call credentials and the server's auth metadata processor, and the
// AuthContext a handler sees.
#include <fcntl.h>
#include <poll.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "rdmarpc/security.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/transport.h"
#include "tests/rpc/stream_service.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

using Md = std::multimap<std::string, std::string>;

constexpr char kWhoAmIMethod[] = "/rdmarpc.test.Auth/WhoAmI";
// The same answer from a run_inline handler (on the worker) and from a
// callback handler (a reactor): other paths through the server.
constexpr char kWhoAmIInlineMethod[] = "/rdmarpc.test.Auth/WhoAmIInline";
constexpr char kWhoAmICallbackMethod[] = "/rdmarpc.test.Auth/WhoAmICallback";

// Answers who the server thinks is calling: text = the peer identity
// (comma-joined), data = "key=value;" for every client metadata entry and
// then "prop:name=value;" for every AuthContext property.
class AuthService final : public rdmarpc::Service {
 public:
  AuthService() : Service("rdmarpc.test.Auth") {
    AddMethod(
        std::make_unique<internal::UnaryMethodHandler<AuthService, EchoRequest, EchoResponse>>(
            kWhoAmIMethod, this, &AuthService::WhoAmI));
    AddMethod(
        std::make_unique<internal::UnaryMethodHandler<AuthService, EchoRequest, EchoResponse>>(
            kWhoAmIInlineMethod, this, &AuthService::WhoAmI, /*run_inline=*/true));
    AddMethod(std::make_unique<
              internal::CallbackUnaryMethodHandler<AuthService, EchoRequest, EchoResponse>>(
        kWhoAmICallbackMethod, this, &AuthService::WhoAmICallback));
  }
  ServerUnaryReactor* WhoAmICallback(CallbackServerContext* ctx, const EchoRequest* req,
                                     EchoResponse* resp) {
    ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(WhoAmI(ctx, *req, resp));
    return reactor;
  }
  absl::Status WhoAmI(ServerContext* ctx, const EchoRequest&, EchoResponse* resp) {
    calls.fetch_add(1);
    std::shared_ptr<const AuthContext> auth = ctx->auth_context();
    resp->set_text(absl::StrJoin(auth->GetPeerIdentity(), ","));
    std::string seen;
    for (const auto& [k, v] : ctx->client_metadata()) absl::StrAppend(&seen, k, "=", v, ";");
    for (const auto& [k, v] : auth->properties()) absl::StrAppend(&seen, "prop:", k, "=", v, ";");
    resp->set_data(seen);
    return absl::OkStatus();
  }
  std::atomic<int> calls{0};
};

// Tokens "key-NAME" name NAME; "key-mallory" is known but not allowed.
class KeyAuthenticator final : public ConnectionAuthenticator {
 public:
  absl::Status Authenticate(absl::string_view token, absl::string_view peer,
                            AuthContext* context) override {
    checked.fetch_add(1);
    {
      absl::MutexLock lock(&mu);
      tokens.emplace_back(token);
      last_peer = std::string(peer);
    }
    if (!absl::StartsWith(token, "key-")) {
      return absl::UnauthenticatedError(absl::StrCat("bad token of ", token.size(), " bytes"));
    }
    if (token == "key-mallory") return absl::PermissionDeniedError("mallory may not connect");
    context->AddProperty("client", token.substr(4));
    EXPECT_TRUE(context->SetPeerIdentityPropertyName("client"));
    return absl::OkStatus();
  }
  std::atomic<int> checked{0};
  absl::Mutex mu;
  std::vector<std::string> tokens ABSL_GUARDED_BY(mu);
  std::string last_peer ABSL_GUARDED_BY(mu);
};

class FixedToken final : public ConnectionCredentials {
 public:
  explicit FixedToken(absl::StatusOr<std::string> token) : token_(std::move(token)) {}
  absl::StatusOr<std::string> GetToken(absl::string_view server) override {
    asked.fetch_add(1);
    EXPECT_TRUE(absl::StartsWith(server, "127.0.0.1:")) << server;
    return token_;
  }
  std::atomic<int> asked{0};

 private:
  const absl::StatusOr<std::string> token_;
};

// Adds `key: value`, or fails with `error`.
class AddsMetadata final : public CallCredentials {
 public:
  AddsMetadata(std::string key, std::string value, absl::Status error = absl::OkStatus())
      : key_(std::move(key)), value_(std::move(value)), error_(std::move(error)) {}
  absl::Status GetMetadata(absl::string_view target, absl::string_view method,
                           Metadata* metadata) override {
    absl::MutexLock lock(&mu);
    last_target = std::string(target);
    last_method = std::string(method);
    if (!error_.ok()) return error_;
    metadata->emplace(key_, value_);
    return absl::OkStatus();
  }
  absl::Mutex mu;
  std::string last_target ABSL_GUARDED_BY(mu);
  std::string last_method ABSL_GUARDED_BY(mu);

 private:
  const std::string key_, value_;
  const absl::Status error_;
};

// "authorization: Bearer NAME-token" names NAME; consumes the entry.
// Refusals answer "www-authenticate: Bearer" in the trailing metadata.
class BearerProcessor final : public AuthMetadataProcessor {
 public:
  absl::Status Process(const InputMetadata& md, AuthContext* context, OutputMetadata* consumed,
                       OutputMetadata* response) override {
    processed.fetch_add(1);
    {
      absl::MutexLock lock(&mu);
      identity_before = absl::StrJoin(context->GetPeerIdentity(), ",");
      keys_seen.clear();
      for (const auto& [k, v] : md) keys_seen.push_back(k);
      auto path = md.find(":path");
      path_seen = path == md.end() ? "" : path->second;
    }
    auto it = md.find("authorization");
    if (it == md.end()) {
      response->emplace("www-authenticate", "Bearer");
      return absl::UnauthenticatedError("no authorization metadata");
    }
    if (!absl::StartsWith(it->second, "Bearer ") || !absl::EndsWith(it->second, "-token")) {
      response->emplace("www-authenticate", "Bearer error=\"invalid_token\"");
      return absl::UnauthenticatedError(absl::StrCat("bad bearer token: ", it->second));
    }
    std::string name = it->second.substr(7, it->second.size() - 7 - 6);
    if (name == "eve") return absl::PermissionDeniedError("eve may not call");
    consumed->emplace(it->first, it->second);
    context->AddProperty("bearer", name);
    context->AddProperty("role", name == "alice" ? "admin" : "user");
    if (!context->IsPeerAuthenticated()) context->SetPeerIdentityPropertyName("bearer");
    response->emplace("x-auth", "ok");
    return absl::OkStatus();
  }
  std::atomic<int> processed{0};
  absl::Mutex mu;
  std::string identity_before ABSL_GUARDED_BY(mu);
  std::vector<std::string> keys_seen ABSL_GUARDED_BY(mu);
  std::string path_seen ABSL_GUARDED_BY(mu);
};

// A server interceptor that records the client metadata keys it sees.
class KeysSeen final : public experimental::ServerInterceptorFactoryInterface {
 public:
  experimental::Interceptor* CreateServerInterceptor(experimental::ServerRpcInfo*) override {
    return new Recorder(this);
  }
  std::vector<std::string> keys() {
    absl::MutexLock lock(&mu_);
    return keys_;
  }

 private:
  class Recorder final : public experimental::Interceptor {
   public:
    explicit Recorder(KeysSeen* owner) : owner_(owner) {}
    void Intercept(experimental::InterceptorBatchMethods* m) override {
      if (m->QueryInterceptionHookPoint(
              experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
        absl::MutexLock lock(&owner_->mu_);
        owner_->keys_.clear();
        for (const auto& [k, v] : *m->GetRecvInitialMetadata()) owner_->keys_.push_back(k);
      }
    }

   private:
    KeysSeen* const owner_;
  };
  absl::Mutex mu_;
  std::vector<std::string> keys_ ABSL_GUARDED_BY(mu_);
};

struct AuthServer {
  explicit AuthServer(ServerOptions so = ServerOptions()) : server(so) {
    EXPECT_TRUE(server.AddService(&service).ok());
    EXPECT_TRUE(server.AddService(&streams).ok());
    absl::Status s = server.Start("127.0.0.1:0");
    EXPECT_TRUE(s.ok()) << s;
  }
  std::shared_ptr<Channel> Connect(ChannelOptions co = ChannelOptions()) {
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()), co);
    EXPECT_TRUE(ch.ok()) << ch.status();
    return ch.ok() ? *ch : nullptr;
  }
  AuthService service;
  StreamService streams;
  Server server;
};

absl::Status WhoAmI(Channel* ch, EchoResponse* resp, ClientContext* ctx = nullptr,
                    const char* method = kWhoAmIMethod) {
  ClientContext own;
  if (ctx == nullptr) ctx = &own;
  ctx->set_deadline(absl::Now() + absl::Seconds(10));
  EchoRequest req;
  return internal::BlockingUnaryCall(ch, method, ctx, req, resp);
}

// --- connection tokens ---

TEST(ConnectionAuth, AcceptedTokenConnectsAndItsIdentityReachesTheHandler) {
  auto auth = std::make_shared<KeyAuthenticator>();
  ServerOptions so;
  so.connection_authenticator = auth;
  AuthServer s(so);
  auto creds = std::make_shared<FixedToken>(std::string("key-alice"));
  ChannelOptions co;
  co.pool_size = 1;
  co.connection_credentials = creds;
  auto ch = s.Connect(co);
  for (int i = 0; i < 3; ++i) {
    EchoResponse resp;
    ASSERT_TRUE(WhoAmI(ch.get(), &resp).ok());
    EXPECT_EQ(resp.text(), "alice");
    EXPECT_EQ(resp.data(), "prop:client=alice;");
  }
  // One connection: asked and checked once for three calls.
  EXPECT_EQ(creds->asked.load(), 1);
  EXPECT_EQ(auth->checked.load(), 1);
  absl::MutexLock lock(&auth->mu);
  EXPECT_EQ(auth->tokens, std::vector<std::string>{"key-alice"});
  EXPECT_TRUE(absl::StartsWith(auth->last_peer, "127.0.0.1:")) << auth->last_peer;
}

TEST(ConnectionAuth, RefusedTokenFailsTheCallUnauthenticated) {
  auto auth = std::make_shared<KeyAuthenticator>();
  ServerOptions so;
  so.connection_authenticator = auth;
  AuthServer s(so);
  ChannelOptions co;
  co.connection_credentials = std::make_shared<FixedToken>(std::string("guess"));
  auto ch = s.Connect(co);
  EchoResponse resp;
  absl::Status st = WhoAmI(ch.get(), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "refused this client's connection token")) << st;
  EXPECT_EQ(s.service.calls.load(), 0);
  // Without credentials the authenticator sees an empty token.
  auto bare = s.Connect();
  st = WhoAmI(bare.get(), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  absl::MutexLock lock(&auth->mu);
  ASSERT_EQ(auth->tokens.size(), 2u);
  EXPECT_EQ(auth->tokens[0], "guess");
  EXPECT_EQ(auth->tokens[1], "");
}

TEST(ConnectionAuth, KnownButNotAllowedFailsPermissionDenied) {
  ServerOptions so;
  so.connection_authenticator = std::make_shared<KeyAuthenticator>();
  AuthServer s(so);
  ChannelOptions co;
  co.connection_credentials = std::make_shared<FixedToken>(std::string("key-mallory"));
  auto ch = s.Connect(co);
  EchoResponse resp;
  absl::Status st = WhoAmI(ch.get(), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_EQ(s.service.calls.load(), 0);
}

TEST(ConnectionAuth, CredentialsErrorsFollowGrfcA54) {
  ServerOptions so;
  so.connection_authenticator = std::make_shared<KeyAuthenticator>();
  AuthServer s(so);
  struct Case {
    absl::StatusOr<std::string> token;
    absl::StatusCode want;
    std::string message_part;
  };
  const Case cases[] = {
      {absl::UnavailableError("token service down"), absl::StatusCode::kUnavailable,
       "token service down"},
      {absl::UnauthenticatedError("no key file"), absl::StatusCode::kUnauthenticated,
       "no key file"},
      // A code kept for servers becomes INTERNAL.
      {absl::InvalidArgumentError("bad key"), absl::StatusCode::kInternal, "INVALID_ARGUMENT"},
      {absl::NotFoundError("no key"), absl::StatusCode::kInternal, "NOT_FOUND"},
      // One byte over what fits in the private data.
      {std::string("key-") + std::string(32, 'x'), absl::StatusCode::kInternal,
       "connection token of 36 bytes; at most 35"},
  };
  for (const Case& c : cases) {
    ChannelOptions co;
    co.connection_credentials = std::make_shared<FixedToken>(c.token);
    auto ch = s.Connect(co);
    EchoResponse resp;
    absl::Status st = WhoAmI(ch.get(), &resp);
    EXPECT_EQ(st.code(), c.want) << st;
    EXPECT_TRUE(absl::StrContains(st.message(), c.message_part)) << st;
  }
  EXPECT_EQ(s.service.calls.load(), 0);
  // The longest token that fits goes through whole.
  ChannelOptions co;
  const std::string longest = "key-" + std::string(kMaxConnectionTokenBytes - 4, 'y');
  co.connection_credentials = std::make_shared<FixedToken>(longest);
  auto ch = s.Connect(co);
  EchoResponse resp;
  ASSERT_TRUE(WhoAmI(ch.get(), &resp).ok());
  EXPECT_EQ(resp.text(), longest.substr(4));
}

// A raw rdma_cm peer (no QP, nothing registered) sends connect requests
// with `token`; returns the event that answered the last one.
struct RawOutcome {
  rdma_cm_event_type event = RDMA_CM_EVENT_ADDR_ERROR;
  uint32_t reject_reason = 0;
};
RawOutcome RawConnect(int port, absl::string_view token) {
  RawOutcome out;
  rdma_event_channel* ch = softrdma::create_event_channel();
  EXPECT_NE(ch, nullptr);
  fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
  auto next = [ch](rdma_cm_event_type* type, std::string* private_data) {
    for (int waited = 0; waited < 10000; waited += 10) {
      rdma_cm_event* ev = nullptr;
      if (softrdma::get_cm_event(ch, &ev) == 0) {
        *type = ev->event;
        if (ev->param.conn.private_data != nullptr) {
          private_data->assign(static_cast<const char*>(ev->param.conn.private_data),
                               ev->param.conn.private_data_len);
        }
        softrdma::ack_cm_event(ev);
        return true;
      }
      pollfd p{ch->fd, POLLIN, 0};
      poll(&p, 1, 10);
    }
    return false;
  };
  rdma_cm_id* id = nullptr;
  EXPECT_EQ(softrdma::create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_ERROR;
  std::string pd;
  EXPECT_EQ(softrdma::resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), 1000), 0);
  EXPECT_TRUE(next(&type, &pd));
  EXPECT_EQ(type, RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_EQ(softrdma::resolve_route(id, 1000), 0);
  EXPECT_TRUE(next(&type, &pd));
  EXPECT_EQ(type, RDMA_CM_EVENT_ROUTE_RESOLVED);
  const internal::Handshake::PrivateData offer =
      internal::Handshake::Offer(internal::kProtocolVersion, 16, 4096, token);
  rdma_conn_param param{};
  param.private_data = offer.data();
  param.private_data_len = offer.size();
  EXPECT_EQ(softrdma::connect(id, &param), 0);
  if (next(&type, &pd)) {
    out.event = type;
    absl::StatusOr<internal::HandshakeData> h = internal::DecodeHandshake(pd.data(), pd.size());
    if (h.ok()) out.reject_reason = h->reject_reason;
  }
  // Accepted: with no QP on the id, rdma_cm reports CONNECT_RESPONSE.
  if (out.event == RDMA_CM_EVENT_CONNECT_RESPONSE) softrdma::disconnect(id);
  softrdma::destroy_id(id);
  softrdma::destroy_event_channel(ch);
  return out;
}

TEST(ConnectionAuth, RefusedPeerCostsTheServerNoQpNoReceiveNoRegistration) {
  auto auth = std::make_shared<KeyAuthenticator>();
  ServerOptions so;
  so.connection_authenticator = auth;
  AuthServer s(so);
  const softrdma::Stats before = softrdma::GetStats();
  for (int i = 0; i < 20; ++i) {
    RawOutcome o = RawConnect(s.server.port(), i % 2 == 0 ? "guess" : "");
    EXPECT_EQ(o.event, RDMA_CM_EVENT_REJECTED);
    EXPECT_EQ(o.reject_reason, internal::kRejectUnauthenticated);
  }
  RawOutcome denied = RawConnect(s.server.port(), "key-mallory");
  EXPECT_EQ(denied.event, RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(denied.reject_reason, internal::kRejectPermissionDenied);
  const softrdma::Stats after = softrdma::GetStats();
  // The raw peer makes none of these itself: every one would be the
  // server's. (The gauges may fall as an earlier test's objects go.)
  EXPECT_EQ(after.reg_mr, before.reg_mr);
  EXPECT_EQ(after.post_recv_calls, before.post_recv_calls);
  EXPECT_LE(after.live_qps, before.live_qps);
  EXPECT_LE(after.live_mrs, before.live_mrs);
  EXPECT_EQ(auth->checked.load(), 21);
  // The same raw peer with a good token does cost the server its QP and
  // receives: the counters above would have seen them.
  RawOutcome ok = RawConnect(s.server.port(), "key-alice");
  EXPECT_EQ(ok.event, RDMA_CM_EVENT_CONNECT_RESPONSE);
  EXPECT_GT(softrdma::GetStats().post_recv_calls, after.post_recv_calls);
}

TEST(ConnectionAuth, AcceptedClientsCarryOnWhileOthersAreRefused) {
  ServerOptions so;
  so.connection_authenticator = std::make_shared<KeyAuthenticator>();
  AuthServer s(so);
  ChannelOptions good;
  good.connection_credentials = std::make_shared<FixedToken>(std::string("key-bob"));
  auto ok_channel = s.Connect(good);
  ChannelOptions bad;
  bad.connection_credentials = std::make_shared<FixedToken>(std::string("nope"));
  int ok = 0, refused = 0;
  for (int i = 0; i < 20; ++i) {
    auto bad_channel = s.Connect(bad);
    EchoResponse resp;
    if (WhoAmI(bad_channel.get(), &resp).code() == absl::StatusCode::kUnauthenticated) ++refused;
    absl::Status st = WhoAmI(ok_channel.get(), &resp);
    if (st.ok() && resp.text() == "bob") ++ok;
  }
  EXPECT_EQ(ok, 20);
  EXPECT_EQ(refused, 20);
}

// --- call credentials and the auth metadata processor ---

TEST(CallAuth, ProcessorConsumesTheTokenAndNamesTheCaller) {
  auto processor = std::make_shared<BearerProcessor>();
  auto keys = std::make_shared<KeysSeen>();
  ServerOptions so;
  so.auth_metadata_processor = processor;
  so.interceptor_creators.push_back(keys);
  AuthServer s(so);
  auto creds = std::make_shared<AddsMetadata>("authorization", "Bearer alice-token");
  ChannelOptions co;
  co.call_credentials = creds;
  auto ch = s.Connect(co);
  ClientContext ctx;
  ctx.AddMetadata("x-trace", "7");
  EchoResponse resp;
  ASSERT_TRUE(WhoAmI(ch.get(), &resp, &ctx).ok());
  EXPECT_EQ(resp.text(), "alice");
  // The handler and the user's interceptor see the metadata without the
  // consumed token; the handler sees what the processor added.
  EXPECT_EQ(resp.data(), "x-trace=7;prop:bearer=alice;prop:role=admin;");
  EXPECT_EQ(keys->keys(), std::vector<std::string>{"x-trace"});
  {
    absl::MutexLock lock(&processor->mu);
    EXPECT_EQ(processor->keys_seen,
              (std::vector<std::string>{":path", "authorization", "x-trace"}));
    EXPECT_EQ(processor->path_seen, kWhoAmIMethod);
  }
  // The processor's response metadata goes with the initial metadata.
  auto it = ctx.GetServerInitialMetadata().find("x-auth");
  ASSERT_NE(it, ctx.GetServerInitialMetadata().end());
  EXPECT_EQ(it->second, "ok");
  absl::MutexLock lock(&creds->mu);
  EXPECT_EQ(creds->last_method, kWhoAmIMethod);
  EXPECT_EQ(creds->last_target, absl::StrCat("127.0.0.1:", s.server.port()));
}

TEST(CallAuth, RefusedCallsNeverReachTheHandler) {
  auto processor = std::make_shared<BearerProcessor>();
  ServerOptions so;
  so.auth_metadata_processor = processor;
  AuthServer s(so);
  {
    auto ch = s.Connect();  // no credentials
    ClientContext ctx;
    EchoResponse resp;
    absl::Status st = WhoAmI(ch.get(), &resp, &ctx);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
    EXPECT_EQ(st.message(), "no authorization metadata");
    auto it = ctx.GetServerTrailingMetadata().find("www-authenticate");
    ASSERT_NE(it, ctx.GetServerTrailingMetadata().end());
    EXPECT_EQ(it->second, "Bearer");
  }
  {
    ChannelOptions co;
    co.call_credentials = std::make_shared<AddsMetadata>("authorization", "Basic Zm9v");
    auto ch = s.Connect(co);
    EchoResponse resp;
    absl::Status st = WhoAmI(ch.get(), &resp);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
    EXPECT_EQ(st.message(), "bad bearer token: Basic Zm9v");
  }
  {
    ChannelOptions co;
    co.call_credentials = std::make_shared<AddsMetadata>("authorization", "Bearer eve-token");
    auto ch = s.Connect(co);
    EchoResponse resp;
    absl::Status st = WhoAmI(ch.get(), &resp);
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  }
  EXPECT_EQ(processor->processed.load(), 3);
  EXPECT_EQ(s.service.calls.load(), 0);
}

TEST(CallAuth, InlineAndCallbackHandlersAreGuardedAlike) {
  auto processor = std::make_shared<BearerProcessor>();
  ServerOptions so;
  so.auth_metadata_processor = processor;
  AuthServer s(so);
  ChannelOptions good;
  good.call_credentials = std::make_shared<AddsMetadata>("authorization", "Bearer erin-token");
  auto ch = s.Connect(good);
  auto bare = s.Connect();
  for (const char* method : {kWhoAmIInlineMethod, kWhoAmICallbackMethod}) {
    EchoResponse resp;
    absl::Status st = WhoAmI(ch.get(), &resp, nullptr, method);
    ASSERT_TRUE(st.ok()) << method << ": " << st;
    EXPECT_EQ(resp.text(), "erin") << method;
    EXPECT_EQ(resp.data(), "prop:bearer=erin;prop:role=user;") << method;
    ClientContext ctx;
    st = WhoAmI(bare.get(), &resp, &ctx, method);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << method << ": " << st;
    auto it = ctx.GetServerTrailingMetadata().find("www-authenticate");
    ASSERT_NE(it, ctx.GetServerTrailingMetadata().end()) << method;
    EXPECT_EQ(it->second, "Bearer") << method;
  }
  EXPECT_EQ(s.service.calls.load(), 2);  // the two good calls only
}

TEST(CallAuth, ContextCredentialsFollowTheChannels) {
  auto processor = std::make_shared<BearerProcessor>();
  ServerOptions so;
  so.auth_metadata_processor = processor;
  AuthServer s(so);
  ChannelOptions co;
  co.call_credentials = std::make_shared<AddsMetadata>("x-tenant", "blue");
  auto ch = s.Connect(co);
  ClientContext ctx;
  ctx.set_credentials(std::make_shared<AddsMetadata>("authorization", "Bearer carol-token"));
  EchoResponse resp;
  ASSERT_TRUE(WhoAmI(ch.get(), &resp, &ctx).ok());
  EXPECT_EQ(resp.text(), "carol");
  EXPECT_EQ(resp.data(), "x-tenant=blue;prop:bearer=carol;prop:role=user;");
  // Without the context's credentials the channel's alone are not enough.
  ClientContext plain;
  absl::Status st = WhoAmI(ch.get(), &resp, &plain);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
}

TEST(CallAuth, CredentialsErrorEndsTheCallBeforeAnythingIsSent) {
  auto processor = std::make_shared<BearerProcessor>();
  ServerOptions so;
  so.auth_metadata_processor = processor;
  AuthServer s(so);
  auto ch = s.Connect();
  struct Case {
    absl::Status error;
    absl::StatusCode want;
  };
  const Case cases[] = {
      {absl::UnauthenticatedError("token expired"), absl::StatusCode::kUnauthenticated},
      {absl::UnavailableError("token service down"), absl::StatusCode::kUnavailable},
      {absl::NotFoundError("no token"), absl::StatusCode::kInternal},
      {absl::FailedPreconditionError("not logged in"), absl::StatusCode::kInternal},
  };
  for (const Case& c : cases) {
    ClientContext ctx;
    ctx.set_credentials(std::make_shared<AddsMetadata>("authorization", "x", c.error));
    EchoResponse resp;
    absl::Status st = WhoAmI(ch.get(), &resp, &ctx);
    EXPECT_EQ(st.code(), c.want) << st;
    EXPECT_TRUE(absl::StrContains(st.message(), c.error.message())) << st;
    EXPECT_TRUE(absl::StrContains(st.message(),
                                  "the call's call credentials for " + std::string(kWhoAmIMethod)))
        << st;
  }
  EXPECT_EQ(processor->processed.load(), 0);
}

TEST(CallAuth, AsyncCallsAndStreamsCarryCallCredentials) {
  auto processor = std::make_shared<BearerProcessor>();
  ServerOptions so;
  so.auth_metadata_processor = processor;
  AuthServer s(so);
  ChannelOptions co;
  co.call_credentials = std::make_shared<AddsMetadata>("authorization", "Bearer dave-token");
  auto ch = s.Connect(co);
  {
    ClientContext ctx;
    EchoRequest req;
    EchoResponse resp;
    absl::Notification done;
    absl::Status result;
    internal::AsyncUnaryCall(ch.get(), kWhoAmIMethod, &ctx, req, &resp, [&](absl::Status st) {
      result = st;
      done.Notify();
    });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    ASSERT_TRUE(result.ok()) << result;
    EXPECT_EQ(resp.text(), "dave");
  }
  {
    ClientContext ctx;
    EchoResponse resp;
    ClientWriter<EchoRequest> writer(ch.get(), kCollectMethod, &ctx, &resp);
    EchoRequest req;
    req.set_data("ab");
    ASSERT_TRUE(writer.Write(req));
    ASSERT_TRUE(writer.Write(req));
    ASSERT_TRUE(writer.WritesDone());
    absl::Status st = writer.Finish();
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(resp.text(), "2");
    EXPECT_EQ(resp.data(), "abab");
  }
  {
    auto bare = s.Connect();
    ClientContext ctx;
    EchoRequest req;
    req.set_tag(3);
    ClientReader<EchoResponse> reader(bare.get(), kExpandMethod, &ctx, req);
    EchoResponse resp;
    EXPECT_FALSE(reader.Read(&resp));
    absl::Status st = reader.Finish();
    EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  }
  EXPECT_EQ(processor->processed.load(), 3);
}

TEST(CallAuth, CallsStartFromTheConnectionsIdentity) {
  auto processor = std::make_shared<BearerProcessor>();
  ServerOptions so;
  so.connection_authenticator = std::make_shared<KeyAuthenticator>();
  so.auth_metadata_processor = processor;
  AuthServer s(so);
  ChannelOptions co;
  co.connection_credentials = std::make_shared<FixedToken>(std::string("key-host7"));
  co.call_credentials = std::make_shared<AddsMetadata>("authorization", "Bearer alice-token");
  auto ch = s.Connect(co);
  EchoResponse resp;
  ASSERT_TRUE(WhoAmI(ch.get(), &resp).ok());
  // The connection named the peer; the processor added to it.
  EXPECT_EQ(resp.text(), "host7");
  EXPECT_EQ(resp.data(), "prop:bearer=alice;prop:client=host7;prop:role=admin;");
  absl::MutexLock lock(&processor->mu);
  EXPECT_EQ(processor->identity_before, "host7");
}

TEST(AuthContextTest, IdentityNeedsANamedPropertyThatExists) {
  AuthContext c;
  EXPECT_FALSE(c.IsPeerAuthenticated());
  EXPECT_TRUE(c.GetPeerIdentity().empty());
  EXPECT_FALSE(c.SetPeerIdentityPropertyName("x509_cn"));
  EXPECT_EQ(c.GetPeerIdentityPropertyName(), "");
  c.AddProperty("x509_cn", "alice");
  c.AddProperty("x509_cn", "alice2");
  c.AddProperty("group", "ops");
  ASSERT_TRUE(c.SetPeerIdentityPropertyName("x509_cn"));
  EXPECT_TRUE(c.IsPeerAuthenticated());
  EXPECT_EQ(c.GetPeerIdentity(), (std::vector<std::string>{"alice", "alice2"}));
  EXPECT_EQ(c.FindPropertyValues("group"), std::vector<std::string>{"ops"});
  EXPECT_TRUE(c.FindPropertyValues("none").empty());
  // A context made for a direct call of a service method is empty.
  ServerContext direct;
  EXPECT_NE(direct.auth_context(), nullptr);
  EXPECT_FALSE(direct.auth_context()->IsPeerAuthenticated());
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
