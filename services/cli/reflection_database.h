// reflection_database.h: a google::protobuf::DescriptorDatabase that asks a
// server's grpc.reflection.v1.ServerReflection for the files it does not
// hold yet, as grpc_cli's ProtoReflectionDescriptorDatabase does. A
// DescriptorPool built on it resolves a service, method or message name of
// the server's into descriptors, fetching the file that defines it and the
// files that one imports:
//
//   rdmarpc::cli::ReflectionDatabase db(channel, absl::Seconds(10));
//   google::protobuf::DescriptorPool pool(&db);
//   const google::protobuf::ServiceDescriptor* s = pool.FindServiceByName("pkg.Svc");
//   if (s == nullptr) ... db.last_error() says why (NOT_FOUND, UNAVAILABLE, ...)
//
// All requests go over one ServerReflectionInfo stream, opened by the first
// and closed by the destructor. A server that answers v1 with UNIMPLEMENTED
// is asked again under grpc.reflection.v1alpha (the same messages), as
// grpc_cli and grpcurl do for servers older than v1. Thread safety: none; one thread uses it (a
// DescriptorPool calls it under its own mutex).
#ifndef RDMARPC_SERVICES_CLI_REFLECTION_DATABASE_H_
#define RDMARPC_SERVICES_CLI_REFLECTION_DATABASE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/descriptor_database.h"
#include "grpc/reflection/v1/reflection.rdmarpc.pb.h"
#include "rdmarpc/rdmarpc.h"

namespace rdmarpc {
namespace cli {

class ReflectionDatabase final : public google::protobuf::DescriptorDatabase {
 public:
  // Shares `channel`. `timeout` bounds the whole reflection stream, from its
  // first request (absl::InfiniteDuration() for none).
  ReflectionDatabase(std::shared_ptr<Channel> channel, absl::Duration timeout);
  // Half-closes the stream and waits for the server's status.
  ~ReflectionDatabase() override;
  ReflectionDatabase(const ReflectionDatabase&) = delete;
  ReflectionDatabase& operator=(const ReflectionDatabase&) = delete;

  // The services the server lists, sorted by full name. Errors: the
  // stream's status (UNAVAILABLE, DEADLINE_EXCEEDED, UNIMPLEMENTED when the
  // server serves neither grpc.reflection.v1 nor, asked next, v1alpha), or
  // the server's error_response as a Status of its code.
  absl::StatusOr<std::vector<std::string>> ListServices();

  // google::protobuf::DescriptorDatabase. False when the server does not
  // know the name or the stream failed; last_error() then says which.
  bool FindFileByName(const std::string& filename,
                      google::protobuf::FileDescriptorProto* output) override;
  bool FindFileContainingSymbol(const std::string& symbol_name,
                                google::protobuf::FileDescriptorProto* output) override;
  // Extensions are not asked for (nothing in the CLI prints or parses
  // them): always false.
  bool FindFileContainingExtension(const std::string& containing_type, int field_number,
                                   google::protobuf::FileDescriptorProto* output) override;

  // Why the last lookup failed (OK when none did): NOT_FOUND with the
  // server's message for a name it does not know, else the stream's status.
  const absl::Status& last_error() const { return last_error_; }

 private:
  // Sends `request` and reads its answer; once the stream broke, every
  // call returns the status Finish gave.
  absl::StatusOr<grpc::reflection::v1::ServerReflectionResponse> Ask(
      const grpc::reflection::v1::ServerReflectionRequest& request);
  // Caches the files of a file_descriptor_response and copies the first
  // (the one asked for) to `*output`.
  bool TakeFiles(const absl::StatusOr<grpc::reflection::v1::ServerReflectionResponse>& response,
                 google::protobuf::FileDescriptorProto* output);

  std::shared_ptr<Channel> channel_;
  absl::Duration timeout_;
  // The server answered v1 with UNIMPLEMENTED: the stream is v1alpha's.
  bool use_v1alpha_ = false;
  std::unique_ptr<ClientContext> context_;
  std::unique_ptr<ClientReaderWriterInterface<grpc::reflection::v1::ServerReflectionRequest,
                                              grpc::reflection::v1::ServerReflectionResponse>>
      stream_;
  absl::Status stream_status_;  // set once the stream broke
  absl::Status last_error_;
  std::map<std::string, google::protobuf::FileDescriptorProto> files_;  // by file name
};

}  // namespace cli
}  // namespace rdmarpc

#endif  // RDMARPC_SERVICES_CLI_REFLECTION_DATABASE_H_
