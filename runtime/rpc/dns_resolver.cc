// dns_resolver.cc: see dns_resolver.h.
#include "runtime/rpc/dns_resolver.h"

#include <ares.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "runtime/rpc/address.h"
#include "runtime/transport/connection_backoff.h"

namespace rdmarpc {
namespace internal {
namespace {

// c-ares: each query attempt waits this long, and is tried this often per
// server, before the lookup fails.
constexpr int kQueryTimeoutMs = 2000;
constexpr int kQueryTries = 2;
// RequestReresolution: no sooner than this after the last lookup began.
constexpr absl::Duration kMinReresolutionGap = absl::Seconds(1);

// "HOST:PORT" with the port required, or a bracketed IPv6 host; `what`
// names the part in messages.
absl::Status SplitHostPort(absl::string_view text, absl::string_view what, std::string* host,
                           std::string* port, bool port_required) {
  if (absl::StartsWith(text, "[")) {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(what, " \"", text, "\" lacks its ']'"));
    }
    *host = std::string(text.substr(1, close - 1));
    absl::string_view rest = text.substr(close + 1);
    if (rest.empty()) {
      if (port_required) {
        return absl::InvalidArgumentError(absl::StrCat(what, " \"", text, "\" has no :PORT"));
      }
      port->clear();
      return absl::OkStatus();
    }
    if (!absl::ConsumePrefix(&rest, ":")) {
      return absl::InvalidArgumentError(absl::StrCat(what, " \"", text, "\" is not [IPV6]:PORT"));
    }
    *port = std::string(rest);
    return absl::OkStatus();
  }
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos) {
    if (port_required) {
      return absl::InvalidArgumentError(absl::StrCat(what, " \"", text, "\" has no :PORT"));
    }
    *host = std::string(text);
    port->clear();
    return absl::OkStatus();
  }
  if (text.substr(0, colon).find(':') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", text, "\": an IPv6 address takes brackets"));
  }
  *host = std::string(text.substr(0, colon));
  *port = std::string(text.substr(colon + 1));
  return absl::OkStatus();
}

absl::StatusOr<uint16_t> ParsePort(absl::string_view port, absl::string_view in) {
  int n = 0;
  if (!absl::SimpleAtoi(port, &n) || n < 1 || n > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port \"", port, "\" in \"", in, "\" is not 1..65535"));
  }
  return static_cast<uint16_t>(n);
}

void InitAresOnce() {
  static std::once_flag once;
  std::call_once(once, [] { ares_library_init(ARES_LIB_INIT_ALL); });
}

class DnsResolver final : public Resolver {
 public:
  DnsResolver(DnsTarget target, std::string whole, absl::Duration refresh,
              ResolverListener* listener)
      : target_(std::move(target)),
        whole_(std::move(whole)),
        refresh_(refresh),
        listener_(listener),
        wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

  ~DnsResolver() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    Wake();
    if (thread_.joinable()) thread_.join();
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  absl::Status Start() {
    if (wake_fd_ < 0) {
      return absl::UnavailableError(
          absl::StrCat("dns resolver for ", whole_, ": eventfd: ", strerror(errno)));
    }
    InitAresOnce();
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  void RequestReresolution() override {
    {
      absl::MutexLock lock(&mu_);
      reresolve_ = true;
    }
    Wake();
  }

 private:
  void Wake() {
    if (wake_fd_ < 0) return;
    const uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof(one));
    (void)n;
  }

  bool Stopping() {
    absl::MutexLock lock(&mu_);
    return stop_;
  }

