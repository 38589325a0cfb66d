// kvstore_client: command-line access to a kvstore_server.
//
//   kvstore_client --server=HOST:PORT put KEY FILE    store FILE's bytes ("-" = stdin)
//   kvstore_client --server=HOST:PORT get KEY FILE    write the value to FILE ("-" = stdout)
//   kvstore_client --server=HOST:PORT delete KEY
//   kvstore_client --server=HOST:PORT list [PREFIX]   keys, one per line, sorted
//   kvstore_client --server=HOST:PORT putstream KEY FILE   as put, in chunks (PutStream)
//   kvstore_client --server=HOST:PORT getstream KEY FILE   as get, in chunks (GetStream)
//   kvstore_client --server=HOST:PORT selfcheck KEY MIB
//       stores MIB MiB of deterministic bytes under KEY with PutStream, reads
//       them back with GetStream, compares byte for byte and prints the times
//
// put and get move the value, and putstream and getstream each chunk, as
// an rdmarpc::Buffer attachment beside the message (rdmarpc/buffer.h):
// above 8 KiB the server's NIC reads it straight from this process's
// memory and ours reads it back, with no copy or serialisation by rdmarpc
// (--attachments=false puts it in the message instead, as servers before
// attachments need).
//
// The streaming commands move values of up to 2 GiB (put and get: 64 MiB) in
// chunks of --chunk_bytes (default 1 MiB), holding one chunk in memory at a
// time on this side.
//
// Exit status: 0 on success, 1 when the call or a file fails (the last line
// on stderr is "kvstore: <STATUS_CODE> <message>"), 2 on bad usage.
#include <algorithm>
#include <cerrno>
#include <cstdint>
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
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "kvstore.pb.h"
#include "kvstore.rdmarpc.pb.h"
#include "rdmarpc/rdmarpc.h"

DEFINE_string(server, "127.0.0.1:7100",
              "kvstore_server target: HOST:PORT, a list, [IPV6]:PORT, dns:... or etcd://HOST:PORT/PREFIX");
DEFINE_int64(timeout_ms, 60000, "Deadline of the call, in milliseconds; 0 = none");
DEFINE_bool(attachments, true,
            "put, get: carry the value, putstream, getstream, selfcheck: each chunk, as an "
            "attachment (rdmarpc::Buffer) rather than in the message's bytes field");
DEFINE_uint32(chunk_bytes, 1 << 20,
              "putstream, getstream, selfcheck: bytes per chunk, 1 to 64 MiB");

namespace {

namespace kv = rdmarpc::examples;

constexpr char kUsage[] =
    "usage: kvstore_client --server=HOST:PORT COMMAND ARGS...\n"
    "  put KEY FILE      store the contents of FILE under KEY (FILE \"-\" = stdin)\n"
    "  get KEY FILE      write the value of KEY to FILE (FILE \"-\" = stdout)\n"
    "  delete KEY        remove KEY\n"
    "  list [PREFIX]     print the keys (starting with PREFIX), one per line, sorted\n"
    "  putstream KEY FILE  as put, streamed in chunks of --chunk_bytes (up to 2 GiB)\n"
    "  getstream KEY FILE  as get, streamed in chunks of --chunk_bytes\n"
    "  selfcheck KEY MIB   putstream MIB MiB of deterministic bytes, getstream them\n"
    "                      back, compare byte for byte, print the times\n";

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

absl::Status WriteOutput(const std::string& path, absl::string_view data) {
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

// ---- streaming --------------------------------------------------------------

// Fills `out` with the selfcheck bytes at [offset, offset + n) of a value:
// byte p is byte p % 8 (little-endian) of SplitMix64(p / 8), so any range can
// be regenerated without the rest.
void FillPattern(uint64_t offset, char* out, size_t n) {
  auto splitmix64 = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
    x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
    return x ^ (x >> 31);
  };
  uint64_t word = splitmix64(offset / 8);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t p = offset + i;
    if (p % 8 == 0) word = splitmix64(p / 8);
    out[i] = static_cast<char>(word >> (8 * (p % 8)));
  }
}

