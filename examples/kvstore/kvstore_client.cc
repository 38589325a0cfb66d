// kvstore_client: command-line access to a kvstore_server.
//
//   kvstore_client --server=HOST:PORT put KEY FILE    store FILE's bytes ("-" = stdin)
//   kvstore_client --server=HOST:PORT get KEY FILE    write the value to FILE ("-" = stdout)
//   kvstore_client --server=HOST:PORT delete KEY
//   kvstore_client --server=HOST:PORT list [PREFIX]   keys, one per line, sorted
//
// Exit status: 0 on success, 1 when the call or a file fails (the last line
// on stderr is "kvstore: <STATUS_CODE> <message>"), 2 on bad usage.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "kvstore.pb.h"
#include "kvstore.rdmarpc.pb.h"
#include "rdmarpc/rdmarpc.h"

DEFINE_string(server, "127.0.0.1:7100", "kvstore_server address, HOST:PORT");
DEFINE_int64(timeout_ms, 60000, "Deadline of the call, in milliseconds; 0 = none");

namespace {

namespace kv = rdmarpc::examples;

constexpr char kUsage[] =
    "usage: kvstore_client --server=HOST:PORT COMMAND ARGS...\n"
    "  put KEY FILE      store the contents of FILE under KEY (FILE \"-\" = stdin)\n"
    "  get KEY FILE      write the value of KEY to FILE (FILE \"-\" = stdout)\n"
    "  delete KEY        remove KEY\n"
    "  list [PREFIX]     print the keys (starting with PREFIX), one per line, sorted\n";

constexpr size_t kMaxMessageBytes = (64 << 20) + (1 << 20);

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  std::ostringstream contents;
  if (path == "-") {
    contents << std::cin.rdbuf();
    if (std::cin.bad()) return absl::DataLossError("cannot read stdin");
    return std::move(contents).str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return std::move(contents).str();
}

absl::Status WriteOutput(const std::string& path, const std::string& data) {
  if (path == "-") {
    std::cout.write(data.data(), static_cast<std::streamsize>(data.size()));
    std::cout.flush();
    return std::cout ? absl::OkStatus() : absl::DataLossError("cannot write stdout");
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", path, ": ", strerror(errno)));
  }
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

void SetDeadline(rdmarpc::ClientContext* context) {
  if (FLAGS_timeout_ms > 0) context->set_timeout(absl::Milliseconds(FLAGS_timeout_ms));
}

absl::Status RunCommand(kv::KvStore::Stub& stub, const std::vector<std::string>& args) {
  const std::string& command = args[0];
  rdmarpc::ClientContext context;
  SetDeadline(&context);
  if (command == "put") {
    absl::StatusOr<std::string> value = ReadInput(args[2]);
    if (!value.ok()) return value.status();
    kv::PutRequest request;
    request.set_key(args[1]);
    request.set_value(*std::move(value));
    kv::PutResponse response;
    return stub.Put(&context, request, &response);
  }
  if (command == "get") {
    kv::GetRequest request;
    request.set_key(args[1]);
    kv::GetResponse response;
    absl::Status status = stub.Get(&context, request, &response);
    if (!status.ok()) return status;  // FILE stays untouched
    return WriteOutput(args[2], response.value());
  }
  if (command == "delete") {
    kv::DeleteRequest request;
    request.set_key(args[1]);
    kv::DeleteResponse response;
    return stub.Delete(&context, request, &response);
  }
  // list
  kv::ListRequest request;
  if (args.size() == 2) request.set_prefix(args[1]);
  kv::ListResponse response;
  absl::Status status = stub.List(&context, request, &response);
  if (!status.ok()) return status;
  for (const std::string& key : response.keys()) std::cout << key << '\n';
  std::cout.flush();
  return absl::OkStatus();
}

// Whether `args` (the command and its operands) is a well-formed command line.
bool UsageOk(const std::vector<std::string>& args) {
  if (args.empty()) return false;
  const std::string& c = args[0];
  if (c == "put" || c == "get") return args.size() == 3;
  if (c == "delete") return args.size() == 2;
  if (c == "list") return args.size() == 1 || args.size() == 2;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(kUsage);
  // A command-line tool stays quiet unless something goes wrong; the default
  // is set before parsing so --minloglevel=0 still brings the INFO lines back.
  FLAGS_minloglevel = google::GLOG_WARNING;
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  std::vector<std::string> args(argv + 1, argv + argc);
  if (!UsageOk(args)) {
    fputs(kUsage, stderr);
    return 2;
  }

  rdmarpc::ChannelOptions options;
  options.max_message_bytes = kMaxMessageBytes;
  absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel =
      rdmarpc::CreateChannel(FLAGS_server, options);
  absl::Status status = channel.status();
  if (status.ok()) {
    std::unique_ptr<kv::KvStore::Stub> stub = kv::KvStore::NewStub(*channel);
    status = RunCommand(*stub, args);
  }
  if (!status.ok()) {
    fprintf(stderr, "kvstore: %s %s\n", absl::StatusCodeToString(status.code()).c_str(),
            std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
