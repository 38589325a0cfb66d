// outlier_detection.cc: see outlier_detection.h.
#include "runtime/rpc/outlier_detection.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace rdmarpc {
namespace internal {

namespace {

// The codes that count against a server: its fault or the network's.
bool CountsAsFailure(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
      return true;
    default:
      return false;
  }
}

struct Registry {
  absl::Mutex mu;
  std::vector<OutlierDetector*> detectors ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* const r = new Registry;
  return *r;
}

}  // namespace

void ForEachOutlierDetector(const std::function<void(OutlierDetector*)>& fn) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  for (OutlierDetector* d : r.detectors) fn(d);
}

absl::Status ValidateOutlierDetection(const OutlierDetectionOptions& o) {
  auto bad = [](absl::string_view field, auto value, absl::string_view rule) {
    return absl::InvalidArgumentError(
        absl::StrCat("ChannelOptions: outlier_detection.", field, " is ", value, "; ", rule));
  };
  if (o.interval <= absl::ZeroDuration()) {
    return bad("interval", absl::FormatDuration(o.interval), "must be > 0");
  }
  if (o.base_ejection_time <= absl::ZeroDuration()) {
    return bad("base_ejection_time", absl::FormatDuration(o.base_ejection_time), "must be > 0");
  }
  if (o.max_ejection_time <= absl::ZeroDuration()) {
    return bad("max_ejection_time", absl::FormatDuration(o.max_ejection_time), "must be > 0");
  }
  if (o.max_ejection_percent < 0 || o.max_ejection_percent > 100) {
    return bad("max_ejection_percent", o.max_ejection_percent, "must be in 0..100");
  }
  if (o.failure_percentage_threshold < 0 || o.failure_percentage_threshold > 100) {
    return bad("failure_percentage_threshold", o.failure_percentage_threshold, "must be in 0..100");
  }
  for (auto [field, v] :
       {std::pair{"consecutive_failures", o.consecutive_failures},
        {"success_rate_stdev_factor", o.success_rate_stdev_factor},
        {"success_rate_minimum_hosts", o.success_rate_minimum_hosts},
        {"success_rate_request_volume", o.success_rate_request_volume},
        {"failure_percentage_minimum_hosts", o.failure_percentage_minimum_hosts},
        {"failure_percentage_request_volume", o.failure_percentage_request_volume},
        {"latency_minimum_hosts", o.latency_minimum_hosts},
        {"latency_request_volume", o.latency_request_volume}}) {
    if (v < 0) return bad(field, v, "must be >= 0");
  }
  if (!(o.latency_factor >= 0) || !std::isfinite(o.latency_factor)) {
    return bad("latency_factor", o.latency_factor, "must be >= 0 (0: off)");
  }
  return absl::OkStatus();
}

OutlierDetector::OutlierDetector(std::string target, const OutlierDetectionOptions& options,
                                 std::function<std::vector<ConnectionPool*>()> pools)
    : target_(std::move(target)), options_(options), pools_(std::move(pools)) {
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id.fetch_add(1, std::memory_order_relaxed);
}

OutlierDetector::~OutlierDetector() {
  if (loop_ == nullptr) return;  // never started, never listed
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  r.detectors.erase(std::find(r.detectors.begin(), r.detectors.end(), this));
}

void OutlierDetector::Start(EventLoop* loop) {
  loop_ = loop;
  {
    // Listed for the metrics page only now: its pools are all there.
    Registry& r = GetRegistry();
    absl::MutexLock lock(&r.mu);
    r.detectors.push_back(this);
  }
  loop_->Post([this] { Arm(); });
}

void OutlierDetector::Arm() {
  // A timer that expects no completion: an idle channel's loop sleeps.
  loop_->AddTimer(
      absl::Now() + options_.interval,
      [this] {
        Evaluate(absl::Now());
        Arm();
      },
      /*needs_completions=*/false);
}

void OutlierDetector::Record(ConnectionPool* pool, absl::StatusCode code, absl::Duration latency) {
  if (code == absl::StatusCode::kCancelled) return;
  const int in_a_row =
      pool->RecordOutcome(CountsAsFailure(code), absl::ToInt64Nanoseconds(latency));
  // At each multiple of the threshold only: while an ejection is refused
  // (max_ejection_percent), failed calls do not all take the locks.
  if (options_.consecutive_failures == 0 || in_a_row == 0 ||
      in_a_row % options_.consecutive_failures != 0 || pool->ejected()) {
    return;
  }
  const std::vector<ConnectionPool*> pools = pools_();
  absl::MutexLock lock(&mu_);
  TryEject(pool, pools, "consecutive_failures", absl::Now());
}

