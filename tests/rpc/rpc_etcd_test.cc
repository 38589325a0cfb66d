// rpc_etcd_test.cc: discovery through a real etcd (Debian's etcd-server,
// started by the test on 127.0.0.1): servers register under a prefix with a
// lease, channels with an etcd:// target follow the registrations, and three
// servers restarted one at a time under 8 calling threads lose no call.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/rpc/etcd_client.h"
#include "tests/rpc/test_service.h"

extern char** environ;

namespace rdmarpc {
namespace test {
namespace {

using internal::EtcdClient;
using internal::EtcdTarget;
using internal::ParseEtcdTarget;

TEST(EtcdTarget, ParsesEndpointsAndPrefix) {
  absl::StatusOr<EtcdTarget> t = ParseEtcdTarget("etcd://127.0.0.1:2379,[::1]:2380/services/echo/");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->endpoints, (std::vector<std::string>{"127.0.0.1:2379", "[::1]:2380"}));
  EXPECT_EQ(t->prefix, "services/echo");
  for (const char* bad : {"etcd:/x", "etcd://127.0.0.1:2379", "etcd://127.0.0.1:2379/",
                          "etcd://127.0.0.1/p", "etcd://::1:2379/p"}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<EtcdTarget> b = ParseEtcdTarget(bad);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(CreateChannel(bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
  ServerOptions so;
  so.register_target = "etcd://127.0.0.1:1/p";
  Server wildcard(so);
  absl::Status s = wildcard.Start("0.0.0.0:0");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "set ServerOptions::register_address")) << s;
}

TEST(EtcdRegistration, StartFailsUnavailableWhenEtcdDoesNotAnswerAndLeavesNothingRunning) {
  ServerOptions so;
  so.register_target = absl::StrCat("etcd://127.0.0.1:", 1, "/p");  // nothing on port 1
  EchoService service;
  Server server(so);
  ASSERT_TRUE(server.AddService(&service).ok());
  absl::Status s = server.Start("127.0.0.1:0");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "registering 127.0.0.1:")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "etcd://127.0.0.1:1/p")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "127.0.0.1:1: could not connect")) << s;
  // The server it had started is stopped: Wait returns, nobody listens.
  server.Wait();
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()));
  ASSERT_TRUE(ch.ok()) << ch.status();
  EchoRequest req;
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(5));
  EXPECT_EQ(Echo(ch->get(), &ctx, req, &resp).code(), absl::StatusCode::kUnavailable);
}

int FreeTcpPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// One etcd member on 127.0.0.1, its data in a fresh directory.
class Etcd {
 public:
  ~Etcd() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  static std::string Binary() { return access("/usr/bin/etcd", X_OK) == 0 ? "/usr/bin/etcd" : ""; }
  bool Start() {
    char dir_template[] = "/tmp/rdmarpc-etcd.XXXXXX";
    dir_ = mkdtemp(dir_template);
    client_port_ = FreeTcpPort();
    const int peer_port = FreeTcpPort();
    const std::string client = absl::StrCat("http://127.0.0.1:", client_port_);
    const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port);
    std::vector<std::string> args = {Binary(),
                                     "--name=rdmarpc-test",
                                     absl::StrCat("--data-dir=", dir_, "/data"),
                                     absl::StrCat("--listen-client-urls=", client),
                                     absl::StrCat("--advertise-client-urls=", client),
                                     absl::StrCat("--listen-peer-urls=", peer),
                                     absl::StrCat("--initial-advertise-peer-urls=", peer),
                                     absl::StrCat("--initial-cluster=rdmarpc-test=", peer),
                                     "--logger=zap",
                                     "--log-level=error",
                                     absl::StrCat("--log-outputs=", dir_, "/log")};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, args[0].c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
      pid_ = -1;
      return false;
    }
    EtcdClient probe({endpoint()}, absl::Seconds(1));
    const absl::Time until = absl::Now() + absl::Seconds(30);
    while (absl::Now() < until) {
      if (probe.GetPrefix("x").ok()) return true;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }
  std::string endpoint() const { return absl::StrCat("127.0.0.1:", client_port_); }
  std::string Target(const std::string& prefix) const {
    return absl::StrCat("etcd://", endpoint(), "/", prefix);
  }
  // The addresses registered under `prefix`.
  std::vector<std::string> Registered(const std::string& prefix) const {
    EtcdClient c({endpoint()}, absl::Seconds(2));
    std::vector<std::string> out;
    absl::StatusOr<EtcdClient::Range> r = c.GetPrefix(prefix + "/");
    if (!r.ok()) return {"error: " + std::string(r.status().message())};
    for (const auto& kv : r->kvs) out.push_back(kv.value);
    return out;
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  int client_port_ = -1;
};

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Etcd::Binary().empty()) {
      // scripts/test.sh installs it and sets RDMARPC_REQUIRE_TEST_TOOLS.
      if (std::getenv("RDMARPC_REQUIRE_TEST_TOOLS") != nullptr) FAIL() << "etcd is missing";
      GTEST_SKIP() << "etcd is not installed (scripts/install-deps.sh installs etcd-server)";
    }
    ASSERT_TRUE(etcd_.Start()) << "etcd did not start";
  }
  Etcd etcd_;
};

