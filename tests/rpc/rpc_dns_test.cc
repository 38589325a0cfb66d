// rpc_dns_test.cc: the dns: resolver. Targets parse as gRPC's naming doc
// has them; against a real DNS server (Debian's dnsmasq, started here on
// 127.0.0.1 with its own hosts file) a channel follows addresses being added
// and removed, resolves AAAA records, and fails UNAVAILABLE for a name that
// does not exist.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/rpc/dns_resolver.h"
#include "tests/rpc/test_service.h"

extern char** environ;

namespace rdmarpc {
namespace test {
namespace {

using internal::DnsTarget;
using internal::ParseDnsTarget;

TEST(DnsTarget, ParsesEachForm) {
  absl::StatusOr<DnsTarget> t = ParseDnsTarget("dns:svc.example:7000");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->authority, "");
  EXPECT_EQ(t->name, "svc.example");
  EXPECT_EQ(t->port, 7000);
  t = ParseDnsTarget("dns:///svc.example:7000");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->authority, "");
  EXPECT_EQ(t->name, "svc.example");
  t = ParseDnsTarget("dns://10.0.0.2/svc.example:7000");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->authority, "10.0.0.2:53");
  t = ParseDnsTarget("dns://127.0.0.1:5353/a:1");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->authority, "127.0.0.1:5353");
  EXPECT_EQ(t->name, "a");
  EXPECT_EQ(t->port, 1);
  t = ParseDnsTarget("dns://[::1]:5353/[::1]:80");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->authority, "[::1]:5353");
  EXPECT_EQ(t->name, "::1");
  EXPECT_EQ(t->port, 80);
}

TEST(DnsTarget, RefusesMalformedTargetsNamingThePart) {
  struct Case {
    const char* target;
    const char* message;
  };
  for (const Case& c : {
           Case{"dns:svc.example", "name \"svc.example\" has no :PORT"},
           Case{"dns:svc.example:0", "port \"0\" in \"svc.example:0\" is not 1..65535"},
           Case{"dns:svc.example:http", "port \"http\" in \"svc.example:http\" is not 1..65535"},
           Case{"dns://10.0.0.2", "no '/' after the authority"},
           Case{"dns://dns.example/svc:1",
                "DNS server \"dns.example\" in \"dns://dns.example/svc:1\" is not a numeric "
                "address"},
           Case{"dns://10.0.0.2:99999/svc:1", "port \"99999\" in \"10.0.0.2:99999\""},
           Case{"dns::1", "names no host"},
           Case{"dns:::1:80", "an IPv6 address takes brackets"},
       }) {
    SCOPED_TRACE(c.target);
    absl::StatusOr<DnsTarget> t = ParseDnsTarget(c.target);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(t.status().message(), c.message)) << t.status();
    // CreateChannel returns the same.
    auto ch = CreateChannel(c.target);
    EXPECT_EQ(ch.status(), t.status());
  }
}

// A port free for both UDP and TCP on 127.0.0.1 (dnsmasq serves both).
int FreeDnsPort() {
  for (int attempt = 0; attempt < 20; ++attempt) {
    int udp = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(udp, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        getsockname(udp, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      close(udp);
      continue;
    }
    int tcp = socket(AF_INET, SOCK_STREAM, 0);
    const bool ok = bind(tcp, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(tcp);
    close(udp);
    if (ok) return ntohs(a.sin_port);
  }
  return -1;
}

// dnsmasq on 127.0.0.1:port() answering from one hosts file only.
class Dnsmasq {
 public:
  Dnsmasq() {
    char dir_template[] = "/tmp/rdmarpc-dns.XXXXXX";
    dir_ = mkdtemp(dir_template);
    // dnsmasq started as root reads the file as "nobody" after SIGHUP.
    chmod(dir_.c_str(), 0755);
    hosts_ = dir_ + "/hosts";
    WriteHosts("");
  }
  ~Dnsmasq() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    unlink(hosts_.c_str());
    unlink((dir_ + "/log").c_str());
    rmdir(dir_.c_str());
  }
  static std::string Binary() {
    for (const char* p : {"/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"}) {
      if (access(p, X_OK) == 0) return p;
    }
    return "";
  }
  // Starts it with `hosts` as its hosts file: read before it answers, so
  // the first lookups see it (a SIGHUP reload is asynchronous).
  bool Start(const std::string& hosts) {
    WriteHosts(hosts);
    port_ = FreeDnsPort();
    if (port_ < 0) return false;
    const std::string bin = Binary();
    std::vector<std::string> args = {
        bin, "--keep-in-foreground", "--conf-file=/dev/null", absl::StrCat("--port=", port_),
        "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts",
        "--no-negcache",
        // Names under it not in the hosts file
        // do not exist (NXDOMAIN).
        "--local=/rdmarpc.test/", absl::StrCat("--addn-hosts=", hosts_),
        "--pid-file=", absl::StrCat("--log-facility=", dir_, "/log")};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, bin.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
      pid_ = -1;
      return false;
    }
    // Listening once its port is taken.
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (absl::Now() < until) {
      int udp = socket(AF_INET, SOCK_DGRAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(port_));
      const bool taken = bind(udp, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0;
      close(udp);
      if (taken) return true;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }
  // Replaces the hosts file and makes dnsmasq read it again, some time
  // after this returns.
  void SetHosts(const std::string& text) {
    WriteHosts(text);
    if (pid_ > 0) kill(pid_, SIGHUP);
  }
  int port() const { return port_; }

 private:
  void WriteHosts(const std::string& text) {
    const std::string tmp = hosts_ + ".new";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << text;
    }
    chmod(tmp.c_str(), 0644);
    rename(tmp.c_str(), hosts_.c_str());
  }
  std::string dir_;
  std::string hosts_;
  pid_t pid_ = -1;
  int port_ = -1;
};

absl::Status Call(Channel* channel, std::string* peer = nullptr) {
  EchoRequest req;
  req.set_text("dns");
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(5));
  absl::Status s = Echo(channel, &ctx, req, &resp);
  if (peer != nullptr) *peer = ctx.peer();
  return s;
}

