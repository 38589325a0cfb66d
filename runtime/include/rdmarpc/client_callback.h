// rdmarpc/client_callback.h: callback (reactor) clients, shaped like gRPC's
// (grpcpp/support/client_callback.h). A reactor is an object the user
// derives from; the call runs without blocking any thread, and the runtime
// calls the reactor's On* methods as its operations complete.
//
//   // rpc ListFeatures(Rectangle) returns (stream Feature);
//   class Lister final : public rdmarpc::ClientReadReactor<Feature> {
//    public:
//     Lister(RouteGuide::Stub* stub, const Rectangle& rect) {
//       stub->async()->ListFeatures(&ctx_, &rect, this);
//       StartRead(&feature_);
//       StartCall();
//     }
//     void OnReadDone(bool ok) override {
//       if (!ok) return;          // the stream ended: OnDone follows
//       Use(feature_);
//       StartRead(&feature_);     // the next one
//     }
//     void OnDone(const absl::Status& s) override { status_ = s; done_.Notify(); }
//    private:
//     rdmarpc::ClientContext ctx_;
//     Feature feature_;
//     ...
//   };
//
// Rules, as gRPC's:
// - The generated `stub->async()->Method(context, ..., reactor)` binds the
//   reactor to a new call; nothing is sent before StartCall. Operations may
//   be started before StartCall (they run once it is called).
// - At most one read and one write (or writes-done) may be outstanding at
//   a time: start the next one from the reaction of the last.
// - OnDone runs exactly once, last: after the call ended (its status is
//   known), every started operation reacted and every hold was removed.
//   Nothing of the reactor is touched after OnDone begins, so OnDone may
//   delete the reactor. No operation may be started after OnDone.
// - An operation started outside a reaction of the same reactor must hold
//   the reactor (AddHold before StartCall, RemoveHold once started), or
//   OnDone may already have run.
//
// Threads: Start*, AddHold and RemoveHold may be called from any thread and
// never block; they never run a reaction inline. Reactions (the On*
// methods) run on the thread polling the channel: one of its engine
// threads, or a thread waiting in a blocking unary call on the same
// channel. A reaction must not block (it holds up every call of that
// thread); it may start operations, and may start new calls on any
// channel. Reactions of one reactor never run at the same time.
//
// Status codes in OnDone: the server's status, or DEADLINE_EXCEEDED (the
// context's deadline passed), CANCELLED (ClientContext::TryCancel),
// UNAVAILABLE (no connection, or it was lost or the server shut down: safe
// to retry idempotent calls), RESOURCE_EXHAUSTED (a message over
// max_message_bytes, or the server sent beyond its flow-control window),
// INTERNAL (a message that did not parse), UNIMPLEMENTED (no such method).
#ifndef RDMARPC_CLIENT_CALLBACK_H_
#define RDMARPC_CLIENT_CALLBACK_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/impl/callback_call.h"
#include "rdmarpc/impl/unary_call.h"

namespace rdmarpc {

class ClientUnaryReactor;

namespace internal {
// Generated stubs' access to the reactors' binding (the reactors expose no
// runtime plumbing).
class ClientReactorAccess {
 public:
  static void BindUnary(ClientUnaryReactor* reactor, Channel* channel, absl::string_view method,
                        ClientContext* context, const google::protobuf::MessageLite* request,
                        google::protobuf::MessageLite* response,
                        const MethodConfig* idl_config = nullptr);
  static ClientCallbackStream* Stream(ClientReactorBase* reactor);
  static void ReactInitialMetadata(ClientReactorBase* r, bool ok) {
    r->ReactInitialMetadata(ok);
  }
  static void ReactRead(ClientReactorBase* r, bool ok) { r->ReactRead(ok); }
  static void ReactWrite(ClientReactorBase* r, bool ok) { r->ReactWrite(ok); }
  static void ReactWritesDone(ClientReactorBase* r, bool ok) { r->ReactWritesDone(ok); }
  static void ReactDone(ClientReactorBase* r, const absl::Status& s) { r->ReactDone(s); }
};

// The operations and holds the streaming reactors share.
class ClientStreamingReactor : public ClientReactorBase {
 protected:
  ClientCallbackStream& stream() { return stream_; }

