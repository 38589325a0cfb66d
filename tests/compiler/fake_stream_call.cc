#include "fake_stream_call.h"

#include <memory>
#include <utility>

namespace fake_stream {
namespace {

RecordedStream& MutableLastStream() {
  static RecordedStream* const stream = new RecordedStream;
  return *stream;
}

struct Script {
  std::vector<std::string> reads;
  absl::Status status;
};

Script& MutableScript() {
  static Script* const script = new Script;
  return *script;
}

}  // namespace

const RecordedStream& LastStream() { return MutableLastStream(); }

void Reset(std::vector<std::string> reads, absl::Status status) {
  MutableLastStream() = RecordedStream();
  MutableScript() = Script{std::move(reads), std::move(status)};
}

}  // namespace fake_stream

namespace rdmarpc {
namespace internal {

// What one fake client stream has left to read and will finish with; the
// runtime only declares this class, so the fake defines it.
class ClientStreamState {
 public:
  std::deque<std::string> reads;
  absl::Status status;
  bool writes_done = false;
};

// The member functions of ClientStream and ServerStream that
// rdmarpc/impl/stream_call.h declares, defined here instead of in the
// runtime library.
ClientStream::ClientStream(Channel* channel, absl::string_view method, ClientContext* context,
                           RpcKind kind, const google::protobuf::MessageLite* first)
    : state_(std::make_shared<ClientStreamState>()) {
  const fake_stream::Script& script = fake_stream::MutableScript();
  state_->reads.assign(script.reads.begin(), script.reads.end());
  state_->status = script.status;
  fake_stream::RecordedStream& record = fake_stream::MutableLastStream();
  const int opened = record.opened;
  record = fake_stream::RecordedStream();
  record.opened = opened + 1;
  record.channel = channel;
  record.method = std::string(method);
  record.kind = kind;
  record.deadline = context->deadline();
  record.has_first = first != nullptr;
  if (first != nullptr) record.first = first->SerializeAsString();
}

ClientStream::~ClientStream() {
  if (!finished_) fake_stream::MutableLastStream().destroyed_unfinished = true;
}

bool ClientStream::Write(const google::protobuf::MessageLite& message) {
  if (finished_ || state_->writes_done) return false;
  fake_stream::MutableLastStream().written.push_back(message.SerializeAsString());
  return true;
}

// The fake moves no attachments: a write records the message alone, a read
// yields none.
bool ClientStream::Write(const google::protobuf::MessageLite& message, const Buffer& /*a*/) {
  return Write(message);
}

bool ClientStream::WritesDone() {
  if (finished_ || state_->writes_done) return false;
  state_->writes_done = true;
  ++fake_stream::MutableLastStream().writes_done;
  return true;
}

bool ClientStream::Read(google::protobuf::MessageLite* message) {
  if (finished_ || state_->reads.empty()) return false;
  const std::string bytes = std::move(state_->reads.front());
  state_->reads.pop_front();
  if (!message->ParseFromString(bytes)) return false;
  ++fake_stream::MutableLastStream().reads;
  return true;
}

bool ClientStream::Read(google::protobuf::MessageLite* message, Buffer* attachment) {
  *attachment = Buffer();
  return Read(message);
}

bool ClientStream::ReadResponse(google::protobuf::MessageLite* response) {
  return Read(response);
}

absl::Status ClientStream::Finish() {
  finished_ = true;
  ++fake_stream::MutableLastStream().finishes;
  return state_->status;
}

bool ServerStream::Read(google::protobuf::MessageLite* message) {
  if (state_->cancelled || state_->incoming.empty()) return false;
  const std::string bytes = std::move(state_->incoming.front());
  state_->incoming.pop_front();
  return message->ParseFromString(bytes);
}

bool ServerStream::Read(google::protobuf::MessageLite* message, Buffer* attachment) {
  *attachment = Buffer();
  return Read(message);
}

bool ServerStream::Write(const google::protobuf::MessageLite& message) {
  if (state_->cancelled) return false;
  state_->written.push_back(message.SerializeAsString());
  return true;
}

bool ServerStream::Write(const google::protobuf::MessageLite& message, const Buffer& /*a*/) {
  return Write(message);
}

// ClientCallbackStream's members (rdmarpc/impl/callback_call.h): Bind
// records the stream as the blocking constructor does; operations are
// recorded and never react.
void ClientCallbackStream::Bind(ClientReactorBase* /*reactor*/, Channel* channel,
                                absl::string_view method, ClientContext* context, RpcKind kind,
                                const google::protobuf::MessageLite* first,
                                google::protobuf::MessageLite* response) {
  fake_stream::RecordedStream& record = fake_stream::MutableLastStream();
  const int opened = record.opened;
  record = fake_stream::RecordedStream();
  record.opened = opened + 1;
  record.channel = channel;
  record.method = std::string(method);
  record.kind = kind;
  record.deadline = context->deadline();
  record.has_first = first != nullptr;
  if (first != nullptr) record.first = first->SerializeAsString();
  record.reactor = true;
  record.response_target = response;
}
void ClientCallbackStream::StartCall() { ++fake_stream::MutableLastStream().start_calls; }
void ClientCallbackStream::Read(google::protobuf::MessageLite* /*message*/,
                                Buffer* /*attachment*/) {}
void ClientCallbackStream::Write(const google::protobuf::MessageLite& message, bool /*last*/,
                                 const Buffer& /*attachment*/) {
  fake_stream::MutableLastStream().written.push_back(message.SerializeAsString());
}
void ClientCallbackStream::WritesDone() { ++fake_stream::MutableLastStream().writes_done; }
void ClientCallbackStream::AddHolds(int /*holds*/) {}
void ClientCallbackStream::RemoveHold() {}

}  // namespace internal
}  // namespace rdmarpc
