// Interceptors (rdmarpc/interceptor.h) end to end over softrdma: one test
// per capability — metadata read and changed both ways, every message of
// every method kind observed, the final status observed, a call failed
// early on either side, the order of a chain of three around the handler —
// on the blocking, callback and reactor APIs.
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/transport_stats.h"
#include "tests/rpc/call_model_service.h"
#include "tests/rpc/callback_services.h"
#include "tests/rpc/stream_service.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

using experimental::ClientInterceptorFactoryInterface;
using experimental::ClientRpcInfo;
using experimental::InterceptionHookPoints;
using experimental::Interceptor;
using experimental::InterceptorBatchMethods;
using experimental::RpcType;
using experimental::ServerInterceptorFactoryInterface;
using experimental::ServerRpcInfo;
using Metadata = std::multimap<std::string, std::string>;

const char* HookName(InterceptionHookPoints h) {
  switch (h) {
    case InterceptionHookPoints::PRE_SEND_INITIAL_METADATA:
      return "PRE_SEND_INITIAL_METADATA";
    case InterceptionHookPoints::PRE_SEND_MESSAGE:
      return "PRE_SEND_MESSAGE";
    case InterceptionHookPoints::PRE_SEND_STATUS:
      return "PRE_SEND_STATUS";
    case InterceptionHookPoints::PRE_SEND_CLOSE:
      return "PRE_SEND_CLOSE";
    case InterceptionHookPoints::POST_RECV_INITIAL_METADATA:
      return "POST_RECV_INITIAL_METADATA";
    case InterceptionHookPoints::POST_RECV_MESSAGE:
      return "POST_RECV_MESSAGE";
    case InterceptionHookPoints::POST_RECV_STATUS:
      return "POST_RECV_STATUS";
    case InterceptionHookPoints::NUM_INTERCEPTION_HOOKS:
      break;
  }
  return "?";
}

// A sequence of events shared by interceptors and handlers.
class EventLog {
 public:
  void Add(std::string event) {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(event));
  }
  std::vector<std::string> Take() {
    absl::MutexLock lock(&mu_);
    return std::exchange(events_, {});
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
};

// What a Probe does (set before calls) and what all its calls saw.
struct ProbeState {
  explicit ProbeState(std::string n, EventLog* l = nullptr) : name(std::move(n)), log(l) {}
  const std::string name;
  EventLog* const log;
  // Behaviour.
  Metadata add_send_initial;   // added at PRE_SEND_INITIAL_METADATA
  Metadata add_recv_initial;   // server: added to the client's metadata
  Metadata add_send_trailing;  // server: added at PRE_SEND_STATUS
  absl::Status fail;           // not OK: Fail at the first hook
  Metadata fail_trailing;      // server: added to the context before failing

  // Observations, over every call.
  absl::Mutex mu;
  int calls ABSL_GUARDED_BY(mu) = 0;
  int hooks ABSL_GUARDED_BY(mu) = 0;
  int sent ABSL_GUARDED_BY(mu) = 0;
  int received ABSL_GUARDED_BY(mu) = 0;
  size_t sent_bytes ABSL_GUARDED_BY(mu) = 0;
  size_t received_bytes ABSL_GUARDED_BY(mu) = 0;
  int closes ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::string> methods ABSL_GUARDED_BY(mu);
  std::vector<RpcType> types ABSL_GUARDED_BY(mu);
  std::vector<Metadata> recv_initial ABSL_GUARDED_BY(mu);
  std::vector<Metadata> recv_trailing ABSL_GUARDED_BY(mu);
  std::vector<Metadata> send_initial ABSL_GUARDED_BY(mu);
  std::vector<absl::Status> statuses ABSL_GUARDED_BY(mu);
  std::vector<std::string> peers ABSL_GUARDED_BY(mu);
  std::vector<bool> cancelled ABSL_GUARDED_BY(mu);
  bool times_ordered ABSL_GUARDED_BY(mu) = true;
  std::vector<std::thread::id> threads ABSL_GUARDED_BY(mu);  // of each server hook

  int Calls() {
    absl::MutexLock lock(&mu);
    return calls;
  }
  int Hooks() {
    absl::MutexLock lock(&mu);
    return hooks;
  }
  std::vector<absl::Status> Statuses() {
    absl::MutexLock lock(&mu);
    return statuses;
  }
};

class Probe final : public Interceptor {
 public:
  Probe(ProbeState* s, const ClientRpcInfo* client, const ServerRpcInfo* server)
      : s_(s), client_(client), server_(server) {
    absl::MutexLock lock(&s_->mu);
    ++s_->calls;
    // Branches, not ?:, so GCC's -Wnonnull sees no call through the null
    // one when this is inlined with a constant argument.
    if (client != nullptr) {
      s_->methods.push_back(client->method());
      s_->types.push_back(client->type());
    } else if (server != nullptr) {
      s_->methods.push_back(server->method());
      s_->types.push_back(server->type());
    }
  }

