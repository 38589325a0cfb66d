// rdmarpc_cli: lists, describes and calls the methods of any rdmarpc
// server that serves grpc.reflection.v1, in the manner of gRPC's grpc_cli.
// It learns the server's types by reflection (ReflectionDatabase), builds
// requests and reads responses as google::protobuf::DynamicMessage, and
// calls through rdmarpc::GenericStub.
//
//   rdmarpc_cli ls 127.0.0.1:7100
//   grpc.health.v1.Health
//   ...
//   rdmarpc.examples.KvStore
//   rdmarpc_cli ls 127.0.0.1:7100 rdmarpc.examples.KvStore        (methods, one a line)
//   rdmarpc_cli describe 127.0.0.1:7100 rdmarpc.examples.PutRequest
//   rdmarpc_cli call 127.0.0.1:7100 rdmarpc.examples.KvStore/Put 'key: "a" value: "1"'
//   replaced: false
//   rdmarpc_cli health 127.0.0.1:7100
//   SERVING
//
// Output: each message on one line of stdout, in protobuf text format
// (single-line mode) or, with --json, compact JSON (proto3's mapping);
// server-streaming responses one line each, as they arrive. `describe`
// prints the descriptor's DebugString (the definition as .proto text).
// Requests: the REQUEST argument, or, without one, standard input: a
// streaming request (client or bidi) one message a line, a single request
// the whole input. Metadata the server sends back is not printed.
//
// Errors go to stderr as "CODE: message" (absl::StatusCodeToString's names:
// NOT_FOUND, UNAVAILABLE, ...); exit statuses are in cli_args.h (0 ok,
// 1 bad command line or request, 2 call failed, 4 health: not SERVING).
// glog's output is limited to errors, so stderr holds only that line.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "cli/cli_args.h"
#include "cli/reflection_database.h"
#include "glog/logging.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.rdmarpc.pb.h"
#include "rdmarpc/generic_stub.h"
#include "rdmarpc/rdmarpc.h"

namespace rdmarpc {
namespace cli {
namespace {

namespace pb = google::protobuf;

// Prints `status` as "CODE: message" on stderr and returns `exit_code`.
int Fail(const absl::Status& status, int exit_code) {
  fprintf(stderr, "%s: %s\n", absl::StatusCodeToString(status.code()).c_str(),
          std::string(status.message()).c_str());
  return exit_code;
}

// A name the server does not know: the reflection error when there was one.
absl::Status LookupError(const ReflectionDatabase& db, absl::string_view what,
                         absl::string_view name) {
  if (!db.last_error().ok()) return db.last_error();
  return absl::NotFoundError(absl::StrCat(what, " not found: ", name));
}

// The text-format parser's first error, as "LINE:COLUMN: message" (1-based).
class FirstError final : public pb::io::ErrorCollector {
 public:
  explicit FirstError(int first_line) : first_line_(first_line) {}
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (error_.empty()) error_ = absl::StrCat(first_line_ + line, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  int first_line_;
  std::string error_;
};

// Everything one command needs: the channel, the server's types as learned
// by reflection, and the factory of messages of those types. Members are
// destroyed in reverse: messages before the factory before the pool.
class Session {
 public:
  Session(std::shared_ptr<Channel> channel, const CliArgs& args)
      : channel_(std::move(channel)),
        args_(args),
        db_(channel_, ReflectionTimeout(args)),
        pool_(&db_),
        factory_(&pool_) {}

  const std::shared_ptr<Channel>& channel() const { return channel_; }
  ReflectionDatabase& db() { return db_; }
  const pb::DescriptorPool& pool() const { return pool_; }

  std::unique_ptr<pb::Message> NewMessage(const pb::Descriptor* type) {
    return std::unique_ptr<pb::Message>(factory_.GetPrototype(type)->New());
  }