// Sends a value with PutStream: `next(buffer)` fills `buffer` (resized to at
// most --chunk_bytes) with the next chunk and returns false after the last;
// a value has at least one chunk, so an empty value still names its key.
template <class NextChunk>
absl::Status PutStream(kv::KvStore::Stub& stub, const std::string& key, uint64_t total_bytes,
                       NextChunk next) {
  rdmarpc::ClientContext context;
  SetDeadline(&context);
  kv::PutResponse response;
  std::unique_ptr<rdmarpc::ClientWriterInterface<kv::PutChunk>> writer =
      stub.PutStream(&context, &response);
  kv::PutChunk chunk;
  chunk.set_key(key);
  chunk.set_total_bytes(total_bytes);
  bool more = true;
  absl::Status input = absl::OkStatus();
  while (more) {
    more = next(chunk.mutable_data(), &input);
    if (!input.ok()) return input;  // destroying the writer cancels the call
    bool written;
    if (FLAGS_attachments && !chunk.data().empty()) {
      // The chunk's own memory goes as the attachment, kept until the
      // server pulled it.
      auto bytes = std::make_shared<std::string>(std::move(*chunk.mutable_data()));
      chunk.clear_data();
      written = writer->Write(chunk, rdmarpc::Buffer::Wrap(bytes->data(), bytes->size(),
                                                           [bytes] {}));
    } else {
      written = writer->Write(chunk);
    }
    if (!written) break;  // the stream ended; Finish says why
    chunk.clear_key();
    chunk.clear_total_bytes();
  }
  return writer->Finish();
}

// Receives a value with GetStream (each chunk as an attachment with
// --attachments), handing each chunk's data to `sink(data, offset)` (which
// may fail the command). DATA_LOSS when the chunks do
// not add up to the size the server announced.
template <class Sink>
absl::Status GetStream(kv::KvStore::Stub& stub, const std::string& key, Sink sink) {
  rdmarpc::ClientContext context;
  SetDeadline(&context);
  kv::GetRequest request;
  request.set_key(key);
  request.set_chunk_bytes(FLAGS_chunk_bytes);
  request.set_as_attachment(FLAGS_attachments);
  std::unique_ptr<rdmarpc::ClientReaderInterface<kv::GetChunk>> reader =
      stub.GetStream(&context, request);
  kv::GetChunk chunk;
  rdmarpc::Buffer piece;
  uint64_t received = 0;
  uint64_t total = 0;
  while (reader->Read(&chunk, &piece)) {
    total = chunk.total_bytes();
    // A server older than stream attachments sends the bytes in the message.
    const absl::string_view data = piece ? piece.view() : absl::string_view(chunk.data());
    absl::Status status = sink(data, received);
    if (!status.ok()) return status;  // destroying the reader cancels the call
    received += data.size();
  }
  absl::Status status = reader->Finish();
  if (!status.ok()) return status;
  if (received != total) {
    return absl::DataLossError(
        absl::StrCat("GetStream of \"", key, "\": got ", received, " bytes, server said ", total));
  }
  return absl::OkStatus();
}

absl::Status PutStreamFile(kv::KvStore::Stub& stub, const std::string& key,
                           const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  uint64_t total_bytes = 0;  // unknown for stdin
  if (path != "-") {
    file.open(path, std::ios::binary | std::ios::ate);
    if (!file) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
    total_bytes = static_cast<uint64_t>(file.tellg());
    file.seekg(0);
    in = &file;
  }
  return PutStream(stub, key, total_bytes, [&](std::string* data, absl::Status* status) {
    data->resize(FLAGS_chunk_bytes);
    in->read(data->data(), static_cast<std::streamsize>(data->size()));
    if (in->bad()) *status = absl::DataLossError(absl::StrCat("cannot read ", path));
    data->resize(static_cast<size_t>(in->gcount()));
    return !in->eof();
  });
}

absl::Status GetStreamFile(kv::KvStore::Stub& stub, const std::string& key,
                           const std::string& path) {
  // FILE is created at the first chunk, so a missing key leaves it
  // untouched; a call that fails later removes it.
  std::ofstream file;
  auto sink = [&](absl::string_view data, uint64_t /*offset*/) -> absl::Status {
    std::ostream* out = &std::cout;
    if (path != "-") {
      if (!file.is_open()) {
        file.open(path, std::ios::binary | std::ios::trunc);
        if (!file) {
          return absl::PermissionDeniedError(
              absl::StrCat("cannot create ", path, ": ", strerror(errno)));
        }
      }
      out = &file;
    }
    out->write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!*out) return absl::DataLossError(absl::StrCat("cannot write ", path));
    return absl::OkStatus();
  };
  absl::Status status = GetStream(stub, key, sink);
  if (path == "-") {
    std::cout.flush();
    if (status.ok() && !std::cout) status = absl::DataLossError("cannot write stdout");
    return status;
  }
  if (file.is_open()) {
    file.close();
    if (status.ok() && !file) status = absl::DataLossError(absl::StrCat("cannot write ", path));
    if (!status.ok()) std::remove(path.c_str());
  }
  return status;
}

