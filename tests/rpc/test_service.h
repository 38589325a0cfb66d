// test_service.h: a hand-written rdmarpc::Service for the runtime tests (the
// same shape protoc-gen-rdmarpc generates), and helpers.
#ifndef RDMARPC_TESTS_RPC_TEST_SERVICE_H_
#define RDMARPC_TESTS_RPC_TEST_SERVICE_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "rdmarpc/rdmarpc.h"
#include "rpc_test.pb.h"

namespace rdmarpc {
namespace test {

inline constexpr char kEchoMethod[] = "/rdmarpc.test.EchoService/Echo";

class EchoService final : public rdmarpc::Service {
 public:
  EchoService() : Service("rdmarpc.test.EchoService") {
    AddMethod(std::make_unique<internal::UnaryMethodHandler<EchoService, EchoRequest, EchoResponse>>(
        kEchoMethod, this, &EchoService::Echo));
  }

  absl::Status Echo(ServerContext* ctx, const EchoRequest& req, EchoResponse* resp) {
    calls_.fetch_add(1);
    {
      absl::MutexLock lock(&mu_);
      ++per_tag_[req.tag()];
      last_deadline_ = ctx->deadline();
      last_method_ = ctx->method();
      last_peer_ = ctx->peer();
      last_attachment_ = std::string(ctx->request_attachment().view());
    }
    if (req.sleep_ms() > 0) absl::SleepFor(absl::Milliseconds(req.sleep_ms()));
    if (req.text() == "fail") return absl::NotFoundError("asked to fail");
    resp->set_text(req.text());
    if (req.reply_bytes() > 0) {
      resp->mutable_data()->assign(static_cast<size_t>(req.reply_bytes()), 'r');
    } else {
      resp->set_data(req.data());
    }
    return absl::OkStatus();
  }

  int calls() const { return calls_.load(); }
  int calls_with_tag(int tag) {
    absl::MutexLock lock(&mu_);
    return per_tag_[tag];
  }
  absl::Time last_deadline() {
    absl::MutexLock lock(&mu_);
    return last_deadline_;
  }
  // The bytes of the last call's request attachment ("" without one).
  std::string last_attachment() {
    absl::MutexLock lock(&mu_);
    return last_attachment_;
  }
  std::string last_method() {
    absl::MutexLock lock(&mu_);
    return last_method_;
  }
  std::string last_peer() {
    absl::MutexLock lock(&mu_);
    return last_peer_;
  }

 private:
  std::atomic<int> calls_{0};
  absl::Mutex mu_;
  std::map<int, int> per_tag_ ABSL_GUARDED_BY(mu_);
  absl::Time last_deadline_ ABSL_GUARDED_BY(mu_);
  std::string last_method_ ABSL_GUARDED_BY(mu_);
  std::string last_attachment_ ABSL_GUARDED_BY(mu_);
  std::string last_peer_ ABSL_GUARDED_BY(mu_);
};

inline absl::Status Echo(Channel* ch, ClientContext* ctx, const EchoRequest& req,
                         EchoResponse* resp) {
  return internal::BlockingUnaryCall(ch, kEchoMethod, ctx, req, resp);
}

}  // namespace test
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_RPC_TEST_SERVICE_H_