  // Parses `text` (text format or JSON) into `*message`. INVALID_ARGUMENT
  // "cannot parse request: ..." when it does not parse. `line` numbers
  // the first line of `text` in error messages.
  absl::Status ParseRequest(absl::string_view text, int line, pb::Message* message) const {
    if (args_.json) {
      const auto status = pb::util::JsonStringToMessage(
          pb::StringPiece(text.data(), text.size()), message);
      if (status.ok()) return absl::OkStatus();
      const auto why = status.message();
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot parse request: ", line, ": ", absl::string_view(why.data(), why.size())));
    }
    FirstError errors(line);
    pb::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errors);
    if (parser.ParseFromString(std::string(text), message)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("cannot parse request: ", errors.error()));
  }

  // `message` as one line, without the newline.
  std::string Format(const pb::Message& message) const {
    std::string out;
    if (args_.json) {
      const auto status = pb::util::MessageToJsonString(message, &out);
      if (!status.ok()) {
        const auto why = status.message();
        return absl::StrCat("(cannot print as JSON: ", absl::string_view(why.data(), why.size()),
                            ")");
      }
      return out;
    }
    pb::TextFormat::Printer printer;
    printer.SetSingleLineMode(true);
    printer.PrintToString(message, &out);
    return std::string(absl::StripTrailingAsciiWhitespace(out));
  }

