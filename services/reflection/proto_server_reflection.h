// proto_server_reflection.h: gRPC's server reflection,
// grpc.reflection.v1.ServerReflection and its predecessor
// grpc.reflection.v1alpha.ServerReflection (grpc/reflection/{v1,v1alpha}/
// reflection.proto, verbatim copies of gRPC's), for rdmarpc servers, so a
// tool can list a server's services and fetch the .proto descriptors it
// needs to call them.
//
//   rdmarpc::Server server;
//   server.AddService(&my_service);
//   rdmarpc::reflection::ProtoServerReflection reflection;
//   absl::Status s = reflection.AddToServer(&server);   // both versions
//   if (s.ok()) s = server.Start("0.0.0.0:7000");
//
// Clients use the generated stubs, ::grpc::reflection::v1::ServerReflection::Stub
// ("grpc/reflection/v1/reflection.rdmarpc.pb.h", or v1alpha), as gRPC
// clients use gRPC's. ServerReflectionInfo is a bidirectional stream: each
// ServerReflectionRequest gets one ServerReflectionResponse, in order, with
// valid_host = the request's host and original_request = the request:
//   list_services -> list_services_response: every service registered with
//       the server (Server::GetServiceNames), sorted by full name, these
//       two included.
//   file_by_filename, file_containing_symbol (a service, method
//       "pkg.Service.Method", message, field, enum, enum value),
//       file_containing_extension -> file_descriptor_response: serialised
//       FileDescriptorProtos, the file first, then its imports, direct or
//       not, each once per response (as gRPC's C++ server, so every answer
//       stands alone).
//   all_extension_numbers_of_type -> all_extension_numbers_response, numbers
//       ascending.
//   An unknown file, symbol, type or extension -> error_response with
//       error_code NOT_FOUND (5) and a message naming it; a request with no
//       field of message_request this server knows -> UNIMPLEMENTED (12).
// The call ends OK once the client half-closes (WritesDone) and every
// answer went out; CANCELLED when an answer cannot be sent; the stream's
// own failures (UNAVAILABLE, RESOURCE_EXHAUSTED for a response over
// max_message_bytes) as any call's.
//
// What it knows: the descriptors of `pool`, by default protobuf's
// generated_pool(), which holds every .proto compiled into the binary (each
// generated .pb.cc registers its file at start-up). A service registered
// by hand from a .proto whose .pb.cc is linked (grpc.health.v1.Health) is
// found like a generated one.
//
// Threads: the methods are callback (reactor) methods; an open stream holds
// no thread. Each answer is looked up and serialised on the worker thread
// that owns the call's connection: descriptor lookups and copying a few
// FileDescriptorProtos, measured in the Debug+ASan build on the 2-vCPU VM
// at 0.2 ms for a 3-file answer of 1.2 KB and 0.5 ms for descriptor.proto
// (6 KB), 1 to 5 ms for the first lookup that makes the pool build a
// file's descriptors. gRPC's ProtoServerReflection is a synchronous
// handler instead, holding a thread per open stream.
//
// Lifetime: this object must outlive the Server it was added to (the
// Server must have shut down, Server::Wait returned, before it is
// destroyed); open streams end when Server::Shutdown's grace runs out.
#ifndef RDMARPC_SERVICES_REFLECTION_PROTO_SERVER_REFLECTION_H_
#define RDMARPC_SERVICES_REFLECTION_PROTO_SERVER_REFLECTION_H_

#include <memory>

#include "absl/status/status.h"
#include "google/protobuf/descriptor.h"
#include "rdmarpc/rdmarpc.h"
#include "reflection/reflection_backend.h"

namespace rdmarpc {
namespace reflection {

// Both reflection services over one descriptor pool. Not copyable.
class ProtoServerReflection final {
 public:
  // The full service names, as clients call them.
  static constexpr char kV1ServiceName[] = "grpc.reflection.v1.ServerReflection";
  static constexpr char kV1AlphaServiceName[] = "grpc.reflection.v1alpha.ServerReflection";

  // `pool` is not owned and must outlive this object; the default, the
  // generated pool, lives for the whole process.
  explicit ProtoServerReflection(
      const google::protobuf::DescriptorPool* pool =
          google::protobuf::DescriptorPool::generated_pool());
  ~ProtoServerReflection();
  ProtoServerReflection(const ProtoServerReflection&) = delete;
  ProtoServerReflection& operator=(const ProtoServerReflection&) = delete;

  // Registers grpc.reflection.v1.ServerReflection and
  // grpc.reflection.v1alpha.ServerReflection with `server`, whose services
  // list_services then names. `server` is not owned; this object must
  // outlive it (see Lifetime above). Call before server->Start, from the thread that adds the
  // other services; services added later are listed too.
  // Returns FAILED_PRECONDITION when this object was added to a server
  // already or `server` has started, ALREADY_EXISTS when `server` has a
  // service of either name (then neither is added).
  absl::Status AddToServer(Server* server);
  // As AddToServer, registering grpc.reflection.v1alpha only: a server that
  // looks like one from before gRPC added v1 (for testing clients' fallback).
  absl::Status AddV1AlphaOnlyToServer(Server* server);

 private:
  absl::Status Add(Server* server, bool with_v1);
  ReflectionBackend backend_;
  std::unique_ptr<Service> v1_;
  std::unique_ptr<Service> v1alpha_;
  bool added_ = false;
};

}  // namespace reflection
}  // namespace rdmarpc

#endif  // RDMARPC_SERVICES_REFLECTION_PROTO_SERVER_REFLECTION_H_
