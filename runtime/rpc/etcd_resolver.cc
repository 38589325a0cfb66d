// etcd_resolver.cc: see etcd_resolver.h.
#include "runtime/rpc/etcd_resolver.h"

#include <algorithm>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "runtime/transport/connection_backoff.h"

namespace rdmarpc {
namespace internal {
namespace {

// Each etcd request (not a watch's wait) gets this long.
constexpr absl::Duration kRequestTimeout = absl::Seconds(2);
constexpr absl::Duration kMaxRetryWait = absl::Seconds(5);

class EtcdResolver final : public Resolver {
 public:
  EtcdResolver(EtcdTarget target, std::string whole, absl::Duration refresh,
               ResolverListener* listener)
      : target_(std::move(target)),
        whole_(std::move(whole)),
        refresh_(refresh),
        listener_(listener),
        client_(target_.endpoints, kRequestTimeout) {
    thread_ = std::thread([this] { Run(); });
  }
  ~EtcdResolver() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    client_.Stop();
    thread_.join();
  }
  // The watch keeps the list current; a failed connection changes nothing
  // in etcd until the server's lease expires, which the watch reports.
  void RequestReresolution() override {}

 private:
  bool SleepOrStop(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stop_), d);
    return stop_;
  }
  bool Stopping() {
    absl::MutexLock lock(&mu_);
    return stop_;
  }

  void Run() {
    const std::string range = RegistrationRange(target_.prefix);
    ConnectionBackoff backoff;
    absl::BitGen jitter;
    bool reported = false;
    std::vector<std::string> last;
    while (!Stopping()) {
      absl::StatusOr<EtcdClient::Range> r = client_.GetPrefix(range);
      if (Stopping()) return;
      if (!r.ok()) {
        listener_->OnError(absl::UnavailableError(
            absl::StrCat("etcd resolver for ", whole_, ": ", r.status().message())));
        if (SleepOrStop(
                std::min(kMaxRetryWait, backoff.NextDelay(absl::Uniform(jitter, 0.0, 1.0))))) {
          return;
        }
        continue;
      }
      backoff.Reset();
      std::vector<std::string> addresses;
      for (const EtcdClient::KeyValue& kv : r->kvs) addresses.push_back(kv.value);
      std::sort(addresses.begin(), addresses.end());
      addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
      if (!reported || addresses != last) {
        reported = true;
        last = addresses;
        if (addresses.empty()) {
          listener_->OnError(absl::UnavailableError(absl::StrCat(
              "etcd resolver for ", whole_, ": no server is registered under ", range)));
        } else {
          listener_->OnAddresses(addresses);
        }
      }
      absl::Status w = client_.WaitForChange(range, r->revision, refresh_);
      if (w.code() == absl::StatusCode::kCancelled) return;
      if (!w.ok() && w.code() != absl::StatusCode::kDeadlineExceeded) {
        VLOG(1) << "etcd watch for " << whole_ << ": " << w;
        if (SleepOrStop(
                std::min(kMaxRetryWait, backoff.NextDelay(absl::Uniform(jitter, 0.0, 1.0))))) {
          return;
        }
      }
    }
  }

  const EtcdTarget target_;
  const std::string whole_;
  const absl::Duration refresh_;
  ResolverListener* const listener_;
  EtcdClient client_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class EtcdResolverFactory final : public ResolverFactory {
 public:
  std::string scheme() const override { return "etcd"; }
  absl::StatusOr<std::unique_ptr<Resolver>> Create(const ResolverArgs& args) override {
    absl::StatusOr<EtcdTarget> t = ParseEtcdTarget(args.target);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Resolver>(
        new EtcdResolver(*std::move(t), args.target, args.refresh_interval, args.listener));
  }
};

}  // namespace

std::shared_ptr<ResolverFactory> MakeEtcdResolverFactory() {
  return std::make_shared<EtcdResolverFactory>();
}

absl::StatusOr<std::unique_ptr<EtcdRegistration>> EtcdRegistration::Start(absl::string_view target,
                                                                          std::string address,
                                                                          absl::Duration ttl) {
  absl::StatusOr<EtcdTarget> t = ParseEtcdTarget(target);
  if (!t.ok()) return t.status();
  const int64_t seconds =
      std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1))));
  std::unique_ptr<EtcdRegistration> r(
      new EtcdRegistration(*std::move(t), std::move(address), seconds));
  if (absl::Status s = r->Register(); !s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("registering ", r->address_, " at ", target, ": ", s.message()));
  }
  r->thread_ = std::thread([p = r.get()] { p->KeepAliveLoop(); });
  return r;
}

EtcdRegistration::EtcdRegistration(EtcdTarget target, std::string address, int64_t ttl_seconds)
    : target_(std::move(target)),
      address_(std::move(address)),
      ttl_seconds_(ttl_seconds),
      client_(target_.endpoints, kRequestTimeout) {}

EtcdRegistration::~EtcdRegistration() { Deregister(); }

absl::Status EtcdRegistration::Register() {
  absl::StatusOr<int64_t> lease = client_.GrantLease(ttl_seconds_);
  if (!lease.ok()) return lease.status();
  if (absl::Status s = client_.Put(RegistrationKey(target_.prefix, address_), address_, *lease);
      !s.ok()) {
    return s;
  }
  absl::MutexLock lock(&mu_);
  lease_ = *lease;
  return absl::OkStatus();
}

void EtcdRegistration::KeepAliveLoop() {
  const absl::Duration period = absl::Seconds(ttl_seconds_) / 3;
  absl::Duration wait = period;
  for (;;) {
    int64_t lease;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), wait)) return;
      lease = lease_;
    }
    absl::Status s = client_.KeepAlive(lease);
    if (s.ok()) {
      wait = period;
      continue;
    }
    if (s.code() == absl::StatusCode::kNotFound) {
      LOG(WARNING) << "etcd lease of " << address_ << " under " << target_.prefix
                   << " expired; registering again";
      s = Register();
    }
    if (!s.ok() && s.code() != absl::StatusCode::kCancelled) {
      LOG(WARNING) << "etcd registration of " << address_ << ": " << s;
    }
    wait = s.ok() ? period : std::min(period, absl::Seconds(1));
  }
}

void EtcdRegistration::Deregister() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  int64_t lease;
  {
    // After the join: a keepalive that registered again holds the new lease.
    absl::MutexLock lock(&mu_);
    lease = lease_;
  }
  if (lease != 0) {
    absl::Status s = client_.Revoke(lease);
    if (!s.ok()) LOG(WARNING) << "etcd: revoking the lease of " << address_ << ": " << s;
  }
  client_.Stop();
}

}  // namespace internal
}  // namespace rdmarpc
