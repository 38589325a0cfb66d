// admin_endpoint.cc: the admin HTTP endpoint (rdmarpc/admin.h) on
// cpp-httplib.
#include "runtime/rpc/admin_endpoint.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "httplib.h"
#include "rdmarpc/admin.h"
#include "rdmarpc/metrics.h"
#include "runtime/rpc/address.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/connection_snapshot.h"
#include "runtime/transport/device.h"
#include "runtime/transport/engine_stats.h"

DEFINE_string(rdmarpc_admin_listen, "",
              "HOST:PORT of this process's admin HTTP endpoint (GET /metrics, /statusz, "
              "/healthz; see rdmarpc/admin.h). Every rdmarpc::Server serves it from Start; a "
              "client process calls rdmarpc::AdminServer::StartFromFlags. Empty (the "
              "default): none. Plain HTTP without authentication: use a loopback or "
              "management address.");

namespace rdmarpc {
namespace internal {
namespace {

// How long /statusz waits for each engine's list of connections.
constexpr absl::Duration kSnapshotTimeout = absl::Seconds(1);
// Threads answering HTTP requests, per endpoint (cpp-httplib's default is
// one per core, at least 8), besides the one that accepts.
constexpr size_t kHttpThreads = 8;
// How long a request may take to arrive, or its answer to be taken, in s.
constexpr time_t kHttpSocketTimeoutSeconds = 1;

const absl::Time g_process_start = absl::Now();

struct Directory {
  absl::Mutex mu;
  // Running endpoints by the "ip:port" they bound.
  std::map<std::string, std::weak_ptr<AdminEndpoint>> endpoints ABSL_GUARDED_BY(mu);
  std::vector<const ServerStatusSource*> servers ABSL_GUARDED_BY(mu);
};

Directory& GetDirectory() {
  static Directory* const directory =
      new Directory;  // never destroyed: HTTP threads may outlive main
  return *directory;
}

std::atomic<int> g_running_endpoints{0};

std::string HealthText(int* status) {
  Directory& d = GetDirectory();
  absl::MutexLock lock(&d.mu);
  std::vector<std::string> not_serving;
  for (const ServerStatusSource* s : d.servers) {
    if (!s->Serving()) not_serving.push_back(s->Address());
  }
  if (not_serving.empty()) {
    *status = 200;
    return "ok\n";
  }
  *status = 503;
  return absl::StrCat("not serving: ", absl::StrJoin(not_serving, ", "), "\n");
}

std::string FlagsText() {
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);  // sorted by file
  std::sort(flags.begin(), flags.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::string out;
  for (const gflags::CommandLineFlagInfo& f : flags) {
    if (f.name.rfind("rdmarpc_", 0) != 0) continue;
    // Strings quoted, so that an empty one shows.
    auto shown = [&f](const std::string& v) {
      return f.type == "string" ? absl::StrCat("\"", v, "\"") : v;
    };
    absl::StrAppend(&out, "  --", f.name, "=", shown(f.current_value));
    if (!f.is_default) absl::StrAppend(&out, "   (default ", shown(f.default_value), ")");
    out += "\n";
  }
  return out;
}

std::string StatuszText() {
  std::string out =
      absl::StrCat("rdmarpc status\n", "  pid ", getpid(), ", up ",
                   absl::StrFormat("%.1f", absl::ToDoubleSeconds(absl::Now() - g_process_start)),
                   " s, provider ", ProviderName(), "\n\n");

  out += "servers\n";
  {
    Directory& d = GetDirectory();
    absl::MutexLock lock(&d.mu);
    if (d.servers.empty()) out += "  (none)\n";
    for (const ServerStatusSource* s : d.servers) out += s->DescribeForStatusz();
  }

  out += "\nconnections\n";
  const std::vector<EngineSnapshot> engines = SnapshotConnections(kSnapshotTimeout);
  if (engines.empty()) out += "  (no engine)\n";
  for (const EngineSnapshot& e : engines) {
    if (!e.answered) {
      absl::StrAppend(&out, "  engine ", e.engine, ": did not answer within ",
                      absl::FormatDuration(kSnapshotTimeout), "\n");
      continue;
    }
    absl::StrAppend(&out, "  engine ", e.engine, ": ", e.connections.size(), " connection",
                    e.connections.size() == 1 ? "" : "s", "\n");
    if (e.srq) {
      absl::StrAppend(&out, "    shared receive queue: ", e.srq_capacity, " buffers (",
                      e.srq_registered_bytes, " bytes registered), ", e.srq_posted,
                      " posted, ", e.srq_free_credits, " of them granted to no one; ",
                      e.srq_attached, " connection", e.srq_attached == 1 ? "" : "s",
                      " attached, ", e.srq_borrowers, " holding more than their floor\n");
    }
    for (const ConnectionStatus& c : e.connections) {
      absl::StrAppend(&out, "    peer ", c.peer, " (", c.is_client ? "client" : "server",
                      ") state ", c.state, ", ", c.device, ", qp ", c.qp_num, " ", c.qp_state,
                      "\n");
      // send: what this side may spend now (the peer's handshake granted
      // peer_recv_depth; an SRQ peer grows that). local_recv_depth: the
      // receives granted to the peer, a ring's depth or an SRQ share.
      absl::StrAppend(&out, "      credits: send ", c.send_credits, " (the peer granted ",
                      c.peer_recv_depth, " at the handshake), granted to the peer ",
                      c.local_recv_depth,
                      c.shared_receive_queue ? " on the shared receive queue" : " in a ring",
                      " with ", c.credits_owed, " owed; credit stall ", c.credit_stall_us,
                      " us\n");
      absl::StrAppend(&out, "      streams in flight ", c.streams_in_flight, ", queued frames ",
                      c.queued_frames, ", rendezvous in flight ", c.rendezvous_in_flight,
                      ", buffers exposed ", c.exposed_buffers, " (", c.exposed_bytes,
                      " bytes of ", c.max_exposed_bytes, ", ",
                      c.memory_windows ? "memory windows" : "MR rkeys", ")\n");
      absl::StrAppend(&out, "      sent ", c.messages_sent, " messages / ", c.bytes_sent,
                      " bytes, received ", c.messages_received, " messages / ", c.bytes_received,
                      " bytes\n");
      absl::StrAppend(&out, "      error completions ", c.wc_errors,
                      c.last_error.empty() ? "" : absl::StrCat(", last error: ", c.last_error),
                      "\n");
    }
  }

  const EngineTotals t = SumEngineStats();
  const RegisteredMemoryTotals mem = GetRegisteredMemoryTotals();
  const LargeBufferPoolTotals large = GetLargeBufferPoolTotals();
  absl::StrAppend(&out, "\nmemory\n", "  registered: ", mem.bytes, " bytes in ", mem.regions,
                  " regions\n", "  rendezvous buffers: ", large.in_use_bytes, " bytes in use, ",
                  large.cached_bytes, " bytes cached, ", large.registered_bytes,
                  " bytes registered\n", "  eager send buffers: ", t.send_buffers_in_use,
                  " in use of ", t.send_buffers_capacity, "\n");
  absl::StrAppend(&out, "\nflags\n", FlagsText());
  return out;
}

}  // namespace

struct AdminEndpoint::Http {
  httplib::Server server;
  std::thread thread;
  // listen_after_bind returned (cpp-httplib's is_running() is false again
  // then, so waiting for it alone could wait forever).
  std::atomic<bool> exited{false};
};

absl::StatusOr<std::shared_ptr<AdminEndpoint>> AdminEndpoint::Acquire(absl::string_view host_port) {
  absl::StatusOr<ResolvedAddress> addr = ParseHostPort(host_port, /*allow_port_zero=*/true);
  if (!addr.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("admin endpoint address: ", addr.status().message()));
  }
  // Declared before the lock: an endpoint that fails to start is destroyed
  // after the lock is released (its destructor takes it).
  std::shared_ptr<AdminEndpoint> endpoint;
  Directory& d = GetDirectory();
  absl::MutexLock lock(&d.mu);
  const std::string ip = addr->addr.IpString();
  const int want_port = addr->addr.port();
  // Endpoints are known by the address they bound: a later request for
  // that port (not for port 0) shares it.
  if (want_port != 0) {
    auto it = d.endpoints.find(addr->name);
    if (it != d.endpoints.end()) {
      if (std::shared_ptr<AdminEndpoint> running = it->second.lock()) return running;
    }
  }

