// compiler/service_model.h: everything the printers need to know about one
// service, worked out once from its descriptor.
//
// Keeping names, mangling and options here means the printing functions in
// cpp_generator.cc only substitute strings into templates.
#ifndef RDMARPC_COMPILER_SERVICE_MODEL_H_
#define RDMARPC_COMPILER_SERVICE_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"

namespace rdmarpc {
namespace compiler {

// What a method streams, which decides every piece of code printed for it
// (gRPC's cpp_generator branches the same way). Only unary methods reach
// the printers: FindStreamingMethod rejects the other kinds before, and each
// gets its enumerator here, and its own printers, when it is generated.
enum class MethodKind {
  kUnary,  // one request, one response
};

struct MethodModel {
  MethodKind kind = MethodKind::kUnary;
  std::string proto_name;   // "delete", as in the .proto
  std::string cpp_name;     // "delete_", after the rule in names.h
  std::string full_name;    // "/a.b.S/delete", the name on the wire
  std::string request;      // "::a::b::Req", protobuf's C++ class name
  std::string response;     // "::a::b::Resp"
  std::string request_proto;   // "a.b.Req", for comments
  std::string response_proto;  // "a.b.Resp"
  // Default deadline the Stub applies, in milliseconds; 0 = none. From
  // (rdmarpc.method).default_timeout_ms, else (rdmarpc.service).
  uint32_t default_timeout_ms = 0;
  // Which option default_timeout_ms came from ("(rdmarpc.method)" or
  // "(rdmarpc.service)"); empty when there is none.
  std::string default_timeout_source;
  // The server runs the handler on the worker thread that received the call,
  // not on the handler pool. From (rdmarpc.method).run_inline when set,
  // else (rdmarpc.service).run_inline.
  bool run_inline = false;
  // Which option run_inline came from ("(rdmarpc.method)" or
  // "(rdmarpc.service)"); empty when the method sets none and the service's
  // is false.
  std::string run_inline_source;
  std::vector<std::string> comment_lines;  // leading comments in the .proto
};

struct ServiceModel {
  std::string name;            // C++ class: "S" ("Stub_" for a service Stub)
  std::string full_name;       // "a.b.S"
  std::string qualified_class; // "::a::b::S"
  std::string mock_class;      // "MockSStub", in the same namespace as S
  std::vector<MethodModel> methods;  // .proto order
  std::vector<std::string> comment_lines;
};

// Builds the model of `service`. Streaming methods must have been rejected
// before (see FindStreamingMethod); they are not modelled.
ServiceModel BuildServiceModel(const google::protobuf::ServiceDescriptor* service);

// Returns the first client-, server- or bidi-streaming method in `file`, or
// nullptr when every method is unary. `*kind` names the kind of streaming.
const google::protobuf::MethodDescriptor* FindStreamingMethod(
    const google::protobuf::FileDescriptor* file, std::string* kind);

}  // namespace compiler
}  // namespace rdmarpc

#endif  // RDMARPC_COMPILER_SERVICE_MODEL_H_
