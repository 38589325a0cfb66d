#include "service_model.h"

#include "google/protobuf/compiler/cpp/names.h"
#include "names.h"
#include "rdmarpc/options.pb.h"

namespace rdmarpc {
namespace compiler {
namespace {

// Splits a comment block from SourceLocation into lines without the
// trailing newline or trailing blanks, so generated files carry no trailing
// whitespace.
std::vector<std::string> CommentLines(const std::string& comments) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < comments.size()) {
    size_t end = comments.find('\n', start);
    if (end == std::string::npos) end = comments.size();
    std::string line = comments.substr(start, end - start);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) {
      line.pop_back();
    }
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

template <class DescriptorT>
std::vector<std::string> LeadingComments(const DescriptorT* descriptor) {
  google::protobuf::SourceLocation location;
  if (!descriptor->GetSourceLocation(&location)) return {};
  return CommentLines(location.leading_comments);
}

}  // namespace

MethodKind KindOf(const google::protobuf::MethodDescriptor* method) {
  if (method->client_streaming() && method->server_streaming()) return MethodKind::kBidiStreaming;
  if (method->client_streaming()) return MethodKind::kClientStreaming;
  if (method->server_streaming()) return MethodKind::kServerStreaming;
  return MethodKind::kUnary;
}

const char* MethodKindName(MethodKind kind) {
  switch (kind) {
    case MethodKind::kUnary:
      return "unary";
    case MethodKind::kServerStreaming:
      return "server-streaming";
    case MethodKind::kClientStreaming:
      return "client-streaming";
    case MethodKind::kBidiStreaming:
      return "bidi-streaming";
  }
  return "unknown";
}

ServiceModel BuildServiceModel(const google::protobuf::ServiceDescriptor* service) {
  ServiceModel model;
  model.name = CppServiceName(service);
  model.full_name = service->full_name();
  model.qualified_class = QualifiedServiceClass(service);
  model.mock_class = MockStubClassName(service);
  model.comment_lines = LeadingComments(service);

  // The options arrive in the CodeGeneratorRequest as serialised
  // google.protobuf.*Options; this binary links rdmarpc/options.pb.cc, so
  // protobuf parses our extensions into typed fields.
  const rdmarpc::ServiceOptions& service_options =
      service->options().GetExtension(rdmarpc::service);
  model.run_inline = service_options.run_inline();

  const std::vector<std::string> cpp_names = CppMethodNames(service);
  for (int i = 0; i < service->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* method = service->method(i);
    MethodModel m;
    m.kind = KindOf(method);
    m.proto_name = method->name();
    m.cpp_name = cpp_names[i];
    m.full_name = "/" + service->full_name() + "/" + method->name();
    m.request = google::protobuf::compiler::cpp::QualifiedClassName(method->input_type());
    m.response = google::protobuf::compiler::cpp::QualifiedClassName(method->output_type());
    m.request_proto = method->input_type()->full_name();
    m.response_proto = method->output_type()->full_name();
    const rdmarpc::MethodOptions& method_options =
        method->options().GetExtension(rdmarpc::method);
    if (method_options.default_timeout_ms() != 0) {
      m.default_timeout_ms = method_options.default_timeout_ms();
      m.default_timeout_source = "(rdmarpc.method)";
    } else if (service_options.default_timeout_ms() != 0) {
      m.default_timeout_ms = service_options.default_timeout_ms();
      m.default_timeout_source = "(rdmarpc.service)";
    }
    // run_inline is proto3 `optional` in MethodOptions, so a method can say
    // false where its service says true. Streaming handlers always run on
    // the handler pool: the service's option passes them by, and the
    // method's, when true, was rejected (FindInlineStreamingMethod).
    const bool streaming = m.kind != MethodKind::kUnary;
    if (method_options.has_run_inline()) {
      m.run_inline = method_options.run_inline() && !streaming;
      m.run_inline_source = "(rdmarpc.method)";
    } else if (service_options.run_inline() && !streaming) {
      m.run_inline = true;
      m.run_inline_source = "(rdmarpc.service)";
    }
    m.comment_lines = LeadingComments(method);
    model.methods.push_back(std::move(m));
  }
  return model;
}

const google::protobuf::MethodDescriptor* FindInlineStreamingMethod(
    const google::protobuf::FileDescriptor* file) {
  for (int s = 0; s < file->service_count(); ++s) {
    const google::protobuf::ServiceDescriptor* service = file->service(s);
    for (int m = 0; m < service->method_count(); ++m) {
      const google::protobuf::MethodDescriptor* method = service->method(m);
      if (KindOf(method) != MethodKind::kUnary &&
          method->options().GetExtension(rdmarpc::method).run_inline()) {
        return method;
      }
    }
  }
  return nullptr;
}

}  // namespace compiler
}  // namespace rdmarpc
