// rdmarpc/server_callback.h: callback (reactor) services, shaped like gRPC's
// (grpcpp/support/server_callback.h). A method of a generated
// `S::CallbackService` returns a reactor; the call stays open until the
// reactor calls Finish, from any thread, so a handler may return at once
// and answer later without holding a thread.
//
//   class RouteGuideImpl final : public RouteGuide::CallbackService {
//     rdmarpc::ServerUnaryReactor* GetFeature(rdmarpc::CallbackServerContext* ctx,
//                                             const Point* point,
//                                             Feature* feature) override {
//       *feature = Lookup(*point);
//       rdmarpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
//       reactor->Finish(absl::OkStatus());  // or later, from another thread
//       return reactor;
//     }
//     rdmarpc::ServerWriteReactor<Feature>* ListFeatures(
//         rdmarpc::CallbackServerContext* ctx, const Rectangle* rect) override {
//       class Lister final : public rdmarpc::ServerWriteReactor<Feature> {
//        public:
//         explicit Lister(std::vector<Feature> f) : f_(std::move(f)) { Next(); }
//         void OnWriteDone(bool ok) override {
//           if (!ok) { Finish(absl::CancelledError("write failed")); return; }
//           Next();
//         }
//         void OnDone() override { delete this; }
//        private:
//         void Next() {
//           if (i_ == f_.size()) { Finish(absl::OkStatus()); return; }
//           StartWrite(&f_[i_++]);
//         }
//         std::vector<Feature> f_;
//         size_t i_ = 0;
//       };
//       return new Lister(FeaturesIn(*rect));
//     }
//   };
//
// Rules, as gRPC's:
// - Every call must be finished with Finish (or StartWriteAndFinish), once,
//   also after OnCancel; OnDone runs after that answer went out (or was
//   dropped because the call was cancelled) and every started operation
//   reacted. OnDone is the last touch of the reactor: it may delete it.
// - At most one read and one write may be outstanding at a time.
// - Operations may be started in the reactor's constructor, before the
//   method returned it: they run once the runtime has it.
// - The method may return nullptr: the call then finishes UNIMPLEMENTED.
//
// Threads: the service method runs on the server's handler pool (inline on
// the worker thread when the method is marked run_inline: the IDL option
// allows it on unary methods; services/health's handler sets it for the
// server-streaming Watch); it must not block either way, since the reactor
// carries the call. Start*, Finish may be called from any thread and never
// block; they never run a reaction inline. Reactions (the On* methods) run on the
// worker thread that owns the call's connection, one at a time per call;
// a reaction must not block (it holds up every call of that worker): hand
// slow work to threads of your own and Finish from there.
//
// Cancellation: when the client cancels (TryCancel, its deadline), its
// connection is lost, or Server::Shutdown's grace ran out, OnCancel runs
// once (CallbackServerContext::IsCancelled() is true), operations pending
// or started later react with ok = false, and the status Finish gives is
// dropped (the client was answered CANCELLED or UNAVAILABLE already).
// Server::Shutdown waits, within its grace, for callback calls to finish;
// then it cancels them and waits for their OnDone.
#ifndef RDMARPC_SERVER_CALLBACK_H_
#define RDMARPC_SERVER_CALLBACK_H_

#include <utility>

#include "absl/status/status.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/export.h"
#include "rdmarpc/impl/callback_call.h"
#include "rdmarpc/server_context.h"

namespace rdmarpc {

// The reactor of a unary call.
class ServerUnaryReactor : public internal::ServerReactorBase {
 public:
  // Sends the context's initial metadata now. A unary answer carries its
  // initial metadata, so this only fixes what is sent: entries added later
  // are not. OnSendInitialMetadataDone(true), or false when cancelled.
  void StartSendInitialMetadata() { StartSendInitialMetadataOp(); }
  // Answers the call: the response (the method's `response` argument) when
  // `status` is OK, else `status` with its message and payloads. The answer
  // is posted when this is called, not when the method returns. Any
  // thread; once.
  void Finish(absl::Status status) { FinishOp(std::move(status)); }

  virtual void OnSendInitialMetadataDone(bool /*ok*/) {}
  // The call was cancelled (see the top of this file); Finish is still
  // needed. At most once.
  virtual void OnCancel() {}
  // Last; may delete the reactor.
  virtual void OnDone() {}

 private:
  void ReactSendInitialMetadata(bool ok) final { OnSendInitialMetadataDone(ok); }
  void ReactCancel() final { OnCancel(); }
  void ReactDone() final { OnDone(); }
};

// The reactor of a client-streaming call (the client writes, this reads).
template <class Req>
class ServerReadReactor : public internal::ServerReactorBase {
 public:
  void StartSendInitialMetadata() { StartSendInitialMetadataOp(); }
  // Reads the client's next message into `*message` (valid until
  // OnReadDone). OnReadDone(false): the client half-closed and everything
  // was read, the call was cancelled, or a message did not parse (then the
  // call ends INTERNAL whatever Finish says).
  void StartRead(Req* message) { StartReadOp(message); }
  // As StartRead; `*attachment` (valid until OnReadDone) receives the bytes
  // the client sent beside the message (rdmarpc/buffer.h; the reactor's to
  // keep), or becomes empty without any.
  void StartRead(Req* message, Buffer* attachment) { StartReadOp(message, attachment); }
  // Answers: with OK, the method's `response` goes to the client first.
  void Finish(absl::Status status) { FinishOp(std::move(status)); }