  endpoint.reset(new AdminEndpoint);
  endpoint->http_ = std::make_unique<Http>();
  httplib::Server& svr = endpoint->http_->server;
  svr.new_task_queue = [] { return new httplib::ThreadPool(kHttpThreads); };
  // One request per connection and short socket timeouts: an idle or slow
  // client must not hold one of the few threads for cpp-httplib's default
  // 5 s, or a probe with a 1 s timeout would fail behind it.
  svr.set_keep_alive_max_count(1);
  svr.set_read_timeout(kHttpSocketTimeoutSeconds, 0);
  svr.set_write_timeout(kHttpSocketTimeoutSeconds, 0);
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, with which
  // two processes given the same port would both bind it and share its
  // scrapes between them.
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  svr.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(RenderMetricsText(), kMetricsContentType);
  });
  svr.Get("/statusz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(StatuszText(), "text/plain; charset=utf-8");
  });
  svr.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    int status = 200;
    res.set_content(HealthText(&status), "text/plain; charset=utf-8");
    res.status = status;
  });
  // Other methods on a known path: 405 (cpp-httplib answers 404 for
  // everything it has no handler for).
  for (const char* path : {"/metrics", "/statusz", "/healthz"}) {
    auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
      res.status = 405;
      res.set_header("Allow", "GET, HEAD");
      res.set_content("method not allowed\n", "text/plain; charset=utf-8");
    };
    svr.Post(path, not_allowed);
    svr.Put(path, not_allowed);
    svr.Delete(path, not_allowed);
    svr.Patch(path, not_allowed);
  }

  int port = want_port;
  if (want_port == 0) {
    port = svr.bind_to_any_port(ip);
    if (port <= 0) port = -1;
  } else if (!svr.bind_to_port(ip, want_port)) {
    port = -1;
  }
  if (port < 0) {
    return absl::UnavailableError(absl::StrCat("admin endpoint: cannot listen on ", addr->name,
                                               ": ", strerror(errno)));
  }
  endpoint->port_ = port;
  SocketAddress bound = addr->addr;
  bound.set_port(static_cast<uint16_t>(port));
  endpoint->address_ = bound.ToString();
  Http* http = endpoint->http_.get();
  http->thread = std::thread([http] {
    http->server.listen_after_bind();
    http->exited.store(true);
  });
  // stop() only reaches a server that is running: wait for it to be (it
  // sets is_running before it accepts).
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (!svr.is_running() && !http->exited.load() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (!svr.is_running()) {
    return absl::UnavailableError(
        absl::StrCat("admin endpoint on ", endpoint->address_,
                     " did not start accepting within 5 s"));
  }
  d.endpoints[endpoint->address_] = endpoint;
  g_running_endpoints.fetch_add(1);
  endpoint->counted_ = true;
  LOG(INFO) << "rdmarpc admin endpoint on http://" << endpoint->address_
            << "/ (metrics, statusz, healthz)";
  return endpoint;
}

