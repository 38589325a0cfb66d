// callback_services.h: hand-written callback (reactor) services and client
// reactors (the shapes protoc-gen-rdmarpc generates) for the runtime's
// reactor and interceptor tests.
#ifndef RDMARPC_TESTS_RPC_CALLBACK_SERVICES_H_
#define RDMARPC_TESTS_RPC_CALLBACK_SERVICES_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/stream_service.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {

// ---- callback services (the shape protoc-gen-rdmarpc's CallbackService has) ----

struct ServerCounts {
  std::atomic<int> started{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> done{0};
};

// "rdmarpc.test.Streams" with reactors; same messages as StreamService.
class CallbackStreams final : public rdmarpc::Service {
 public:
  CallbackStreams() : Service("rdmarpc.test.Streams") {
    using namespace internal;  // NOLINT: the handler templates
    AddMethod(std::make_unique<CallbackClientStreamingMethodHandler<CallbackStreams, EchoRequest,
                                                                    EchoResponse>>(
        kCollectMethod, this, &CallbackStreams::Collect));
    AddMethod(std::make_unique<CallbackServerStreamingMethodHandler<CallbackStreams, EchoRequest,
                                                                    EchoResponse>>(
        kExpandMethod, this, &CallbackStreams::Expand));
    AddMethod(std::make_unique<CallbackBidiStreamingMethodHandler<CallbackStreams, EchoRequest,
                                                                  EchoResponse>>(
        kChatMethod, this, &CallbackStreams::Chat));
  }
  ~CallbackStreams() override {
    for (auto& t : finishers_) t.join();
  }

  // Reads every message; answers their count and data, finished from a
  // thread of its own after the method returned. Client metadata goes back
  // as initial and trailing metadata.
  ServerReadReactor<EchoRequest>* Collect(CallbackServerContext* ctx, EchoResponse* resp) {
    class R final : public ServerReadReactor<EchoRequest> {
     public:
      R(CallbackStreams* s, CallbackServerContext* ctx, EchoResponse* resp)
          : s_(s), resp_(resp) {
        for (const auto& [k, v] : ctx->client_metadata()) {
          ctx->AddInitialMetadata(k, v);
          ctx->AddTrailingMetadata(k, v);
        }
        StartRead(&req_);
      }
      void OnReadDone(bool ok) override {
        if (ok) {
          ++n_;
          all_ += req_.data();
          StartRead(&req_);
          return;
        }
        resp_->set_text(absl::StrCat(n_));
        resp_->set_data(all_);
        absl::MutexLock lock(&s_->mu_);
        s_->finishers_.emplace_back([this] {
          absl::SleepFor(absl::Milliseconds(20));
          Finish(absl::OkStatus());
        });
      }
      void OnCancel() override { s_->counts.cancelled.fetch_add(1); }
      void OnDone() override {
        s_->counts.done.fetch_add(1);
        delete this;
      }

     private:
      CallbackStreams* s_;
      EchoResponse* resp_;
      EchoRequest req_;
      int n_ = 0;
      std::string all_;
    };
    counts.started.fetch_add(1);
    return new R(this, ctx, resp);
  }

  // Writes req.tag() messages: text "i", data PatternBytes(i, reply_bytes).
  // text "hang": writes nothing and finishes only when cancelled.
  ServerWriteReactor<EchoResponse>* Expand(CallbackServerContext*, const EchoRequest* req) {
    class W final : public ServerWriteReactor<EchoResponse> {
     public:
      W(CallbackStreams* s, const EchoRequest* req) : s_(s), req_(req) {
        if (req_->text() != "hang") Next();
      }
      void OnWriteDone(bool ok) override {
        if (!ok) {
          Finish(absl::CancelledError("write failed"));
          return;
        }
        Next();
      }
      void OnCancel() override {
        s_->counts.cancelled.fetch_add(1);
        if (req_->text() == "hang") Finish(absl::CancelledError("cancelled"));
      }
      void OnDone() override {
        s_->counts.done.fetch_add(1);
        delete this;
      }

     private:
      void Next() {
        if (i_ == req_->tag()) {
          Finish(absl::OkStatus());
          return;
        }
        resp_.set_text(absl::StrCat(i_));
        resp_.set_data(PatternBytes(i_, static_cast<size_t>(req_->reply_bytes())));
        ++i_;
        StartWrite(&resp_);
      }
      CallbackStreams* s_;
      const EchoRequest* req_;
      EchoResponse resp_;
      int i_ = 0;
    };
    counts.started.fetch_add(1);
    return new W(this, req);
  }

