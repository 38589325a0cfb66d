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
// (gRPC's cpp_generator branches the same way), and which
// ::rdmarpc::internal::RpcKind its stream is opened with.
enum class MethodKind {
  kUnary,            // rpc M(Req) returns (Resp)
  kServerStreaming,  // rpc M(Req) returns (stream Resp)
  kClientStreaming,  // rpc M(stream Req) returns (Resp)
  kBidiStreaming,    // rpc M(stream Req) returns (stream Resp)
};

// The kind of `method`, from its stream keywords.
MethodKind KindOf(const google::protobuf::MethodDescriptor* method);

// "unary", "server-streaming", "client-streaming" or "bidi-streaming".
const char* MethodKindName(MethodKind kind);

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
  // else (rdmarpc.service).run_inline. Always false for a streaming method:
  // its handler blocks in Read/Write, so it runs on the handler pool
  // (FindInlineStreamingMethod rejects a streaming method that sets the
  // method option to true, and the service option applies to unary methods
  // only).
  bool run_inline = false;
  // Which option run_inline came from ("(rdmarpc.method)" or
  // "(rdmarpc.service)"); empty when the method sets none and the service's
  // is false or does not apply (streaming methods).
  std::string run_inline_source;
  // The method's retry or hedging policy as one gRPC methodConfig object
  // without "name" ({"retryPolicy": {...}}), for the Stub to hand the
  // runtime (IdlMethodConfig); empty when it has none. From
  // (rdmarpc.method).retry_policy / hedging_policy, else the service's.
  // Unary methods only.
  std::string method_config_json;
  std::string method_config_source;  // "(rdmarpc.method)" or "(rdmarpc.service)"
  std::vector<std::string> comment_lines;  // leading comments in the .proto
};

struct ServiceModel {
  std::string name;            // C++ class: "S" ("Stub_" for a service Stub)
  std::string full_name;       // "a.b.S"
  std::string qualified_class; // "::a::b::S"
  std::string mock_class;      // "MockSStub", in the same namespace as S
  // The .cc's helpers (CppServiceHelperNames): "kSMethodNames" and
  // "SMethodConfig" (the config function of method i adds i).
  std::string method_names_var;
  std::string method_config_prefix;
  std::vector<MethodModel> methods;  // .proto order
  std::vector<std::string> comment_lines;
  // (rdmarpc.service).run_inline, which applies to the unary methods only.
  bool run_inline = false;
};

// Builds the model of `service`, all four kinds of method. A streaming
// method that sets (rdmarpc.method).run_inline = true must have been
// rejected before (FindInlineStreamingMethod); it would be modelled as
// running on the handler pool.
ServiceModel BuildServiceModel(const google::protobuf::ServiceDescriptor* service);

// Checks the retry and hedging options of every service and method in
// `file` against gRPC's rules (gRFC A6): at most one policy per method or
// service, none on a streaming method, max_attempts >= 2, backoffs and the
// multiplier > 0, at least one retryable code, every code a gRPC code name.
// Returns the first problem, naming the option and its value ("a.b.S.Get:
// (rdmarpc.method).retry_policy.max_attempts is 1; must be 2 or more"), or
// an empty string.
std::string CheckCallPolicies(const google::protobuf::FileDescriptor* file);

// Returns the first client-, server- or bidi-streaming method in `file` that
// sets (rdmarpc.method).run_inline = true, or nullptr when there is none.
// Such a method cannot be generated as asked: a streaming handler blocks in
// Read/Write, so the runtime always runs it on the handler pool
// (rdmarpc/impl/method_handler.h).
const google::protobuf::MethodDescriptor* FindInlineStreamingMethod(
    const google::protobuf::FileDescriptor* file);

}  // namespace compiler
}  // namespace rdmarpc

#endif  // RDMARPC_COMPILER_SERVICE_MODEL_H_
