// etcd_client.cc: see etcd_client.h.
#include "runtime/rpc/etcd_client.h"

#include <httplib.h>

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "runtime/rpc/address.h"

namespace rdmarpc {
namespace internal {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

// etcd's prefix range end: the prefix with its last byte incremented
// (clientv3.GetPrefixRangeEnd); "\0" (every key) for an empty prefix.
std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  for (size_t i = end.size(); i > 0; --i) {
    if (static_cast<unsigned char>(end[i - 1]) < 0xFF) {
      end[i - 1] = static_cast<char>(end[i - 1] + 1);
      end.resize(i);
      return end;
    }
  }
  return std::string(1, '\0');
}

std::string B64(absl::string_view s) { return absl::Base64Escape(s); }

absl::StatusOr<Struct> ParseJson(absl::string_view body, absl::string_view what) {
  Struct out;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto s = google::protobuf::util::JsonStringToMessage(std::string(body), &out, options);
  if (!s.ok()) {
    return absl::InternalError(absl::StrCat("etcd answer to ", what, " is not JSON (",
                                            s.message().as_string(), "): ", body.substr(0, 200)));
  }
  return out;
}

const Value* Field(const Struct& s, absl::string_view name) {
  auto it = s.fields().find(std::string(name));
  return it == s.fields().end() ? nullptr : &it->second;
}

// A 64-bit integer as the gateway writes it (a JSON string); 0 if absent.
int64_t IntField(const Struct& s, absl::string_view name) {
  const Value* v = Field(s, name);
  if (v == nullptr) return 0;
  int64_t n = 0;
  if (v->kind_case() == Value::kStringValue && absl::SimpleAtoi(v->string_value(), &n)) return n;
  if (v->kind_case() == Value::kNumberValue) return static_cast<int64_t>(v->number_value());
  return 0;
}

std::string BytesField(const Struct& s, absl::string_view name) {
  const Value* v = Field(s, name);
  std::string out;
  if (v != nullptr && v->kind_case() == Value::kStringValue) {
    absl::Base64Unescape(v->string_value(), &out);
  }
  return out;
}

const Struct* StructField(const Struct& s, absl::string_view name) {
  const Value* v = Field(s, name);
  return v != nullptr && v->kind_case() == Value::kStructValue ? &v->struct_value() : nullptr;
}

// cpp-httplib's error, in words ("Connection" alone reads cut short).
std::string Describe(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "could not connect";
    case httplib::Error::ConnectionTimeout:
      return "connect timed out";
    case httplib::Error::Read:
      return "no answer (read failed or timed out)";
    case httplib::Error::Write:
      return "sending the request failed";
    default:
      return httplib::to_string(e);
  }
}

std::unique_ptr<httplib::Client> MakeClient(const std::string& endpoint, absl::Duration timeout) {
  auto c = std::make_unique<httplib::Client>(absl::StrCat("http://", endpoint));
  const int64_t ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout));
  c->set_connection_timeout(ms / 1000, (ms % 1000) * 1000);
  c->set_read_timeout(ms / 1000, (ms % 1000) * 1000);
  c->set_write_timeout(ms / 1000, (ms % 1000) * 1000);
  c->set_keep_alive(false);
  return c;
}

}  // namespace

absl::StatusOr<EtcdTarget> ParseEtcdTarget(absl::string_view target) {
  absl::string_view rest = target;
  if (!absl::ConsumePrefix(&rest, "etcd://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("target \"", target, "\" is not etcd://HOST:PORT[,HOST:PORT...]/PREFIX"));
  }
  const size_t slash = rest.find('/');
  if (slash == absl::string_view::npos || slash + 1 >= rest.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target \"", target, "\" names no key prefix (etcd://HOST:PORT[,HOST:PORT...]/PREFIX)"));
  }
  EtcdTarget out;
  for (absl::string_view ep : absl::StrSplit(rest.substr(0, slash), ',')) {
    absl::StatusOr<ResolvedAddress> a = ParseHostPort(ep, /*allow_port_zero=*/false);
    if (!a.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint in \"", target, "\": ", a.status().message()));
    }
    // As given (cpp-httplib resolves names itself), checked above.
    out.endpoints.push_back(std::string(absl::StripAsciiWhitespace(ep)));
  }
  out.prefix = std::string(absl::StripSuffix(rest.substr(slash + 1), "/"));
  if (out.prefix.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("target \"", target, "\" names no key prefix"));
  }
  return out;
}

