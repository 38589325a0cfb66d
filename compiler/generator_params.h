// compiler/generator_params.h: the parameters protoc-gen-rdmarpc accepts.
//
// protoc passes everything given with --rdmarpc_opt=... (or before the colon
// in --rdmarpc_out=PARAMS:DIR) as one comma-separated string. The front end
// turns it into a GeneratorParams and rejects anything it does not know, so
// a misspelt option fails the build instead of being ignored:
//
//   protoc --rdmarpc_out=gen --rdmarpc_opt=include_prefix=proto/ ...
//   protoc --rdmarpc_out=gen --rdmarpc_opt=generate_mock_code=true ...
#ifndef RDMARPC_COMPILER_GENERATOR_PARAMS_H_
#define RDMARPC_COMPILER_GENERATOR_PARAMS_H_

#include <string>

namespace rdmarpc {
namespace compiler {

struct GeneratorParams {
  // Prepended to the paths of the headers the generated files #include from
  // the same protoc run (NAME.pb.h and NAME.rdmarpc.pb.h), for projects that
  // install generated headers under a directory of their own. Empty by
  // default: "foo/bar.proto" gives #include "foo/bar.pb.h".
  std::string include_prefix;
  // Also write NAME_mock.rdmarpc.pb.h, with a gMock class Mock<Service>Stub
  // of each service's StubInterface, for unit tests of code that calls the
  // service (gRPC's generate_mock_code). Off by default.
  bool generate_mock_code = false;
};

// Parses protoc's parameter string ("key=value,flag,...") into `*params`.
// Returns false and sets `*error` to a message naming the offending
// parameter when a key is unknown or a value is malformed.
bool ParseGeneratorParams(const std::string& parameter, GeneratorParams* params,
                          std::string* error);

}  // namespace compiler
}  // namespace rdmarpc

#endif  // RDMARPC_COMPILER_GENERATOR_PARAMS_H_
