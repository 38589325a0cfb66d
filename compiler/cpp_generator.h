// compiler/cpp_generator.h: prints NAME.rdmarpc.pb.h and NAME.rdmarpc.pb.cc,
// and NAME_mock.rdmarpc.pb.h when asked for (generate_mock_code=true).
//
// Each function prints one piece of the output from a `$var$` template with
// io::Printer, in the manner of gRPC's cpp_generator.cc. The front end
// (generator.h) has already parsed the parameters and rejected files this
// generator cannot handle.
#ifndef RDMARPC_COMPILER_CPP_GENERATOR_H_
#define RDMARPC_COMPILER_CPP_GENERATOR_H_

#include "generator_params.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/printer.h"

namespace rdmarpc {
namespace compiler {

// The whole header for `file`: one class per service, in .proto order.
void PrintHeader(const google::protobuf::FileDescriptor* file, const GeneratorParams& params,
                 google::protobuf::io::Printer* printer);

// The whole source file for `file`.
void PrintSource(const google::protobuf::FileDescriptor* file, const GeneratorParams& params,
                 google::protobuf::io::Printer* printer);

// The gMock header for `file`: class Mock<S>Stub for each service S, beside
// S in its namespace. Written whatever `params.generate_mock_code` says;
// the front end decides whether to call it.
void PrintMockHeader(const google::protobuf::FileDescriptor* file, const GeneratorParams& params,
                     google::protobuf::io::Printer* printer);

}  // namespace compiler
}  // namespace rdmarpc

#endif  // RDMARPC_COMPILER_CPP_GENERATOR_H_
