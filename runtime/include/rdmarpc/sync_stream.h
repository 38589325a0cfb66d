// rdmarpc/sync_stream.h: blocking readers and writers of streaming calls,
// shaped like gRPC's (grpcpp/support/sync_stream.h).
//
// Client side, as the generated stubs hand them out:
//
//   // rpc ListFeatures(Rectangle) returns (stream Feature);
//   rdmarpc::ClientContext ctx;
//   std::unique_ptr<rdmarpc::ClientReaderInterface<Feature>> reader =
//       stub->ListFeatures(&ctx, rect);
//   Feature f;
//   while (reader->Read(&f)) { ... }
//   absl::Status s = reader->Finish();
//
//   // rpc RecordRoute(stream Point) returns (RouteSummary);
//   RouteSummary summary;
//   auto writer = stub->RecordRoute(&ctx, &summary);
//   for (const Point& p : points) if (!writer->Write(p)) break;
//   writer->WritesDone();
//   absl::Status s = writer->Finish();        // summary is filled when OK
//
//   // rpc RouteChat(stream RouteNote) returns (stream RouteNote);
//   auto stream = stub->RouteChat(&ctx);
//   std::thread writer([&] { for (...) stream->Write(note); stream->WritesDone(); });
//   RouteNote in;
//   while (stream->Read(&in)) { ... }
//   writer.join();
//   absl::Status s = stream->Finish();
//
// Server side, the handler's arguments:
//
//   absl::Status RecordRoute(rdmarpc::ServerContext* ctx,
//                            rdmarpc::ServerReader<Point>* reader,
//                            RouteSummary* summary) override;
//   absl::Status ListFeatures(rdmarpc::ServerContext* ctx, const Rectangle& rect,
//                             rdmarpc::ServerWriter<Feature>* writer) override;
//   absl::Status RouteChat(rdmarpc::ServerContext* ctx,
//                          rdmarpc::ServerReaderWriter<RouteNote, RouteNote>* stream) override;
//
// Attachments (rdmarpc/buffer.h): each stream message may carry one, bytes
// beside it that the runtime moves without serialising them (large ones by
// RDMA READ straight from the writer's Buffer). Write(message, buffer)
// sends one; Read(&message, &buffer) receives it (an empty Buffer when the
// message came without). A Read without the Buffer drops any that came.
// A server-streaming call's one request carries the ClientContext's
// request attachment (ServerContext::request_attachment).
//
//   rdmarpc::Buffer chunk = rdmarpc::Buffer::Allocate(4 << 20);
//   writer->Write(piece, chunk);                       // client
//   while (reader->Read(&piece, &chunk)) Store(chunk);  // server
//
// Every stream has flow control: a writer blocks while the reader has
// internal::kStreamWindow unread messages, and a reader that stops reading
// stops only its own writer. Threads: one thread may read while another
// writes; none of these may be called on a channel engine thread (i.e. from
// an asynchronous call's callback). A reader, writer or stream must not
// outlive its ClientContext; destroying one before Finish cancels the call.
#ifndef RDMARPC_SYNC_STREAM_H_
#define RDMARPC_SYNC_STREAM_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rdmarpc/buffer.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/impl/stream_call.h"

namespace rdmarpc {

// ---- client -----------------------------------------------------------------

// The client end of a server-streaming call.
template <class R>
class ClientReaderInterface {
 public:
  virtual ~ClientReaderInterface() = default;
  // Blocks for the next message; false once the server finished or the
  // call failed (then call Finish).
  virtual bool Read(R* message) = 0;
  // As Read; `*attachment` receives the bytes the server sent beside the
  // message (the caller's to keep), or becomes empty without any. The
  // default, for test doubles that implement only Read, yields none.
  virtual bool Read(R* message, Buffer* attachment) {
    *attachment = Buffer();
    return Read(message);
  }
  // Waits for the server's status; unread messages are dropped. Returns
  // the handler's status, or the call's failure (DEADLINE_EXCEEDED,
  // UNAVAILABLE, CANCELLED, RESOURCE_EXHAUSTED, INTERNAL for a message
  // that did not parse, UNIMPLEMENTED for an unknown method).
  virtual absl::Status Finish() = 0;
};

// The client end of a client-streaming call.
template <class W>
class ClientWriterInterface {
 public:
  virtual ~ClientWriterInterface() = default;
  // Sends one message; blocks while the server's window is full. False when
  // the stream ended (the server finished early, the call failed or was
  // cancelled): call Finish.
  virtual bool Write(const W& message) = 0;
  // As Write, with `attachment` beside the message (empty: none). The
  // runtime holds the Buffer's bytes until the server pulled them: treat
  // them as read-only until then, or Wrap memory to learn when. One above
  // max_message_bytes: returns false at once, and the call ends
  // RESOURCE_EXHAUSTED. Other failures to send it end the call later, on
  // the channel's thread (this and later Writes may still return true;
  // only Finish is sure to tell): FAILED_PRECONDITION when the server's
  // rdmarpc does not take stream attachments, RESOURCE_EXHAUSTED at the
  // connection's exposure cap (max_exposed_bytes_per_connection). The
  // default, for test doubles that implement only Write, sends the message
  // alone.
  virtual bool Write(const W& message, const Buffer& attachment) {
    (void)attachment;
    return Write(message);
  }
  // Tells the server no more messages follow. False when the stream ended.
  virtual bool WritesDone() = 0;
  // Half-closes if needed, then waits for the response (stored where the
  // stub method was told; its attachment, if the server set one, in the
  // ClientContext's response_attachment) and the server's status.
  virtual absl::Status Finish() = 0;
};

// The client end of a bidirectional-streaming call.
template <class W, class R>
class ClientReaderWriterInterface {
 public:
  virtual ~ClientReaderWriterInterface() = default;
  virtual bool Write(const W& message) = 0;
  // As ClientWriterInterface's and ClientReaderInterface's.
  virtual bool Write(const W& message, const Buffer& attachment) {
    (void)attachment;
    return Write(message);
  }
  virtual bool WritesDone() = 0;
  virtual bool Read(R* message) = 0;
  virtual bool Read(R* message, Buffer* attachment) {
    *attachment = Buffer();
    return Read(message);
  }
  virtual absl::Status Finish() = 0;
};

template <class R>
class ClientReader final : public ClientReaderInterface<R> {
 public:
  // Sends `request` and half-closes at once.
  template <class Req>
  ClientReader(Channel* channel, absl::string_view method, ClientContext* context,
               const Req& request)
      : stream_(channel, method, context, internal::RpcKind::kServerStreaming, &request) {}
  bool Read(R* message) override { return stream_.Read(message); }
  bool Read(R* message, Buffer* attachment) override { return stream_.Read(message, attachment); }
  absl::Status Finish() override { return stream_.Finish(); }