  // Echoes every message; OK when the client half-closes. Client metadata
  // goes back as initial (sent at once) and trailing metadata.
  ServerBidiReactor<EchoRequest, EchoResponse>* Chat(CallbackServerContext* ctx) {
    class B final : public ServerBidiReactor<EchoRequest, EchoResponse> {
     public:
      B(CallbackStreams* s, CallbackServerContext* ctx) : s_(s) {
        for (const auto& [k, v] : ctx->client_metadata()) {
          ctx->AddInitialMetadata(k, v);
          ctx->AddTrailingMetadata(k, v);
        }
        StartSendInitialMetadata();
        StartRead(&req_);
      }
      void OnReadDone(bool ok) override {
        if (!ok) {
          Finish(absl::OkStatus());
          return;
        }
        resp_.set_text(req_.text());
        resp_.set_data(req_.data());
        StartWrite(&resp_);
      }
      void OnWriteDone(bool ok) override {
        if (!ok) {
          Finish(absl::CancelledError("write failed"));
          return;
        }
        StartRead(&req_);
      }
      void OnCancel() override { s_->counts.cancelled.fetch_add(1); }
      void OnDone() override {
        s_->counts.done.fetch_add(1);
        delete this;
      }

     private:
      CallbackStreams* s_;
      EchoRequest req_;
      EchoResponse resp_;
    };
    counts.started.fetch_add(1);
    return new B(this, ctx);
  }

  ServerCounts counts;

 private:
  absl::Mutex mu_;
  std::vector<std::thread> finishers_ ABSL_GUARDED_BY(mu_);
};

// "rdmarpc.test.EchoService" with a unary reactor: echoes text; with
// sleep_ms, the method returns at once and another thread finishes later.
class CallbackEcho final : public rdmarpc::Service {
 public:
  CallbackEcho() : Service("rdmarpc.test.EchoService") {
    AddMethod(std::make_unique<
              internal::CallbackUnaryMethodHandler<CallbackEcho, EchoRequest, EchoResponse>>(
        kEchoMethod, this, &CallbackEcho::Echo));
  }
  ~CallbackEcho() override {
    for (auto& t : finishers_) t.join();
  }
  ServerUnaryReactor* Echo(CallbackServerContext* ctx, const EchoRequest* req,
                           EchoResponse* resp) {
    resp->set_text(req->text());
    ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (req->sleep_ms() == 0) {
      reactor->Finish(absl::OkStatus());
    } else {
      absl::MutexLock lock(&mu_);
      finishers_.emplace_back([reactor, ms = req->sleep_ms(), this] {
        absl::SleepFor(absl::Milliseconds(ms));
        finished_late.fetch_add(1);
        reactor->Finish(absl::OkStatus());
      });
    }
    returned.fetch_add(1);
    return reactor;
  }
  std::atomic<int> returned{0};
  std::atomic<int> finished_late{0};