std::string RegistrationKey(absl::string_view prefix, absl::string_view address) {
  return absl::StrCat(prefix, "/", address);
}

std::string RegistrationRange(absl::string_view prefix) { return absl::StrCat(prefix, "/"); }

EtcdClient::EtcdClient(std::vector<std::string> endpoints, absl::Duration timeout)
    : endpoints_(std::move(endpoints)), timeout_(timeout) {}

EtcdClient::~EtcdClient() { Stop(); }

absl::StatusOr<std::string> EtcdClient::Post(const std::string& path, const std::string& body) {
  std::vector<std::string> errors;
  const size_t first = preferred_.load();
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (stopped_.load()) return absl::CancelledError("etcd client stopped");
    const size_t k = (first + i) % endpoints_.size();
    std::unique_ptr<httplib::Client> c = MakeClient(endpoints_[k], timeout_);
    httplib::Result r = c->Post(path.c_str(), body, "application/json");
    if (!r) {
      errors.push_back(absl::StrCat(endpoints_[k], ": ", Describe(r.error())));
      continue;
    }
    preferred_.store(k);
    if (r->status == 404) {
      return absl::NotFoundError(absl::StrCat("etcd ", endpoints_[k], path, ": ", r->body));
    }
    if (r->status != 200) {
      errors.push_back(absl::StrCat(endpoints_[k], ": HTTP ", r->status, " ", r->body));
      continue;
    }
    return r->body;
  }
  return absl::UnavailableError(
      absl::StrCat("etcd ", path, " failed at every endpoint: ", absl::StrJoin(errors, "; ")));
}

absl::StatusOr<EtcdClient::Range> EtcdClient::GetPrefix(absl::string_view prefix) {
  absl::StatusOr<std::string> body =
      Post("/v3/kv/range", absl::StrCat("{\"key\":\"", B64(prefix), "\",\"range_end\":\"",
                                        B64(PrefixEnd(prefix)), "\"}"));
  if (!body.ok()) return body.status();
  absl::StatusOr<Struct> json = ParseJson(*body, "range");
  if (!json.ok()) return json.status();
  Range out;
  if (const Struct* header = StructField(*json, "header")) {
    out.revision = IntField(*header, "revision");
  }
  if (const Value* kvs = Field(*json, "kvs"); kvs != nullptr && kvs->has_list_value()) {
    for (const Value& kv : kvs->list_value().values()) {
      if (!kv.has_struct_value()) continue;
      out.kvs.push_back(
          KeyValue{BytesField(kv.struct_value(), "key"), BytesField(kv.struct_value(), "value")});
    }
  }
  return out;
}

absl::StatusOr<int64_t> EtcdClient::GrantLease(int64_t ttl_seconds) {
  absl::StatusOr<std::string> body =
      Post("/v3/lease/grant", absl::StrCat("{\"TTL\":\"", ttl_seconds, "\"}"));
  if (!body.ok()) return body.status();
  absl::StatusOr<Struct> json = ParseJson(*body, "lease grant");
  if (!json.ok()) return json.status();
  const int64_t id = IntField(*json, "ID");
  if (id == 0) return absl::InternalError(absl::StrCat("etcd granted no lease: ", *body));
  return id;
}

