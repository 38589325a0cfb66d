#include "service_model.h"

#include <cmath>
#include <sstream>

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
    // A lone '\r' ends a line as '\n' and "\r\n" do: a C++ compiler reads
    // it as a line break, so text after it would leave the `//` comment.
    size_t end = comments.find_first_of("\r\n", start);
    if (end == std::string::npos) end = comments.size();
    std::string line = comments.substr(start, end - start);
    // Trailing white space goes, form feed and vertical tab too: a
    // backslash followed by any of it still continues the line.
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\f' ||
                             line.back() == '\v')) {
      line.pop_back();
    }
    lines.push_back(std::move(line));
    start = end + 1;
    if (end < comments.size() && comments[end] == '\r' && start < comments.size() &&
        comments[start] == '\n') {
      ++start;
    }
  }
  return lines;
}

template <class DescriptorT>
std::vector<std::string> LeadingComments(const DescriptorT* descriptor) {
  google::protobuf::SourceLocation location;
  if (!descriptor->GetSourceLocation(&location)) return {};
  return CommentLines(location.leading_comments);
}

// gRPC's status code names (grpc/include/grpcpp/support/status_code_enum.h,
// google.rpc.Code), by number.
constexpr const char* kCodeNames[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

std::string Upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

bool KnownCode(const std::string& name) {
  for (const char* n : kCodeNames) {
    if (Upper(name) == n) return true;
  }
  return false;
}

// Milliseconds as a proto3 JSON duration ("0.010s").
std::string JsonDuration(uint32_t ms) {
  std::string frac = std::to_string(ms % 1000);
  frac.insert(0, 3 - frac.size(), '0');
  return std::to_string(ms / 1000) + "." + frac + "s";
}

std::string JsonCodes(const google::protobuf::RepeatedPtrField<std::string>& codes) {
  std::string out = "[";
  for (int i = 0; i < codes.size(); ++i) {
    out += (i == 0 ? "\"" : ", \"") + Upper(codes.Get(i)) + "\"";
  }
  return out + "]";
}

std::string JsonNumber(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

// Problems of one options message's policies; `where` names it
// ("(rdmarpc.method)").
template <class Options>
std::string CheckPolicies(const Options& options, const std::string& where) {
  if (options.has_retry_policy() && options.has_hedging_policy()) {
    return where + " sets both retry_policy and hedging_policy; a method has at most one";
  }
  if (options.has_retry_policy()) {
    const rdmarpc::RetryPolicy& p = options.retry_policy();
    const std::string at = where + ".retry_policy.";
    if (p.max_attempts() < 2) {
      return at + "max_attempts is " + std::to_string(p.max_attempts()) + "; must be 2 or more";
    }
    if (p.initial_backoff_ms() == 0) return at + "initial_backoff_ms is 0; must be > 0";
    if (p.max_backoff_ms() == 0) return at + "max_backoff_ms is 0; must be > 0";
    if (!(p.backoff_multiplier() > 0) || !std::isfinite(p.backoff_multiplier())) {
      return at + "backoff_multiplier is " + JsonNumber(p.backoff_multiplier()) +
             "; must be > 0 and finite";
    }
    if (p.retryable_status_codes().empty()) {
      return at + "retryable_status_codes is empty; name at least one code (\"UNAVAILABLE\")";
    }
    for (const std::string& c : p.retryable_status_codes()) {
      if (!KnownCode(c)) {
        return at + "retryable_status_codes has \"" + c + "\", not a gRPC status code name";
      }
    }
  }
  if (options.has_hedging_policy()) {
    const rdmarpc::HedgingPolicy& p = options.hedging_policy();
    const std::string at = where + ".hedging_policy.";
    if (p.max_attempts() < 2) {
      return at + "max_attempts is " + std::to_string(p.max_attempts()) + "; must be 2 or more";
    }
    for (const std::string& c : p.non_fatal_status_codes()) {
      if (!KnownCode(c)) {
        return at + "non_fatal_status_codes has \"" + c + "\", not a gRPC status code name";
      }
    }
  }
  return std::string();
}

// The policy of `options` as a methodConfig object; empty when it has none.
template <class Options>
std::string PolicyJson(const Options& options) {
  if (options.has_retry_policy()) {
    const rdmarpc::RetryPolicy& p = options.retry_policy();
    return "{\"retryPolicy\": {\"maxAttempts\": " + std::to_string(p.max_attempts()) +
           ", \"initialBackoff\": \"" + JsonDuration(p.initial_backoff_ms()) +
           "\", \"maxBackoff\": \"" + JsonDuration(p.max_backoff_ms()) +
           "\", \"backoffMultiplier\": " + JsonNumber(p.backoff_multiplier()) +
           ", \"retryableStatusCodes\": " + JsonCodes(p.retryable_status_codes()) + "}}";
  }
  if (options.has_hedging_policy()) {
    const rdmarpc::HedgingPolicy& p = options.hedging_policy();
    return "{\"hedgingPolicy\": {\"maxAttempts\": " + std::to_string(p.max_attempts()) +
           ", \"hedgingDelay\": \"" + JsonDuration(p.hedging_delay_ms()) +
           "\", \"nonFatalStatusCodes\": " + JsonCodes(p.non_fatal_status_codes()) + "}}";
  }
  return std::string();
}

}  // namespace

std::string CheckCallPolicies(const google::protobuf::FileDescriptor* file) {
  for (int s = 0; s < file->service_count(); ++s) {
    const google::protobuf::ServiceDescriptor* service = file->service(s);
    std::string problem =
        CheckPolicies(service->options().GetExtension(rdmarpc::service), "(rdmarpc.service)");
    if (!problem.empty()) return service->full_name() + ": " + problem;
    for (int m = 0; m < service->method_count(); ++m) {
      const google::protobuf::MethodDescriptor* method = service->method(m);
      const rdmarpc::MethodOptions& options = method->options().GetExtension(rdmarpc::method);
      problem = CheckPolicies(options, "(rdmarpc.method)");
      if (!problem.empty()) return method->full_name() + ": " + problem;
      if (KindOf(method) != MethodKind::kUnary &&
          (options.has_retry_policy() || options.has_hedging_policy())) {
        return method->full_name() + " is " + MethodKindName(KindOf(method)) +
               " and sets (rdmarpc.method)." +
               (options.has_retry_policy() ? "retry_policy" : "hedging_policy") +
               "; retries and hedging apply to unary methods only (remove the option)";
      }
    }
  }
  return std::string();
}

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
  const ServiceHelperNames helpers =
      CppServiceHelperNames(service->file())[static_cast<size_t>(service->index())];
  model.method_names_var = helpers.method_names;
  model.method_config_prefix = helpers.method_config_prefix;
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
    const rdmarpc::MethodOptions& method_options = method->options().GetExtension(rdmarpc::method);
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
    if (!streaming) {
      m.method_config_json = PolicyJson(method_options);
      m.method_config_source = "(rdmarpc.method)";
      if (m.method_config_json.empty()) {
        m.method_config_json = PolicyJson(service_options);
        m.method_config_source = "(rdmarpc.service)";
      }
      if (m.method_config_json.empty()) m.method_config_source.clear();
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
