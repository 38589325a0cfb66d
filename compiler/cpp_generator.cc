#include "cpp_generator.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "names.h"
#include "service_model.h"

namespace rdmarpc {
namespace compiler {
namespace {

using google::protobuf::FileDescriptor;
using google::protobuf::io::Printer;
using Vars = std::map<std::string, std::string>;

// The namespace a service's class is in, as a qualifier: "::a::b::" for
// "::a::b::S", "::" for a file without a package.
std::string NamespaceQualifier(const ServiceModel& service) {
  return service.qualified_class.substr(0, service.qualified_class.rfind("::") + 2);
}

Vars ServiceVars(const ServiceModel& service) {
  // The .cc's helpers (method-name table, retry / hedging configs) sit in an
  // unnamed namespace inside the service's; their uses are qualified, so a
  // method that happens to share a helper's name cannot hide it.
  return {
      {"Service", service.name},
      {"service_full_name", service.full_name},
      {"qualified_service", service.qualified_class},
      {"method_names_decl", service.method_names_var},
      {"method_names", NamespaceQualifier(service) + service.method_names_var},
      {"method_config_prefix", service.method_config_prefix},
      {"mock_class", service.mock_class},
  };
}

Vars MethodVars(const ServiceModel& service, const MethodModel& method, size_t index) {
  Vars vars = ServiceVars(service);
  vars["Method"] = method.cpp_name;
  vars["proto_method"] = method.proto_name;
  vars["method_full_name"] = method.full_name;
  vars["Request"] = method.request;
  vars["Response"] = method.response;
  vars["request_proto"] = method.request_proto;
  vars["response_proto"] = method.response_proto;
  vars["index"] = std::to_string(index);
  vars["timeout_ms"] = std::to_string(method.default_timeout_ms);
  vars["timeout_source"] = method.default_timeout_source;
  vars["run_inline_source"] = method.run_inline_source;
  // The IDL's retry or hedging policy, passed to the runtime with each call.
  vars["config_arg"] = method.method_config_json.empty()
                           ? ""
                           : ",\n      " + NamespaceQualifier(service) +
                                 service.method_config_prefix + std::to_string(index) + "()";
  // "stream " before a streamed type in the comments that quote the .proto.
  const bool client_streams =
      method.kind == MethodKind::kClientStreaming || method.kind == MethodKind::kBidiStreaming;
  const bool server_streams =
      method.kind == MethodKind::kServerStreaming || method.kind == MethodKind::kBidiStreaming;
  vars["request_stream"] = client_streams ? "stream " : "";
  vars["response_stream"] = server_streams ? "stream " : "";
  return vars;
}

// Whether Stub::async (and StubInterface::async_interface, and the mock's
// async()) has a done-callback call for `method`: unary methods only. Every
// method has a reactor call there (rdmarpc/client_callback.h).
bool HasDoneForm(const MethodModel& method) { return method.kind == MethodKind::kUnary; }

// The parameters of Stub::async's reactor call for `method`, after gRPC's
// callback stubs; `$Request$` and `$Response$` are left for the caller's
// vars. Shared by the interface, the Stub and the mock.
std::string ReactorParams(const MethodModel& method) {
  switch (method.kind) {
    case MethodKind::kUnary:
      return "    ::rdmarpc::ClientContext* context,\n"
             "    const $Request$* request,\n"
             "    $Response$* response,\n"
             "    ::rdmarpc::ClientUnaryReactor* reactor)";
    case MethodKind::kServerStreaming:
      return "    ::rdmarpc::ClientContext* context,\n"
             "    const $Request$* request,\n"
             "    ::rdmarpc::ClientReadReactor<$Response$>* reactor)";
    case MethodKind::kClientStreaming:
      return "    ::rdmarpc::ClientContext* context,\n"
             "    $Response$* response,\n"
             "    ::rdmarpc::ClientWriteReactor<$Request$>* reactor)";
    case MethodKind::kBidiStreaming:
      return "    ::rdmarpc::ClientContext* context,\n"
             "    ::rdmarpc::ClientBidiReactor<$Request$, $Response$>* reactor)";
  }
  return "";
}

// The first method of `service` for which `pred` holds, or nullptr.
template <class Pred>
const MethodModel* FirstMethod(const ServiceModel& service, Pred pred) {
  for (const MethodModel& method : service.methods) {
    if (pred(method)) return &method;
  }
  return nullptr;
}

// "::a::B" -> "a::B", for C++ names in comments, as users write them.
std::string Unqualified(const std::string& name) {
  return name.compare(0, 2, "::") == 0 ? name.substr(2) : name;
}

// Comment lines copied from the .proto; `$` in them is not a template
// variable because each line is passed as a value.
void PrintCommentLines(const std::vector<std::string>& lines, Printer* printer) {
  for (const std::string& line : lines) {
    if (line.empty()) {
      printer->Print("//\n");
    } else if (line.back() == '\\') {
      // A `//` comment ending in a backslash continues onto the next line
      // (and -Wcomment, in -Wall, makes that an error under -Werror).
      printer->Print("//$line$ //\n", "line", line);
    } else {
      printer->Print("//$line$\n", "line", line);
    }
  }
}

void PrintNamespacesOpen(const FileDescriptor* file, Printer* printer) {
  for (const std::string& ns : PackageNamespaces(file)) {
    printer->Print("namespace $ns$ {\n", "ns", ns);
  }
  if (!file->package().empty()) printer->Print("\n");
}

void PrintNamespacesClose(const FileDescriptor* file, Printer* printer) {
  std::vector<std::string> namespaces = PackageNamespaces(file);
  for (auto it = namespaces.rbegin(); it != namespaces.rend(); ++it) {
    printer->Print("}  // namespace $ns$\n", "ns", *it);
  }
}

// ---- header ---------------------------------------------------------------

// The include paths of the headers generated for `file`, as users write them.
std::string RdmarpcHeaderPath(const FileDescriptor* file, const GeneratorParams& params) {
  return params.include_prefix + StripProtoExtension(file->name()) + ".rdmarpc.pb.h";
}

std::string MockHeaderPath(const FileDescriptor* file, const GeneratorParams& params) {
  return params.include_prefix + StripProtoExtension(file->name()) + "_mock.rdmarpc.pb.h";
}

// What the usage comments say of `service`: its class and its mock's class
// as users write them (no leading "::"), and where the mock is declared.
Vars UsageVars(const FileDescriptor* file, const GeneratorParams& params,
               const ServiceModel& service) {
  const std::string ns = service.qualified_class.substr(
      2, service.qualified_class.size() - 2 - service.name.size());
  return {{"Service", service.name},
          {"service_full_name", service.full_name},
          {"class", service.qualified_class.substr(2)},
          {"mock_class", ns + service.mock_class},
          {"mock_h", MockHeaderPath(file, params)}};
}

// One line of the usage example for each kind of method `service` has,
// with its first method of that kind, in .proto order.
void PrintUsageCalls(const ServiceModel& service, Printer* printer) {
  std::set<MethodKind> printed;
  for (const MethodModel& method : service.methods) {
    if (!printed.insert(method.kind).second) continue;
    switch (method.kind) {
      case MethodKind::kUnary:
        printer->Print("//   absl::Status status = stub->$Method$(&context, request, &response);\n",
                       "Method", method.cpp_name);
        break;
      case MethodKind::kServerStreaming:
        printer->Print(
            "//   auto reader = stub->$Method$(&context, request);  // reader->Read(&response)\n",
            "Method", method.cpp_name);
        break;
      case MethodKind::kClientStreaming:
        printer->Print(
            "//   auto writer = stub->$Method$(&context, &response);  // writer->Write(request)\n",
            "Method", method.cpp_name);
        break;
      case MethodKind::kBidiStreaming:
        printer->Print("//   auto stream = stub->$Method$(&context);  // stream->Write, stream->Read\n",
                       "Method", method.cpp_name);
        break;
    }
  }
  const bool any_streaming = printed.size() > printed.count(MethodKind::kUnary);
  if (any_streaming) {
    printer->Print("//   (readers, writers and streams end with Finish(): rdmarpc/sync_stream.h)\n");
  }
}

// A short example with the file's first service, as STYLE.md asks of every
// public header.
void PrintUsageExample(const FileDescriptor* file, const GeneratorParams& params,
                       const std::vector<ServiceModel>& services, Printer* printer) {
  if (services.empty()) return;
  const ServiceModel& service = services.front();
  Vars vars = UsageVars(file, params, service);
  printer->Print(vars,
                 "//\n"
                 "// Usage, with service $service_full_name$:\n"
                 "//   class $Service$Impl final : public $class$::Service {\n"
                 "//     // override the methods this server implements\n"
                 "//   };\n"
                 "//   auto stub = $class$::NewStub(channel);\n");
  PrintUsageCalls(service, printer);
  printer->Print(vars,
                 "//\n"
                 "// Code that takes a $class$::StubInterface* can be unit-tested\n"
                 "// with the gMock class $mock_class$, from\n"
                 "// $mock_h$: protoc-gen-rdmarpc writes it with\n"
                 "// generate_mock_code=true (rdmarpc_generate(... GENERATE_MOCKS)).\n");
}

void PrintHeaderPrologue(const FileDescriptor* file, const GeneratorParams& params,
                         const std::vector<ServiceModel>& services, Printer* printer) {
  Vars vars = {
      {"proto", file->name()},
      {"guard", HeaderGuard(file->name())},
      {"pb_h", params.include_prefix + StripProtoExtension(file->name()) + ".pb.h"},
  };
  printer->Print(vars,
                 "// Generated by protoc-gen-rdmarpc from $proto$. DO NOT EDIT!\n"
                 "//\n"
                 "// Client stubs and server skeletons for the services in $proto$;\n"
                 "// see rdmarpc/service.h and rdmarpc/channel.h for how to use them.\n");
  PrintUsageExample(file, params, services, printer);
  printer->Print(vars,
                 "#ifndef $guard$\n"
                 "#define $guard$\n"
                 "\n"
                 "#include <memory>\n"
                 "\n"
                 "#include \"$pb_h$\"\n"
                 "#include \"rdmarpc/rdmarpc.h\"\n"
                 "\n");
}

// A method's comments from the .proto, then a blank comment line before
// what the generator says about it.
void PrintMethodComments(const MethodModel& method, Printer* printer) {
  PrintCommentLines(method.comment_lines, printer);
  if (!method.comment_lines.empty()) printer->Print("//\n");
}

// The note on a streaming method of a service that sets
// (rdmarpc.service).run_inline, which passes it by.
void PrintStreamingRunsOnPool(const ServiceModel& service, const MethodModel& method,
                              Printer* printer) {
  if (!service.run_inline || !method.run_inline_source.empty()) return;
  printer->Print("// Runs on the handler pool although the service sets\n"
                 "// (rdmarpc.service).run_inline: streaming handlers block in Read/Write.\n");
}

// S::Service's virtual method for `method`.
void PrintHeaderServerMethod(const ServiceModel& service, const MethodModel& method, size_t index,
                             Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  printer->Print("\n");
  PrintMethodComments(method, printer);
  printer->Print(vars,
                 "// rpc $proto_method$($request_stream$$request_proto$) returns "
                 "($response_stream$$response_proto$): \"$method_full_name$\".\n");
  switch (method.kind) {
    case MethodKind::kUnary:
      if (method.run_inline) {
        printer->Print(vars,
                       "// Runs inline on the worker thread ($run_inline_source$.run_inline):\n"
                       "// it must never block.\n");
      }
      printer->Print(vars,
                     "virtual ::absl::Status $Method$(\n"
                     "    ::rdmarpc::ServerContext* context,\n"
                     "    const $Request$& request,\n"
                     "    $Response$* response);\n");
      break;
    case MethodKind::kServerStreaming:
      printer->Print(vars,
                     "// Writes any number of responses to `writer`; the call ends with the\n"
                     "// returned status.\n");
      PrintStreamingRunsOnPool(service, method, printer);
      printer->Print(vars,
                     "virtual ::absl::Status $Method$(\n"
                     "    ::rdmarpc::ServerContext* context,\n"
                     "    const $Request$& request,\n"
                     "    ::rdmarpc::ServerWriter<$Response$>* writer);\n");
      break;
    case MethodKind::kClientStreaming:
      printer->Print(vars,
                     "// Reads the requests from `reader` until its Read returns false;\n"
                     "// `*response` is sent when the method returns OK.\n");
      PrintStreamingRunsOnPool(service, method, printer);
      printer->Print(vars,
                     "virtual ::absl::Status $Method$(\n"
                     "    ::rdmarpc::ServerContext* context,\n"
                     "    ::rdmarpc::ServerReader<$Request$>* reader,\n"
                     "    $Response$* response);\n");
      break;
    case MethodKind::kBidiStreaming:
      printer->Print(vars,
                     "// Reads requests from and writes responses to `stream` (one thread may\n"
                     "// read while another writes); the call ends with the returned status.\n");
      PrintStreamingRunsOnPool(service, method, printer);
      printer->Print(vars,
                     "virtual ::absl::Status $Method$(\n"
                     "    ::rdmarpc::ServerContext* context,\n"
                     "    ::rdmarpc::ServerReaderWriter<$Response$, $Request$>* stream);\n");
      break;
  }
}

using MethodPrinter = void (*)(const ServiceModel&, const MethodModel&, size_t, Printer*);

// A server class deriving ::rdmarpc::Service: `doc`, then `class_name` with
// its constructor, destructor and one `print_method` per method.
void PrintServiceClassDecl(const ServiceModel& service, const char* doc, const char* class_name,
                           MethodPrinter print_method, Printer* printer) {
  Vars vars = ServiceVars(service);
  vars["class_name"] = class_name;
  printer->Print(vars, doc);
  printer->Print(vars,
                 "class $class_name$ : public ::rdmarpc::Service {\n"
                 " public:\n"
                 "  // Registers one handler per method, in .proto order (methods()).\n"
                 "  $class_name$();\n"
                 "  ~$class_name$() override;\n");
  printer->Indent();
  for (size_t i = 0; i < service.methods.size(); ++i) {
    print_method(service, service.methods[i], i, printer);
  }
  printer->Outdent();
  printer->Print("};\n");
}

void PrintServerClassDecl(const ServiceModel& service, Printer* printer) {
  PrintServiceClassDecl(
      service,
      "// The server side. Derive from it, override the methods this server\n"
      "// implements and pass an instance to ::rdmarpc::Server::AddService;\n"
      "// methods left alone return UNIMPLEMENTED. Overrides run on the server's\n"
      "// handler pool, several at a time, or inline on the worker thread that\n"
      "// received the call where the method says so (run_inline).\n",
      "Service", &PrintHeaderServerMethod, printer);
}

// S::CallbackService's virtual method for `method`.
void PrintHeaderCallbackServerMethod(const ServiceModel& service, const MethodModel& method,
                                     size_t index, Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  printer->Print("\n");
  PrintMethodComments(method, printer);
  printer->Print(vars,
                 "// rpc $proto_method$($request_stream$$request_proto$) returns "
                 "($response_stream$$response_proto$): \"$method_full_name$\".\n");
  switch (method.kind) {
    case MethodKind::kUnary:
      if (method.run_inline) {
        printer->Print(vars,
                       "// Runs inline on the worker thread ($run_inline_source$.run_inline).\n");
      }
      printer->Print(vars,
                     "// The reactor's Finish(OK) sends `*response`; `request` and `response`\n"
                     "// live until its OnDone.\n"
                     "virtual ::rdmarpc::ServerUnaryReactor* $Method$(\n"
                     "    ::rdmarpc::CallbackServerContext* context,\n"
                     "    const $Request$* request,\n"
                     "    $Response$* response);\n");
      break;
    case MethodKind::kServerStreaming:
      printer->Print(vars,
                     "// The reactor writes the responses; `request` lives until its OnDone.\n"
                     "virtual ::rdmarpc::ServerWriteReactor<$Response$>* $Method$(\n"
                     "    ::rdmarpc::CallbackServerContext* context,\n"
                     "    const $Request$* request);\n");
      break;
    case MethodKind::kClientStreaming:
      printer->Print(vars,
                     "// The reactor reads the requests; its Finish(OK) sends `*response`,\n"
                     "// which lives until its OnDone.\n"
                     "virtual ::rdmarpc::ServerReadReactor<$Request$>* $Method$(\n"
                     "    ::rdmarpc::CallbackServerContext* context,\n"
                     "    $Response$* response);\n");
      break;
    case MethodKind::kBidiStreaming:
      printer->Print(vars,
                     "// The reactor reads requests and writes responses.\n"
                     "virtual ::rdmarpc::ServerBidiReactor<$Request$, $Response$>* $Method$(\n"
                     "    ::rdmarpc::CallbackServerContext* context);\n");
      break;
  }
}

void PrintCallbackServiceClassDecl(const ServiceModel& service, Printer* printer) {
  PrintServiceClassDecl(
      service,
      "// The server side in gRPC's callback style (rdmarpc/server_callback.h):\n"
      "// each method returns the reactor that carries its call, which may\n"
      "// finish later, from any thread. Derive from it, override the methods\n"
      "// this server implements and pass an instance to\n"
      "// ::rdmarpc::Server::AddService instead of a Service (both register the\n"
      "// same methods); methods left alone return nullptr and their calls\n"
      "// finish UNIMPLEMENTED. Methods run on the server's handler pool, or\n"
      "// inline on the worker thread where a unary method says so\n"
      "// (run_inline); they must not block either way.\n",
      "CallbackService", &PrintHeaderCallbackServerMethod, printer);
}

// S::StubInterface's pure virtual method for `method`'s blocking call.
void PrintHeaderClientMethodInterface(const ServiceModel& service, const MethodModel& method,
                                      size_t index, Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "\n"
                     "// \"$method_full_name$\"; see Stub::$Method$.\n"
                     "virtual ::absl::Status $Method$(\n"
                     "    ::rdmarpc::ClientContext* context,\n"
                     "    const $Request$& request,\n"
                     "    $Response$* response) = 0;\n");
      break;
    case MethodKind::kServerStreaming:
      printer->Print(vars,
                     "\n"
                     "// \"$method_full_name$\"; see Stub::$Method$.\n"
                     "virtual ::std::unique_ptr<::rdmarpc::ClientReaderInterface<$Response$>>\n"
                     "$Method$(\n"
                     "    ::rdmarpc::ClientContext* context,\n"
                     "    const $Request$& request) = 0;\n");
      break;
    case MethodKind::kClientStreaming:
      printer->Print(vars,
                     "\n"
                     "// \"$method_full_name$\"; see Stub::$Method$.\n"
                     "virtual ::std::unique_ptr<::rdmarpc::ClientWriterInterface<$Request$>>\n"
                     "$Method$(\n"
                     "    ::rdmarpc::ClientContext* context,\n"
                     "    $Response$* response) = 0;\n");
      break;
    case MethodKind::kBidiStreaming:
      printer->Print(vars,
                     "\n"
                     "// \"$method_full_name$\"; see Stub::$Method$.\n"
                     "virtual ::std::unique_ptr<::rdmarpc::ClientReaderWriterInterface<$Request$, $Response$>>\n"
                     "$Method$(\n"
                     "    ::rdmarpc::ClientContext* context) = 0;\n");
      break;
  }
}

// S::StubInterface::async_interface's pure virtual method for `method`.
void PrintHeaderClientMethodAsyncInterface(const ServiceModel& service,
                                           const MethodModel& method, size_t index,
                                           Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "\n"
                     "// \"$method_full_name$\"; see Stub::async::$Method$.\n"
                     "virtual void $Method$(\n"
                     "    ::rdmarpc::ClientContext* context,\n"
                     "    const $Request$& request,\n"
                     "    $Response$* response,\n"
                     "    ::absl::AnyInvocable<void(::absl::Status) &&> done) = 0;\n");
      break;
    case MethodKind::kServerStreaming:
    case MethodKind::kClientStreaming:
    case MethodKind::kBidiStreaming:
      break;  // no done-callback form (HasDoneForm)
  }
}