void OutlierDetector::TryEject(ConnectionPool* pool, const std::vector<ConnectionPool*>& pools,
                               const char* reason, absl::Time now) {
  if (pool->ejected()) return;
  int ejected = 0;
  for (ConnectionPool* p : pools) ejected += p->ejected() ? 1 : 0;
  if (ejected > 0 &&
      ejected * 100 >= options_.max_ejection_percent * static_cast<int>(pools.size())) {
    return;
  }
  State& s = state_[pool];
  s.ejected_at = now;
  ++s.multiplier;
  ++s.ejections[reason];
  pool->set_ejected(true);
  pool->ResetConsecutiveFailures();
  const absl::Duration for_time =
      std::min(options_.base_ejection_time * s.multiplier,
               std::max(options_.base_ejection_time, options_.max_ejection_time));
  LOG(WARNING) << "rdmarpc: channel " << target_ << ": " << pool->name()
               << " taken out of rotation for " << absl::FormatDuration(for_time)
               << " by outlier detection (" << reason << ")";
}

void OutlierDetector::Evaluate(absl::Time now) {
  const std::vector<ConnectionPool*> pools = pools_();
  struct Seen {
    ConnectionPool* pool;
    ConnectionPool::Outcomes o;
    uint64_t total() const { return o.ok + o.failed; }
  };
  std::vector<Seen> seen;
  for (ConnectionPool* p : pools) seen.push_back(Seen{p, p->TakeOutcomes()});
  absl::MutexLock lock(&mu_);
  // gRFC A50's success-rate rule.
  if (options_.success_rate_minimum_hosts > 0) {
    std::vector<std::pair<ConnectionPool*, double>> rates;
    for (const Seen& s : seen) {
      if (s.total() >= static_cast<uint64_t>(options_.success_rate_request_volume) &&
          s.total() > 0) {
        rates.emplace_back(s.pool, static_cast<double>(s.o.ok) / static_cast<double>(s.total()));
      }
    }
    if (static_cast<int>(rates.size()) >= options_.success_rate_minimum_hosts) {
      double mean = 0;
      for (auto& [p, r] : rates) mean += r;
      mean /= static_cast<double>(rates.size());
      double var = 0;
      for (auto& [p, r] : rates) var += (r - mean) * (r - mean);
      const double stdev = std::sqrt(var / static_cast<double>(rates.size()));
      const double floor = mean - stdev * (options_.success_rate_stdev_factor / 1000.0);
      for (auto& [p, r] : rates) {
        if (r < floor) TryEject(p, pools, "success_rate", now);
      }
    }
  }
  // gRFC A50's failure-percentage rule (its minimum counts every address).
  if (options_.failure_percentage_minimum_hosts > 0) {
    if (static_cast<int>(seen.size()) >= options_.failure_percentage_minimum_hosts) {
      for (const Seen& s : seen) {
        if (s.total() == 0 ||
            s.total() < static_cast<uint64_t>(options_.failure_percentage_request_volume)) {
          continue;
        }
        if (s.o.failed * 100 >
            static_cast<uint64_t>(options_.failure_percentage_threshold) * s.total()) {
          TryEject(s.pool, pools, "failure_percentage", now);
        }
      }
    }
  }
  // Slow servers: mean latency against the median of the means.
  if (options_.latency_factor > 0) {
    std::vector<std::pair<ConnectionPool*, double>> means;
    for (const Seen& s : seen) {
      if (s.total() > 0 && s.total() >= static_cast<uint64_t>(options_.latency_request_volume)) {
        means.emplace_back(s.pool,
                           static_cast<double>(s.o.latency_ns) / static_cast<double>(s.total()));
      }
    }
    if (!means.empty() && static_cast<int>(means.size()) >= options_.latency_minimum_hosts) {
      std::vector<double> sorted;
      for (auto& [p, m] : means) sorted.push_back(m);
      std::sort(sorted.begin(), sorted.end());
      const double median = sorted[sorted.size() / 2];
      for (auto& [p, m] : means) {
        if (m > options_.latency_factor * median) TryEject(p, pools, "latency", now);
      }
    }
  }
  // Back into rotation once the ejection time passed; a server left in
  // rotation for a whole interval is forgiven one earlier ejection.
  for (ConnectionPool* p : pools) {
    auto it = state_.find(p);
    if (it == state_.end()) continue;
    State& s = it->second;
    if (p->ejected()) {
      const absl::Duration for_time =
          std::min(options_.base_ejection_time * s.multiplier,
                   std::max(options_.base_ejection_time, options_.max_ejection_time));
      if (now >= s.ejected_at + for_time) {
        p->set_ejected(false);
        LOG(INFO) << "rdmarpc: channel " << target_ << ": " << p->name()
                  << " back in rotation after its outlier ejection";
      }
    } else if (s.multiplier > 0) {
      --s.multiplier;
    }
  }
}

std::vector<OutlierDetector::ServerState> OutlierDetector::Snapshot() {
  std::vector<ServerState> out;
  const std::vector<ConnectionPool*> pools = pools_();
  absl::MutexLock lock(&mu_);
  for (ConnectionPool* p : pools) {
    ServerState s;
    s.channel = id_;
    s.server = p->name();
    s.ejected = p->ejected();
    if (auto it = state_.find(p); it != state_.end()) s.ejections = it->second.ejections;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace internal
}  // namespace rdmarpc
