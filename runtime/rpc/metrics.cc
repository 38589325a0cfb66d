// metrics.cc: the call-metrics registry, the metrics interceptors and the
// text exposition (see rdmarpc/metrics.h and metrics.h).
#include "runtime/rpc/metrics.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "rdmarpc/metrics.h"
#include "runtime/rpc/interceptor_chain.h"
#include "runtime/rpc/outlier_detection.h"
#include "runtime/rpc/retrying_call.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/device.h"
#include "runtime/transport/engine_stats.h"

namespace rdmarpc {
namespace internal {
namespace {

// The histogram's upper bounds and their `le` labels, spelt as the Go
// Prometheus client prints float64s (strconv 'g', shortest), so that a
// query such as le="0.005" written against go-grpc-prometheus matches.
struct Bucket {
  int64_t ns;
  const char* le;
};
constexpr Bucket kBuckets[kNumLatencyBuckets] = {
    {10'000, "1e-05"},      {25'000, "2.5e-05"},   {50'000, "5e-05"},      {100'000, "0.0001"},
    {250'000, "0.00025"},   {500'000, "0.0005"},   {1'000'000, "0.001"},   {2'500'000, "0.0025"},
    {5'000'000, "0.005"},   {10'000'000, "0.01"},  {25'000'000, "0.025"},  {50'000'000, "0.05"},
    {100'000'000, "0.1"},   {250'000'000, "0.25"}, {500'000'000, "0.5"},   {1'000'000'000, "1"},
    {2'500'000'000, "2.5"}, {5'000'000'000, "5"},  {10'000'000'000, "10"},
};

// gRPC-Go's codes.Code.String(), which go-grpc-prometheus puts in grpc_code.
constexpr const char* kCodeNames[kNumStatusCodes] = {
    "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
    "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
    "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
    "DataLoss", "Unauthenticated"};

const char* TypeLabel(experimental::RpcType type) {
  switch (type) {
    case experimental::RpcType::UNARY:
      return "unary";
    case experimental::RpcType::CLIENT_STREAMING:
      return "client_stream";
    case experimental::RpcType::SERVER_STREAMING:
      return "server_stream";
    case experimental::RpcType::BIDI_STREAMING:
      return "bidi_stream";
  }
  return "unary";
}

// "/pkg.Service/Method" -> ("pkg.Service", "Method"); a name without the
// leading slash or the separator keeps what it has ("", name).
std::pair<std::string, std::string> SplitMethod(absl::string_view full_name) {
  if (!full_name.empty() && full_name.front() == '/') full_name.remove_prefix(1);
  const size_t slash = full_name.rfind('/');
  if (slash == absl::string_view::npos) return {std::string(), std::string(full_name)};
  return {std::string(full_name.substr(0, slash)), std::string(full_name.substr(slash + 1))};
}

struct Registry {
  absl::Mutex mu;
  // By side, then full name (looked up by string_view: no allocation per
  // call); the values never move or die.
  absl::flat_hash_map<std::string, std::unique_ptr<MethodMetrics>> methods[2] ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* const registry = new Registry;  // never destroyed: calls may outlive main
  return *registry;
}

std::atomic<uint32_t> g_next_shard{0};

// Distinct methods counted per side; calls of further methods are counted
// under kOverflowMethod.
constexpr size_t kMaxMethodsPerSide = 4096;
constexpr char kOverflowMethod[] = "/rdmarpc.metrics.Overflow/other";

// Label values escaped as the exposition format asks (\\, \", \n).
std::string EscapeLabel(absl::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// The interceptor enable_metrics installs; one per call.
class MetricsInterceptor final : public experimental::Interceptor {
 public:
  MetricsInterceptor(MethodMetrics* metrics, const experimental::ClientRpcInfo* client,
                     const experimental::ServerRpcInfo* server)
      : metrics_(metrics), client_(client), server_(server) {}

  void Intercept(experimental::InterceptorBatchMethods* m) override {
    using experimental::InterceptionHookPoints;
    switch (m->hook_point()) {
      case InterceptionHookPoints::PRE_SEND_INITIAL_METADATA:
        if (client_ != nullptr) metrics_->Started();  // the client's first hook
        break;
      case InterceptionHookPoints::POST_RECV_INITIAL_METADATA:
        if (server_ != nullptr) metrics_->Started();  // the server's first hook
        break;
      case InterceptionHookPoints::PRE_SEND_MESSAGE:
        metrics_->MessageSent();
        break;
      case InterceptionHookPoints::POST_RECV_MESSAGE:
        metrics_->MessageReceived();
        break;
      case InterceptionHookPoints::PRE_SEND_STATUS:  // server: the last hook
        metrics_->Handled(static_cast<int>(m->GetSendStatus()->code()),
                          server_->end_time() - server_->start_time());
        break;
      case InterceptionHookPoints::POST_RECV_STATUS:  // client: the last hook
        metrics_->Handled(static_cast<int>(m->GetRecvStatus()->code()),
                          client_->end_time() - client_->start_time());
        break;
      default:
        break;
    }
  }

 private:
  MethodMetrics* const metrics_;
  const experimental::ClientRpcInfo* const client_;
  const experimental::ServerRpcInfo* const server_;
};

class ServerFactory final : public experimental::ServerInterceptorFactoryInterface {
 public:
  experimental::Interceptor* CreateServerInterceptor(experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(
        GetMethodMetrics(MetricsSide::kServer, info->method(), info->type()), nullptr, info);
  }
};

class ClientFactory final : public experimental::ClientInterceptorFactoryInterface {
 public:
  experimental::Interceptor* CreateClientInterceptor(experimental::ClientRpcInfo* info) override {
    return new MetricsInterceptor(
        GetMethodMetrics(MetricsSide::kClient, info->method(), info->type()), info, nullptr);
  }
};

// Writes one metric family: its HELP and TYPE lines, then `body`.
void Family(std::string* out, absl::string_view name, absl::string_view type,
            absl::string_view help, absl::string_view body) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", body);
}

void RenderCallMetrics(std::string* out) {
  // A sorted copy, so the output is stable and the lock is short.
  std::vector<std::pair<const MethodMetrics*, MethodMetrics::Totals>> rows;
  {
    Registry& r = GetRegistry();
    absl::MutexLock lock(&r.mu);
    for (const auto& side : r.methods) {
      for (const auto& [name, m] : side) rows.emplace_back(m.get(), MethodMetrics::Totals{});
    }
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.first->service(), a.first->method()) <
           std::make_tuple(b.first->service(), b.first->method());
  });
  for (auto& [m, totals] : rows) totals = m->Read();

  for (const MetricsSide side : {MetricsSide::kServer, MetricsSide::kClient}) {
    const bool server = side == MetricsSide::kServer;
    const std::string prefix = server ? "grpc_server_" : "grpc_client_";
    std::string started, handled, received, sent, histogram;
    for (const auto& [m, t] : rows) {
      if (m->side() != side) continue;
      const std::string labels =
          absl::StrCat("grpc_method=\"", EscapeLabel(m->method()), "\",grpc_service=\"",
                       EscapeLabel(m->service()), "\",grpc_type=\"", TypeLabel(m->type()), "\"");
      absl::StrAppend(&started, prefix, "started_total{", labels, "} ", t.started, "\n");
      absl::StrAppend(&received, prefix, "msg_received_total{", labels, "} ", t.msg_received, "\n");
      absl::StrAppend(&sent, prefix, "msg_sent_total{", labels, "} ", t.msg_sent, "\n");
      for (int code = 0; code < kNumStatusCodes; ++code) {
        // A server shows every code of its methods from the start; a
        // client the codes its calls ended with.
        if (!server && t.handled[code] == 0) continue;
        absl::StrAppend(&handled, prefix, "handled_total{grpc_code=\"", kCodeNames[code], "\",",
                        labels, "} ", t.handled[code], "\n");
      }
      uint64_t cumulative = 0;
      for (int b = 0; b < kNumLatencyBuckets; ++b) {
        cumulative += t.buckets[b];
        absl::StrAppend(&histogram, prefix, "handling_seconds_bucket{", labels, ",le=\"",
                        kBuckets[b].le, "\"} ", cumulative, "\n");
      }
      cumulative += t.buckets[kNumLatencyBuckets];
      absl::StrAppend(&histogram, prefix, "handling_seconds_bucket{", labels, ",le=\"+Inf\"} ",
                      cumulative, "\n");
      absl::StrAppend(&histogram, prefix, "handling_seconds_sum{", labels, "} ",
                      absl::StrFormat("%.9f", static_cast<double>(t.sum_ns) / 1e9), "\n");
      absl::StrAppend(&histogram, prefix, "handling_seconds_count{", labels, "} ", cumulative,
                      "\n");
    }
    const char* where = server ? "on the server" : "by the client";
    Family(out, prefix + "started_total", "counter", absl::StrCat("RPCs started ", where, "."),
           started);
    Family(out, prefix + "handled_total", "counter",
           absl::StrCat("RPCs completed ", where, ", by status code."), handled);
    Family(out, prefix + "msg_received_total", "counter",
           absl::StrCat("Messages received ", where, "."), received);
    Family(out, prefix + "msg_sent_total", "counter", absl::StrCat("Messages sent ", where, "."),
           sent);
    Family(out, prefix + "handling_seconds", "histogram",
           server ? "Seconds from a handler's start to the status the server sent."
                  : "Seconds from a call's start to the status the client received.",
           histogram);
  }
}

// One sample line: `name{labels} value` (labels may be empty).
std::string Sample(absl::string_view name, absl::string_view labels, int64_t value) {
  if (labels.empty()) return absl::StrCat(name, " ", value, "\n");
  return absl::StrCat(name, "{", labels, "} ", value, "\n");
}

void RenderTransportMetrics(std::string* out) {
  const EngineTotals t = SumEngineStats();

  static constexpr const char* kStateLabels[kNumCountedConnStates] = {
      "resolving_addr", "resolving_route", "connecting", "accepting", "established", "closing"};
  std::string body;
  for (int i = 0; i < kNumCountedConnStates; ++i) {
    body += Sample("rdmarpc_connections", absl::StrCat("state=\"", kStateLabels[i], "\""),
                   t.connections_in_state[i]);
  }
  Family(out, "rdmarpc_connections", "gauge", "Live RDMA connections by handshake state.", body);
  Family(out, "rdmarpc_connections_established_total", "counter",
         "Connections that completed their handshake.",
         Sample("rdmarpc_connections_established_total", "", t.connections_established));
  Family(out, "rdmarpc_connections_closed_total", "counter",
         "Connections that ended, for any reason (set-up failures included).",
         Sample("rdmarpc_connections_closed_total", "", t.connections_closed));

  body.clear();
  for (int i = 0; i < static_cast<int>(WrOpcode::kCount); ++i) {
    body += Sample("rdmarpc_work_requests_posted_total",
                   absl::StrCat("opcode=\"", WrOpcodeName(static_cast<WrOpcode>(i)), "\""),
                   t.wrs_posted[i]);
  }
  Family(out, "rdmarpc_work_requests_posted_total", "counter",
         "Work requests posted to queue pairs, by opcode (recv: receive queue).", body);
  Family(out, "rdmarpc_signalled_send_work_requests_total", "counter",
         "Send work requests posted with IBV_SEND_SIGNALED.",
         Sample("rdmarpc_signalled_send_work_requests_total", "", t.signalled_send_wrs));
  Family(out, "rdmarpc_inline_send_work_requests_total", "counter",
         "Send work requests posted with IBV_SEND_INLINE.",
         Sample("rdmarpc_inline_send_work_requests_total", "", t.inline_send_wrs));
  Family(out, "rdmarpc_doorbells_total", "counter",
         "ibv_post_send (queue=send) and ibv_post_recv (queue=recv) calls.",
         Sample("rdmarpc_doorbells_total", "queue=\"send\"", t.send_doorbells) +
             Sample("rdmarpc_doorbells_total", "queue=\"recv\"", t.recv_doorbells));
  Family(out, "rdmarpc_completions_total", "counter",
         "Work completions polled from completion queues, by queue.",
         Sample("rdmarpc_completions_total", "queue=\"send\"", t.send_completions) +
             Sample("rdmarpc_completions_total", "queue=\"recv\"", t.recv_completions));
  body.clear();
  for (int i = 1; i < kNumWcStatus; ++i) {
    if (t.wc_errors[i] == 0) continue;
    body += Sample("rdmarpc_work_completion_errors_total",
                   absl::StrCat("status=\"", WcStatusName(i), "\""), t.wc_errors[i]);
  }
  Family(out, "rdmarpc_work_completion_errors_total", "counter",
         "Work completions with an error status, by ibv_wc_status without its IBV_WC_ prefix "
         "(flushes apart).",
         body);
  Family(out, "rdmarpc_work_completions_flushed_total", "counter",
         "Work requests flushed (IBV_WC_WR_FLUSH_ERR) when a connection was torn down, as every "
         "close does to the receives it had posted.",
         Sample("rdmarpc_work_completions_flushed_total", "", t.wc_flushed));
  const int64_t rnr = GetProviderRnrRetries();
  if (rnr >= 0) {
    Family(out, "rdmarpc_rnr_retries_total", "counter",
           "SENDs that found no receive posted and were retried (receiver not ready); "
           "reported by softrdma only.",
           Sample("rdmarpc_rnr_retries_total", "", rnr));
  }
  Family(out, "rdmarpc_credit_stalls_total", "counter",
         "Times a connection had messages queued and no credit to send them.",
         Sample("rdmarpc_credit_stalls_total", "", t.credit_stalls));
  Family(out, "rdmarpc_credit_stall_seconds_total", "counter",
         "Time connections spent with messages queued waiting for credits.",
         absl::StrCat("rdmarpc_credit_stall_seconds_total ",
                      absl::StrFormat("%.9f", static_cast<double>(t.credit_stall_ns) / 1e9), "\n"));
  const int kRead = static_cast<int>(RendezvousDirection::kRead);
  const int kWrite = static_cast<int>(RendezvousDirection::kWrite);
  Family(out, "rdmarpc_rendezvous_transfers_total", "counter",
         "Large messages moved by rendezvous: pulled with RDMA READ (direction=read) or pushed "
         "with RDMA WRITE (direction=write).",
         Sample("rdmarpc_rendezvous_transfers_total", "direction=\"read\"",
                t.rendezvous_transfers[kRead]) +
             Sample("rdmarpc_rendezvous_transfers_total", "direction=\"write\"",
                    t.rendezvous_transfers[kWrite]));
  Family(out, "rdmarpc_rendezvous_bytes_total", "counter",
         "Bytes of large messages moved by rendezvous, by direction.",
         Sample("rdmarpc_rendezvous_bytes_total", "direction=\"read\"", t.rendezvous_bytes[kRead]) +
             Sample("rdmarpc_rendezvous_bytes_total", "direction=\"write\"",
                    t.rendezvous_bytes[kWrite]));
  Family(out, "rdmarpc_payload_bytes_copied_total", "counter",
         "Message bytes the runtime copied between buffers (serialisation aside).",
         Sample("rdmarpc_payload_bytes_copied_total", "", t.payload_bytes_copied));
  Family(out, "rdmarpc_keepalive_probes_total", "counter",
         "Keepalive probes posted to peers that had been silent.",
         Sample("rdmarpc_keepalive_probes_total", "", t.keepalive_probes));
  Family(out, "rdmarpc_completion_loop_sleeps_total", "counter",
         "Times a completion loop thread stopped polling and slept on its completion channel.",
         Sample("rdmarpc_completion_loop_sleeps_total", "", t.loop_sleeps));
  Family(out, "rdmarpc_spins_refused_total", "counter",
         "Times a completion loop or a caller driving its own call would have busy-polled but "
         "found the process's spinning threads at their limit (one per CPU, or "
         "--rdmarpc_spinning_threads) and slept instead.",
         Sample("rdmarpc_spins_refused_total", "", t.spins_refused));
  Family(out, "rdmarpc_cq_resizes_total", "counter",
         "Times a completion loop grew its completion queue (ibv_resize_cq) to hold more "
         "connections.",
         Sample("rdmarpc_cq_resizes_total", "", t.cq_resizes));

  const RegisteredMemoryTotals mem = GetRegisteredMemoryTotals();
  Family(out, "rdmarpc_registered_memory_bytes", "gauge",
         "Memory registered with the RDMA device (pinned), in bytes.",
         Sample("rdmarpc_registered_memory_bytes", "", mem.bytes));
  Family(out, "rdmarpc_memory_regions", "gauge", "Memory regions registered now.",
         Sample("rdmarpc_memory_regions", "", mem.regions));
  const LargeBufferPoolTotals large = GetLargeBufferPoolTotals();
  Family(
      out, "rdmarpc_buffer_pool_bytes", "gauge",
      "Rendezvous buffers (pool=large), in bytes: on loan (state=in_use) and cached "
      "for reuse (state=free).",
      Sample("rdmarpc_buffer_pool_bytes", "pool=\"large\",state=\"in_use\"", large.in_use_bytes) +
          Sample("rdmarpc_buffer_pool_bytes", "pool=\"large\",state=\"free\"", large.cached_bytes));
  Family(out, "rdmarpc_send_buffers", "gauge",
         "Eager send buffers of every connection: taken by a posted send (state=in_use) or "
         "free.",
         Sample("rdmarpc_send_buffers", "state=\"in_use\"", t.send_buffers_in_use) +
             Sample("rdmarpc_send_buffers", "state=\"free\"",
                    t.send_buffers_capacity - t.send_buffers_in_use));
  Family(out, "rdmarpc_engines", "gauge",
         "Completion engines (server workers and channel loops) running now.",
         Sample("rdmarpc_engines", "", t.engines));

  const RetryCounters& rc = GetRetryCounters();
  Family(out, "rdmarpc_client_retry_attempts_total", "counter",
         "Attempts of unary calls after their first, under a retry policy (kind=retry) or a "
         "hedging policy (kind=hedge).",
         Sample("rdmarpc_client_retry_attempts_total", "kind=\"retry\"",
                static_cast<int64_t>(rc.retries.load(std::memory_order_relaxed))) +
             Sample("rdmarpc_client_retry_attempts_total", "kind=\"hedge\"",
                    static_cast<int64_t>(rc.hedges.load(std::memory_order_relaxed))));

  // Outlier detection, per channel and server.
  std::string ejected, ejections;
  ForEachOutlierDetector([&](OutlierDetector* d) {
    for (const OutlierDetector::ServerState& st : d->Snapshot()) {
      const std::string labels =
          absl::StrCat("channel=\"", st.channel, "\",target=\"", EscapeLabel(d->target()),
                       "\",server=\"", EscapeLabel(st.server), "\"");
      ejected += Sample("rdmarpc_outlier_ejected", labels, st.ejected ? 1 : 0);
      for (const auto& [reason, n] : st.ejections) {
        ejections += Sample("rdmarpc_outlier_ejections_total",
                            absl::StrCat(labels, ",reason=\"", reason, "\""),
                            static_cast<int64_t>(n));
      }
    }
  });
  if (!ejected.empty()) {
    Family(out, "rdmarpc_outlier_ejected", "gauge",
           "1 while outlier detection keeps the server out of the channel's rotation.", ejected);
  }
  if (!ejections.empty()) {
    Family(out, "rdmarpc_outlier_ejections_total", "counter",
           "Times outlier detection took the server out of rotation, by rule.", ejections);
  }
}

// The registry entry of (side, full_name), made on first use.
MethodMetrics* FindOrMake(MetricsSide side, absl::string_view full_name,
                          experimental::RpcType type) {
  Registry& r = GetRegistry();
  const int s = static_cast<int>(side);
  absl::MutexLock lock(&r.mu);
  if (r.methods[s].size() >= kMaxMethodsPerSide && !r.methods[s].contains(full_name)) {
    // A client calling ever new method names (a generic stub fed user
    // input) must not grow the registry and every scrape without bound.
    full_name = kOverflowMethod;
    type = experimental::RpcType::UNARY;
  }
  std::unique_ptr<MethodMetrics>& slot = r.methods[s][std::string(full_name)];
  if (slot == nullptr) {
    auto [service, method] = SplitMethod(full_name);
    slot = std::make_unique<MethodMetrics>(side, std::move(service), std::move(method), type);
  }
  return slot.get();
}

}  // namespace

void MethodMetrics::Handled(int code, absl::Duration elapsed) {
  Shard& s = Mine();
  s.handled[std::clamp(code, 0, kNumStatusCodes - 1)].fetch_add(1, std::memory_order_relaxed);
  const int64_t ns = std::max<int64_t>(0, absl::ToInt64Nanoseconds(elapsed));
  int b = 0;
  while (b < kNumLatencyBuckets && ns > kBuckets[b].ns) ++b;
  s.buckets[b].fetch_add(1, std::memory_order_relaxed);
  s.sum_ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

MethodMetrics::Shard& MethodMetrics::Mine() {
  thread_local const uint32_t shard =
      g_next_shard.fetch_add(1, std::memory_order_relaxed) % kShards;
  return shards_[shard];
}

MethodMetrics::Totals MethodMetrics::Read() const {
  Totals t;
  for (const Shard& s : shards_) {
    t.started += s.started.load(std::memory_order_relaxed);
    t.msg_received += s.msg_received.load(std::memory_order_relaxed);
    t.msg_sent += s.msg_sent.load(std::memory_order_relaxed);
    for (int i = 0; i < kNumStatusCodes; ++i) {
      t.handled[i] += s.handled[i].load(std::memory_order_relaxed);
    }
    for (int i = 0; i <= kNumLatencyBuckets; ++i) {
      t.buckets[i] += s.buckets[i].load(std::memory_order_relaxed);
    }
    t.sum_ns += s.sum_ns.load(std::memory_order_relaxed);
  }
  return t;
}

namespace {

thread_local bool t_method_cache_gone = false;
struct MethodCache {
  absl::flat_hash_map<std::string, MethodMetrics*> by_side[2];
  ~MethodCache() { t_method_cache_gone = true; }
};
thread_local MethodCache t_method_cache;

}  // namespace

MethodMetrics* GetMethodMetrics(MetricsSide side, absl::string_view full_name,
                                experimental::RpcType type) {
  const int s = static_cast<int>(side);
  // Each thread keeps what it looked up (entries never die): a call costs a
  // hash of its method name, not the registry's lock. A thread_local
  // destructed after the cache (made before it) that makes a call finds
  // t_method_cache_gone and asks the registry.
  if (t_method_cache_gone) return FindOrMake(side, full_name, type);
  auto& cache = t_method_cache.by_side;
  if (auto it = cache[s].find(full_name); it != cache[s].end()) return it->second;
  MethodMetrics* found = FindOrMake(side, full_name, type);
  if (cache[s].size() < kMaxMethodsPerSide) cache[s].emplace(std::string(full_name), found);
  return found;
}

void InitializeServerMethodMetrics(absl::string_view full_name, RpcKind kind) {
  GetMethodMetrics(MetricsSide::kServer, full_name, RpcTypeOf(kind));
}

}  // namespace internal

std::string RenderMetricsText() {
  std::string out;
  internal::RenderCallMetrics(&out);
  internal::RenderTransportMetrics(&out);
  return out;
}

std::shared_ptr<experimental::ServerInterceptorFactoryInterface> ServerMetricsInterceptorFactory() {
  static auto* const factory =
      new std::shared_ptr<internal::ServerFactory>(std::make_shared<internal::ServerFactory>());
  return *factory;
}

std::shared_ptr<experimental::ClientInterceptorFactoryInterface> ClientMetricsInterceptorFactory() {
  static auto* const factory =
      new std::shared_ptr<internal::ClientFactory>(std::make_shared<internal::ClientFactory>());
  return *factory;
}

}  // namespace rdmarpc