// S::StubInterface::async_interface's pure virtual reactor call for `method`.
void PrintHeaderClientMethodReactorInterface(const ServiceModel& service,
                                             const MethodModel& method, size_t index,
                                             Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  printer->Print(vars,
                 "\n"
                 "// \"$method_full_name$\" with a reactor; see Stub::async::$Method$.\n"
                 "virtual void $Method$(\n");
  printer->Print(vars, (ReactorParams(method) + " = 0;\n").c_str());
}

void PrintStubInterfaceClassDecl(const ServiceModel& service, Printer* printer) {
  printer->Print(ServiceVars(service),
                 "// The client side as an interface: Stub's calls, pure virtual, in the\n"
                 "// manner of gRPC's StubInterface. Code that takes a StubInterface*\n"
                 "// works with a Stub and, in unit tests, with the gMock class\n"
                 "// $mock_class$ (see the top of this file). Stub documents each call.\n"
                 "class StubInterface {\n"
                 " public:\n"
                 "  virtual ~StubInterface() = default;\n");
  printer->Indent();
  for (size_t i = 0; i < service.methods.size(); ++i) {
    PrintHeaderClientMethodInterface(service, service.methods[i], i, printer);
  }
  printer->Print("\n"
                 "// Stub::async's calls.\n"
                 "class async_interface {\n"
                 " public:\n"
                 "  virtual ~async_interface() = default;\n");
  printer->Indent();
  for (size_t i = 0; i < service.methods.size(); ++i) {
    if (HasDoneForm(service.methods[i])) {
      PrintHeaderClientMethodAsyncInterface(service, service.methods[i], i, printer);
    }
    PrintHeaderClientMethodReactorInterface(service, service.methods[i], i, printer);
  }
  printer->Outdent();
  printer->Print("};\n"
                 "// The asynchronous calls; owned by the stub.\n"
                 "virtual class async_interface* async() = 0;\n");
  printer->Outdent();
  printer->Print("};\n");
}