 private:
  internal::ClientStream stream_;
};

template <class W>
class ClientWriter final : public ClientWriterInterface<W> {
 public:
  // `response` receives the server's one message; it must outlive Finish.
  template <class Resp>
  ClientWriter(Channel* channel, absl::string_view method, ClientContext* context,
               Resp* response)
      : stream_(channel, method, context, internal::RpcKind::kClientStreaming, nullptr),
        response_(response) {}
  bool Write(const W& message) override { return stream_.Write(message); }
  bool Write(const W& message, const Buffer& attachment) override {
    return stream_.Write(message, attachment);
  }
  bool WritesDone() override { return stream_.WritesDone(); }
  absl::Status Finish() override {
    stream_.WritesDone();
    const bool got = stream_.ReadResponse(response_);
    absl::Status status = stream_.Finish();
    if (status.ok() && !got) {
      return absl::InternalError("the server finished OK without sending its response");
    }
    return status;
  }

 private:
  internal::ClientStream stream_;
  google::protobuf::MessageLite* response_;
};

template <class W, class R>
class ClientReaderWriter final : public ClientReaderWriterInterface<W, R> {
 public:
  ClientReaderWriter(Channel* channel, absl::string_view method, ClientContext* context)
      : stream_(channel, method, context, internal::RpcKind::kBidiStreaming, nullptr) {}
  bool Write(const W& message) override { return stream_.Write(message); }
  bool Write(const W& message, const Buffer& attachment) override {
    return stream_.Write(message, attachment);
  }
  bool WritesDone() override { return stream_.WritesDone(); }
  bool Read(R* message) override { return stream_.Read(message); }
  bool Read(R* message, Buffer* attachment) override { return stream_.Read(message, attachment); }
  absl::Status Finish() override { return stream_.Finish(); }

 private:
  internal::ClientStream stream_;
};

// ---- server -----------------------------------------------------------------

// What a client-streaming handler reads from.
template <class R>
class ServerReader final {
 public:
  explicit ServerReader(internal::ServerStream* stream) : stream_(stream) {}
  // Blocks for the client's next message; false once the client half-closed
  // and everything was read, or the call was cancelled.
  bool Read(R* message) { return stream_->Read(message); }
  // As Read; `*attachment` receives the bytes the client sent beside the
  // message (the handler's to keep, also past the call), or becomes empty
  // without any.
  bool Read(R* message, Buffer* attachment) { return stream_->Read(message, attachment); }

 private:
  internal::ServerStream* stream_;
};

// What a server-streaming handler writes to.
template <class W>
class ServerWriter final {
 public:
  explicit ServerWriter(internal::ServerStream* stream) : stream_(stream) {}
  // Sends one message; blocks while the client's window is full. False once
  // the call was cancelled (the handler should return).
  bool Write(const W& message) { return stream_->Write(message); }
  // As Write, with `attachment` beside the message (empty: none), held
  // until the client pulled it. A failure to send it ends the call with
  // that status in place of the handler's: RESOURCE_EXHAUSTED above
  // max_message_bytes (this Write returns false) or at the connection's
  // exposure cap, FAILED_PRECONDITION when the client's rdmarpc does not
  // take stream attachments (found later, on the worker: this Write may
  // return true).
  bool Write(const W& message, const Buffer& attachment) {
    return stream_->Write(message, attachment);
  }

 private:
  internal::ServerStream* stream_;
};

// What a bidirectional-streaming handler reads from and writes to; one
// thread may read while another writes.
template <class W, class R>
class ServerReaderWriter final {
 public:
  explicit ServerReaderWriter(internal::ServerStream* stream) : stream_(stream) {}
  bool Read(R* message) { return stream_->Read(message); }
  bool Read(R* message, Buffer* attachment) { return stream_->Read(message, attachment); }
  bool Write(const W& message) { return stream_->Write(message); }
  bool Write(const W& message, const Buffer& attachment) {
    return stream_->Write(message, attachment);
  }

 private:
  internal::ServerStream* stream_;
};

}  // namespace rdmarpc

#endif  // RDMARPC_SYNC_STREAM_H_
