// call_model_service.h: a hand-written service whose handlers block, watch
// for cancellation, run inline, return status details or call on, for the
// handler-pool, shutdown, cancellation and deadline tests.
#ifndef RDMARPC_TESTS_RPC_CALL_MODEL_SERVICE_H_
#define RDMARPC_TESTS_RPC_CALL_MODEL_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "rdmarpc/rdmarpc.h"
#include "rpc_test.pb.h"

namespace rdmarpc {
namespace test {

inline constexpr char kSlowMethod[] = "/rdmarpc.test.CallModel/Slow";
inline constexpr char kInlineMethod[] = "/rdmarpc.test.CallModel/Inline";
inline constexpr char kDetailsMethod[] = "/rdmarpc.test.CallModel/Details";
inline constexpr char kRelayMethod[] = "/rdmarpc.test.CallModel/Relay";
inline constexpr char kEchoMetadataMethod[] = "/rdmarpc.test.CallModel/EchoMetadata";
inline constexpr char kDetailsTypeUrl[] = "type.googleapis.com/google.rpc.Status";

class CallModelService final : public rdmarpc::Service {
 public:
  CallModelService() : Service("rdmarpc.test.CallModel") {
    using internal::UnaryMethodHandler;
    AddMethod(std::make_unique<UnaryMethodHandler<CallModelService, EchoRequest, EchoResponse>>(
        kSlowMethod, this, &CallModelService::Slow));
    AddMethod(std::make_unique<UnaryMethodHandler<CallModelService, EchoRequest, EchoResponse>>(
        kInlineMethod, this, &CallModelService::Inline, /*run_inline=*/true));
    AddMethod(std::make_unique<UnaryMethodHandler<CallModelService, EchoRequest, EchoResponse>>(
        kDetailsMethod, this, &CallModelService::Details));
    AddMethod(std::make_unique<UnaryMethodHandler<CallModelService, EchoRequest, EchoResponse>>(
        kRelayMethod, this, &CallModelService::Relay));
    AddMethod(std::make_unique<UnaryMethodHandler<CallModelService, EchoRequest, EchoResponse>>(
        kEchoMetadataMethod, this, &CallModelService::EchoMetadata));
  }

  // Sleeps req.sleep_ms in 5 ms steps; returns early with CANCELLED once the
  // call is cancelled, unless req.text() is "ignore-cancel".
  absl::Status Slow(ServerContext* ctx, const EchoRequest& req, EchoResponse* resp) {
    started_.fetch_add(1);
    ctx->AddOnCancelCallback([this] { on_cancel_runs_.fetch_add(1); });
    const absl::Time until = absl::Now() + absl::Milliseconds(req.sleep_ms());
    const bool watch = req.text() != "ignore-cancel";
    while (absl::Now() < until) {
      if (watch && ctx->IsCancelled()) {
        saw_cancel_.fetch_add(1);
        returned_.fetch_add(1);
        return absl::CancelledError("handler saw the cancel");
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    if (ctx->IsCancelled()) saw_cancel_.fetch_add(1);
    {
      absl::MutexLock lock(&mu_);
      last_deadline_ = ctx->deadline();
    }
    resp->set_text(req.text());
    resp->set_data(req.data());
    returned_.fetch_add(1);
    return absl::OkStatus();
  }

  // Runs on the worker (run_inline): answers at once, or blocks the worker
  // for req.sleep_ms (which an inline handler must never do: tests use it to
  // hold a worker up deterministically).
  absl::Status Inline(ServerContext*, const EchoRequest& req, EchoResponse* resp) {
    inline_calls_.fetch_add(1);
    if (req.sleep_ms() > 0) absl::SleepFor(absl::Milliseconds(req.sleep_ms()));
    resp->set_text(req.text());
    return absl::OkStatus();
  }

  // Fails with code req.tag(), message req.text() and one payload under
  // kDetailsTypeUrl holding req.data().
  absl::Status Details(ServerContext*, const EchoRequest& req, EchoResponse*) {
    absl::Status s(static_cast<absl::StatusCode>(req.tag()), req.text());
    s.SetPayload(kDetailsTypeUrl, absl::Cord(req.data()));
    if (req.reply_bytes() > 0) s.SetPayload("second", absl::Cord("2"));
    return s;
  }

  // Calls Slow on `relay_channel` with a context made by FromServerContext,
  // records that context's deadline and returns the child call's status.
  absl::Status Relay(ServerContext* ctx, const EchoRequest& req, EchoResponse* resp) {
    std::unique_ptr<ClientContext> child = ClientContext::FromServerContext(*ctx);
    {
      absl::MutexLock lock(&mu_);
      relay_parent_deadline_ = ctx->deadline();
      relay_child_deadline_ = child->deadline();
    }
    return internal::BlockingUnaryCall(relay_channel.get(), kSlowMethod, child.get(), req, resp);
  }

  // Sends every client metadata entry back as initial and as trailing
  // metadata; text = number of entries seen; fails with req.tag() as the
  // code when it is not 0 (the metadata still goes back).
  absl::Status EchoMetadata(ServerContext* ctx, const EchoRequest& req, EchoResponse* resp) {
    for (const auto& [k, v] : ctx->client_metadata()) {
      ctx->AddInitialMetadata(k, v);
      ctx->AddTrailingMetadata(k, v);
    }
    resp->set_text(absl::StrCat(ctx->client_metadata().size()));
    resp->set_data(req.data());
    if (req.tag() != 0) return absl::Status(static_cast<absl::StatusCode>(req.tag()), "asked");
    return absl::OkStatus();
  }

  std::shared_ptr<Channel> relay_channel;
  std::atomic<int> started_{0};
  std::atomic<int> returned_{0};
  std::atomic<int> saw_cancel_{0};
  std::atomic<int> on_cancel_runs_{0};
  std::atomic<int> inline_calls_{0};
  absl::Mutex mu_;
  absl::Time last_deadline_ ABSL_GUARDED_BY(mu_);
  absl::Time relay_parent_deadline_ ABSL_GUARDED_BY(mu_);
  absl::Time relay_child_deadline_ ABSL_GUARDED_BY(mu_);
};

// Waits (bounded by `limit`) until `pred()` holds; returns it.
template <class Pred>
bool WaitFor(Pred pred, absl::Duration limit = absl::Seconds(10)) {
  const absl::Time until = absl::Now() + limit;
  while (!pred()) {
    if (absl::Now() >= until) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

}  // namespace test
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_RPC_CALL_MODEL_SERVICE_H_