  void Run() {
    ConnectionBackoff backoff;
    absl::BitGen jitter;
    while (!Stopping()) {
      const absl::Time began = absl::Now();
      {
        absl::MutexLock lock(&mu_);
        reresolve_ = false;  // this lookup answers what was asked so far
      }
      absl::StatusOr<std::vector<std::string>> found = LookUp();
      if (Stopping()) return;
      absl::Duration wait = refresh_;
      if (found.ok()) {
        backoff.Reset();
        std::vector<std::string> sorted = *found;
        std::sort(sorted.begin(), sorted.end());
        if (!reported_ || sorted != last_) {
          last_ = sorted;
          reported_ = true;
          listener_->OnAddresses(std::move(*found));
        }
      } else {
        wait = std::min(refresh_, backoff.NextDelay(absl::Uniform(jitter, 0.0, 1.0)));
        listener_->OnError(found.status());
      }
      // Until the wait ends, or a re-resolution is asked for (no sooner
      // than kMinReresolutionGap after this lookup began; one asked for
      // during it counts), or Stop.
      absl::MutexLock lock(&mu_);
      const absl::Time until = began + wait;
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || reresolve_; };
      if (!mu_.AwaitWithDeadline(absl::Condition(&wake), until)) continue;
      if (stop_) return;
      const absl::Time earliest = began + kMinReresolutionGap;
      mu_.AwaitWithDeadline(absl::Condition(&stop_), std::min(earliest, until));
      reresolve_ = false;  // the next lookup answers it
    }
  }

  struct Query {
    bool done = false;
    int status = ARES_SUCCESS;
    std::vector<std::string> addresses;
    uint16_t port = 0;
  };

  static void OnAnswer(void* arg, int status, int /*timeouts*/, ares_addrinfo* result) {
    auto* q = static_cast<Query*>(arg);
    q->done = true;
    q->status = status;
    if (status == ARES_SUCCESS && result != nullptr) {
      for (ares_addrinfo_node* n = result->nodes; n != nullptr; n = n->ai_next) {
        std::optional<SocketAddress> a = SocketAddress::FromSockaddr(n->ai_addr);
        if (!a) continue;
        a->set_port(q->port);
        std::string name = a->ToString();
        if (std::find(q->addresses.begin(), q->addresses.end(), name) == q->addresses.end()) {
          q->addresses.push_back(std::move(name));
        }
      }
    }
    if (result != nullptr) ares_freeaddrinfo(result);
  }

  absl::StatusOr<std::vector<std::string>> LookUp() {
    const std::string server =
        target_.authority.empty() ? "the system's DNS servers" : target_.authority;
    ares_options opts{};
    int mask = ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;
    opts.timeout = kQueryTimeoutMs;
    opts.tries = kQueryTries;
    char dns_only[] = "b";
    if (!target_.authority.empty()) {
      // A named server answers alone: no /etc/hosts.
      opts.lookups = dns_only;
      mask |= ARES_OPT_LOOKUPS;
    }
    ares_channel channel = nullptr;
    if (int rc = ares_init_options(&channel, &opts, mask); rc != ARES_SUCCESS) {
      return absl::UnavailableError(
          absl::StrCat("dns: c-ares init for ", whole_, " failed: ", ares_strerror(rc)));
    }
    if (!target_.authority.empty()) {
      if (int rc = ares_set_servers_ports_csv(channel, target_.authority.c_str());
          rc != ARES_SUCCESS) {
        ares_destroy(channel);
        return absl::UnavailableError(absl::StrCat("dns: DNS server \"", target_.authority,
                                                   "\" of ", whole_, ": ", ares_strerror(rc)));
      }
    }
    Query q;
    q.port = target_.port;
    ares_addrinfo_hints hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    ares_getaddrinfo(channel, target_.name.c_str(), nullptr, &hints, &OnAnswer, &q);
    while (!q.done) {
      ares_socket_t socks[ARES_GETSOCK_MAXNUM];
      const int bits = ares_getsock(channel, socks, ARES_GETSOCK_MAXNUM);
      std::vector<pollfd> fds;
      for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
        short events = 0;
        if (ARES_GETSOCK_READABLE(bits, i)) events |= POLLIN;
        if (ARES_GETSOCK_WRITABLE(bits, i)) events |= POLLOUT;
        if (events != 0) fds.push_back(pollfd{socks[i], events, 0});
      }
      fds.push_back(pollfd{wake_fd_, POLLIN, 0});
      timeval max_tv{1, 0};
      timeval tv{};
      timeval* t = ares_timeout(channel, &max_tv, &tv);
      const int ms = static_cast<int>(t->tv_sec * 1000 + t->tv_usec / 1000);
      const int n = poll(fds.data(), fds.size(), std::max(ms, 1));
      if (n < 0 && errno != EINTR) break;
      if (fds.back().revents & POLLIN) {
        uint64_t v;
        ssize_t r = read(wake_fd_, &v, sizeof(v));
        (void)r;
        if (Stopping()) break;
      }
      bool any = false;
      for (size_t i = 0; i + 1 < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        any = true;
        const ares_socket_t rfd =
            (fds[i].revents & (POLLIN | POLLERR | POLLHUP)) ? fds[i].fd : ARES_SOCKET_BAD;
        const ares_socket_t wfd = (fds[i].revents & POLLOUT) ? fds[i].fd : ARES_SOCKET_BAD;
        ares_process_fd(channel, rfd, wfd);
      }
      if (!any) ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // timeouts
    }
    ares_destroy(channel);  // a query still open completes ARES_EDESTRUCTION
    if (Stopping()) return absl::CancelledError("dns resolver stopped");
    if (!q.done || q.status == ARES_EDESTRUCTION || q.status == ARES_ECANCELLED) {
      return absl::UnavailableError(absl::StrCat("dns: looking up \"", target_.name, "\" (", whole_,
                                                 ") at ", server,
                                                 " was cut short: ", strerror(errno)));
    }
    if (q.status != ARES_SUCCESS) {
      return absl::UnavailableError(absl::StrCat("dns: looking up \"", target_.name, "\" (", whole_,
                                                 ") at ", server,
                                                 " failed: ", ares_strerror(q.status)));
    }
    if (q.addresses.empty()) {
      return absl::UnavailableError(absl::StrCat("dns: \"", target_.name, "\" (", whole_,
                                                 ") has no A or AAAA record at ", server));
    }
    return q.addresses;
  }

  const DnsTarget target_;
  const std::string whole_;
  const absl::Duration refresh_;
  ResolverListener* const listener_;
  const int wake_fd_;
  std::thread thread_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool reresolve_ ABSL_GUARDED_BY(mu_) = false;
  // Resolver thread only.
  bool reported_ = false;
  std::vector<std::string> last_;
};