 private:
  absl::Mutex mu_;
  std::vector<std::thread> finishers_ ABSL_GUARDED_BY(mu_);
};

// ---- client reactors ---------------------------------------------------------------

// Common bookkeeping: OnDone's status and how often it ran.
struct DoneRecord {
  absl::Notification notified;
  absl::Status status;
  std::atomic<int> times{0};
  void Set(const absl::Status& s) {
    status = s;
    if (times.fetch_add(1) == 0) notified.Notify();
  }
  bool Wait() { return notified.WaitForNotificationWithTimeout(absl::Seconds(20)); }
};

// Writes `n` messages ("m0".."m<n-1>"), half-closes, reads everything.
class ChatClient final : public ClientBidiReactor<EchoRequest, EchoResponse> {
 public:
  ChatClient(Channel* ch, ClientContext* ctx, int n) : n_(n) {
    internal::ClientCallbackStream::Bind(this, ch, kChatMethod, ctx, internal::RpcKind::kBidiStreaming, nullptr,
                               nullptr);
    ctx_ = ctx;
    StartRead(&resp_);
    NextWrite();
    StartCall();
  }
  void OnReadInitialMetadataDone(bool ok) override {
    initial_ok = ok;
    initial_count = static_cast<int>(ctx_->GetServerInitialMetadata().size());
    metadata_calls.fetch_add(1);
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    texts.push_back(resp_.text());
    StartRead(&resp_);
  }
  void OnWriteDone(bool ok) override {
    if (ok) NextWrite();
  }
  void OnWritesDoneDone(bool ok) override { writes_done_ok = ok; }
  void OnDone(const absl::Status& s) override { done.Set(s); }

  std::vector<std::string> texts;
  bool initial_ok = false;
  int initial_count = -1;
  std::atomic<int> metadata_calls{0};
  bool writes_done_ok = false;
  DoneRecord done;

 private:
  void NextWrite() {
    if (i_ == n_) {
      StartWritesDone();
      return;
    }
    req_.set_text(absl::StrCat("m", i_++));
    StartWrite(&req_);
  }
  ClientContext* ctx_;
  int n_;
  int i_ = 0;
  EchoRequest req_;
  EchoResponse resp_;
};

// Reads a server stream; with `hold`, reads only once StartReading is called.
class ExpandClient final : public ClientReadReactor<EchoResponse> {
 public:
  ExpandClient(Channel* ch, ClientContext* ctx, const EchoRequest& req, bool hold) {
    internal::ClientCallbackStream::Bind(this, ch, kExpandMethod, ctx, internal::RpcKind::kServerStreaming, &req,
                               nullptr);
    if (hold) {
      AddHold();
    } else {
      StartRead(&resp_);
    }
    StartCall();
  }
  void StartReading() { StartRead(&resp_); }
  void Release() {
    released.store(true);
    RemoveHold();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    texts.push_back(resp_.text());
    datas.push_back(resp_.data());
    StartRead(&resp_);
  }
  void OnDone(const absl::Status& s) override {
    done_after_release = released.load();
    done.Set(s);
  }
  std::vector<std::string> texts;
  std::vector<std::string> datas;
  std::atomic<bool> released{false};
  bool done_after_release = false;
  DoneRecord done;

 private:
  EchoResponse resp_;
};

// Writes `n` messages with data "d<i>", half-closes; the response arrives
// in `response`.
class CollectClient final : public ClientWriteReactor<EchoRequest> {
 public:
  CollectClient(Channel* ch, ClientContext* ctx, int n) : n_(n) {
    internal::ClientCallbackStream::Bind(this, ch, kCollectMethod, ctx, internal::RpcKind::kClientStreaming, nullptr,
                               &response);
    Next();
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (ok) Next();
  }
  void OnDone(const absl::Status& s) override { done.Set(s); }
  EchoResponse response;
  DoneRecord done;

 private:
  void Next() {
    if (i_ == n_) {
      StartWritesDone();
      return;
    }
    req_.set_data(absl::StrCat("d", i_++));
    StartWrite(&req_);
  }
  int n_;
  int i_ = 0;
  EchoRequest req_;
};

class UnaryClient final : public ClientUnaryReactor {
 public:
  UnaryClient(Channel* ch, ClientContext* ctx, const EchoRequest& req) {
    internal::ClientReactorAccess::BindUnary(this, ch, kEchoMethod, ctx, &req, &response);
    StartCall();
  }
  void OnDone(const absl::Status& s) override { done.Set(s); }
  EchoResponse response;
  DoneRecord done;
};

}  // namespace test
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_RPC_CALLBACK_SERVICES_H_