// The comment on a Stub method with a default deadline.
void PrintDefaultDeadlineComment(const MethodModel& method, const Vars& vars, Printer* printer) {
  if (method.default_timeout_ms == 0) return;
  printer->Print(vars,
                 "// When `context` has no deadline, sets one $timeout_ms$ ms from now\n"
                 "// ($timeout_source$.default_timeout_ms).\n");
}

// Stub's blocking call for `method`; for a streaming method, the call that
// opens the stream.
void PrintHeaderClientMethod(const ServiceModel& service, const MethodModel& method,
                             size_t index, Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  printer->Print("\n");
  PrintMethodComments(method, printer);
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "// Calls \"$method_full_name$\" and waits for its response. Returns the\n"
                     "// server method's status or the runtime's (rdmarpc/impl/unary_call.h).\n");
      PrintDefaultDeadlineComment(method, vars, printer);
      printer->Print(vars,
                     "::absl::Status $Method$(\n"
                     "    ::rdmarpc::ClientContext* context,\n"
                     "    const $Request$& request,\n"
                     "    $Response$* response) override;\n");
      break;
    case MethodKind::kServerStreaming:
      printer->Print(vars,
                     "// Opens a server-streaming call to \"$method_full_name$\" that sends\n"
                     "// `request`, and returns at once: read the responses from the reader,\n"
                     "// whose Finish gives the call's status (rdmarpc/sync_stream.h). The\n"
                     "// reader must not outlive `context`.\n");
      PrintDefaultDeadlineComment(method, vars, printer);
      printer->Print(vars,
                     "::std::unique_ptr<::rdmarpc::ClientReaderInterface<$Response$>>\n"
                     "$Method$(\n"
                     "    ::rdmarpc::ClientContext* context,\n"
                     "    const $Request$& request) override;\n");
      break;
    case MethodKind::kClientStreaming:
      printer->Print(vars,
                     "// Opens a client-streaming call to \"$method_full_name$\" and returns\n"
                     "// at once: write the requests to the writer, whose Finish stores the\n"
                     "// server's response in `*response` and gives the call's status\n"
                     "// (rdmarpc/sync_stream.h). The writer must not outlive `context`, nor\n"
                     "// `response` its Finish.\n");
      PrintDefaultDeadlineComment(method, vars, printer);
      printer->Print(vars,
                     "::std::unique_ptr<::rdmarpc::ClientWriterInterface<$Request$>>\n"
                     "$Method$(\n"
                     "    ::rdmarpc::ClientContext* context,\n"
                     "    $Response$* response) override;\n");
      break;
    case MethodKind::kBidiStreaming:
      printer->Print(vars,
                     "// Opens a bidirectional-streaming call to \"$method_full_name$\" and\n"
                     "// returns at once: write requests to and read responses from the\n"
                     "// stream, whose Finish gives the call's status (rdmarpc/sync_stream.h).\n"
                     "// The stream must not outlive `context`.\n");
      PrintDefaultDeadlineComment(method, vars, printer);
      printer->Print(vars,
                     "::std::unique_ptr<::rdmarpc::ClientReaderWriterInterface<$Request$, $Response$>>\n"
                     "$Method$(\n"
                     "    ::rdmarpc::ClientContext* context) override;\n");
      break;
  }
}

