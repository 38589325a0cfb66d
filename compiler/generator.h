// compiler/generator.h: the protoc plugin's front end.
//
// For each foo/bar.proto that protoc asks for, writes foo/bar.rdmarpc.pb.h
// and foo/bar.rdmarpc.pb.cc beside protobuf's foo/bar.pb.h/.cc, and with
// generate_mock_code=true also foo/bar_mock.rdmarpc.pb.h (gMock stubs,
// named and placed as gRPC's foo/bar_mock.grpc.pb.h). The front
// end only parses the parameters (generator_params.h) and rejects what the
// generator cannot handle -- unknown parameters, a streaming method asking to
// run inline, cc_generic_services -- with an error that protoc prints and
// turns into a non-zero exit; the printing is in cpp_generator.h.
#ifndef RDMARPC_COMPILER_GENERATOR_H_
#define RDMARPC_COMPILER_GENERATOR_H_

#include <cstdint>
#include <string>

#include "google/protobuf/compiler/code_generator.h"

namespace rdmarpc {
namespace compiler {

class RdmarpcGenerator final : public google::protobuf::compiler::CodeGenerator {
 public:
  bool Generate(const google::protobuf::FileDescriptor* file, const std::string& parameter,
                google::protobuf::compiler::GeneratorContext* context,
                std::string* error) const override;

  // proto3 `optional` fields only matter to protobuf's own generator; ours
  // never looks at fields, so it supports them.
  uint64_t GetSupportedFeatures() const override { return FEATURE_PROTO3_OPTIONAL; }
};

}  // namespace compiler
}  // namespace rdmarpc

#endif  // RDMARPC_COMPILER_GENERATOR_H_
