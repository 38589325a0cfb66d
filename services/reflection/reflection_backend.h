// reflection_backend.h: the answers of gRPC's server reflection protocol
// (grpc.reflection.v1 and v1alpha, which ask and answer the same), looked up
// in a protobuf DescriptorPool and a Server's list of services. The stream
// and the wire messages are proto_server_reflection.cc's; this type knows
// only descriptors, so it is tested without a server.
//
//   ReflectionBackend backend(google::protobuf::DescriptorPool::generated_pool());
//   backend.set_server(&server);
//   absl::StatusOr<std::vector<std::string>> files =
//       backend.FileContainingSymbol("my.pkg.MyService.MyMethod");
//   // files->front() is the serialised FileDescriptorProto declaring it,
//   // then each file it imports, directly or not, once.
//
// File answers are serialised google.protobuf.FileDescriptorProto messages
// (FileDescriptor::CopyTo, without source info), the file asked for first,
// then its imports depth first in declaration order, each file once per
// answer, as gRPC's C++ ProtoServerReflection fills a FileDescriptorResponse.
//
// Status codes (the same a gRPC server puts in ErrorResponse.error_code):
//   NOT_FOUND: the file, symbol, type or extension is not in the pool (or no
//       server was set for ListServices); the message names what was asked
//       for. Retrying does not help: the pool is fixed for a process's life.
//
// Threads: every method is const and may be called from any thread at
// once (DescriptorPool lookups lock the pool; generated_pool() builds a
// file's descriptors on the first lookup that needs them).
#ifndef RDMARPC_SERVICES_REFLECTION_REFLECTION_BACKEND_H_
#define RDMARPC_SERVICES_REFLECTION_REFLECTION_BACKEND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"
#include "rdmarpc/server.h"

namespace rdmarpc {
namespace reflection {

class ReflectionBackend {
 public:
  // `pool` is not owned and must outlive this object.
  explicit ReflectionBackend(const google::protobuf::DescriptorPool* pool) : pool_(pool) {}
  ReflectionBackend(const ReflectionBackend&) = delete;
  ReflectionBackend& operator=(const ReflectionBackend&) = delete;

  // The server whose services ListServices names; not owned, it must
  // outlive this object. Set before the server starts (before any other
  // thread calls ListServices).
  void set_server(const Server* server) { server_ = server; }

  // Server::GetServiceNames of the server set: sorted full names.
  // NOT_FOUND when no server was set.
  absl::StatusOr<std::vector<std::string>> ListServices() const;

  // The file called `filename` ("grpc/health/v1/health.proto": the path it
  // was compiled under) and its imports. NOT_FOUND when the pool has none.
  absl::StatusOr<std::vector<std::string>> FileByFilename(const std::string& filename) const;

  // The file that declares `symbol`, a fully qualified name of a service,
  // method ("pkg.Service.Method"), message, field, enum, enum value or
  // extension ("pkg.Message.Nested.field"), and its imports. NOT_FOUND
  // when the pool knows no such symbol.
  absl::StatusOr<std::vector<std::string>> FileContainingSymbol(const std::string& symbol) const;

  // The file that declares the extension numbered `number` of the message
  // type `containing_type` ("pkg.Message"), and its imports. NOT_FOUND
  // when the type, or such an extension of it, is unknown.
  absl::StatusOr<std::vector<std::string>> FileContainingExtension(
      const std::string& containing_type, int32_t number) const;

  // The numbers of every extension of `type` the pool knows, ascending.
  // NOT_FOUND when `type` is not a message type of the pool.
  absl::StatusOr<std::vector<int32_t>> AllExtensionNumbersOfType(const std::string& type) const;

 private:
  const google::protobuf::DescriptorPool* const pool_;
  const Server* server_ = nullptr;
};

}  // namespace reflection
}  // namespace rdmarpc

#endif  // RDMARPC_SERVICES_REFLECTION_REFLECTION_BACKEND_H_
