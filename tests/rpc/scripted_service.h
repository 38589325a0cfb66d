// scripted_service.h: an Echo service whose calls follow a script (fail
// with a code, sleep, send headers or a retry pushback), recording each
// call, and a set of such servers on loopback; for the retry, hedging and
// outlier-detection tests.
#ifndef RDMARPC_TESTS_RPC_SCRIPTED_SERVICE_H_
#define RDMARPC_TESTS_RPC_SCRIPTED_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {

// What one call to a ScriptedService does.
struct Step {
  absl::StatusCode code = absl::StatusCode::kOk;
  absl::Duration sleep = absl::ZeroDuration();  // first, cut short by cancellation
  bool initial_metadata = false;                // sends response headers
  std::string pushback;                         // grpc-retry-pushback-ms, when set
};

inline Step Fails(absl::StatusCode code) {
  Step s;
  s.code = code;
  return s;
}

inline Step Sleeps(absl::Duration d) {
  Step s;
  s.sleep = d;
  return s;
}

// Echo whose calls follow a script (then `fallback`), recording each
// attempt's grpc-previous-rpc-attempts and start time.
class ScriptedService final : public rdmarpc::Service {
 public:
  ScriptedService() : Service("rdmarpc.test.EchoService") {
    AddMethod(
        std::make_unique<internal::UnaryMethodHandler<ScriptedService, EchoRequest, EchoResponse>>(
            kEchoMethod, this, &ScriptedService::Echo));
  }

  void Script(std::vector<Step> steps, Step fallback = Step()) {
    absl::MutexLock lock(&mu_);
    script_ = std::move(steps);
    fallback_ = fallback;
    next_ = 0;
  }

  absl::Status Echo(ServerContext* ctx, const EchoRequest& req, EchoResponse* resp) {
    Step step;
    {
      absl::MutexLock lock(&mu_);
      step = next_ < script_.size() ? script_[next_] : fallback_;
      ++next_;
      auto it = ctx->client_metadata().find("grpc-previous-rpc-attempts");
      previous_.push_back(it == ctx->client_metadata().end() ? "-" : it->second);
      starts_.push_back(absl::Now());
    }
    const absl::Time until = absl::Now() + step.sleep;
    while (absl::Now() < until) {
      if (ctx->IsCancelled()) {
        absl::MutexLock lock(&mu_);
        ++cancelled_;
        return absl::CancelledError("client cancelled");
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    if (step.initial_metadata) ctx->AddInitialMetadata("x-headers", "sent");
    if (!step.pushback.empty()) ctx->AddTrailingMetadata("grpc-retry-pushback-ms", step.pushback);
    if (step.code != absl::StatusCode::kOk) return absl::Status(step.code, "scripted failure");
    resp->set_text(req.text());
    return absl::OkStatus();
  }

  int calls() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(previous_.size());
  }
  int cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }
  // "-" for an attempt without the header.
  std::vector<std::string> previous() {
    absl::MutexLock lock(&mu_);
    return previous_;
  }
  std::vector<absl::Time> starts() {
    absl::MutexLock lock(&mu_);
    return starts_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Step> script_ ABSL_GUARDED_BY(mu_);
  Step fallback_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> previous_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> starts_ ABSL_GUARDED_BY(mu_);
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
};

// N servers of ScriptedService on loopback.
class Servers {
 public:
  explicit Servers(int n) {
    for (int i = 0; i < n; ++i) {
      services_.push_back(std::make_unique<ScriptedService>());
      servers_.push_back(std::make_unique<Server>());
      EXPECT_TRUE(servers_.back()->AddService(services_.back().get()).ok());
      absl::Status s = servers_.back()->Start("127.0.0.1:0");
      EXPECT_TRUE(s.ok()) << s;
      absl::StrAppend(&target_, i == 0 ? "" : ",", "127.0.0.1:", servers_.back()->port());
    }
  }
  ScriptedService& service(int i) { return *services_[static_cast<size_t>(i)]; }
  const std::string& target() const { return target_; }
  // "127.0.0.1:PORT" of server i, as the channel names it.
  std::string address(int i) const {
    return absl::StrCat("127.0.0.1:", servers_[static_cast<size_t>(i)]->port());
  }
  int total_calls() {
    int n = 0;
    for (auto& s : services_) n += s->calls();
    return n;
  }
  void ScriptAll(std::vector<Step> steps, Step fallback = Step()) {
    for (auto& s : services_) s->Script(steps, fallback);
  }

 private:
  std::vector<std::unique_ptr<ScriptedService>> services_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::string target_;
};

}  // namespace test
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_RPC_SCRIPTED_SERVICE_H_