  void Intercept(InterceptorBatchMethods* m) override {
    if (s_->log != nullptr) s_->log->Add(absl::StrCat(s_->name, ":", HookName(m->hook_point())));
    absl::MutexLock lock(&s_->mu);
    ++s_->hooks;
    if (server_ != nullptr) s_->threads.push_back(std::this_thread::get_id());
    const bool first = !entered_;
    entered_ = true;
    if (first && !s_->fail.ok()) {
      if (server_ != nullptr) {
        for (const auto& [k, v] : s_->fail_trailing) {
          server_->server_context()->AddTrailingMetadata(k, v);
        }
      }
      m->Fail(s_->fail);
      return;
    }
    switch (m->hook_point()) {
      case InterceptionHookPoints::PRE_SEND_INITIAL_METADATA:
        for (const auto& kv : s_->add_send_initial) m->GetSendInitialMetadata()->insert(kv);
        s_->send_initial.push_back(*m->GetSendInitialMetadata());
        break;
      case InterceptionHookPoints::PRE_SEND_MESSAGE:
        ++s_->sent;
        s_->sent_bytes += m->GetSendMessageSize();
        EXPECT_EQ(m->GetSendMessage()->ByteSizeLong(), m->GetSendMessageSize());
        break;
      case InterceptionHookPoints::PRE_SEND_CLOSE:
        ++s_->closes;
        break;
      case InterceptionHookPoints::POST_RECV_INITIAL_METADATA:
        s_->recv_initial.push_back(*m->GetRecvInitialMetadata());
        for (const auto& kv : s_->add_recv_initial) m->GetRecvInitialMetadata()->insert(kv);
        break;
      case InterceptionHookPoints::POST_RECV_MESSAGE:
        ++s_->received;
        s_->received_bytes += m->GetRecvMessageSize();
        EXPECT_EQ(m->GetRecvMessage()->ByteSizeLong(), m->GetRecvMessageSize());
        break;
      case InterceptionHookPoints::PRE_SEND_STATUS:
        for (const auto& kv : s_->add_send_trailing) m->GetSendTrailingMetadata()->insert(kv);
        s_->statuses.push_back(*m->GetSendStatus());
        s_->peers.push_back(server_->peer());
        s_->cancelled.push_back(server_->server_context()->IsCancelled());
        if (!(server_->start_time() <= server_->end_time())) s_->times_ordered = false;
        break;
      case InterceptionHookPoints::POST_RECV_STATUS:
        s_->statuses.push_back(*m->GetRecvStatus());
        s_->recv_trailing.push_back(*m->GetRecvTrailingMetadata());
        s_->peers.push_back(client_->peer());
        if (!(client_->start_time() <= client_->end_time())) s_->times_ordered = false;
        break;
      case InterceptionHookPoints::NUM_INTERCEPTION_HOOKS:
        break;
    }
  }

 private:
  ProbeState* const s_;
  const ClientRpcInfo* const client_;
  const ServerRpcInfo* const server_;
  bool entered_ = false;
};

class ProbeFactory final : public ClientInterceptorFactoryInterface,
                           public ServerInterceptorFactoryInterface {
 public:
  explicit ProbeFactory(ProbeState* s) : s_(s) {}
  Interceptor* CreateClientInterceptor(ClientRpcInfo* info) override {
    return new Probe(s_, info, nullptr);
  }
  Interceptor* CreateServerInterceptor(ServerRpcInfo* info) override {
    return new Probe(s_, nullptr, info);
  }

 private:
  ProbeState* const s_;
};

ChannelOptions WithClient(std::vector<ProbeState*> probes) {
  ChannelOptions o;
  for (ProbeState* p : probes) o.interceptor_creators.push_back(std::make_shared<ProbeFactory>(p));
  return o;
}
ServerOptions WithServer(std::vector<ProbeState*> probes) {
  ServerOptions o;
  for (ProbeState* p : probes) o.interceptor_creators.push_back(std::make_shared<ProbeFactory>(p));
  return o;
}

struct Ends {
  Ends(std::vector<rdmarpc::Service*> services, ServerOptions so, ChannelOptions co)
      : server(so) {
    for (auto* s : services) EXPECT_TRUE(server.AddService(s).ok());
    absl::Status s = server.Start("127.0.0.1:0");
    EXPECT_TRUE(s.ok()) << s;
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()), co);
    EXPECT_TRUE(ch.ok()) << ch.status();
    if (ch.ok()) channel = *ch;
  }
  Server server;
  std::shared_ptr<Channel> channel;
};