// Stub::async's call for `method`.
void PrintHeaderClientMethodAsync(const ServiceModel& service, const MethodModel& method,
                                  size_t index, Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "// \"$method_full_name$\".\n"
                     "void $Method$(\n"
                     "    ::rdmarpc::ClientContext* context,\n"
                     "    const $Request$& request,\n"
                     "    $Response$* response,\n"
                     "    ::absl::AnyInvocable<void(::absl::Status) &&> done) override;\n");
      break;
    case MethodKind::kServerStreaming:
    case MethodKind::kClientStreaming:
    case MethodKind::kBidiStreaming:
      break;  // no done-callback form (HasDoneForm)
  }
}

// Stub::async's reactor call for `method`.
void PrintHeaderClientMethodReactor(const ServiceModel& service, const MethodModel& method,
                                    size_t index, Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "// \"$method_full_name$\" with a ClientUnaryReactor: binds the call to\n"
                     "// `reactor`, which sends `*request` at its StartCall.\n");
      break;
    case MethodKind::kServerStreaming:
      printer->Print(vars,
                     "// \"$method_full_name$\" with a ClientReadReactor: binds the call to\n"
                     "// `reactor` (`*request` is serialised now); StartCall sends it.\n");
      break;
    case MethodKind::kClientStreaming:
      printer->Print(vars,
                     "// \"$method_full_name$\" with a ClientWriteReactor: binds the call to\n"
                     "// `reactor`; `*response` is filled in before its OnDone(OK).\n");
      break;
    case MethodKind::kBidiStreaming:
      printer->Print(vars,
                     "// \"$method_full_name$\" with a ClientBidiReactor: binds the call to\n"
                     "// `reactor`.\n");
      break;
  }
  printer->Print(vars, "void $Method$(\n");
  printer->Print(vars, (ReactorParams(method) + " override;\n").c_str());
}

void PrintAsyncClassDecl(const ServiceModel& service, Printer* printer) {
  Vars vars = ServiceVars(service);
  printer->Print(vars,
                 "\n"
                 "// Asynchronous calls in gRPC's callback style. Unary methods take a\n"
                 "// done callback:\n"
                 "//   stub->async()->Method(&context, request, &response, done);\n"
                 "// it returns at once; `done` runs exactly once with the call's status,\n"
                 "// on a channel engine thread (or inline when the call fails before\n"
                 "// anything is sent). `request` may be freed on return; `context` and\n"
                 "// `response` must stay alive until `done` runs. Every method also takes\n"
                 "// a reactor (rdmarpc/client_callback.h), as gRPC's stub->async() does:\n"
                 "//   stub->async()->Method(&context, ..., reactor); reactor->StartCall();\n"
                 "// `context` (and `response`) must stay alive until the reactor's OnDone.\n"
                 "// The context's deadline applies as for the blocking calls (none unless\n"
                 "// set).\n");
  printer->Print(vars,
                 "class async final : public StubInterface::async_interface {\n"
                 " public:\n");
  printer->Indent();
  bool any_async = false;
  for (size_t i = 0; i < service.methods.size(); ++i) {
    if (HasDoneForm(service.methods[i])) {
      if (any_async) printer->Print("\n");
      any_async = true;
      PrintHeaderClientMethodAsync(service, service.methods[i], i, printer);
    }
    if (any_async) printer->Print("\n");
    any_async = true;
    PrintHeaderClientMethodReactor(service, service.methods[i], i, printer);
  }
  printer->Outdent();
  if (any_async) printer->Print("\n");
  printer->Print(vars,
                 " private:\n"
                 "  friend class $qualified_service$::Stub;\n"
                 "  explicit async(::rdmarpc::Channel* channel) : channel_(channel) {}\n"
                 "  ::rdmarpc::Channel* channel_;  // owned by the enclosing Stub\n"
                 "};\n"
                 "class async* async() override { return &async_stub_; }\n");
}

void PrintStubClassDecl(const ServiceModel& service, Printer* printer) {
  printer->Print(ServiceVars(service),
                 "// The client side. A Stub only names the methods of one Channel; it is\n"
                 "// cheap to make, and any number of threads may use one at a time.\n"
                 "class Stub final : public StubInterface {\n"
                 " public:\n"
                 "  explicit Stub(::std::shared_ptr<::rdmarpc::Channel> channel);\n"
                 "  Stub(const Stub&) = delete;\n"
                 "  Stub& operator=(const Stub&) = delete;\n");
  printer->Indent();
  for (size_t i = 0; i < service.methods.size(); ++i) {
    PrintHeaderClientMethod(service, service.methods[i], i, printer);
  }
  PrintAsyncClassDecl(service, printer);
  printer->Outdent();
  printer->Print(
      "\n"
      " private:\n"
      "  ::std::shared_ptr<::rdmarpc::Channel> channel_;\n"
      "  class async async_stub_;\n"
      "};\n");
}