 private:
  std::shared_ptr<Channel> channel_;
  const CliArgs& args_;
  ReflectionDatabase db_;
  pb::DescriptorPool pool_;
  pb::DynamicMessageFactory factory_;
};

void PrintLine(absl::string_view line) {
  fwrite(line.data(), 1, line.size(), stdout);
  fputc('\n', stdout);
  fflush(stdout);  // streamed responses show as they arrive
}

// ---- ls ---------------------------------------------------------------------

int RunLs(Session& session, const CliArgs& args) {
  if (args.positional.size() == 1) {
    absl::StatusOr<std::vector<std::string>> names = session.db().ListServices();
    if (!names.ok()) return Fail(names.status(), kExitRpcFailure);
    for (const std::string& name : *names) {
      if (!args.long_listing) {
        PrintLine(name);
        continue;
      }
      const pb::ServiceDescriptor* service = session.pool().FindServiceByName(name);
      if (service == nullptr) {
        return Fail(LookupError(session.db(), "service", name), kExitRpcFailure);
      }
      // grpc_cli ls -l's header: the short name alone may repeat (v1 and
      // v1alpha both have a ServerReflection).
      printf("filename: %s\npackage: %s;\n%s", service->file()->name().c_str(),
             service->file()->package().c_str(), service->DebugString().c_str());
    }
    return kExitOk;
  }
  const std::string& name = args.positional[1];
  const pb::ServiceDescriptor* service = session.pool().FindServiceByName(name);
  if (service == nullptr) return Fail(LookupError(session.db(), "service", name), kExitRpcFailure);
  for (int i = 0; i < service->method_count(); ++i) {
    const pb::MethodDescriptor* method = service->method(i);
    if (args.long_listing) {
      fputs(method->DebugString().c_str(), stdout);
    } else {
      PrintLine(method->name());
    }
  }
  return kExitOk;
}

// ---- describe ---------------------------------------------------------------

// A service, method, message, enum, field, extension or enum value, by full
// name, as its descriptor's DebugString: the definition in .proto text.
int RunDescribe(Session& session, const CliArgs& args) {
  const std::string& symbol = args.positional[1];
  const pb::DescriptorPool& pool = session.pool();
  // The first lookup fetches the file defining `symbol`; the others find
  // it among that file's definitions.
  std::string text;
  if (const auto* service = pool.FindServiceByName(symbol)) {
    text = service->DebugString();
  } else if (const auto* method = pool.FindMethodByName(symbol)) {
    text = method->DebugString();
  } else if (const auto* message = pool.FindMessageTypeByName(symbol)) {
    text = message->DebugString();
  } else if (const auto* enum_type = pool.FindEnumTypeByName(symbol)) {
    text = enum_type->DebugString();
  } else if (const auto* field = pool.FindFieldByName(symbol)) {
    text = field->DebugString();
  } else if (const auto* extension = pool.FindExtensionByName(symbol)) {
    text = extension->DebugString();
  } else if (const auto* value = pool.FindEnumValueByName(symbol)) {
    text = value->DebugString();
  } else {
    return Fail(LookupError(session.db(), "symbol", symbol), kExitRpcFailure);
  }
  fputs(text.c_str(), stdout);
  return kExitOk;
}

// ---- call -------------------------------------------------------------------

// "pkg.Service/Method", "/pkg.Service/Method" or "pkg.Service.Method".
const pb::MethodDescriptor* FindMethod(Session& session, absl::string_view name,
                                       absl::Status* error) {
  absl::ConsumePrefix(&name, "/");
  size_t split = name.rfind('/');
  if (split == absl::string_view::npos) split = name.rfind('.');
  if (split == absl::string_view::npos || split == 0 || split + 1 == name.size()) {
    *error = absl::InvalidArgumentError(
        absl::StrCat("method \"", name, "\": want SERVICE/METHOD, e.g. pkg.Service/Method"));
    return nullptr;
  }
  const std::string service_name(name.substr(0, split));
  const pb::ServiceDescriptor* service = session.pool().FindServiceByName(service_name);
  if (service == nullptr) {
    *error = LookupError(session.db(), "service", service_name);
    return nullptr;
  }
  const std::string method_name(name.substr(split + 1));
  const pb::MethodDescriptor* method = service->FindMethodByName(method_name);
  if (method == nullptr) {
    *error = absl::NotFoundError(
        absl::StrCat("service ", service_name, " has no method ", method_name));
  }
  return method;
}

// Reads standard input: one message a line, or all of it as one.
std::vector<std::string> ReadRequests(bool one_per_line) {
  std::vector<std::string> requests;
  if (!one_per_line) {
    requests.emplace_back(std::istreambuf_iterator<char>(std::cin),
                          std::istreambuf_iterator<char>());
    return requests;
  }
  std::string line;
  while (std::getline(std::cin, line)) requests.push_back(std::move(line));
  return requests;
}

int RunCall(Session& session, const CliArgs& args) {
  absl::Status error;
  const pb::MethodDescriptor* method = FindMethod(session, args.positional[1], &error);
  if (method == nullptr) {
    return Fail(error, error.code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                          : kExitRpcFailure);
  }
  const bool streams_requests = method->client_streaming();
  std::vector<std::string> requests;
  if (args.positional.size() == 3) {
    requests.push_back(args.positional[2]);
  } else {
    requests = ReadRequests(streams_requests);
  }
  // Parsed before the call, so a bad line fails the command before anything is sent.
  std::vector<std::unique_ptr<pb::Message>> messages;
  for (size_t i = 0; i < requests.size(); ++i) {
    messages.push_back(session.NewMessage(method->input_type()));
    absl::Status parsed = session.ParseRequest(requests[i], static_cast<int>(i) + 1,
                                               messages.back().get());
    if (!parsed.ok()) return Fail(parsed, kExitUsage);
  }
  if (!streams_requests && messages.size() != 1) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
                    method->full_name(), " takes one request, standard input held ",
                    messages.size())),
                kExitUsage);
  }

  ClientContext context;
  if (args.timeout != absl::InfiniteDuration()) context.set_timeout(args.timeout);
  for (const auto& [key, value] : args.metadata) context.AddMetadata(key, value);
  GenericStub stub(session.channel());
  const std::string path = absl::StrCat("/", method->service()->full_name(), "/", method->name());
  std::unique_ptr<pb::Message> response = session.NewMessage(method->output_type());
  absl::Status status;
  if (!method->client_streaming() && !method->server_streaming()) {
    status = stub.UnaryCall(&context, path, *messages[0], response.get());
    if (status.ok()) PrintLine(session.Format(*response));
  } else if (!method->client_streaming()) {
    auto reader = stub.ServerStreamingCall(&context, path, *messages[0]);
    while (reader->Read(response.get())) PrintLine(session.Format(*response));
    status = reader->Finish();
  } else if (!method->server_streaming()) {
    auto writer = stub.ClientStreamingCall(&context, path, response.get());
    for (const auto& message : messages) {
      if (!writer->Write(*message)) break;  // Finish says why
    }
    status = writer->Finish();
    if (status.ok()) PrintLine(session.Format(*response));
  } else {
    auto stream = stub.BidiStreamingCall(&context, path);
    // Writes on their own thread: the server may answer before it read
    // everything, and its window stops our writes until we read.
    std::thread writer([&] {
      for (const auto& message : messages) {
        if (!stream->Write(*message)) break;
      }
      stream->WritesDone();
    });
    while (stream->Read(response.get())) PrintLine(session.Format(*response));
    writer.join();
    status = stream->Finish();
  }
  if (!status.ok()) return Fail(status, kExitRpcFailure);
  return kExitOk;
}