struct EchoServer {
  explicit EchoServer(const std::string& listen) {
    EXPECT_TRUE(server.AddService(&service).ok());
    status = server.Start(listen);
  }
  EchoService service;
  Server server;
  absl::Status status;
};

class DnsResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Dnsmasq::Binary().empty()) {
      // scripts/test.sh installs it and sets RDMARPC_REQUIRE_TEST_TOOLS.
      if (std::getenv("RDMARPC_REQUIRE_TEST_TOOLS") != nullptr) FAIL() << "dnsmasq is missing";
      GTEST_SKIP() << "dnsmasq is not installed (scripts/install-deps.sh installs dnsmasq-base)";
    }
  }
  void StartDns(const std::string& hosts) {
    ASSERT_TRUE(dns_.Start(hosts)) << "dnsmasq did not start";
  }
  std::string Target(const std::string& name, int port) const {
    return absl::StrCat("dns://127.0.0.1:", dns_.port(), "/", name, ":", port);
  }
  Dnsmasq dns_;
};

TEST_F(DnsResolverTest, TheChannelFollowsAddressesAddedAndRemoved) {
  EchoServer a("127.0.0.1:0");
  ASSERT_TRUE(a.status.ok()) << a.status;
  const int port = a.server.port();
  EchoServer b(absl::StrCat("127.0.0.2:", port));
  ASSERT_TRUE(b.status.ok()) << b.status;
  ASSERT_NO_FATAL_FAILURE(StartDns("127.0.0.1 svc.rdmarpc.test\n"));
  ChannelOptions options;
  options.resolver_refresh_interval = absl::Milliseconds(100);
  auto ch = CreateChannel(Target("svc.rdmarpc.test", port), options);
  ASSERT_TRUE(ch.ok()) << ch.status();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Call(ch->get()).ok()) << i;
  EXPECT_EQ(a.service.calls(), 20);
  EXPECT_EQ(b.service.calls(), 0);

  // b's address joins: b gets calls within a few refreshes; no call fails.
  dns_.SetHosts("127.0.0.1 svc.rdmarpc.test\n127.0.0.2 svc.rdmarpc.test\n");
  absl::Time until = absl::Now() + absl::Seconds(10);
  while (b.service.calls() == 0 && absl::Now() < until) ASSERT_TRUE(Call(ch->get()).ok());
  ASSERT_GT(b.service.calls(), 0) << "the channel never sent a call to the added address";
  int a_before = a.service.calls();
  int b_before = b.service.calls();
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(Call(ch->get()).ok()) << i;
  EXPECT_EQ(a.service.calls() - a_before, 20);
  EXPECT_EQ(b.service.calls() - b_before, 20);

  // a's address leaves: once the channel saw it, every call goes to b.
  dns_.SetHosts("127.0.0.2 svc.rdmarpc.test\n");
  until = absl::Now() + absl::Seconds(10);
  int in_a_row = 0;
  while (in_a_row < 20 && absl::Now() < until) {
    std::string peer;
    ASSERT_TRUE(Call(ch->get(), &peer).ok());
    in_a_row = peer == absl::StrCat("127.0.0.2:", port) ? in_a_row + 1 : 0;
  }
  ASSERT_EQ(in_a_row, 20) << "calls still reach the removed address";
  a_before = a.service.calls();
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(Call(ch->get()).ok()) << i;
  EXPECT_EQ(a.service.calls(), a_before);
}

TEST_F(DnsResolverTest, ANameWithAAndAaaaRecordsReachesBothFamilies) {
  EchoServer v4("127.0.0.1:0");
  ASSERT_TRUE(v4.status.ok()) << v4.status;
  const int port = v4.server.port();
  EchoServer v6(absl::StrCat("[::1]:", port));
  ASSERT_TRUE(v6.status.ok()) << v6.status;
  ASSERT_NO_FATAL_FAILURE(StartDns("127.0.0.1 both.rdmarpc.test\n::1 both.rdmarpc.test\n"));
  auto ch = CreateChannel(Target("both.rdmarpc.test", port));
  ASSERT_TRUE(ch.ok()) << ch.status();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Call(ch->get()).ok()) << i;
  EXPECT_EQ(v4.service.calls(), 10);
  EXPECT_EQ(v6.service.calls(), 10);
}

TEST_F(DnsResolverTest, AnUnknownNameFailsUnavailableNamingIt) {
  ASSERT_NO_FATAL_FAILURE(StartDns("127.0.0.1 known.rdmarpc.test\n"));
  auto ch = CreateChannel(Target("unknown.rdmarpc.test", 7000));
  ASSERT_TRUE(ch.ok()) << ch.status();
  absl::Status s = Call(ch->get());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "\"unknown.rdmarpc.test\"")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("127.0.0.1:", dns_.port()))) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "Domain name not found")) << s;
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