absl::Status SelfCheck(kv::KvStore::Stub& stub, const std::string& key, uint64_t mib) {
  const uint64_t total = mib << 20;
  uint64_t sent = 0;
  const absl::Time put_start = absl::Now();
  absl::Status status =
      PutStream(stub, key, total, [&](std::string* data, absl::Status* /*status*/) {
        data->resize(std::min<uint64_t>(FLAGS_chunk_bytes, total - sent));
        FillPattern(sent, data->data(), data->size());
        sent += data->size();
        return sent < total;
      });
  if (!status.ok()) return status;
  const absl::Duration put_time = absl::Now() - put_start;

  std::string expected;
  const absl::Time get_start = absl::Now();
  status = GetStream(stub, key, [&](absl::string_view data, uint64_t offset) -> absl::Status {
    if (offset + data.size() > total) {
      return absl::DataLossError(absl::StrCat("selfcheck: got more than ", total, " bytes"));
    }
    expected.resize(data.size());
    FillPattern(offset, expected.data(), expected.size());
    if (data != expected) {
      size_t i = 0;
      while (data[i] == expected[i]) ++i;
      return absl::DataLossError(absl::StrCat("selfcheck: byte ", offset + i, " of \"", key,
                                              "\" differs"));
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  const absl::Duration get_time = absl::Now() - get_start;

  auto rate = [&](absl::Duration d) {
    const double seconds = absl::ToDoubleSeconds(d);
    return seconds > 0 ? static_cast<double>(mib) / seconds : 0.0;
  };
  std::cout << absl::StrFormat(
      "selfcheck: %d MiB in chunks of %d bytes: putstream %.2f s (%.0f MiB/s), "
      "getstream %.2f s (%.0f MiB/s), byte-exact\n",
      mib, FLAGS_chunk_bytes, absl::ToDoubleSeconds(put_time), rate(put_time),
      absl::ToDoubleSeconds(get_time), rate(get_time));
  std::cout.flush();
  return absl::OkStatus();
}

// ---- commands ---------------------------------------------------------------

absl::Status RunCommand(kv::KvStore::Stub& stub, const std::vector<std::string>& args) {
  const std::string& command = args[0];
  if (command == "putstream") return PutStreamFile(stub, args[1], args[2]);
  if (command == "getstream") return GetStreamFile(stub, args[1], args[2]);
  if (command == "selfcheck") {
    uint64_t mib = 0;
    if (!absl::SimpleAtoi(args[2], &mib) || mib > 2048) {
      return absl::InvalidArgumentError(
          absl::StrCat("selfcheck: MIB \"", args[2], "\" is not a number from 0 to 2048"));
    }
    return SelfCheck(stub, args[1], mib);
  }
  rdmarpc::ClientContext context;
  SetDeadline(&context);
  if (command == "put") {
    absl::StatusOr<std::string> value = ReadInput(args[2]);
    if (!value.ok()) return value.status();
    kv::PutRequest request;
    request.set_key(args[1]);
    if (FLAGS_attachments) {
      // The file's bytes as they are: the Buffer keeps the string alive
      // until the server has read it.
      auto bytes = std::make_shared<std::string>(*std::move(value));
      char* data = bytes->data();
      const size_t size = bytes->size();
      context.set_request_attachment(rdmarpc::Buffer::Wrap(data, size, [bytes] {}));
    } else {
      request.set_value(*std::move(value));
    }
    kv::PutResponse response;
    return stub.Put(&context, request, &response);
  }
  if (command == "get") {
    kv::GetRequest request;
    request.set_key(args[1]);
    request.set_as_attachment(FLAGS_attachments);
    kv::GetResponse response;
    absl::Status status = stub.Get(&context, request, &response);
    if (!status.ok()) return status;  // FILE stays untouched
    // A server older than attachments ignores as_attachment and answers
    // in the message.
    if (context.response_attachment()) {
      return WriteOutput(args[2], context.response_attachment().view());
    }
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
  if (c == "put" || c == "get" || c == "putstream" || c == "getstream" || c == "selfcheck") {
    return args.size() == 3;
  }
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
  if (!UsageOk(args) || FLAGS_chunk_bytes < 1 || FLAGS_chunk_bytes > (64u << 20)) {
    fputs(kUsage, stderr);
    return 2;
  }

  // --rdmarpc_admin_listen=HOST:PORT serves /metrics, /statusz and /healthz
  // while the client runs (rdmarpc/admin.h).
  absl::StatusOr<std::unique_ptr<rdmarpc::AdminServer>> admin =
      rdmarpc::AdminServer::StartFromFlags();
  if (!admin.ok()) {
    fprintf(stderr, "%s: %s\n", argv[0], admin.status().ToString().c_str());
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