void PrintServiceDecl(const ServiceModel& service, Printer* printer) {
  PrintCommentLines(service.comment_lines, printer);
  if (!service.comment_lines.empty()) printer->Print("//\n");
  printer->Print(ServiceVars(service),
                 "// rdmarpc service $service_full_name$.\n"
                 "class $Service$ final {\n"
                 " public:\n"
                 "  // The service's full protobuf name.\n"
                 "  static constexpr char service_full_name[] = \"$service_full_name$\";\n"
                 "\n");
  printer->Indent();
  PrintServerClassDecl(service, printer);
  printer->Print("\n");
  PrintCallbackServiceClassDecl(service, printer);
  printer->Print("\n");
  PrintStubInterfaceClassDecl(service, printer);
  printer->Print("\n");
  PrintStubClassDecl(service, printer);
  printer->Print(
      "\n"
      "// Same as ::std::make_unique<Stub>(channel).\n"
      "static ::std::unique_ptr<Stub> NewStub(::std::shared_ptr<::rdmarpc::Channel> channel);\n");
  printer->Outdent();
  printer->Print("};\n");
}

// ---- source ---------------------------------------------------------------

void PrintSourcePrologue(const FileDescriptor* file, const GeneratorParams& params,
                         Printer* printer) {
  Vars vars = {
      {"proto", file->name()},
      {"rdmarpc_h", RdmarpcHeaderPath(file, params)},
  };
  printer->Print(vars,
                 "// Generated by protoc-gen-rdmarpc from $proto$. DO NOT EDIT!\n"
                 "#include \"$rdmarpc_h$\"\n"
                 "\n"
                 "#include <memory>\n"
                 "#include <utility>\n"
                 "\n");
}

void PrintMethodNameTable(const ServiceModel& service, Printer* printer) {
  // A zero-length array is ill-formed; a service without methods needs none.
  if (service.methods.empty()) return;
  printer->Print(ServiceVars(service),
                 "// The full names of $service_full_name$'s methods, in .proto order.\n"
                 "constexpr const char* $method_names_decl$[] = {\n");
  for (const MethodModel& method : service.methods) {
    printer->Print("    \"$name$\",\n", "name", method.full_name);
  }
  printer->Print("};\n");
  for (size_t i = 0; i < service.methods.size(); ++i) {
    const MethodModel& method = service.methods[i];
    if (method.method_config_json.empty()) continue;
    Vars vars = MethodVars(service, method, i);
    // A C++ string literal: the JSON holds only ASCII (checked names,
    // numbers), so escaping quotes and backslashes suffices.
    std::string literal;
    for (char c : method.method_config_json) {
      if (c == '"' || c == '\\') literal += '\\';
      literal += c;
    }
    vars["json"] = literal;
    vars["config_source"] = method.method_config_source;
    printer->Print(vars,
                   "\n"
                   "// $method_full_name$'s policy, from $config_source$ (rdmarpc/options.proto).\n"
                   "const ::rdmarpc::internal::MethodConfig* $method_config_prefix$$index$() {\n"
                   "  static const ::rdmarpc::internal::MethodConfig* const config =\n"
                   "      ::rdmarpc::internal::IdlMethodConfig(\"$json$\");\n"
                   "  return config;\n"
                   "}\n");
  }
}

// The line of S::Service::Service() that registers `method`'s handler.
void PrintSourceServerMethodHandler(const ServiceModel& service, const MethodModel& method,
                                    size_t index, Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  // The handler's run_inline parameter defaults to false; printing it only
  // when true keeps the registration of ordinary methods short.
  vars["run_inline_arg"] = method.run_inline ? ", /*run_inline=*/true" : "";
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "AddMethod(::std::make_unique<::rdmarpc::internal::UnaryMethodHandler<\n"
                     "              $Service$::Service, $Request$, $Response$>>(\n"
                     "    $method_names$[$index$], this, &$Service$::Service::$Method$"
                     "$run_inline_arg$));\n");
      break;
    // Streaming handlers take no run_inline: they always run on the handler
    // pool (MethodModel::run_inline is false for them).
    case MethodKind::kServerStreaming:
      printer->Print(vars,
                     "AddMethod(::std::make_unique<::rdmarpc::internal::ServerStreamingMethodHandler<\n"
                     "              $Service$::Service, $Request$, $Response$>>(\n"
                     "    $method_names$[$index$], this, &$Service$::Service::$Method$));\n");
      break;
    case MethodKind::kClientStreaming:
      printer->Print(vars,
                     "AddMethod(::std::make_unique<::rdmarpc::internal::ClientStreamingMethodHandler<\n"
                     "              $Service$::Service, $Request$, $Response$>>(\n"
                     "    $method_names$[$index$], this, &$Service$::Service::$Method$));\n");
      break;
    case MethodKind::kBidiStreaming:
      printer->Print(vars,
                     "AddMethod(::std::make_unique<::rdmarpc::internal::BidiStreamingMethodHandler<\n"
                     "              $Service$::Service, $Request$, $Response$>>(\n"
                     "    $method_names$[$index$], this, &$Service$::Service::$Method$));\n");
      break;
  }
}

// The default body of S::Service's virtual method for `method`.
void PrintSourceServerMethodDefault(const ServiceModel& service, const MethodModel& method,
                                    size_t index, Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "\n"
                     "::absl::Status $Service$::Service::$Method$(\n"
                     "    ::rdmarpc::ServerContext* /*context*/,\n"
                     "    const $Request$& /*request*/,\n"
                     "    $Response$* /*response*/) {\n");
      break;
    case MethodKind::kServerStreaming:
      printer->Print(vars,
                     "\n"
                     "::absl::Status $Service$::Service::$Method$(\n"
                     "    ::rdmarpc::ServerContext* /*context*/,\n"
                     "    const $Request$& /*request*/,\n"
                     "    ::rdmarpc::ServerWriter<$Response$>* /*writer*/) {\n");
      break;
    case MethodKind::kClientStreaming:
      printer->Print(vars,
                     "\n"
                     "::absl::Status $Service$::Service::$Method$(\n"
                     "    ::rdmarpc::ServerContext* /*context*/,\n"
                     "    ::rdmarpc::ServerReader<$Request$>* /*reader*/,\n"
                     "    $Response$* /*response*/) {\n");
      break;
    case MethodKind::kBidiStreaming:
      printer->Print(vars,
                     "\n"
                     "::absl::Status $Service$::Service::$Method$(\n"
                     "    ::rdmarpc::ServerContext* /*context*/,\n"
                     "    ::rdmarpc::ServerReaderWriter<$Response$, $Request$>* /*stream*/) {\n");
      break;
  }
  printer->Print(vars,
                 "  return ::absl::UnimplementedError(\n"
                 "      \"method $method_full_name$ is not implemented by this server\");\n"
                 "}\n");
}

void PrintServerDefinitions(const ServiceModel& service, Printer* printer) {
  printer->Print(ServiceVars(service),
                 "$Service$::Service::Service() : ::rdmarpc::Service($Service$::service_full_name) {\n");
  printer->Indent();
  for (size_t i = 0; i < service.methods.size(); ++i) {
    PrintSourceServerMethodHandler(service, service.methods[i], i, printer);
  }
  printer->Outdent();
  printer->Print(ServiceVars(service),
                 "}\n"
                 "\n"
                 "$Service$::Service::~Service() = default;\n");
  for (size_t i = 0; i < service.methods.size(); ++i) {
    PrintSourceServerMethodDefault(service, service.methods[i], i, printer);
  }
}

