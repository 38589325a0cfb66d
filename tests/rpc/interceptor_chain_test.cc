// InterceptorChain on its own (internal API): which interceptors run at
// each hook point and in which order, what Fail does where, and that every
// interceptor made is deleted with the chain.
#include "runtime/rpc/interceptor_chain.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/server_context.h"
#include "rpc_test.pb.h"

namespace rdmarpc {
namespace internal {
namespace {

using experimental::InterceptionHookPoints;
using experimental::Interceptor;
using experimental::InterceptorBatchMethods;

struct Shared {
  std::vector<std::string> log;
  int alive = 0;
};

// Logs "<name><hook number>"; fails with `fail` at hook `fail_at`.
class Logger final : public Interceptor {
 public:
  Logger(Shared* s, std::string name, InterceptionHookPoints fail_at, absl::Status fail)
      : s_(s), name_(std::move(name)), fail_at_(fail_at), fail_(std::move(fail)) {
    ++s_->alive;
  }
  ~Logger() override { --s_->alive; }
  void Intercept(InterceptorBatchMethods* m) override {
    s_->log.push_back(absl::StrCat(name_, static_cast<int>(m->hook_point())));
    if (m->QueryInterceptionHookPoint(fail_at_)) m->Fail(fail_);
  }

 private:
  Shared* s_;
  std::string name_;
  InterceptionHookPoints fail_at_;
  absl::Status fail_;
};

class LoggerFactory final : public experimental::ClientInterceptorFactoryInterface,
                            public experimental::ServerInterceptorFactoryInterface {
 public:
  LoggerFactory(Shared* s, std::string name,
                InterceptionHookPoints fail_at = InterceptionHookPoints::NUM_INTERCEPTION_HOOKS,
                absl::Status fail = absl::OkStatus())
      : s_(s), name_(std::move(name)), fail_at_(fail_at), fail_(std::move(fail)) {}
  Interceptor* CreateClientInterceptor(experimental::ClientRpcInfo* info) override {
    EXPECT_EQ(info->method(), "/p.S/M");
    EXPECT_EQ(info->type(), experimental::RpcType::BIDI_STREAMING);
    return new Logger(s_, name_, fail_at_, fail_);
  }
  Interceptor* CreateServerInterceptor(experimental::ServerRpcInfo* info) override {
    EXPECT_EQ(info->type(), experimental::RpcType::CLIENT_STREAMING);
    return new Logger(s_, name_, fail_at_, fail_);
  }

 private:
  Shared* s_;
  std::string name_;
  InterceptionHookPoints fail_at_;
  absl::Status fail_;
};

constexpr int kPreSendInitial = static_cast<int>(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA);
constexpr int kPreSendMessage = static_cast<int>(InterceptionHookPoints::PRE_SEND_MESSAGE);
constexpr int kPreSendStatus = static_cast<int>(InterceptionHookPoints::PRE_SEND_STATUS);
constexpr int kPostRecvInitial =
    static_cast<int>(InterceptionHookPoints::POST_RECV_INITIAL_METADATA);
constexpr int kPostRecvStatus = static_cast<int>(InterceptionHookPoints::POST_RECV_STATUS);

std::unique_ptr<InterceptorChain> Client(const InterceptorChain::ClientFactories& f,
                                         ClientContext* ctx) {
  return InterceptorChain::ForClient(f, nullptr, "/p.S/M", RpcKind::kBidiStreaming, ctx);
}

TEST(InterceptorChain, ClientSendsInOrderReceivesInReverseAndStatusOnce) {
  Shared s;
  ClientContext ctx;
  auto chain = Client(
                      {std::make_shared<LoggerFactory>(&s, "a"),
                       std::make_shared<LoggerFactory>(&s, "b")},
                      &ctx);
  ASSERT_NE(chain, nullptr);
  EXPECT_EQ(s.alive, 2);
  InterceptorChain::Metadata md;
  EXPECT_TRUE(chain->ClientSendInitialMetadata(&md).ok());
  test::EchoRequest req;
  chain->ClientSendMessage(req, 0);
  chain->ClientRecvInitialMetadata(&md);
  chain->ClientRecvInitialMetadata(&md);  // once only
  absl::Status status = absl::OkStatus();
  chain->ClientRecvStatus(&status, &md);
  chain->ClientRecvStatus(&status, &md);  // once only
  EXPECT_EQ(s.log, (std::vector<std::string>{
                       absl::StrCat("a", kPreSendInitial), absl::StrCat("b", kPreSendInitial),
                       absl::StrCat("a", kPreSendMessage), absl::StrCat("b", kPreSendMessage),
                       absl::StrCat("b", kPostRecvInitial), absl::StrCat("a", kPostRecvInitial),
                       absl::StrCat("b", kPostRecvStatus), absl::StrCat("a", kPostRecvStatus)}));
  EXPECT_LE(chain->client_info().start_time(), chain->client_info().end_time());
  chain.reset();
  EXPECT_EQ(s.alive, 0);
}

TEST(InterceptorChain, FailAtTheFirstHookStopsThereAndLaterOnesSeeNothing) {
  Shared s;
  ClientContext ctx;
  auto chain = Client(
                      {std::make_shared<LoggerFactory>(&s, "a"),
                       std::make_shared<LoggerFactory>(
                           &s, "b", InterceptionHookPoints::PRE_SEND_INITIAL_METADATA,
                           absl::PermissionDeniedError("no")),
                       std::make_shared<LoggerFactory>(&s, "c")},
                      &ctx);
  InterceptorChain::Metadata md;
  EXPECT_EQ(chain->ClientSendInitialMetadata(&md), absl::PermissionDeniedError("no"));
  absl::Status status = absl::PermissionDeniedError("no");
  chain->ClientRecvStatus(&status, &md);
  EXPECT_EQ(s.log, (std::vector<std::string>{
                       absl::StrCat("a", kPreSendInitial), absl::StrCat("b", kPreSendInitial),
                       absl::StrCat("b", kPostRecvStatus), absl::StrCat("a", kPostRecvStatus)}));
  chain.reset();
  EXPECT_EQ(s.alive, 0);  // "c" was made, and deleted unused
}

TEST(InterceptorChain, FailElsewhereIsIgnoredAndTheRestStillRun) {
  Shared s;
  ClientContext ctx;
  auto chain = Client(
                      {std::make_shared<LoggerFactory>(&s, "a",
                                                       InterceptionHookPoints::POST_RECV_STATUS,
                                                       absl::AbortedError("late")),
                       std::make_shared<LoggerFactory>(&s, "b",
                                                       InterceptionHookPoints::PRE_SEND_MESSAGE,
                                                       absl::AbortedError("late"))},
                      &ctx);
  test::EchoRequest req;
  chain->ClientSendMessage(req, 0);
  absl::Status status = absl::OkStatus();
  InterceptorChain::Metadata md;
  chain->ClientRecvStatus(&status, &md);
  EXPECT_TRUE(status.ok()) << status;  // Fail does not change what the caller gets
  EXPECT_EQ(s.log, (std::vector<std::string>{
                       absl::StrCat("a", kPreSendMessage), absl::StrCat("b", kPreSendMessage),
                       absl::StrCat("b", kPostRecvStatus), absl::StrCat("a", kPostRecvStatus)}));
}

TEST(InterceptorChain, FailWithOkBecomesInternal) {
  Shared s;
  ClientContext ctx;
  auto chain = Client(
                      {std::make_shared<LoggerFactory>(
                          &s, "a", InterceptionHookPoints::PRE_SEND_INITIAL_METADATA,
                          absl::OkStatus())},
                      &ctx);
  InterceptorChain::Metadata md;
  EXPECT_EQ(chain->ClientSendInitialMetadata(&md).code(), absl::StatusCode::kInternal);
}

TEST(InterceptorChain, ServerReceivesInOrderSendsInReverse) {
  Shared s;
  ServerContext ctx;
  auto chain = InterceptorChain::ForServer(
      {std::make_shared<LoggerFactory>(&s, "x"), std::make_shared<LoggerFactory>(&s, "y")},
      RpcKind::kClientStreaming, &ctx);
  ASSERT_NE(chain, nullptr);
  InterceptorChain::Metadata md;
  EXPECT_TRUE(chain->ServerRecvInitialMetadata(&md).ok());
  chain->ServerSendInitialMetadata(&md);
  chain->ServerSendInitialMetadata(&md);  // once only
  absl::Status status = absl::OkStatus();
  chain->ServerSendStatus(&status, &md);
  EXPECT_EQ(s.log, (std::vector<std::string>{
                       absl::StrCat("x", kPostRecvInitial), absl::StrCat("y", kPostRecvInitial),
                       absl::StrCat("y", kPreSendInitial), absl::StrCat("x", kPreSendInitial),
                       absl::StrCat("y", kPreSendStatus), absl::StrCat("x", kPreSendStatus)}));
}

class NoneFactory final : public experimental::ClientInterceptorFactoryInterface {
 public:
  Interceptor* CreateClientInterceptor(experimental::ClientRpcInfo*) override { return nullptr; }
};

TEST(InterceptorChain, NoInterceptorMadeMeansNoChain) {
  ClientContext ctx;
  EXPECT_EQ(InterceptorChain::ForClient({std::make_shared<NoneFactory>()}, nullptr, "/p.S/M",
                                        RpcKind::kUnary, &ctx),
            nullptr);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