absl::Status EtcdClient::KeepAlive(int64_t lease) {
  absl::StatusOr<std::string> body =
      Post("/v3/lease/keepalive", absl::StrCat("{\"ID\":\"", lease, "\"}"));
  if (!body.ok()) return body.status();
  // A stream of one answer: {"result":{...,"TTL":"N"}}; no TTL (0) when
  // the lease is gone.
  absl::StatusOr<Struct> json = ParseJson(*body, "lease keepalive");
  if (!json.ok()) return json.status();
  const Struct* result = StructField(*json, "result");
  if (result == nullptr || IntField(*result, "TTL") <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " has expired"));
  }
  return absl::OkStatus();
}

absl::Status EtcdClient::Revoke(int64_t lease) {
  return Post("/v3/lease/revoke", absl::StrCat("{\"ID\":\"", lease, "\"}")).status();
}

absl::Status EtcdClient::Put(absl::string_view key, absl::string_view value, int64_t lease) {
  return Post("/v3/kv/put", absl::StrCat("{\"key\":\"", B64(key), "\",\"value\":\"", B64(value),
                                         "\",\"lease\":\"", lease, "\"}"))
      .status();
}

absl::Status EtcdClient::WaitForChange(absl::string_view prefix, int64_t revision,
                                       absl::Duration max_wait) {
  if (stopped_.load()) return absl::CancelledError("etcd client stopped");
  const std::string& endpoint = endpoints_[preferred_.load() % endpoints_.size()];
  std::unique_ptr<httplib::Client> c = MakeClient(endpoint, timeout_);
  // No event for max_wait: the read times out and the caller looks again.
  const int64_t ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(max_wait));
  c->set_read_timeout(ms / 1000, (ms % 1000) * 1000);
  {
    absl::MutexLock lock(&mu_);
    if (stopped_.load()) return absl::CancelledError("etcd client stopped");
    watching_ = c.get();
  }
  httplib::Request req;
  req.method = "POST";
  req.path = "/v3/watch";
  req.set_header("Content-Type", "application/json");
  req.body = absl::StrCat("{\"create_request\":{\"key\":\"", B64(prefix), "\",\"range_end\":\"",
                          B64(PrefixEnd(prefix)), "\",\"start_revision\":\"", revision + 1, "\"}}");
  std::string pending;
  bool changed = false;
  absl::Status bad;
  // The gateway streams one JSON object a line: first the watch's creation,
  // then each batch of events.
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    pending.append(data, len);
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (absl::StripAsciiWhitespace(line).empty()) continue;
      absl::StatusOr<Struct> json = ParseJson(line, "watch");
      if (!json.ok()) {
        bad = json.status();
        return false;
      }
      const Struct* result = StructField(*json, "result");
      if (result == nullptr) {
        bad = absl::UnavailableError(absl::StrCat("etcd watch on ", endpoint, " failed: ", line));
        return false;
      }
      const Value* events = Field(*result, "events");
      if (events != nullptr && events->has_list_value() && events->list_value().values_size() > 0) {
        changed = true;
        return false;  // enough: the caller reads the range again
      }
      if (const Value* canceled = Field(*result, "canceled");
          canceled != nullptr && canceled->bool_value()) {
        // E.g. the revision was compacted: read again.
        changed = true;
        return false;
      }
    }
    return !stopped_.load();
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  c->send(req, res, error);
  {
    absl::MutexLock lock(&mu_);
    watching_ = nullptr;
  }
  if (stopped_.load()) return absl::CancelledError("etcd client stopped");
  if (changed) return absl::OkStatus();
  if (!bad.ok()) return bad;
  if (error == httplib::Error::Read) {
    return absl::DeadlineExceededError(
        absl::StrCat("no change under ", prefix, " within ", absl::FormatDuration(max_wait)));
  }
  return absl::UnavailableError(
      absl::StrCat("etcd watch on ", endpoint, " ended: ", Describe(error)));
}

void EtcdClient::Stop() {
  stopped_.store(true);
  absl::MutexLock lock(&mu_);
  if (watching_ != nullptr) watching_->stop();
}

}  // namespace internal
}  // namespace rdmarpc
