// rdmarpc/generic_stub.h: calls by method name, without generated code,
// shaped like gRPC's grpc::GenericStub (grpcpp/generic/generic_stub.h) but
// taking any protobuf message in place of a ByteBuffer.
//
// The runtime sends and receives protobuf messages through
// google::protobuf::MessageLite, so a google::protobuf::DynamicMessage built
// from a descriptor the program learned at run time (from server reflection,
// a .proto parsed at run time) goes where a generated message would:
//
//   rdmarpc::GenericStub stub(channel);
//   std::unique_ptr<google::protobuf::Message> request(factory.GetPrototype(in)->New());
//   std::unique_ptr<google::protobuf::Message> response(factory.GetPrototype(out)->New());
//   rdmarpc::ClientContext ctx;
//   absl::Status s = stub.UnaryCall(&ctx, "/pkg.Service/Method", *request, response.get());
//
// The caller must choose the call kind that matches the method's definition
// (rpc M(stream A) returns (B) is ClientStreamingCall, ...), as a generated
// stub does. A unary call to a streaming method, or a stream to a unary one,
// fails INTERNAL ("... is a streaming method on this server but was called
// as a unary call"); between the three streaming kinds the server does not
// check, so a stream of the wrong one sees the handler's reads and writes
// as they come (a client-streaming handler called as server-streaming reads
// the one request and then the end). Messages that do not parse as the
// type given end the call with INTERNAL.
//
// Thread safety: a GenericStub may be used from many threads at once, as a
// generated stub; each call has its own ClientContext.
#ifndef RDMARPC_GENERIC_STUB_H_
#define RDMARPC_GENERIC_STUB_H_

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/impl/unary_call.h"
#include "rdmarpc/sync_stream.h"

namespace rdmarpc {

class GenericStub final {
 public:
  using Message = google::protobuf::MessageLite;

  // Shares ownership of `channel`.
  explicit GenericStub(std::shared_ptr<Channel> channel) : channel_(std::move(channel)) {}

  // Calls the unary method `method` ("/package.Service/Method") and blocks
  // for its response, parsed into `*response`. `request` must not change
  // until this returns. Returns what a generated stub's unary method returns
  // (rdmarpc/impl/unary_call.h: the handler's status, DEADLINE_EXCEEDED,
  // UNAVAILABLE, RESOURCE_EXHAUSTED, UNIMPLEMENTED for an unknown method,
  // INTERNAL for a payload that did not parse). Any thread except a
  // channel engine thread.
  absl::Status UnaryCall(ClientContext* context, absl::string_view method,
                         const Message& request, Message* response) {
    return internal::BlockingUnaryCall(channel_.get(), method, context, request, response);
  }

  // Opens a server-streaming call and sends `request` (serialised before
  // this returns). Read the responses, then Finish (rdmarpc/sync_stream.h).
  // `context` must outlive the reader.
  std::unique_ptr<ClientReaderInterface<Message>> ServerStreamingCall(
      ClientContext* context, absl::string_view method, const Message& request) {
    return std::make_unique<ClientReader<Message>>(channel_.get(), method, context, request);
  }

  // Opens a client-streaming call; its one response is parsed into
  // `*response` by a successful Finish. `context` and `response` must
  // outlive the writer.
  std::unique_ptr<ClientWriterInterface<Message>> ClientStreamingCall(
      ClientContext* context, absl::string_view method, Message* response) {
    return std::make_unique<ClientWriter<Message>>(channel_.get(), method, context, response);
  }

  // Opens a bidirectional-streaming call. `context` must outlive the stream.
  std::unique_ptr<ClientReaderWriterInterface<Message, Message>> BidiStreamingCall(
      ClientContext* context, absl::string_view method) {
    return std::make_unique<ClientReaderWriter<Message, Message>>(channel_.get(), method, context);
  }

 private:
  std::shared_ptr<Channel> channel_;
};

}  // namespace rdmarpc

#endif  // RDMARPC_GENERIC_STUB_H_