// The line of S::CallbackService::CallbackService() that registers
// `method`'s handler.
void PrintSourceCallbackServerMethodHandler(const ServiceModel& service,
                                            const MethodModel& method, size_t index,
                                            Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  vars["run_inline_arg"] = method.run_inline ? ", /*run_inline=*/true" : "";
  switch (method.kind) {
    case MethodKind::kUnary:
      vars["handler"] = "CallbackUnaryMethodHandler";
      break;
    case MethodKind::kServerStreaming:
      vars["handler"] = "CallbackServerStreamingMethodHandler";
      break;
    case MethodKind::kClientStreaming:
      vars["handler"] = "CallbackClientStreamingMethodHandler";
      break;
    case MethodKind::kBidiStreaming:
      vars["handler"] = "CallbackBidiStreamingMethodHandler";
      break;
  }
  printer->Print(vars,
                 "AddMethod(::std::make_unique<::rdmarpc::internal::$handler$<\n"
                 "              $Service$::CallbackService, $Request$, $Response$>>(\n"
                 "    $method_names$[$index$], this, &$Service$::CallbackService::$Method$"
                 "$run_inline_arg$));\n");
}

// The default body of S::CallbackService's virtual method for `method`.
void PrintSourceCallbackServerMethodDefault(const ServiceModel& service,
                                            const MethodModel& method, size_t index,
                                            Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "\n"
                     "::rdmarpc::ServerUnaryReactor* $Service$::CallbackService::$Method$(\n"
                     "    ::rdmarpc::CallbackServerContext* /*context*/,\n"
                     "    const $Request$* /*request*/,\n"
                     "    $Response$* /*response*/) {\n");
      break;
    case MethodKind::kServerStreaming:
      printer->Print(vars,
                     "\n"
                     "::rdmarpc::ServerWriteReactor<$Response$>* $Service$::CallbackService::$Method$(\n"
                     "    ::rdmarpc::CallbackServerContext* /*context*/,\n"
                     "    const $Request$* /*request*/) {\n");
      break;
    case MethodKind::kClientStreaming:
      printer->Print(vars,
                     "\n"
                     "::rdmarpc::ServerReadReactor<$Request$>* $Service$::CallbackService::$Method$(\n"
                     "    ::rdmarpc::CallbackServerContext* /*context*/,\n"
                     "    $Response$* /*response*/) {\n");
      break;
    case MethodKind::kBidiStreaming:
      printer->Print(vars,
                     "\n"
                     "::rdmarpc::ServerBidiReactor<$Request$, $Response$>* "
                     "$Service$::CallbackService::$Method$(\n"
                     "    ::rdmarpc::CallbackServerContext* /*context*/) {\n");
      break;
  }
  printer->Print("  return nullptr;  // the call finishes UNIMPLEMENTED\n"
                 "}\n");
}

void PrintCallbackServerDefinitions(const ServiceModel& service, Printer* printer) {
  printer->Print(ServiceVars(service),
                 "\n"
                 "$Service$::CallbackService::CallbackService()\n"
                 "    : ::rdmarpc::Service($Service$::service_full_name) {\n");
  printer->Indent();
  for (size_t i = 0; i < service.methods.size(); ++i) {
    PrintSourceCallbackServerMethodHandler(service, service.methods[i], i, printer);
  }
  printer->Outdent();
  printer->Print(ServiceVars(service),
                 "}\n"
                 "\n"
                 "$Service$::CallbackService::~CallbackService() = default;\n");
  for (size_t i = 0; i < service.methods.size(); ++i) {
    PrintSourceCallbackServerMethodDefault(service, service.methods[i], i, printer);
  }
}

// Sets the default deadline, if the method has one, before a call.
void PrintDefaultDeadline(const MethodModel& method, const Vars& vars, Printer* printer) {
  if (method.default_timeout_ms == 0) return;
  printer->Print(vars,
                 "  if (context->deadline() == ::absl::InfiniteFuture()) {\n"
                 "    // $timeout_source$.default_timeout_ms\n"
                 "    context->set_timeout(::absl::Milliseconds($timeout_ms$));\n"
                 "  }\n");
}

// Stub's blocking call for `method`.
void PrintSourceClientMethod(const ServiceModel& service, const MethodModel& method, size_t index,
                             Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "\n"
                     "::absl::Status $Service$::Stub::$Method$(\n"
                     "    ::rdmarpc::ClientContext* context,\n"
                     "    const $Request$& request,\n"
                     "    $Response$* response) {\n");
      PrintDefaultDeadline(method, vars, printer);
      printer->Print(vars,
                     "  return ::rdmarpc::internal::BlockingUnaryCall(\n"
                     "      channel_.get(), $method_names$[$index$], context, request, response$config_arg$);\n"
                     "}\n");
      break;
    case MethodKind::kServerStreaming:
      printer->Print(vars,
                     "\n"
                     "::std::unique_ptr<::rdmarpc::ClientReaderInterface<$Response$>>\n"
                     "$Service$::Stub::$Method$(\n"
                     "    ::rdmarpc::ClientContext* context,\n"
                     "    const $Request$& request) {\n");
      PrintDefaultDeadline(method, vars, printer);
      printer->Print(vars,
                     "  return ::std::make_unique<::rdmarpc::ClientReader<$Response$>>(\n"
                     "      channel_.get(), $method_names$[$index$], context, request);\n"
                     "}\n");
      break;
    case MethodKind::kClientStreaming:
      printer->Print(vars,
                     "\n"
                     "::std::unique_ptr<::rdmarpc::ClientWriterInterface<$Request$>>\n"
                     "$Service$::Stub::$Method$(\n"
                     "    ::rdmarpc::ClientContext* context,\n"
                     "    $Response$* response) {\n");
      PrintDefaultDeadline(method, vars, printer);
      printer->Print(vars,
                     "  return ::std::make_unique<::rdmarpc::ClientWriter<$Request$>>(\n"
                     "      channel_.get(), $method_names$[$index$], context, response);\n"
                     "}\n");
      break;
    case MethodKind::kBidiStreaming:
      printer->Print(vars,
                     "\n"
                     "::std::unique_ptr<::rdmarpc::ClientReaderWriterInterface<$Request$, $Response$>>\n"
                     "$Service$::Stub::$Method$(\n"
                     "    ::rdmarpc::ClientContext* context) {\n");
      PrintDefaultDeadline(method, vars, printer);
      printer->Print(vars,
                     "  return ::std::make_unique<::rdmarpc::ClientReaderWriter<$Request$, $Response$>>(\n"
                     "      channel_.get(), $method_names$[$index$], context);\n"
                     "}\n");
      break;
  }
}

// Stub::async's call for `method`.
void PrintSourceClientMethodAsync(const ServiceModel& service, const MethodModel& method,
                                  size_t index, Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "\n"
                     "void $Service$::Stub::async::$Method$(\n"
                     "    ::rdmarpc::ClientContext* context,\n"
                     "    const $Request$& request,\n"
                     "    $Response$* response,\n"
                     "    ::absl::AnyInvocable<void(::absl::Status) &&> done) {\n");
      PrintDefaultDeadline(method, vars, printer);
      printer->Print(vars,
                     "  ::rdmarpc::internal::AsyncUnaryCall(\n"
                     "      channel_, $method_names$[$index$], context, request, response,\n"
                     "      ::std::move(done)$config_arg$);\n"
                     "}\n");
      break;
    case MethodKind::kServerStreaming:
    case MethodKind::kClientStreaming:
    case MethodKind::kBidiStreaming:
      break;  // no done-callback form (HasDoneForm)
  }
}