bool WaitUntil(const std::function<bool()>& pred) {
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!pred()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// ---- metadata --------------------------------------------------------------------

TEST(Interceptor, ReadsAndChangesMetadataBothWays) {
  CallModelService service;
  ProbeState client("client"), server("server");
  client.add_send_initial = {{"x-client-added", "c1"}};
  client.add_recv_initial = {{"x-seen-by-client", "yes"}};
  server.add_recv_initial = {{"x-server-added", "s1"}};
  server.add_send_initial = {{"x-server-initial", "i1"}};
  server.add_send_trailing = {{"x-server-trailing", "t1"}};
  Ends s({&service}, WithServer({&server}), WithClient({&client}));

  ClientContext ctx;
  ctx.AddMetadata("x-user", "u1");
  EchoRequest req;
  EchoResponse resp;
  absl::Status st =
      internal::BlockingUnaryCall(s.channel.get(), kEchoMetadataMethod, &ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st;
  // The handler saw the user's entry, the client interceptor's and the
  // server interceptor's (3), and sent them back as initial and trailing.
  EXPECT_EQ(resp.text(), "3");
  const Metadata sent = {{"x-client-added", "c1"}, {"x-user", "u1"}};
  const Metadata arrived = {{"x-client-added", "c1"}, {"x-user", "u1"}};
  const Metadata initial = {{"x-client-added", "c1"},
                            {"x-server-added", "s1"},
                            {"x-server-initial", "i1"},
                            {"x-user", "u1"}};
  const Metadata trailing = {{"x-client-added", "c1"},
                             {"x-server-added", "s1"},
                             {"x-server-trailing", "t1"},
                             {"x-user", "u1"}};
  Metadata initial_seen = initial;
  initial_seen.emplace("x-seen-by-client", "yes");
  {
    absl::MutexLock lock(&client.mu);
    ASSERT_EQ(client.send_initial.size(), 1u);
    EXPECT_EQ(client.send_initial[0], sent);
    ASSERT_EQ(client.recv_initial.size(), 1u);
    EXPECT_EQ(client.recv_initial[0], initial);
    ASSERT_EQ(client.recv_trailing.size(), 1u);
    EXPECT_EQ(client.recv_trailing[0], trailing);
  }
  {
    absl::MutexLock lock(&server.mu);
    ASSERT_EQ(server.recv_initial.size(), 1u);
    EXPECT_EQ(server.recv_initial[0], arrived);
    ASSERT_EQ(server.send_initial.size(), 1u);
    EXPECT_EQ(server.send_initial[0], initial);
  }
  EXPECT_EQ(ctx.GetServerInitialMetadata(), initial_seen);
  EXPECT_EQ(ctx.GetServerTrailingMetadata(), trailing);
}

TEST(Interceptor, ChangesStreamMetadataBothWays) {
  StreamService service;  // Chat echoes client metadata as initial and trailing
  ProbeState client("client"), server("server");
  client.add_send_initial = {{"x-client-added", "c1"}};
  server.add_send_initial = {{"x-server-initial", "i1"}};
  server.add_send_trailing = {{"x-server-trailing", "t1"}};
  Ends s({&service}, WithServer({&server}), WithClient({&client}));
  ClientContext ctx;
  ClientReaderWriter<EchoRequest, EchoResponse> stream(s.channel.get(), kChatMethod, &ctx);
  EchoRequest req;
  req.set_text("a");
  ASSERT_TRUE(stream.Write(req));
  EchoResponse resp;
  ASSERT_TRUE(stream.Read(&resp));
  stream.WritesDone();
  absl::Status st = stream.Finish();
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(ctx.GetServerInitialMetadata(),
            (Metadata{{"x-client-added", "c1"}, {"x-server-initial", "i1"}}));
  EXPECT_EQ(ctx.GetServerTrailingMetadata(),
            (Metadata{{"x-client-added", "c1"}, {"x-server-trailing", "t1"}}));
  absl::MutexLock lock(&client.mu);
  ASSERT_EQ(client.recv_initial.size(), 1u);
  EXPECT_EQ(client.recv_initial[0],
            (Metadata{{"x-client-added", "c1"}, {"x-server-initial", "i1"}}));
  ASSERT_EQ(client.recv_trailing.size(), 1u);
  EXPECT_EQ(client.recv_trailing[0],
            (Metadata{{"x-client-added", "c1"}, {"x-server-trailing", "t1"}}));
}

// ---- messages ----------------------------------------------------------------------

// Expected counts of one call, both sides.
struct Expect {
  int requests;
  size_t request_bytes;
  int responses;
  size_t response_bytes;
};

void ExpectMessages(ProbeState* client, ProbeState* server, const Expect& e, RpcType type,
                    const std::string& method) {
  {
    absl::MutexLock lock(&client->mu);
    EXPECT_EQ(client->calls, 1);
    EXPECT_EQ(client->sent, e.requests);
    EXPECT_EQ(client->sent_bytes, e.request_bytes);
    EXPECT_EQ(client->received, e.responses);
    EXPECT_EQ(client->received_bytes, e.response_bytes);
    ASSERT_EQ(client->types.size(), 1u);
    EXPECT_EQ(client->types[0], type);
    EXPECT_EQ(client->methods[0], method);
    ASSERT_EQ(client->statuses.size(), 1u);
    EXPECT_TRUE(client->statuses[0].ok()) << client->statuses[0];
    EXPECT_TRUE(client->times_ordered);
    EXPECT_EQ(client->closes, type == RpcType::UNARY ? 0 : 1);
  }
  ASSERT_TRUE(WaitUntil([server] { return !server->Statuses().empty(); }));
  absl::MutexLock lock(&server->mu);
  EXPECT_EQ(server->calls, 1);
  EXPECT_EQ(server->received, e.requests);
  EXPECT_EQ(server->received_bytes, e.request_bytes);
  EXPECT_EQ(server->sent, e.responses);
  EXPECT_EQ(server->sent_bytes, e.response_bytes);
  ASSERT_EQ(server->types.size(), 1u);
  EXPECT_EQ(server->types[0], type);
  EXPECT_EQ(server->methods[0], method);
  ASSERT_EQ(server->statuses.size(), 1u);
  EXPECT_TRUE(server->statuses[0].ok()) << server->statuses[0];
  EXPECT_TRUE(server->times_ordered);
  ASSERT_EQ(server->peers.size(), 1u);
  EXPECT_EQ(server->peers[0].rfind("127.0.0.1:", 0), 0u) << server->peers[0];
}

EchoRequest Text(const std::string& t) {
  EchoRequest r;
  r.set_text(t);
  return r;
}
EchoRequest Data(const std::string& d) {
  EchoRequest r;
  r.set_data(d);
  return r;
}
EchoResponse Reply(const std::string& text, const std::string& data) {
  EchoResponse r;
  r.set_text(text);
  r.set_data(data);
  return r;
}

TEST(InterceptorMessages, UnaryBlockingAsyncAndReactor) {
  for (int api = 0; api < 3; ++api) {
    SCOPED_TRACE(api);
    EchoService sync;
    CallbackEcho callback;
    ProbeState client("client"), server("server");
    Ends s({api == 2 ? static_cast<rdmarpc::Service*>(&callback) : &sync},
            WithServer({&server}), WithClient({&client}));
    ClientContext ctx;
    const EchoRequest req = Text("hello");
    EchoResponse resp;
    absl::Status st;
    if (api == 0) {
      st = internal::BlockingUnaryCall(s.channel.get(), kEchoMethod, &ctx, req, &resp);
    } else if (api == 1) {
      absl::Notification done;
      internal::AsyncUnaryCall(s.channel.get(), kEchoMethod, &ctx, req, &resp,
                               [&](absl::Status x) {
                                 st = std::move(x);
                                 done.Notify();
                               });
      done.WaitForNotification();
    } else {
      UnaryClient c(s.channel.get(), &ctx, req);
      ASSERT_TRUE(c.done.Wait());
      st = c.done.status;
      resp = c.response;
    }
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(resp.text(), "hello");
    ExpectMessages(&client, &server,
                   Expect{1, req.ByteSizeLong(), 1, Reply("hello", "").ByteSizeLong()},
                   RpcType::UNARY, kEchoMethod);
  }
}

TEST(InterceptorMessages, ClientStreamingSyncAndReactor) {
  for (int api = 0; api < 2; ++api) {
    SCOPED_TRACE(api);
    StreamService sync;
    CallbackStreams callback;
    ProbeState client("client"), server("server");
    Ends s({api == 0 ? static_cast<rdmarpc::Service*>(&sync) : &callback},
            WithServer({&server}), WithClient({&client}));
    ClientContext ctx;
    EchoResponse resp;
    if (api == 0) {
      ClientWriter<EchoRequest> writer(s.channel.get(), kCollectMethod, &ctx, &resp);
      for (int i = 0; i < 3; ++i) ASSERT_TRUE(writer.Write(Data(absl::StrCat("d", i))));
      absl::Status st = writer.Finish();
      ASSERT_TRUE(st.ok()) << st;
    } else {
      CollectClient c(s.channel.get(), &ctx, 3);
      ASSERT_TRUE(c.done.Wait());
      ASSERT_TRUE(c.done.status.ok()) << c.done.status;
      resp = c.response;
    }
    EXPECT_EQ(resp.text(), "3");
    EXPECT_EQ(resp.data(), "d0d1d2");
    ExpectMessages(&client, &server,
                   Expect{3, 3 * Data("d0").ByteSizeLong(), 1, Reply("3", "d0d1d2").ByteSizeLong()},
                   RpcType::CLIENT_STREAMING, kCollectMethod);
  }
}

TEST(InterceptorMessages, ServerStreamingSyncAndReactor) {
  for (int api = 0; api < 2; ++api) {
    SCOPED_TRACE(api);
    StreamService sync;
    CallbackStreams callback;
    ProbeState client("client"), server("server");
    Ends s({api == 0 ? static_cast<rdmarpc::Service*>(&sync) : &callback},
            WithServer({&server}), WithClient({&client}));
    ClientContext ctx;
    EchoRequest req;
    req.set_tag(4);
    req.set_reply_bytes(10);
    std::vector<std::string> texts;
    if (api == 0) {
      ClientReader<EchoResponse> reader(s.channel.get(), kExpandMethod, &ctx, req);
      EchoResponse resp;
      while (reader.Read(&resp)) texts.push_back(resp.text());
      absl::Status st = reader.Finish();
      ASSERT_TRUE(st.ok()) << st;
    } else {
      ExpandClient c(s.channel.get(), &ctx, req, /*hold=*/false);
      ASSERT_TRUE(c.done.Wait());
      ASSERT_TRUE(c.done.status.ok()) << c.done.status;
      texts = c.texts;
    }
    EXPECT_EQ(texts, (std::vector<std::string>{"0", "1", "2", "3"}));
    size_t bytes = 0;
    for (int i = 0; i < 4; ++i) bytes += Reply(absl::StrCat(i), PatternBytes(i, 10)).ByteSizeLong();
    ExpectMessages(&client, &server, Expect{1, req.ByteSizeLong(), 4, bytes},
                   RpcType::SERVER_STREAMING, kExpandMethod);
  }
}

TEST(InterceptorMessages, BidiStreamingSyncAndReactor) {
  for (int api = 0; api < 2; ++api) {
    SCOPED_TRACE(api);
    StreamService sync;
    CallbackStreams callback;
    ProbeState client("client"), server("server");
    Ends s({api == 0 ? static_cast<rdmarpc::Service*>(&sync) : &callback},
            WithServer({&server}), WithClient({&client}));
    ClientContext ctx;
    std::vector<std::string> texts;
    if (api == 0) {
      ClientReaderWriter<EchoRequest, EchoResponse> stream(s.channel.get(), kChatMethod, &ctx);
      for (int i = 0; i < 5; ++i) {
        ASSERT_TRUE(stream.Write(Text(absl::StrCat("m", i))));
        EchoResponse resp;
        ASSERT_TRUE(stream.Read(&resp));
        texts.push_back(resp.text());
      }
      ASSERT_TRUE(stream.WritesDone());
      absl::Status st = stream.Finish();
      ASSERT_TRUE(st.ok()) << st;
    } else {
      ChatClient c(s.channel.get(), &ctx, 5);
      ASSERT_TRUE(c.done.Wait());
      ASSERT_TRUE(c.done.status.ok()) << c.done.status;
      texts = c.texts;
    }
    EXPECT_EQ(texts, (std::vector<std::string>{"m0", "m1", "m2", "m3", "m4"}));
    ExpectMessages(&client, &server,
                   Expect{5, 5 * Text("m0").ByteSizeLong(), 5, 5 * Reply("m0", "").ByteSizeLong()},
                   RpcType::BIDI_STREAMING, kChatMethod);
  }
}

// ---- final status --------------------------------------------------------------------

TEST(Interceptor, ObservesTheFinalStatusOfEveryOutcome) {
  EchoService service;
  StreamService streams;
  ProbeState client("client"), server("server");
  Ends s({&service, &streams}, WithServer({&server}), WithClient({&client}));
  std::vector<absl::Status> returned;

  {  // The handler's error, unary.
    ClientContext ctx;
    EchoResponse resp;
    returned.push_back(
        internal::BlockingUnaryCall(s.channel.get(), kEchoMethod, &ctx, Text("fail"), &resp));
  }
  {  // The handler's error, server streaming.
    ClientContext ctx;
    EchoRequest req = Text("fail");
    req.set_tag(2);
    ClientReader<EchoResponse> reader(s.channel.get(), kExpandMethod, &ctx, req);
    EchoResponse resp;
    while (reader.Read(&resp)) {
    }
    returned.push_back(reader.Finish());
  }
  ASSERT_TRUE(WaitUntil([&] { return server.Statuses().size() == 2; }));
  {  // Deadline exceeded while the handler runs.
    ClientContext ctx;
    ctx.set_timeout(absl::Milliseconds(50));
    EchoRequest req;
    req.set_sleep_ms(300);
    EchoResponse resp;
    returned.push_back(internal::BlockingUnaryCall(s.channel.get(), kEchoMethod, &ctx, req, &resp));
  }
  {  // Cancelled before it was sent (callback API).
    ClientContext ctx;
    ctx.TryCancel();
    EchoResponse resp;
    absl::Notification done;
    internal::AsyncUnaryCall(s.channel.get(), kEchoMethod, &ctx, Text("x"), &resp,
                             [&](absl::Status st) {
                               returned.push_back(std::move(st));
                               done.Notify();
                             });
    done.WaitForNotification();
  }
  {  // Refused before it was sent: bad metadata.
    ClientContext ctx;
    ctx.AddMetadata("Bad-Key", "v");
    EchoResponse resp;
    returned.push_back(
        internal::BlockingUnaryCall(s.channel.get(), kEchoMethod, &ctx, Text("x"), &resp));
  }
  ASSERT_EQ(returned.size(), 5u);
  EXPECT_EQ(returned[0], absl::NotFoundError("asked to fail"));
  EXPECT_EQ(returned[1], absl::OutOfRangeError("ran out"));
  EXPECT_EQ(returned[2].code(), absl::StatusCode::kDeadlineExceeded) << returned[2];
  EXPECT_EQ(returned[3].code(), absl::StatusCode::kCancelled) << returned[3];
  EXPECT_EQ(returned[4].code(), absl::StatusCode::kInternal) << returned[4];
  // The client's interceptor saw exactly what each caller got.
  EXPECT_EQ(client.Statuses(), returned);
  // The server's saw the handlers' statuses; the deadline's handler
  // finished OK after its client had gone (the call was cancelled).
  ASSERT_TRUE(WaitUntil([&] { return server.Statuses().size() == 3; }));
  EXPECT_EQ(server.Statuses(), (std::vector<absl::Status>{absl::NotFoundError("asked to fail"),
                                                          absl::OutOfRangeError("ran out"),
                                                          absl::OkStatus()}));
  absl::MutexLock lock(&server.mu);
  EXPECT_EQ(server.cancelled, (std::vector<bool>{false, false, true}));
  // Calls refused before the server ran them make no server interceptor.
  EXPECT_EQ(server.calls, 3);
}

TEST(Interceptor, ObservesCancelledAndExpiredStreams) {
  StreamService sync;
  CallbackStreams callback;
  ProbeState client("client"), sync_server("sync"), callback_server("callback");
  Ends a({&sync}, WithServer({&sync_server}), WithClient({&client}));
  Ends b({&callback}, WithServer({&callback_server}), WithClient({&client}));
  std::vector<absl::Status> returned;
  {  // A blocking bidi stream the client cancels after one round trip.
    ClientContext ctx;
    ClientReaderWriter<EchoRequest, EchoResponse> stream(a.channel.get(), kChatMethod, &ctx);
    ASSERT_TRUE(stream.Write(Text("m")));
    EchoResponse resp;
    ASSERT_TRUE(stream.Read(&resp));
    ctx.TryCancel();
    returned.push_back(stream.Finish());
  }
  {  // Connects b's channel, so that the next call's deadline runs out on
     // the server, not while connecting.
    ClientContext ctx;
    ExpandClient c(b.channel.get(), &ctx, Text("none"), /*hold=*/false);
    ASSERT_TRUE(c.done.Wait());
    returned.push_back(c.done.status);
  }
  {  // A reactor's server stream whose deadline passes while the server hangs.
    ClientContext ctx;
    ctx.set_timeout(absl::Milliseconds(100));
    ExpandClient c(b.channel.get(), &ctx, Text("hang"), /*hold=*/false);
    ASSERT_TRUE(c.done.Wait());
    returned.push_back(c.done.status);
  }
  ASSERT_EQ(returned.size(), 3u);
  EXPECT_EQ(returned[0].code(), absl::StatusCode::kCancelled) << returned[0];
  EXPECT_EQ(returned[1], absl::OkStatus());
  EXPECT_EQ(returned[2].code(), absl::StatusCode::kDeadlineExceeded) << returned[2];
  EXPECT_EQ(client.Statuses(), returned);
  // Each server's interceptor saw its handler's status, with the call
  // marked cancelled: the client was gone.
  ASSERT_TRUE(WaitUntil([&] { return sync_server.Statuses().size() == 1; }));
  ASSERT_TRUE(WaitUntil([&] { return callback_server.Statuses().size() == 2; }));
  EXPECT_EQ(sync_server.Statuses()[0], absl::OkStatus());
  EXPECT_EQ(callback_server.Statuses(),
            (std::vector<absl::Status>{absl::OkStatus(), absl::CancelledError("cancelled")}));
  absl::MutexLock l1(&sync_server.mu);
  EXPECT_EQ(sync_server.cancelled, std::vector<bool>{true});
  absl::MutexLock l2(&callback_server.mu);
  EXPECT_EQ(callback_server.cancelled, (std::vector<bool>{false, true}));
}

inline constexpr char kInlineCallbackMethod[] = "/rdmarpc.test.InlineCallback/Echo";

// A callback unary method that runs on the worker (run_inline).
class InlineCallbackEcho final : public rdmarpc::Service {
 public:
  InlineCallbackEcho() : Service("rdmarpc.test.InlineCallback") {
    AddMethod(std::make_unique<
              internal::CallbackUnaryMethodHandler<InlineCallbackEcho, EchoRequest, EchoResponse>>(
        kInlineCallbackMethod, this, &InlineCallbackEcho::Echo, /*run_inline=*/true));
  }
  ServerUnaryReactor* Echo(CallbackServerContext* ctx, const EchoRequest* req,
                           EchoResponse* resp) {
    resp->set_text(req->text());
    ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(absl::OkStatus());
    return reactor;
  }
};

TEST(InterceptorMessages, UnaryRunInlineSyncAndCallback) {
  for (int api = 0; api < 2; ++api) {
    SCOPED_TRACE(api);
    CallModelService sync;
    InlineCallbackEcho callback;
    ProbeState client("client"), server("server");
    Ends s({api == 0 ? static_cast<rdmarpc::Service*>(&sync) : &callback}, WithServer({&server}),
           WithClient({&client}));
    const char* method = api == 0 ? kInlineMethod : kInlineCallbackMethod;
    ClientContext ctx;
    const EchoRequest req = Text("hi");
    EchoResponse resp;
    absl::Status st = internal::BlockingUnaryCall(s.channel.get(), method, &ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(resp.text(), "hi");
    ExpectMessages(&client, &server, Expect{1, req.ByteSizeLong(), 1, resp.ByteSizeLong()},
                   RpcType::UNARY, method);
  }
}

// ---- early failure -------------------------------------------------------------------

TEST(Interceptor, ClientFailsACallEarlyAndNothingIsSent) {
  EchoService service;
  StreamService streams;
  ProbeState outer("outer"), failing("failing"), inner("inner"), server("server");
  failing.fail = absl::PermissionDeniedError("no token");
  Ends s({&service, &streams}, WithServer({&server}),
          WithClient({&outer, &failing, &inner}));
  const softrdma::Stats before = softrdma::GetStats();
  std::vector<absl::Status> returned;
  std::vector<std::string> peers;
  {
    ClientContext ctx;
    EchoResponse resp;
    returned.push_back(
        internal::BlockingUnaryCall(s.channel.get(), kEchoMethod, &ctx, Text("x"), &resp));
    peers.push_back(ctx.peer());
  }
  {
    ClientContext ctx;
    EchoResponse resp;
    absl::Notification done;
    internal::AsyncUnaryCall(s.channel.get(), kEchoMethod, &ctx, Text("x"), &resp,
                             [&](absl::Status st) {
                               returned.push_back(std::move(st));
                               done.Notify();
                             });
    done.WaitForNotification();
    peers.push_back(ctx.peer());
  }
  {
    ClientContext ctx;
    UnaryClient c(s.channel.get(), &ctx, Text("x"));
    ASSERT_TRUE(c.done.Wait());
    returned.push_back(c.done.status);
    peers.push_back(ctx.peer());
  }
  {
    ClientContext ctx;
    ClientReaderWriter<EchoRequest, EchoResponse> stream(s.channel.get(), kChatMethod, &ctx);
    EXPECT_FALSE(stream.Write(Text("m")));
    returned.push_back(stream.Finish());
    peers.push_back(ctx.peer());
  }
  {
    ClientContext ctx;
    ChatClient c(s.channel.get(), &ctx, 2);
    ASSERT_TRUE(c.done.Wait());
    returned.push_back(c.done.status);
    peers.push_back(ctx.peer());
  }
  const softrdma::Stats after = softrdma::GetStats();
  EXPECT_EQ(returned, std::vector<absl::Status>(5, absl::PermissionDeniedError("no token")));
  EXPECT_EQ(peers, std::vector<std::string>(5, ""));
  // Nothing went on the wire: the channel never even connected.
  EXPECT_EQ(after.post_send_calls, before.post_send_calls);
  EXPECT_EQ(service.calls(), 0);
  EXPECT_EQ(server.Calls(), 0);
  // The outer interceptor saw the failure; the inner one nothing at all.
  EXPECT_EQ(outer.Statuses(),
            std::vector<absl::Status>(5, absl::PermissionDeniedError("no token")));
  EXPECT_EQ(failing.Statuses(),
            std::vector<absl::Status>(5, absl::PermissionDeniedError("no token")));
  EXPECT_EQ(inner.Calls(), 5);
  EXPECT_EQ(inner.Hooks(), 0);
}

TEST(Interceptor, ServerFailsACallEarlyAndTheHandlerDoesNotRun) {
  for (int api = 0; api < 2; ++api) {
    SCOPED_TRACE(api);
    EchoService sync_echo;
    StreamService sync_streams;
    CallbackEcho callback_echo;
    CallbackStreams callback_streams;
    ProbeState outer("outer"), failing("failing"), inner("inner"), client("client");
    failing.fail = absl::UnauthenticatedError("bad token");
    failing.fail_trailing = {{"x-why", "denied"}};
    std::vector<rdmarpc::Service*> services;
    if (api == 0) {
      services = {&sync_echo, &sync_streams};
    } else {
      services = {&callback_echo, &callback_streams};
    }
    Ends s(services, WithServer({&outer, &failing, &inner}), WithClient({&client}));
    const Metadata why = {{"x-why", "denied"}};
    {  // unary
      ClientContext ctx;
      EchoResponse resp;
      EXPECT_EQ(internal::BlockingUnaryCall(s.channel.get(), kEchoMethod, &ctx, Text("x"), &resp),
                absl::UnauthenticatedError("bad token"));
      EXPECT_EQ(ctx.GetServerTrailingMetadata(), why);
    }
    {  // server streaming
      ClientContext ctx;
      EchoRequest req;
      req.set_tag(3);
      ClientReader<EchoResponse> reader(s.channel.get(), kExpandMethod, &ctx, req);
      EchoResponse resp;
      EXPECT_FALSE(reader.Read(&resp));
      EXPECT_EQ(reader.Finish(), absl::UnauthenticatedError("bad token"));
      EXPECT_EQ(ctx.GetServerTrailingMetadata(), why);
    }
    {  // bidi
      ClientContext ctx;
      ClientReaderWriter<EchoRequest, EchoResponse> stream(s.channel.get(), kChatMethod, &ctx);
      stream.Write(Text("m"));  // may or may not go before the answer
      EchoResponse resp;
      EXPECT_FALSE(stream.Read(&resp));
      EXPECT_EQ(stream.Finish(), absl::UnauthenticatedError("bad token"));
      EXPECT_EQ(ctx.GetServerTrailingMetadata(), why);
    }
    // No handler ran.
    EXPECT_EQ(sync_echo.calls(), 0);
    EXPECT_EQ(sync_streams.expand_started_.load(), 0);
    EXPECT_EQ(callback_echo.returned.load(), 0);
    EXPECT_EQ(callback_streams.counts.started.load(), 0);
    // The outer and failing interceptors saw the status go out; the inner
    // one was made but saw nothing.
    const std::vector<absl::Status> three(3, absl::UnauthenticatedError("bad token"));
    EXPECT_EQ(outer.Statuses(), three);
    EXPECT_EQ(failing.Statuses(), three);
    EXPECT_EQ(inner.Calls(), 3);
    EXPECT_EQ(inner.Hooks(), 0);
    EXPECT_EQ(client.Statuses(), three);
  }
}

// ---- order around the handler ----------------------------------------------------------

inline constexpr char kSequencedMethod[] = "/rdmarpc.test.Sequenced/Echo";

// A unary service whose handler logs "handler".
class SequencedService final : public rdmarpc::Service {
 public:
  explicit SequencedService(EventLog* log) : Service("rdmarpc.test.Sequenced"), log_(log) {
    AddMethod(
        std::make_unique<internal::UnaryMethodHandler<SequencedService, EchoRequest, EchoResponse>>(
            kSequencedMethod, this, &SequencedService::Echo));
  }
  absl::Status Echo(ServerContext*, const EchoRequest& req, EchoResponse* resp) {
    log_->Add("handler");
    handler_thread = std::this_thread::get_id();
    resp->set_text(req.text());
    return absl::OkStatus();
  }

  std::thread::id handler_thread;

 private:
  EventLog* log_;
};

TEST(Interceptor, ChainsOfThreeRunInOrderAroundTheHandler) {
  EventLog log;
  SequencedService service(&log);
  ProbeState a("A", &log), b("B", &log), c("C", &log);
  ProbeState x("X", &log), y("Y", &log), z("Z", &log);
  Ends s({&service}, WithServer({&x, &y, &z}), WithClient({&a, &b, &c}));
  ClientContext ctx;
  EchoResponse resp;
  absl::Status st =
      internal::BlockingUnaryCall(s.channel.get(), kSequencedMethod, &ctx, Text("hi"), &resp);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(log.Take(), (std::vector<std::string>{
                            "A:PRE_SEND_INITIAL_METADATA",  "B:PRE_SEND_INITIAL_METADATA",
                            "C:PRE_SEND_INITIAL_METADATA",  "A:PRE_SEND_MESSAGE",
                            "B:PRE_SEND_MESSAGE",           "C:PRE_SEND_MESSAGE",
                            "X:POST_RECV_INITIAL_METADATA", "Y:POST_RECV_INITIAL_METADATA",
                            "Z:POST_RECV_INITIAL_METADATA", "X:POST_RECV_MESSAGE",
                            "Y:POST_RECV_MESSAGE",          "Z:POST_RECV_MESSAGE",
                            "handler",                      "Z:PRE_SEND_INITIAL_METADATA",
                            "Y:PRE_SEND_INITIAL_METADATA",  "X:PRE_SEND_INITIAL_METADATA",
                            "Z:PRE_SEND_MESSAGE",           "Y:PRE_SEND_MESSAGE",
                            "X:PRE_SEND_MESSAGE",           "Z:PRE_SEND_STATUS",
                            "Y:PRE_SEND_STATUS",            "X:PRE_SEND_STATUS",
                            "C:POST_RECV_INITIAL_METADATA", "B:POST_RECV_INITIAL_METADATA",
                            "A:POST_RECV_INITIAL_METADATA", "C:POST_RECV_MESSAGE",
                            "B:POST_RECV_MESSAGE",          "A:POST_RECV_MESSAGE",
                            "C:POST_RECV_STATUS",           "B:POST_RECV_STATUS",
                            "A:POST_RECV_STATUS",
                        }));
  // The server's hooks around a synchronous handler run on its thread.
  absl::MutexLock lock(&x.mu);
  EXPECT_EQ(x.threads, (std::vector<std::thread::id>(5, service.handler_thread)));
}

// A factory that returns nullptr stays out of the call; with no
// interceptor made, the call runs as without any.
class AbsentFactory final : public ClientInterceptorFactoryInterface,
                            public ServerInterceptorFactoryInterface {
 public:
  Interceptor* CreateClientInterceptor(ClientRpcInfo*) override {
    made.fetch_add(1);
    return nullptr;
  }
  Interceptor* CreateServerInterceptor(ServerRpcInfo*) override {
    made.fetch_add(1);
    return nullptr;
  }
  std::atomic<int> made{0};
};

TEST(Interceptor, FactoryReturningNullptrStaysOut) {
  EchoService service;
  auto factory = std::make_shared<AbsentFactory>();
  ServerOptions so;
  so.interceptor_creators.push_back(factory);
  ChannelOptions co;
  co.interceptor_creators.push_back(factory);
  Ends s({&service}, so, co);
  ClientContext ctx;
  EchoResponse resp;
  EXPECT_TRUE(
      internal::BlockingUnaryCall(s.channel.get(), kEchoMethod, &ctx, Text("x"), &resp).ok());
  EXPECT_EQ(resp.text(), "x");
  EXPECT_EQ(factory->made.load(), 2);
}

// ---- cost ---------------------------------------------------------------------------------

// An interceptor that does nothing: the runtime's own cost.
class Nothing final : public Interceptor {
 public:
  void Intercept(InterceptorBatchMethods*) override {}
};
class NothingFactory final : public ClientInterceptorFactoryInterface,
                             public ServerInterceptorFactoryInterface {
 public:
  Interceptor* CreateClientInterceptor(ClientRpcInfo*) override { return new Nothing; }
  Interceptor* CreateServerInterceptor(ServerRpcInfo*) override { return new Nothing; }
};

// Interceptors cost CPU, never verbs: an intercepted small blocking call
// posts exactly what rpc_hotpath_test's budget allows a plain one.
TEST(InterceptorCost, InterceptedCallsKeepTheUnaryVerbsBudget) {
  auto factory = std::make_shared<NothingFactory>();
  ServerOptions so;
  so.interceptor_creators = {factory, factory};
  ChannelOptions co;
  co.interceptor_creators = {factory, factory};
  EchoService service;
  Ends s({&service}, so, co);
  EchoRequest req;
  req.set_text(std::string(32, 'p'));
  auto loop = [&](int calls) {
    int failures = 0;
    for (int i = 0; i < calls; ++i) {
      ClientContext ctx;
      EchoResponse resp;
      absl::Status st = internal::BlockingUnaryCall(s.channel.get(), kEchoMethod, &ctx, req, &resp);
      if (!st.ok() || resp.text() != req.text()) ++failures;
    }
    return failures;
  };
  ASSERT_EQ(loop(200), 0);
  softrdma::ResetStats();
  internal::ResetTransportStats();
  constexpr uint64_t kCalls = 800;  // a multiple of the re-post batch (16)
  ASSERT_EQ(loop(kCalls), 0);
  const softrdma::Stats verbs = softrdma::GetStats();
  const internal::TransportStats transport = internal::GetTransportStats();
  EXPECT_EQ(verbs.send_with_imm, 2 * kCalls);
  EXPECT_EQ(verbs.post_send_calls, 2 * kCalls);
  EXPECT_EQ(transport.send_wrs, 2 * kCalls);
  EXPECT_EQ(transport.inline_send_wrs, 2 * kCalls);
  EXPECT_EQ(verbs.reg_mr, 0u);
  EXPECT_EQ(transport.payload_bytes_copied, 0u);
  EXPECT_EQ(verbs.rnr_retries, 0u);
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
