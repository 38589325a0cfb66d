#include "generator.h"

#include <memory>

#include "cpp_generator.h"
#include "generator_params.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/io/printer.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "names.h"
#include "service_model.h"

namespace rdmarpc {
namespace compiler {

bool RdmarpcGenerator::Generate(const google::protobuf::FileDescriptor* file,
                                const std::string& parameter,
                                google::protobuf::compiler::GeneratorContext* context,
                                std::string* error) const {
  GeneratorParams params;
  if (!ParseGeneratorParams(parameter, &params, error)) return false;

  // Reject before opening any output, so a failed run leaves no half-written
  // files behind.
  if (const google::protobuf::MethodDescriptor* method = FindInlineStreamingMethod(file)) {
    // protoc's CodeGenerator::GenerateAll prefixes the file name, giving
    // "foo.proto: a.b.S.Watch is server-streaming and sets ...".
    *error = method->full_name() + " is " + MethodKindName(KindOf(method)) +
             " and sets (rdmarpc.method).run_inline = true; streaming handlers always run "
             "on the handler pool (remove the option)";
    return false;
  }

  if (std::string problem = CheckCallPolicies(file); !problem.empty()) {
    *error = problem;
    return false;
  }

  if (file->service_count() > 0 && file->options().cc_generic_services()) {
    *error = "option cc_generic_services = true makes protoc's C++ generator emit a class "
             "for each service, which would clash with rdmarpc's class " +
             file->service(0)->full_name() + "; remove the option";
    return false;
  }

  const std::string base = StripProtoExtension(file->name());
  {
    std::unique_ptr<google::protobuf::io::ZeroCopyOutputStream> out(
        context->Open(base + ".rdmarpc.pb.h"));
    google::protobuf::io::Printer printer(out.get(), '$');
    PrintHeader(file, params, &printer);
    if (printer.failed()) {
      *error = "failed to write " + base + ".rdmarpc.pb.h";
      return false;
    }
  }
  {
    std::unique_ptr<google::protobuf::io::ZeroCopyOutputStream> out(
        context->Open(base + ".rdmarpc.pb.cc"));
    google::protobuf::io::Printer printer(out.get(), '$');
    PrintSource(file, params, &printer);
    if (printer.failed()) {
      *error = "failed to write " + base + ".rdmarpc.pb.cc";
      return false;
    }
  }
  if (params.generate_mock_code) {
    std::unique_ptr<google::protobuf::io::ZeroCopyOutputStream> out(
        context->Open(base + "_mock.rdmarpc.pb.h"));
    google::protobuf::io::Printer printer(out.get(), '$');
    PrintMockHeader(file, params, &printer);
    if (printer.failed()) {
      *error = "failed to write " + base + "_mock.rdmarpc.pb.h";
      return false;
    }
  }
  return true;
}

}  // namespace compiler
}  // namespace rdmarpc