AdminEndpoint::~AdminEndpoint() {
  {
    Directory& d = GetDirectory();
    absl::MutexLock lock(&d.mu);
    auto it = d.endpoints.find(address_);
    if (it != d.endpoints.end() && it->second.expired()) d.endpoints.erase(it);
  }
  if (http_ != nullptr && http_->thread.joinable()) {
    // Until it runs, stop() would not reach it; once it returned by
    // itself there is nothing to stop.
    while (!http_->server.is_running() && !http_->exited.load()) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    http_->server.stop();
    http_->thread.join();
  }
  if (counted_) g_running_endpoints.fetch_sub(1);
}

bool AnyAdminEndpointRunning() { return g_running_endpoints.load() > 0; }

std::string AdminListenFlag() { return FLAGS_rdmarpc_admin_listen; }

void AddServerStatusSource(const ServerStatusSource* source) {
  Directory& d = GetDirectory();
  absl::MutexLock lock(&d.mu);
  d.servers.push_back(source);
}

void RemoveServerStatusSource(const ServerStatusSource* source) {
  Directory& d = GetDirectory();
  absl::MutexLock lock(&d.mu);
  d.servers.erase(std::remove(d.servers.begin(), d.servers.end(), source), d.servers.end());
}

}  // namespace internal

AdminServer::AdminServer(std::shared_ptr<internal::AdminEndpoint> endpoint)
    : endpoint_(std::move(endpoint)) {}

AdminServer::~AdminServer() = default;

absl::StatusOr<std::unique_ptr<AdminServer>> AdminServer::Start(absl::string_view host_port) {
  absl::StatusOr<std::shared_ptr<internal::AdminEndpoint>> endpoint =
      internal::AdminEndpoint::Acquire(host_port);
  if (!endpoint.ok()) return endpoint.status();
  return std::unique_ptr<AdminServer>(new AdminServer(std::move(*endpoint)));
}

absl::StatusOr<std::unique_ptr<AdminServer>> AdminServer::StartFromFlags() {
  if (FLAGS_rdmarpc_admin_listen.empty()) return std::unique_ptr<AdminServer>();
  return Start(FLAGS_rdmarpc_admin_listen);
}

int AdminServer::port() const { return endpoint_->port(); }

}  // namespace rdmarpc