// ---- health -----------------------------------------------------------------

int RunHealth(Session& session, const CliArgs& args) {
  using grpc::health::v1::HealthCheckResponse;
  auto stub = grpc::health::v1::Health::NewStub(session.channel());
  grpc::health::v1::HealthCheckRequest request;
  if (args.positional.size() == 2) request.set_service(args.positional[1]);
  HealthCheckResponse response;
  ClientContext context;
  if (args.timeout != absl::InfiniteDuration()) context.set_timeout(args.timeout);
  const absl::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return Fail(status, kExitRpcFailure);
  PrintLine(HealthCheckResponse::ServingStatus_Name(response.status()));
  return response.status() == HealthCheckResponse::SERVING ? kExitOk : kExitNotServing;
}

// ---- main -------------------------------------------------------------------

// Positional arguments each command takes, the address included.
bool ArityOk(const CliArgs& args) {
  const size_t n = args.positional.size();
  if (args.command == "ls" || args.command == "health") return n == 1 || n == 2;
  if (args.command == "describe") return n == 2;
  return n == 2 || n == 3;  // call
}

int Main(int argc, char** argv) {
  absl::StatusOr<CliArgs> args = ParseCliArgs(argc, argv);
  if (!args.ok()) return Fail(args.status(), kExitUsage);
  if (args->help) {
    fputs(Usage().c_str(), stderr);
    return kExitUsage;
  }
  if (args->command != "ls" && args->command != "describe" && args->command != "call" &&
      args->command != "health") {
    return Fail(absl::InvalidArgumentError(absl::StrCat("unknown command \"", args->command,
                                                        "\"; rdmarpc_cli -h lists them")),
                kExitUsage);
  }
  if (!ArityOk(*args)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
                    "wrong number of arguments for \"", args->command, "\"; rdmarpc_cli -h")),
                kExitUsage);
  }
  absl::StatusOr<std::shared_ptr<Channel>> channel = CreateChannel(args->positional[0]);
  if (!channel.ok()) {
    return Fail(channel.status(), channel.status().code() == absl::StatusCode::kInvalidArgument
                                      ? kExitUsage
                                      : kExitRpcFailure);
  }
  Session session(*channel, *args);
  if (args->command == "ls") return RunLs(session, *args);
  if (args->command == "describe") return RunDescribe(session, *args);
  if (args->command == "call") return RunCall(session, *args);
  return RunHealth(session, *args);
}

}  // namespace
}  // namespace cli
}  // namespace rdmarpc

int main(int argc, char** argv) {
  // One line of output on failure: the runtime logs only errors, to stderr.
  FLAGS_minloglevel = google::GLOG_ERROR;
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  return rdmarpc::cli::Main(argc, argv);
}