 private:
  friend class ClientReactorAccess;
  ClientCallbackStream stream_;
};

inline ClientCallbackStream* ClientReactorAccess::Stream(ClientReactorBase* reactor) {
  return &static_cast<ClientStreamingReactor*>(reactor)->stream_;
}
}  // namespace internal

// A unary call: stub->async()->Method(&context, &request, &response, this),
// then StartCall().
class ClientUnaryReactor {
 public:
  virtual ~ClientUnaryReactor() = default;

  // Sends the request. `request` (given to the stub's async() method) is
  // serialised before this returns and may be freed then; `context` and
  // `response` must stay alive until OnDone. Any thread; once only. A call
  // that fails before anything is sent (deadline passed, bad metadata, a
  // request over max_message_bytes) reacts on a channel thread too, never
  // inside this call.
  void StartCall() {
    internal::AsyncUnaryCallNeverInline(channel_, method_, context_, *request_, response_,
                             [this](absl::Status status) {
                               OnReadInitialMetadataDone(status.ok());
                               OnDone(status);
                             },
                             idl_config_);
  }

  // A unary response carries the server's initial metadata
  // (ClientContext::GetServerInitialMetadata), so this runs right before
  // OnDone; `ok` is whether the call succeeded.
  virtual void OnReadInitialMetadataDone(bool /*ok*/) {}
  // The call's status (see the top of this file); `*response` is filled in
  // when it is OK. Runs exactly once.
  virtual void OnDone(const absl::Status& /*status*/) {}

 private:
  friend class internal::ClientReactorAccess;
  Channel* channel_ = nullptr;
  absl::string_view method_;
  ClientContext* context_ = nullptr;
  const google::protobuf::MessageLite* request_ = nullptr;
  google::protobuf::MessageLite* response_ = nullptr;
  const internal::MethodConfig* idl_config_ = nullptr;
};

inline void internal::ClientReactorAccess::BindUnary(ClientUnaryReactor* reactor,
                                                     Channel* channel, absl::string_view method,
                                                     ClientContext* context,
                                                     const google::protobuf::MessageLite* request,
                                                     google::protobuf::MessageLite* response,
                                                     const MethodConfig* idl_config) {
  reactor->channel_ = channel;
  reactor->method_ = method;
  reactor->context_ = context;
  reactor->request_ = request;
  reactor->response_ = response;
  reactor->idl_config_ = idl_config;
}

// A bidirectional-streaming call: stub->async()->Method(&context, this).
template <class W, class R>
class ClientBidiReactor : public internal::ClientStreamingReactor {
 public:
  // Opens the stream (HEADERS go out). Any thread; once only.
  void StartCall() { stream().StartCall(); }
  // Reads the server's next message into `*message` (which must stay valid
  // until OnReadDone). OnReadDone(false): the server finished, or the call
  // ended (OnDone tells why).
  void StartRead(R* message) { stream().Read(message); }
  // As StartRead; `*attachment` (valid until OnReadDone) receives the bytes
  // the server sent beside the message (rdmarpc/buffer.h), or becomes
  // empty without any.
  void StartRead(R* message, Buffer* attachment) { stream().Read(message, attachment); }
  // Sends `*message`, serialised before this returns (it may be reused at
  // once). OnWriteDone(true) once it went to the connection: flow control
  // delays that while the server has kStreamWindow unread messages; false
  // when the call ended or was half-closed.
  void StartWrite(const W* message) { stream().Write(*message, /*last=*/false); }
  // As StartWrite, with `attachment` beside the message (empty: none; held
  // until the server pulled it). A failure to send it ends the call
  // (OnDone: FAILED_PRECONDITION for a server whose rdmarpc does not take
  // stream attachments, RESOURCE_EXHAUSTED above max_message_bytes).
  void StartWrite(const W* message, const Buffer& attachment) {
    stream().Write(*message, /*last=*/false, attachment);
  }
  // StartWrite and the half-close in one frame; only OnWriteDone reacts.
  void StartWriteLast(const W* message) { stream().Write(*message, /*last=*/true); }
  void StartWriteLast(const W* message, const Buffer& attachment) {
    stream().Write(*message, /*last=*/true, attachment);
  }
  // Half-closes (after any write started before it); OnWritesDoneDone.
  void StartWritesDone() { stream().WritesDone(); }
  // Holds keep OnDone from running (see the top of this file). Any thread.
  void AddHold() { AddMultipleHolds(1); }
  void AddMultipleHolds(int holds) { stream().AddHolds(holds); }
  void RemoveHold() { stream().RemoveHold(); }

