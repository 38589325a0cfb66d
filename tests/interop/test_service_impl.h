// test_service_impl.h: grpc.testing.TestService as gRPC's interop server
// features describe it (doc/interop-test-descriptions.md, "Server").
//
//   EmptyCall            returns the empty message.
//   UnaryCall            a payload of response_size zero bytes.
//   StreamingOutputCall  one response per response_parameters entry, each
//                        after sleeping its interval_us.
//   StreamingInputCall   the sum of the request payload sizes, on half-close.
//   FullDuplexCall       answers each request as it arrives, as
//                        StreamingOutputCall does; OK after half-close.
//   HalfDuplexCall       reads every request until half-close, then answers
//                        them in order.
//   UnimplementedCall    not overridden: UNIMPLEMENTED.
//
// Every method echoes the client's "x-grpc-test-echo-initial" entry in its
// initial metadata and "x-grpc-test-echo-trailing-bin" in its trailing
// metadata (Echo Metadata), and a request's response_status ends the call
// with that code and message, without reading further requests (Echo
// Status). rdmarpc does not compress messages, so a request that says
// expect_compressed fails INVALID_ARGUMENT (it cannot have been compressed),
// and response_compressed is ignored: responses go uncompressed.
#ifndef RDMARPC_TESTS_INTEROP_TEST_SERVICE_IMPL_H_
#define RDMARPC_TESTS_INTEROP_TEST_SERVICE_IMPL_H_

#include "absl/status/status.h"
#include "grpc/testing/empty.pb.h"
#include "grpc/testing/messages.pb.h"
#include "grpc/testing/test.rdmarpc.pb.h"
#include "rdmarpc/rdmarpc.h"

namespace rdmarpc_interop {

class TestServiceImpl final : public grpc::testing::TestService::Service {
 public:
  absl::Status EmptyCall(rdmarpc::ServerContext* context, const grpc::testing::Empty& request,
                         grpc::testing::Empty* response) override;
  absl::Status UnaryCall(rdmarpc::ServerContext* context,
                         const grpc::testing::SimpleRequest& request,
                         grpc::testing::SimpleResponse* response) override;
  absl::Status StreamingOutputCall(
      rdmarpc::ServerContext* context, const grpc::testing::StreamingOutputCallRequest& request,
      rdmarpc::ServerWriter<grpc::testing::StreamingOutputCallResponse>* writer) override;
  absl::Status StreamingInputCall(
      rdmarpc::ServerContext* context,
      rdmarpc::ServerReader<grpc::testing::StreamingInputCallRequest>* reader,
      grpc::testing::StreamingInputCallResponse* response) override;
  absl::Status FullDuplexCall(
      rdmarpc::ServerContext* context,
      rdmarpc::ServerReaderWriter<grpc::testing::StreamingOutputCallResponse,
                                  grpc::testing::StreamingOutputCallRequest>* stream) override;
  absl::Status HalfDuplexCall(
      rdmarpc::ServerContext* context,
      rdmarpc::ServerReaderWriter<grpc::testing::StreamingOutputCallResponse,
                                  grpc::testing::StreamingOutputCallRequest>* stream) override;
};

}  // namespace rdmarpc_interop

#endif  // RDMARPC_TESTS_INTEROP_TEST_SERVICE_IMPL_H_