// Stub::async's reactor call for `method`: binds the reactor to a call.
void PrintSourceClientMethodReactor(const ServiceModel& service, const MethodModel& method,
                                    size_t index, Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  printer->Print(vars,
                 "\n"
                 "void $Service$::Stub::async::$Method$(\n");
  printer->Print(vars, (ReactorParams(method) + " {\n").c_str());
  PrintDefaultDeadline(method, vars, printer);
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "  ::rdmarpc::internal::ClientReactorAccess::BindUnary(\n"
                     "      reactor, channel_, $method_names$[$index$], context, request, response$config_arg$);\n");
      break;
    case MethodKind::kServerStreaming:
      printer->Print(vars,
                     "  ::rdmarpc::internal::ClientCallbackStream::Bind(\n"
                     "      reactor, channel_, $method_names$[$index$], context,\n"
                     "      ::rdmarpc::internal::RpcKind::kServerStreaming, request, nullptr);\n");
      break;
    case MethodKind::kClientStreaming:
      printer->Print(vars,
                     "  ::rdmarpc::internal::ClientCallbackStream::Bind(\n"
                     "      reactor, channel_, $method_names$[$index$], context,\n"
                     "      ::rdmarpc::internal::RpcKind::kClientStreaming, nullptr, response);\n");
      break;
    case MethodKind::kBidiStreaming:
      printer->Print(vars,
                     "  ::rdmarpc::internal::ClientCallbackStream::Bind(\n"
                     "      reactor, channel_, $method_names$[$index$], context,\n"
                     "      ::rdmarpc::internal::RpcKind::kBidiStreaming, nullptr, nullptr);\n");
      break;
  }
  printer->Print("}\n");
}

void PrintStubDefinitions(const ServiceModel& service, Printer* printer) {
  printer->Print(ServiceVars(service),
                 "\n"
                 "$Service$::Stub::Stub(::std::shared_ptr<::rdmarpc::Channel> channel)\n"
                 "    : channel_(::std::move(channel)), async_stub_(channel_.get()) {}\n");
  for (size_t i = 0; i < service.methods.size(); ++i) {
    PrintSourceClientMethod(service, service.methods[i], i, printer);
  }
  for (size_t i = 0; i < service.methods.size(); ++i) {
    if (HasDoneForm(service.methods[i])) {
      PrintSourceClientMethodAsync(service, service.methods[i], i, printer);
    }
    PrintSourceClientMethodReactor(service, service.methods[i], i, printer);
  }
  printer->Print(ServiceVars(service),
                 "\n"
                 "::std::unique_ptr<$Service$::Stub> $Service$::NewStub(\n"
                 "    ::std::shared_ptr<::rdmarpc::Channel> channel) {\n"
                 "  return ::std::make_unique<$Service$::Stub>(::std::move(channel));\n"
                 "}\n");
}

// ---- mock header ----------------------------------------------------------

// The mock header's usage line for a streaming method: the mock returns a
// reader or writer that the test defines.
void PrintMockUsageStreaming(const MethodModel& method, Printer* printer) {
  Vars vars = {
      {"Method", method.cpp_name},
      {"Request", Unqualified(method.request)},
      {"Response", Unqualified(method.response)},
  };
  switch (method.kind) {
    case MethodKind::kUnary:
      break;  // has the asynchronous form's usage instead
    case MethodKind::kServerStreaming:
      printer->Print(vars,
                     "//   // FakeReader: the test's own rdmarpc::ClientReaderInterface<$Response$>\n"
                     "//   EXPECT_CALL(stub, $Method$(_, _))\n"
                     "//       .WillOnce(Return(ByMove(std::make_unique<FakeReader>())));\n");
      break;
    case MethodKind::kClientStreaming:
      printer->Print(vars,
                     "//   // FakeWriter: the test's own rdmarpc::ClientWriterInterface<$Request$>\n"
                     "//   EXPECT_CALL(stub, $Method$(_, _))\n"
                     "//       .WillOnce(Return(ByMove(std::make_unique<FakeWriter>())));\n");
      break;
    case MethodKind::kBidiStreaming:
      printer->Print(vars,
                     "//   // FakeStream: the test's own rdmarpc::ClientReaderWriterInterface<$Request$, $Response$>\n"
                     "//   EXPECT_CALL(stub, $Method$(_))\n"
                     "//       .WillOnce(Return(ByMove(std::make_unique<FakeStream>())));\n");
      break;
  }
}

void PrintMockHeaderPrologue(const FileDescriptor* file, const GeneratorParams& params,
                             const std::vector<ServiceModel>& services, Printer* printer) {
  Vars vars = {
      {"proto", file->name()},
      {"guard", MockHeaderGuard(file->name())},
      {"rdmarpc_h", RdmarpcHeaderPath(file, params)},
  };
  printer->Print(vars,
                 "// Generated by protoc-gen-rdmarpc from $proto$. DO NOT EDIT!\n"
                 "//\n"
                 "// gMock classes of the client stubs in $proto$, written with\n"
                 "// the plugin parameter generate_mock_code=true. Each is named\n"
                 "// Mock<Service>Stub, as gRPC's generate_mock_code names it, and derives\n"
                 "// from <Service>::StubInterface, so code that takes a StubInterface* can\n"
                 "// be unit-tested without a server. Tests link gMock (GTest::gmock).\n");
  if (!services.empty()) {
    const ServiceModel& service = services.front();
    printer->Print(UsageVars(file, params, service),
                   "//\n"
                   "// Usage, with service $service_full_name$:\n"
                   "//   $mock_class$ stub;\n");
    if (const MethodModel* unary = FirstMethod(service, HasDoneForm)) {
      // Actions for the asynchronous calls must run `done` as an rvalue: it
      // is an ::absl::AnyInvocable<void(::absl::Status) &&>.
      // The last matcher tells the done-callback call from the reactor one.
      printer->Print("//   EXPECT_CALL(stub, $Method$(_, _, _))\n"
                     "//       .WillOnce(Return(absl::OkStatus()));\n"
                     "//   EXPECT_CALL(*stub.async(), $Method$(_, _, _,\n"
                     "//       A<absl::AnyInvocable<void(absl::Status) &&>>()))\n"
                     "//       .WillOnce([](auto*, const auto&, auto*, auto done) {\n"
                     "//         std::move(done)(absl::OkStatus());\n"
                     "//       });\n",
                     "Method", unary->cpp_name);
    }
    if (const MethodModel* streaming =
            FirstMethod(service, [](const MethodModel& m) { return !HasDoneForm(m); })) {
      PrintMockUsageStreaming(*streaming, printer);
    }
    printer->Print(UsageVars(file, params, service),
                   "//   CodeUnderTest(&stub);  // takes a $class$::StubInterface*\n");
  }
  printer->Print(vars,
                 "#ifndef $guard$\n"
                 "#define $guard$\n"
                 "\n"
                 "#include \"$rdmarpc_h$\"\n"
                 "#include \"gmock/gmock.h\"\n"
                 "\n");
}

// Mock<S>Stub's MOCK_METHOD for `method`'s blocking call.
void PrintMockClientMethod(const ServiceModel& service, const MethodModel& method, size_t index,
                           Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "MOCK_METHOD(::absl::Status, $Method$,\n"
                     "            (::rdmarpc::ClientContext* context,\n"
                     "             const $Request$& request,\n"
                     "             $Response$* response),\n"
                     "            (override));\n");
      break;
    // gMock returns the move-only readers and writers with
    // Return(ByMove(...)); a return type with a comma needs parentheses.
    case MethodKind::kServerStreaming:
      printer->Print(vars,
                     "MOCK_METHOD(::std::unique_ptr<::rdmarpc::ClientReaderInterface<$Response$>>,\n"
                     "            $Method$,\n"
                     "            (::rdmarpc::ClientContext* context,\n"
                     "             const $Request$& request),\n"
                     "            (override));\n");
      break;
    case MethodKind::kClientStreaming:
      printer->Print(vars,
                     "MOCK_METHOD(::std::unique_ptr<::rdmarpc::ClientWriterInterface<$Request$>>,\n"
                     "            $Method$,\n"
                     "            (::rdmarpc::ClientContext* context,\n"
                     "             $Response$* response),\n"
                     "            (override));\n");
      break;
    case MethodKind::kBidiStreaming:
      printer->Print(vars,
                     "MOCK_METHOD((::std::unique_ptr<::rdmarpc::ClientReaderWriterInterface<$Request$, $Response$>>),\n"
                     "            $Method$,\n"
                     "            (::rdmarpc::ClientContext* context),\n"
                     "            (override));\n");
      break;
  }
}