  // Reactions: on the thread polling the channel; must not block.
  // The server's initial metadata arrived (ClientContext::
  // GetServerInitialMetadata is set; true) or the call ended without a word
  // from the server (false). Once, before any OnReadDone(true).
  virtual void OnReadInitialMetadataDone(bool /*ok*/) {}
  virtual void OnReadDone(bool /*ok*/) {}
  virtual void OnWriteDone(bool /*ok*/) {}
  virtual void OnWritesDoneDone(bool /*ok*/) {}
  // The call's status; runs exactly once, last (see the top of this file).
  virtual void OnDone(const absl::Status& /*status*/) {}

 private:
  void ReactInitialMetadata(bool ok) final { OnReadInitialMetadataDone(ok); }
  void ReactRead(bool ok) final { OnReadDone(ok); }
  void ReactWrite(bool ok) final { OnWriteDone(ok); }
  void ReactWritesDone(bool ok) final { OnWritesDoneDone(ok); }
  void ReactDone(const absl::Status& status) final { OnDone(status); }
};

// A server-streaming call: stub->async()->Method(&context, &request, this).
// `request` is serialised by that call (it may be freed when it returns)
// and goes with StartCall; the client's side is then closed.
template <class R>
class ClientReadReactor : public internal::ClientStreamingReactor {
 public:
  // As ClientBidiReactor's.
  void StartCall() { stream().StartCall(); }
  void StartRead(R* message) { stream().Read(message); }
  void StartRead(R* message, Buffer* attachment) { stream().Read(message, attachment); }
  void AddHold() { AddMultipleHolds(1); }
  void AddMultipleHolds(int holds) { stream().AddHolds(holds); }
  void RemoveHold() { stream().RemoveHold(); }

  virtual void OnReadInitialMetadataDone(bool /*ok*/) {}
  virtual void OnReadDone(bool /*ok*/) {}
  virtual void OnDone(const absl::Status& /*status*/) {}

 private:
  void ReactInitialMetadata(bool ok) final { OnReadInitialMetadataDone(ok); }
  void ReactRead(bool ok) final { OnReadDone(ok); }
  void ReactDone(const absl::Status& status) final { OnDone(status); }
};

// A client-streaming call: stub->async()->Method(&context, &response, this).
// `response` is filled in when OnDone's status is OK (INTERNAL when the
// server finished OK without one).
template <class W>
class ClientWriteReactor : public internal::ClientStreamingReactor {
 public:
  // As ClientBidiReactor's.
  void StartCall() { stream().StartCall(); }
  void StartWrite(const W* message) { stream().Write(*message, /*last=*/false); }
  void StartWrite(const W* message, const Buffer& attachment) {
    stream().Write(*message, /*last=*/false, attachment);
  }
  void StartWriteLast(const W* message) { stream().Write(*message, /*last=*/true); }
  void StartWriteLast(const W* message, const Buffer& attachment) {
    stream().Write(*message, /*last=*/true, attachment);
  }
  void StartWritesDone() { stream().WritesDone(); }
  void AddHold() { AddMultipleHolds(1); }
  void AddMultipleHolds(int holds) { stream().AddHolds(holds); }
  void RemoveHold() { stream().RemoveHold(); }

  virtual void OnReadInitialMetadataDone(bool /*ok*/) {}
  virtual void OnWriteDone(bool /*ok*/) {}
  virtual void OnWritesDoneDone(bool /*ok*/) {}
  virtual void OnDone(const absl::Status& /*status*/) {}

 private:
  void ReactInitialMetadata(bool ok) final { OnReadInitialMetadataDone(ok); }
  void ReactWrite(bool ok) final { OnWriteDone(ok); }
  void ReactWritesDone(bool ok) final { OnWritesDoneDone(ok); }
  void ReactDone(const absl::Status& status) final { OnDone(status); }
};

}  // namespace rdmarpc

#endif  // RDMARPC_CLIENT_CALLBACK_H_