// An echo server registered under a prefix; restartable on its port.
struct Registered {
  void Start(const std::string& target, int port = 0) {
    ServerOptions so;
    so.register_target = target;
    so.register_ttl = absl::Seconds(5);
    service = std::make_unique<EchoService>();
    server = std::make_unique<Server>(so);
    ASSERT_TRUE(server->AddService(service.get()).ok());
    absl::Status s = server->Start(absl::StrCat("127.0.0.1:", port));
    ASSERT_TRUE(s.ok()) << s;
    started_at = absl::Now();
    this->port = server->port();
  }
  void Stop() {
    server->Shutdown(absl::Seconds(5));
    server->Wait();
    served += service->calls();
    server.reset();
    service.reset();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port); }
  std::unique_ptr<EchoService> service;
  std::unique_ptr<Server> server;
  absl::Time started_at;
  int port = 0;
  int served = 0;
};

TEST_F(EtcdTest, AServerIsListedWhileItRunsAndChannelsFindIt) {
  Registered a;
  a.Start(etcd_.Target("svc"));
  EXPECT_EQ(etcd_.Registered("svc"), std::vector<std::string>{a.address()});
  auto ch = CreateChannel(etcd_.Target("svc"));
  ASSERT_TRUE(ch.ok()) << ch.status();
  for (int i = 0; i < 10; ++i) {
    EchoRequest req;
    req.set_text("e");
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(10));
    absl::Status s = Echo(ch->get(), &ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(ctx.peer(), a.address());
  }
  EXPECT_EQ(a.service->calls(), 10);
  // Shutdown revokes the lease before it drains: the key is gone as it returns.
  a.Stop();
  EXPECT_TRUE(etcd_.Registered("svc").empty());
}

TEST_F(EtcdTest, RollingRestartOfThreeRegisteredServersLosesNoCall) {
  const std::string target = etcd_.Target("echo");
  std::vector<Registered> servers(3);
  for (Registered& r : servers) r.Start(target);
  ASSERT_EQ(etcd_.Registered("echo").size(), 3u);
  auto ch = CreateChannel(target);
  ASSERT_TRUE(ch.ok()) << ch.status();

  constexpr int kCalls = 20000;
  std::atomic<int> issued{0};
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};
  absl::Mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&, t] {
      for (int i = issued.fetch_add(1); i < kCalls; i = issued.fetch_add(1)) {
        EchoRequest req;
        req.set_text(absl::StrCat(t, "/", i));
        EchoResponse resp;
        ClientContext ctx;
        ctx.set_timeout(absl::Seconds(10));
        absl::Status s = Echo(ch->get(), &ctx, req, &resp);
        if (s.ok() && resp.text() != req.text()) s = absl::DataLossError(resp.text());
        if (s.ok()) {
          ok.fetch_add(1);
        } else {
          failed.fetch_add(1);
          absl::MutexLock lock(&mu);
          if (failures.size() < 10) failures.push_back(s.ToString());
        }
      }
    });
  }
  std::vector<absl::Duration> first_call_after;
  for (Registered& r : servers) {
    while (issued.load() < kCalls / 5) absl::SleepFor(absl::Milliseconds(1));
    const int port = r.port;
    r.Stop();  // SIGTERM's path: deregister, drain, stop
    r.Start(target, port);
    while (r.service->calls() == 0 && absl::Now() - r.started_at < absl::Seconds(10) &&
           issued.load() < kCalls) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    first_call_after.push_back(absl::Now() - r.started_at);
    const int at = issued.load();
    while (issued.load() < std::min(kCalls, at + kCalls / 5)) absl::SleepFor(absl::Milliseconds(1));
  }
  for (std::thread& t : callers) t.join();

  absl::MutexLock lock(&mu);
  EXPECT_EQ(failed.load(), 0) << absl::StrJoin(failures, "\n");
  EXPECT_EQ(ok.load(), kCalls);
  int served = 0;
  for (size_t i = 0; i < servers.size(); ++i) {
    Registered& r = servers[i];
    // Each instance, before and after its restart, got a share.
    EXPECT_GT(r.served, kCalls / 20) << i;
    EXPECT_GT(r.service->calls(), 0) << i;
    served += r.served + r.service->calls();
    // The restarted server got calls within 1 s of registering.
    EXPECT_LT(first_call_after[i], absl::Seconds(1)) << i;
  }
  EXPECT_EQ(served, kCalls);
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