  virtual void OnSendInitialMetadataDone(bool /*ok*/) {}
  virtual void OnReadDone(bool /*ok*/) {}
  virtual void OnCancel() {}
  virtual void OnDone() {}

 private:
  void ReactSendInitialMetadata(bool ok) final { OnSendInitialMetadataDone(ok); }
  void ReactRead(bool ok) final { OnReadDone(ok); }
  void ReactCancel() final { OnCancel(); }
  void ReactDone() final { OnDone(); }
};

// The reactor of a server-streaming call (this writes).
template <class Resp>
class ServerWriteReactor : public internal::ServerReactorBase {
 public:
  void StartSendInitialMetadata() { StartSendInitialMetadataOp(); }
  // Sends `*message` (valid until OnWriteDone; serialised once the reactor
  // is bound). OnWriteDone(true) once it went to the connection, delayed
  // while the client has kStreamWindow unread messages; false when the
  // call was cancelled or the message is over max_message_bytes (then the
  // call ends RESOURCE_EXHAUSTED whatever Finish says).
  void StartWrite(const Resp* message) { StartWriteOp(*message); }
  // As StartWrite, with `attachment` beside the message (empty: none; held
  // until the client pulled it). A failure to send it ends the call with
  // that status whatever Finish says (FAILED_PRECONDITION for a client
  // whose rdmarpc does not take stream attachments, RESOURCE_EXHAUSTED
  // above max_message_bytes or the connection's exposure cap).
  void StartWrite(const Resp* message, const Buffer& attachment) {
    StartWriteOp(*message, attachment);
  }
  // A last write and Finish in one step; no OnWriteDone.
  void StartWriteAndFinish(const Resp* message, absl::Status status) {
    StartWriteAndFinishOp(*message, std::move(status));
  }
  void StartWriteAndFinish(const Resp* message, absl::Status status, const Buffer& attachment) {
    StartWriteAndFinishOp(*message, std::move(status), attachment);
  }
  // Ends the stream with `status`, after every write started before it.
  void Finish(absl::Status status) { FinishOp(std::move(status)); }

  virtual void OnSendInitialMetadataDone(bool /*ok*/) {}
  virtual void OnWriteDone(bool /*ok*/) {}
  virtual void OnCancel() {}
  virtual void OnDone() {}

 private:
  void ReactSendInitialMetadata(bool ok) final { OnSendInitialMetadataDone(ok); }
  void ReactWrite(bool ok) final { OnWriteDone(ok); }
  void ReactCancel() final { OnCancel(); }
  void ReactDone() final { OnDone(); }
};

// The reactor of a bidirectional-streaming call; a read and a write may be
// outstanding at the same time.
template <class Req, class Resp>
class ServerBidiReactor : public internal::ServerReactorBase {
 public:
  void StartSendInitialMetadata() { StartSendInitialMetadataOp(); }
  void StartRead(Req* message) { StartReadOp(message); }
  void StartRead(Req* message, Buffer* attachment) { StartReadOp(message, attachment); }
  void StartWrite(const Resp* message) { StartWriteOp(*message); }
  void StartWrite(const Resp* message, const Buffer& attachment) {
    StartWriteOp(*message, attachment);
  }
  void StartWriteAndFinish(const Resp* message, absl::Status status) {
    StartWriteAndFinishOp(*message, std::move(status));
  }
  void StartWriteAndFinish(const Resp* message, absl::Status status, const Buffer& attachment) {
    StartWriteAndFinishOp(*message, std::move(status), attachment);
  }
  void Finish(absl::Status status) { FinishOp(std::move(status)); }

  virtual void OnSendInitialMetadataDone(bool /*ok*/) {}
  virtual void OnReadDone(bool /*ok*/) {}
  virtual void OnWriteDone(bool /*ok*/) {}
  virtual void OnCancel() {}
  virtual void OnDone() {}

 private:
  void ReactSendInitialMetadata(bool ok) final { OnSendInitialMetadataDone(ok); }
  void ReactRead(bool ok) final { OnReadDone(ok); }
  void ReactWrite(bool ok) final { OnWriteDone(ok); }
  void ReactCancel() final { OnCancel(); }
  void ReactDone() final { OnDone(); }
};

// What a callback method knows about its call: a ServerContext (metadata,
// deadline, IsCancelled, AddOnCancelCallback) that lives until the
// reactor's OnDone, plus a ready-made unary reactor.
class RDMARPC_EXPORT CallbackServerContext : public ServerContext {
 public:
  CallbackServerContext() = default;

  // A reactor for a unary method that needs no reactions of its own: call
  // its Finish (now or later, any thread) and return it. Owned by the
  // context. Unary methods only; one per call.
  ServerUnaryReactor* DefaultReactor() { return &default_reactor_; }

 private:
  ServerUnaryReactor default_reactor_;
};

}  // namespace rdmarpc

#endif  // RDMARPC_SERVER_CALLBACK_H_