// The MOCK_METHOD of Mock<S>Stub's async() for `method`.
void PrintMockClientMethodAsync(const ServiceModel& service, const MethodModel& method,
                                size_t index, Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "MOCK_METHOD(void, $Method$,\n"
                     "            (::rdmarpc::ClientContext* context,\n"
                     "             const $Request$& request,\n"
                     "             $Response$* response,\n"
                     "             ::absl::AnyInvocable<void(::absl::Status) &&> done),\n"
                     "            (override));\n");
      break;
    case MethodKind::kServerStreaming:
    case MethodKind::kClientStreaming:
    case MethodKind::kBidiStreaming:
      break;  // no done-callback form (HasDoneForm)
  }
}

// The MOCK_METHOD of Mock<S>Stub's async() for `method`'s reactor call.
void PrintMockClientMethodReactor(const ServiceModel& service, const MethodModel& method,
                                  size_t index, Printer* printer) {
  Vars vars = MethodVars(service, method, index);
  switch (method.kind) {
    case MethodKind::kUnary:
      printer->Print(vars,
                     "MOCK_METHOD(void, $Method$,\n"
                     "            (::rdmarpc::ClientContext* context,\n"
                     "             const $Request$* request,\n"
                     "             $Response$* response,\n"
                     "             ::rdmarpc::ClientUnaryReactor* reactor),\n"
                     "            (override));\n");
      break;
    case MethodKind::kServerStreaming:
      printer->Print(vars,
                     "MOCK_METHOD(void, $Method$,\n"
                     "            (::rdmarpc::ClientContext* context,\n"
                     "             const $Request$* request,\n"
                     "             ::rdmarpc::ClientReadReactor<$Response$>* reactor),\n"
                     "            (override));\n");
      break;
    case MethodKind::kClientStreaming:
      printer->Print(vars,
                     "MOCK_METHOD(void, $Method$,\n"
                     "            (::rdmarpc::ClientContext* context,\n"
                     "             $Response$* response,\n"
                     "             ::rdmarpc::ClientWriteReactor<$Request$>* reactor),\n"
                     "            (override));\n");
      break;
    case MethodKind::kBidiStreaming:
      // A parameter type with a comma needs parentheses (and no name).
      printer->Print(vars,
                     "MOCK_METHOD(void, $Method$,\n"
                     "            (::rdmarpc::ClientContext* context,\n"
                     "             (::rdmarpc::ClientBidiReactor<$Request$, $Response$>*)),\n"
                     "            (override));\n");
      break;
  }
}

void PrintMockStubClassDecl(const ServiceModel& service, Printer* printer) {
  Vars vars = ServiceVars(service);
  // Not final: tests may wrap it in ::testing::NiceMock or StrictMock.
  printer->Print(vars,
                 "// The gMock class of $service_full_name$'s StubInterface. async()\n"
                 "// returns a mock of the asynchronous calls: EXPECT_CALL(*stub.async(), ...).\n"
                 "// ::testing::NiceMock and StrictMock wrap the blocking calls only; the\n"
                 "// asynchronous ones keep gMock's default of warning on uninteresting calls.\n"
                 "class $mock_class$ : public $qualified_service$::StubInterface {\n"
                 " public:\n");
  printer->Indent();
  for (size_t i = 0; i < service.methods.size(); ++i) {
    PrintMockClientMethod(service, service.methods[i], i, printer);
  }
  if (!service.methods.empty()) printer->Print("\n");
  printer->Print(vars,
                 "// The asynchronous calls' mocks, which async() returns.\n"
                 "class async : public $qualified_service$::StubInterface::async_interface {\n"
                 " public:\n");
  printer->Indent();
  for (size_t i = 0; i < service.methods.size(); ++i) {
    if (HasDoneForm(service.methods[i])) {
      PrintMockClientMethodAsync(service, service.methods[i], i, printer);
    }
    PrintMockClientMethodReactor(service, service.methods[i], i, printer);
  }
  printer->Outdent();
  printer->Print("};\n"
                 "class async* async() override { return &async_stub_; }\n");
  printer->Outdent();
  printer->Print("\n"
                 " private:\n"
                 "  class async async_stub_;\n"
                 "};\n");
}

std::vector<ServiceModel> BuildServiceModels(const FileDescriptor* file) {
  std::vector<ServiceModel> services;
  for (int i = 0; i < file->service_count(); ++i) {
    services.push_back(BuildServiceModel(file->service(i)));
  }
  return services;
}

}  // namespace

void PrintHeader(const FileDescriptor* file, const GeneratorParams& params, Printer* printer) {
  const std::vector<ServiceModel> services = BuildServiceModels(file);
  PrintHeaderPrologue(file, params, services, printer);
  if (!services.empty()) {
    PrintNamespacesOpen(file, printer);
    for (size_t i = 0; i < services.size(); ++i) {
      if (i > 0) printer->Print("\n");
      PrintServiceDecl(services[i], printer);
    }
    printer->Print("\n");
    PrintNamespacesClose(file, printer);
    if (!file->package().empty()) printer->Print("\n");
  }
  printer->Print("#endif  // $guard$\n", "guard", HeaderGuard(file->name()));
}

void PrintSource(const FileDescriptor* file, const GeneratorParams& params, Printer* printer) {
  PrintSourcePrologue(file, params, printer);
  const std::vector<ServiceModel> services = BuildServiceModels(file);
  if (services.empty()) return;
  PrintNamespacesOpen(file, printer);
  printer->Print("namespace {\n\n");
  for (size_t i = 0; i < services.size(); ++i) {
    if (i > 0) printer->Print("\n");
    PrintMethodNameTable(services[i], printer);
  }
  printer->Print("\n}  // namespace\n");
  for (const ServiceModel& service : services) {
    printer->Print("\n// $service_full_name$\n\n", "service_full_name", service.full_name);
    PrintServerDefinitions(service, printer);
    PrintCallbackServerDefinitions(service, printer);
    PrintStubDefinitions(service, printer);
  }
  if (!file->package().empty()) {
    printer->Print("\n");
    PrintNamespacesClose(file, printer);
  }
}

void PrintMockHeader(const FileDescriptor* file, const GeneratorParams& params,
                     Printer* printer) {
  const std::vector<ServiceModel> services = BuildServiceModels(file);
  PrintMockHeaderPrologue(file, params, services, printer);
  if (!services.empty()) {
    PrintNamespacesOpen(file, printer);
    for (size_t i = 0; i < services.size(); ++i) {
      if (i > 0) printer->Print("\n");
      PrintMockStubClassDecl(services[i], printer);
    }
    printer->Print("\n");
    PrintNamespacesClose(file, printer);
    if (!file->package().empty()) printer->Print("\n");
  }
  printer->Print("#endif  // $guard$\n", "guard", MockHeaderGuard(file->name()));
}

}  // namespace compiler
}  // namespace rdmarpc