class DnsResolverFactory final : public ResolverFactory {
 public:
  std::string scheme() const override { return "dns"; }
  absl::StatusOr<std::unique_ptr<Resolver>> Create(const ResolverArgs& args) override {
    absl::StatusOr<DnsTarget> t = ParseDnsTarget(args.target);
    if (!t.ok()) return t.status();
    auto r = std::make_unique<DnsResolver>(*std::move(t), args.target, args.refresh_interval,
                                           args.listener);
    if (absl::Status s = r->Start(); !s.ok()) return s;
    return std::unique_ptr<Resolver>(std::move(r));
  }
};

}  // namespace

absl::StatusOr<DnsTarget> ParseDnsTarget(absl::string_view target) {
  absl::string_view rest = target;
  if (!absl::ConsumePrefix(&rest, "dns:")) {
    return absl::InvalidArgumentError(absl::StrCat("target \"", target, "\" is not dns:..."));
  }
  DnsTarget out;
  if (absl::ConsumePrefix(&rest, "//")) {
    const size_t slash = rest.find('/');
    if (slash == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "target \"", target, "\" is not dns://AUTHORITY/NAME:PORT (no '/' after the authority)"));
    }
    const absl::string_view authority = rest.substr(0, slash);
    rest = rest.substr(slash + 1);
    if (!authority.empty()) {
      std::string host, port;
      if (absl::Status s = SplitHostPort(authority, "DNS server", &host, &port, false); !s.ok()) {
        return s;
      }
      uint16_t p = 53;
      if (!port.empty()) {
        absl::StatusOr<uint16_t> parsed = ParsePort(port, authority);
        if (!parsed.ok()) return parsed.status();
        p = *parsed;
      }
      std::optional<SocketAddress> a = SocketAddress::FromIp(host, p);
      if (a && host.find('%') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DNS server \"", authority, "\" in \"", target, "\": a scoped address cannot name it"));
      }
      if (!a) {
        return absl::InvalidArgumentError(absl::StrCat("DNS server \"", authority, "\" in \"",
                                                       target, "\" is not a numeric address"));
      }
      out.authority = a->ToString();
    }
  }
  std::string host, port;
  if (absl::Status s = SplitHostPort(rest, "name", &host, &port, true); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), " (target \"", target, "\": dns:[//AUTHORITY/]NAME:PORT)"));
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("target \"", target, "\" names no host"));
  }
  absl::StatusOr<uint16_t> p = ParsePort(port, rest);
  if (!p.ok()) return p.status();
  out.name = std::move(host);
  out.port = *p;
  return out;
}

std::shared_ptr<ResolverFactory> MakeDnsResolverFactory() {
  return std::make_shared<DnsResolverFactory>();
}

}  // namespace internal
}  // namespace rdmarpc
