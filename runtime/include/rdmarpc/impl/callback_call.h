// rdmarpc/impl/callback_call.h: the runtime's objects under the reactors of
// rdmarpc/client_callback.h and rdmarpc/server_callback.h. Not for direct
// use: derive from the reactors instead.
//
// A reactor's operations (StartRead, StartWrite, Finish, ...) go to the
// call's stream state in the runtime (runtime/rpc/client_stream.h,
// server_stream.h), the same state the blocking readers and writers use;
// where a blocking Read waits, a reactor's StartRead leaves a pending
// operation that the completion upcall finishes and reacts to.
#ifndef RDMARPC_IMPL_CALLBACK_CALL_H_
#define RDMARPC_IMPL_CALLBACK_CALL_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/buffer.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/export.h"
#include "rdmarpc/impl/stream_call.h"

namespace rdmarpc {
namespace internal {

class ClientStreamState;   // runtime/rpc/client_stream.h
class ServerCallbackCall;  // runtime/rpc/server_callback.h
class ClientReactorAccess;
class ServerReactorAccess;

// ---- client -------------------------------------------------------------------

// What the runtime calls on a client streaming reactor; each public reactor
// forwards the reactions of its kind to its On* methods. Runs on the thread
// polling the channel.
class ClientReactorBase {
 public:
  virtual ~ClientReactorBase() = default;

 private:
  friend class ClientReactorAccess;
  virtual void ReactInitialMetadata(bool ok) = 0;
  virtual void ReactRead(bool /*ok*/) {}
  virtual void ReactWrite(bool /*ok*/) {}
  virtual void ReactWritesDone(bool /*ok*/) {}
  virtual void ReactDone(const absl::Status& status) = 0;
};

// A client reactor's end of its stream: a handle on the stream's shared
// state, made by Bind (from a generated stub's async() method).
class RDMARPC_EXPORT ClientCallbackStream {
 public:
  ClientCallbackStream() = default;
  ClientCallbackStream(const ClientCallbackStream&) = delete;
  ClientCallbackStream& operator=(const ClientCallbackStream&) = delete;

  // Prepares a stream of `kind` to `method` whose reactions go to
  // `reactor`; nothing is sent before StartCall. `first` (server streaming:
  // the one request) is serialised before this returns. `response` (client
  // streaming: where the server's one message is parsed) must outlive the
  // reactor's OnDone. `channel` and `context` must outlive OnDone too.
  static void Bind(ClientReactorBase* reactor, Channel* channel, absl::string_view method,
                   ClientContext* context, RpcKind kind,
                   const google::protobuf::MessageLite* first,
                   google::protobuf::MessageLite* response);

  // See ClientBidiReactor. Any thread; the reactions run on the thread
  // polling the channel, never inside these calls.
  void StartCall();
  // `attachment` (may be null) receives the bytes sent beside the
  // message read; it must stay valid until OnReadDone.
  void Read(google::protobuf::MessageLite* message, Buffer* attachment = nullptr);
  void Write(const google::protobuf::MessageLite& message, bool last,
             const Buffer& attachment = Buffer());
  void WritesDone();
  void AddHolds(int holds);
  void RemoveHold();

 private:
  std::shared_ptr<ClientStreamState> state_;
};

// ---- server -------------------------------------------------------------------

// The operations every server reactor has, kept until the runtime binds
// the reactor to its call (a reactor may start them in its constructor,
// before the service method returned it), then forwarded. What the runtime
// calls back runs on the worker thread that owns the call's connection.
class RDMARPC_EXPORT ServerReactorBase {
 public:
  virtual ~ServerReactorBase() = default;

 protected:
  ServerReactorBase() = default;
  // Any thread. A written `message` must stay valid until the write
  // reacted (it is serialised once the reactor is bound); `attachment`
  // goes beside it. A read's `attachment` (may be null) receives the bytes
  // sent beside the message and must stay valid until the read reacted.
  void StartSendInitialMetadataOp();
  void StartReadOp(google::protobuf::MessageLite* message, Buffer* attachment = nullptr);
  void StartWriteOp(const google::protobuf::MessageLite& message,
                    const Buffer& attachment = Buffer());
  void StartWriteAndFinishOp(const google::protobuf::MessageLite& message, absl::Status status,
                             const Buffer& attachment = Buffer());
  void FinishOp(absl::Status status);

 private:
  friend class ServerReactorAccess;
  virtual void ReactSendInitialMetadata(bool /*ok*/) {}
  virtual void ReactRead(bool /*ok*/) {}
  virtual void ReactWrite(bool /*ok*/) {}
  virtual void ReactCancel() = 0;
  virtual void ReactDone() = 0;

  // Operations started before Bind; gRPC's reactors keep the same backlog.
  struct Backlog {
    bool send_initial_metadata = false;
    google::protobuf::MessageLite* read = nullptr;
    Buffer* read_attachment = nullptr;
    const google::protobuf::MessageLite* write = nullptr;
    Buffer write_attachment;
    bool write_and_finish = false;  // `write` goes with the finish, unreacted
    bool finish = false;
    absl::Status finish_status;
  };
  // Worker or pool thread: forwards the backlog, then everything else.
  void Bind(ServerCallbackCall* call);

  absl::Mutex mu_;
  ServerCallbackCall* call_ ABSL_GUARDED_BY(mu_) = nullptr;
  Backlog backlog_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_IMPL_CALLBACK_CALL_H_
