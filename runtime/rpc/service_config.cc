// service_config.cc: see service_config.h.
#include "runtime/rpc/service_config.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace rdmarpc {
namespace internal {

namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

absl::Status Bad(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("service config: ", path, " ", what));
}

const Value* Field(const Struct& s, absl::string_view name) {
  auto it = s.fields().find(std::string(name));
  return it == s.fields().end() ? nullptr : &it->second;
}

std::string Show(const Value& v) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(v, &out);
  return out;
}

// A JSON number that is a whole number in [lo, hi].
absl::StatusOr<int> IntIn(const Value& v, absl::string_view path, int lo, int hi) {
  if (v.kind_case() != Value::kNumberValue || v.number_value() != std::floor(v.number_value()) ||
      v.number_value() < lo || v.number_value() > hi) {
    return Bad(path, absl::StrCat("is ", Show(v), "; must be a whole number in ", lo, "..", hi));
  }
  return static_cast<int>(v.number_value());
}

// proto3 JSON's google.protobuf.Duration: decimal seconds and "s" ("0.1s").
absl::StatusOr<absl::Duration> DurationOf(const Value& v, absl::string_view path) {
  double seconds = 0;
  if (v.kind_case() != Value::kStringValue) {
    return Bad(path, absl::StrCat("is ", Show(v), "; must be a duration string such as \"0.1s\""));
  }
  absl::string_view text = v.string_value();
  // proto3 JSON's form exactly: digits, at most 9 decimals, then "s".
  bool well_formed = absl::ConsumeSuffix(&text, "s") && !text.empty();
  const size_t dot = text.find('.');
  const absl::string_view whole = text.substr(0, dot);
  const absl::string_view frac = dot == absl::string_view::npos ? "" : text.substr(dot + 1);
  well_formed = well_formed && !whole.empty() && whole.size() <= 12 &&
                (dot == absl::string_view::npos || (!frac.empty() && frac.size() <= 9));
  for (absl::string_view part : {whole, frac}) {
    for (char c : part) well_formed = well_formed && c >= '0' && c <= '9';
  }
  if (!well_formed || !absl::SimpleAtod(text, &seconds) || seconds > 315576000000.0) {
    return Bad(path, absl::StrCat("is ", Show(v),
                                  "; must be a non-negative duration string such as \"0.1s\""));
  }
  return absl::Seconds(seconds);
}

absl::StatusOr<StatusCodeSet> CodesOf(const Value& v, absl::string_view path) {
  if (v.kind_case() != Value::kListValue) {
    return Bad(path, absl::StrCat("is ", Show(v), "; must be a list of status codes"));
  }
  StatusCodeSet set = 0;
  for (int i = 0; i < v.list_value().values_size(); ++i) {
    const Value& c = v.list_value().values(i);
    std::optional<absl::StatusCode> code;
    if (c.kind_case() == Value::kStringValue) {
      code = ParseStatusCodeName(c.string_value());
    } else if (c.kind_case() == Value::kNumberValue && c.number_value() >= 0 &&
               c.number_value() <= 16 && c.number_value() == std::floor(c.number_value())) {
      code = static_cast<absl::StatusCode>(static_cast<int>(c.number_value()));
    }
    if (!code.has_value()) {
      return Bad(absl::StrCat(path, "[", i, "]"),
                 absl::StrCat("is ", Show(c),
                              "; not a status code (a name such as "
                              "\"UNAVAILABLE\", or 0..16)"));
    }
    set |= 1u << static_cast<int>(*code);
  }
  return set;
}

// maxAttempts of either policy: a whole number >= 2, above
// kMaxAttemptsCap counted as the cap.
absl::StatusOr<int> MaxAttemptsOf(const Value& v, const std::string& path) {
  if (v.kind_case() != Value::kNumberValue || v.number_value() < 2 ||
      v.number_value() != std::floor(v.number_value())) {
    return Bad(path, absl::StrCat("is ", Show(v),
                                  v.kind_case() == Value::kNumberValue
                                      ? "; must be 2 or more"
                                      : "; must be a number (2 or more)"));
  }
  return static_cast<int>(std::min<double>(v.number_value(), kMaxAttemptsCap));
}

absl::StatusOr<RetryPolicy> RetryPolicyOf(const Struct& s, const std::string& path) {
  RetryPolicy p;
  const Value* attempts = Field(s, "maxAttempts");
  const Value* initial = Field(s, "initialBackoff");
  const Value* max = Field(s, "maxBackoff");
  const Value* multiplier = Field(s, "backoffMultiplier");
  const Value* codes = Field(s, "retryableStatusCodes");
  for (auto [v, name] : {std::pair{attempts, "maxAttempts"},
                         {initial, "initialBackoff"},
                         {max, "maxBackoff"},
                         {multiplier, "backoffMultiplier"},
                         {codes, "retryableStatusCodes"}}) {
    if (v == nullptr) return Bad(absl::StrCat(path, ".", name), "is required");
  }
  absl::StatusOr<int> max_attempts = MaxAttemptsOf(*attempts, path + ".maxAttempts");
  if (!max_attempts.ok()) return max_attempts.status();
  p.max_attempts = *max_attempts;
  absl::StatusOr<absl::Duration> d = DurationOf(*initial, path + ".initialBackoff");
  if (!d.ok()) return d.status();
  p.initial_backoff = *d;
  d = DurationOf(*max, path + ".maxBackoff");
  if (!d.ok()) return d.status();
  p.max_backoff = *d;
  if (p.initial_backoff <= absl::ZeroDuration()) {
    return Bad(path + ".initialBackoff", absl::StrCat("is ", Show(*initial), "; must be > 0"));
  }
  if (p.max_backoff <= absl::ZeroDuration()) {
    return Bad(path + ".maxBackoff", absl::StrCat("is ", Show(*max), "; must be > 0"));
  }
  if (multiplier->kind_case() != Value::kNumberValue || !(multiplier->number_value() > 0) ||
      !std::isfinite(multiplier->number_value())) {
    return Bad(path + ".backoffMultiplier",
               absl::StrCat("is ", Show(*multiplier), "; must be > 0"));
  }
  p.backoff_multiplier = multiplier->number_value();
  absl::StatusOr<StatusCodeSet> set = CodesOf(*codes, path + ".retryableStatusCodes");
  if (!set.ok()) return set.status();
  if (*set == 0) return Bad(path + ".retryableStatusCodes", "is empty; name at least one code");
  p.retryable_codes = *set;
  return p;
}

absl::StatusOr<HedgingPolicy> HedgingPolicyOf(const Struct& s, const std::string& path) {
  HedgingPolicy p;
  const Value* attempts = Field(s, "maxAttempts");
  if (attempts == nullptr) return Bad(path + ".maxAttempts", "is required");
  absl::StatusOr<int> max_attempts = MaxAttemptsOf(*attempts, path + ".maxAttempts");
  if (!max_attempts.ok()) return max_attempts.status();
  p.max_attempts = *max_attempts;
  if (const Value* delay = Field(s, "hedgingDelay"); delay != nullptr) {
    absl::StatusOr<absl::Duration> d = DurationOf(*delay, path + ".hedgingDelay");
    if (!d.ok()) return d.status();
    p.hedging_delay = *d;
  }
  if (const Value* codes = Field(s, "nonFatalStatusCodes"); codes != nullptr) {
    absl::StatusOr<StatusCodeSet> set = CodesOf(*codes, path + ".nonFatalStatusCodes");
    if (!set.ok()) return set.status();
    p.non_fatal_codes = *set;
  }
  return p;
}

absl::StatusOr<MethodConfig> MethodConfigOf(const Struct& s, const std::string& path) {
  MethodConfig config;
  const Value* retry = Field(s, "retryPolicy");
  const Value* hedging = Field(s, "hedgingPolicy");
  if (retry != nullptr && hedging != nullptr) {
    return Bad(path, "sets both retryPolicy and hedgingPolicy; a method has at most one");
  }
  if (retry != nullptr) {
    if (retry->kind_case() != Value::kStructValue) {
      return Bad(path + ".retryPolicy", absl::StrCat("is ", Show(*retry), "; must be an object"));
    }
    absl::StatusOr<RetryPolicy> p = RetryPolicyOf(retry->struct_value(), path + ".retryPolicy");
    if (!p.ok()) return p.status();
    config.retry = *p;
  }
  if (hedging != nullptr) {
    if (hedging->kind_case() != Value::kStructValue) {
      return Bad(path + ".hedgingPolicy",
                 absl::StrCat("is ", Show(*hedging), "; must be an object"));
    }
    absl::StatusOr<HedgingPolicy> p =
        HedgingPolicyOf(hedging->struct_value(), path + ".hedgingPolicy");
    if (!p.ok()) return p.status();
    config.hedging = *p;
  }
  if (const Value* timeout = Field(s, "timeout"); timeout != nullptr) {
    absl::StatusOr<absl::Duration> d = DurationOf(*timeout, path + ".timeout");
    if (!d.ok()) return d.status();
    config.timeout = *d;
  }
  return config;
}

absl::StatusOr<Struct> ParseObject(absl::string_view json) {
  Struct out;
  const auto s = google::protobuf::util::JsonStringToMessage(std::string(json), &out);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("service config is not a JSON object: ",
                     absl::StripPrefix(std::string(s.message()), ": ")));
  }
  return out;
}

// loadBalancingConfig's names are exact; the older loadBalancingPolicy's
// are case-insensitive ("ROUND_ROBIN"), as in gRPC.
std::optional<std::string> KnownPolicy(absl::string_view name, bool any_case) {
  const std::string n = any_case ? absl::AsciiStrToLower(name) : std::string(name);
  if (n == "round_robin" || n == "pick_first" || n == "least_request") return n;
  // gRPC's name of the policy behind Envoy's LEAST_REQUEST.
  if (n == "least_request_experimental") return std::string("least_request");
  return std::nullopt;
}

}  // namespace

std::optional<absl::StatusCode> ParseStatusCodeName(absl::string_view name) {
  int n = 0;
  if (!name.empty() && name.size() <= 2 &&
      std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
      absl::SimpleAtoi(name, &n)) {
    if (n < 0 || n > 16) return std::nullopt;
    return static_cast<absl::StatusCode>(n);
  }
  const std::string upper = absl::AsciiStrToUpper(name);
  for (int c = 0; c <= 16; ++c) {
    if (absl::StatusCodeToString(static_cast<absl::StatusCode>(c)) == upper) {
      return static_cast<absl::StatusCode>(c);
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::shared_ptr<const ServiceConfig>> ServiceConfig::Parse(absl::string_view json) {
  absl::StatusOr<Struct> root = ParseObject(json);
  if (!root.ok()) return root.status();
  auto config = std::make_shared<ServiceConfig>();
  if (const Value* list = Field(*root, "methodConfig"); list != nullptr) {
    if (list->kind_case() != Value::kListValue) {
      return Bad("methodConfig", absl::StrCat("is ", Show(*list), "; must be a list"));
    }
    for (int i = 0; i < list->list_value().values_size(); ++i) {
      const std::string path = absl::StrCat("methodConfig[", i, "]");
      const Value& entry = list->list_value().values(i);
      if (entry.kind_case() != Value::kStructValue) {
        return Bad(path, absl::StrCat("is ", Show(entry), "; must be an object"));
      }
      absl::StatusOr<MethodConfig> mc = MethodConfigOf(entry.struct_value(), path);
      if (!mc.ok()) return mc.status();
      const Value* names = Field(entry.struct_value(), "name");
      if (names == nullptr || names->kind_case() != Value::kListValue) {
        return Bad(path + ".name", "must be a list of {\"service\", \"method\"} objects");
      }
      for (int j = 0; j < names->list_value().values_size(); ++j) {
        const std::string npath = absl::StrCat(path, ".name[", j, "]");
        const Value& n = names->list_value().values(j);
        if (n.kind_case() != Value::kStructValue) {
          return Bad(npath, absl::StrCat("is ", Show(n), "; must be an object"));
        }
        std::string service, method;
        for (auto [field, out] : {std::pair{"service", &service}, {"method", &method}}) {
          const Value* v = Field(n.struct_value(), field);
          if (v == nullptr) continue;
          if (v->kind_case() != Value::kStringValue) {
            return Bad(absl::StrCat(npath, ".", field),
                       absl::StrCat("is ", Show(*v), "; must be a string"));
          }
          *out = v->string_value();
        }
        if (service.empty() && !method.empty()) {
          return Bad(npath, absl::StrCat("names method \"", method, "\" without a service"));
        }
        const std::string key = service.empty() ? "" : absl::StrCat(service, "/", method);
        if (!config->by_name_.emplace(key, *mc).second) {
          return Bad(npath, absl::StrCat("names \"", key, "\" a second time"));
        }
      }
    }
  }
  if (const Value* t = Field(*root, "retryThrottling"); t != nullptr) {
    if (t->kind_case() != Value::kStructValue) {
      return Bad("retryThrottling", absl::StrCat("is ", Show(*t), "; must be an object"));
    }
    const Value* max_tokens = Field(t->struct_value(), "maxTokens");
    const Value* ratio = Field(t->struct_value(), "tokenRatio");
    if (max_tokens == nullptr) return Bad("retryThrottling.maxTokens", "is required");
    if (ratio == nullptr) return Bad("retryThrottling.tokenRatio", "is required");
    absl::StatusOr<int> tokens = IntIn(*max_tokens, "retryThrottling.maxTokens", 1, 1000);
    if (!tokens.ok()) return tokens.status();
    if (ratio->kind_case() != Value::kNumberValue || !(ratio->number_value() > 0) ||
        ratio->number_value() > 1000) {
      return Bad("retryThrottling.tokenRatio",
                 absl::StrCat("is ", Show(*ratio), "; must be > 0 (at most 1000)"));
    }
    RetryThrottleConfig tc;
    tc.max_milli_tokens = *tokens * 1000;
    // gRPC keeps three decimals of tokenRatio and drops the rest.
    tc.token_ratio_milli = static_cast<int>(std::floor(ratio->number_value() * 1000 + 1e-9));
    if (tc.token_ratio_milli == 0) {
      return Bad("retryThrottling.tokenRatio",
                 absl::StrCat("is ", Show(*ratio), "; under 0.001 (three decimals are kept)"));
    }
    config->throttle_ = tc;
  }
  if (const Value* lbc = Field(*root, "loadBalancingConfig"); lbc != nullptr) {
    if (lbc->kind_case() != Value::kListValue) {
      return Bad("loadBalancingConfig", absl::StrCat("is ", Show(*lbc), "; must be a list"));
    }
    std::string names;
    for (const Value& entry : lbc->list_value().values()) {
      if (entry.kind_case() != Value::kStructValue || entry.struct_value().fields_size() != 1) {
        return Bad("loadBalancingConfig",
                   absl::StrCat("has ", Show(entry), "; each entry is {\"POLICY\": {...}}"));
      }
      const std::string& name = entry.struct_value().fields().begin()->first;
      if (std::optional<std::string> p = KnownPolicy(name, /*any_case=*/false); p.has_value()) {
        config->load_balancing_policy_ = *p;
        break;
      }
      absl::StrAppend(&names, names.empty() ? "" : ", ", name);
    }
    if (config->load_balancing_policy_.empty()) {
      return Bad("loadBalancingConfig",
                 absl::StrCat("lists no policy this channel has (", names,
                              "; known: round_robin, pick_first, least_request)"));
    }
  } else if (const Value* lbp = Field(*root, "loadBalancingPolicy"); lbp != nullptr) {
    std::optional<std::string> p;
    if (lbp->kind_case() == Value::kStringValue) {
      p = KnownPolicy(lbp->string_value(), /*any_case=*/true);
    }
    if (!p.has_value()) {
      return Bad("loadBalancingPolicy", absl::StrCat("is ", Show(*lbp),
                                                     "; known: round_robin, pick_first, "
                                                     "least_request"));
    }
    config->load_balancing_policy_ = *p;
  }
  return std::shared_ptr<const ServiceConfig>(std::move(config));
}

const MethodConfig* ServiceConfig::Find(absl::string_view method) const {
  if (by_name_.empty()) return nullptr;
  absl::ConsumePrefix(&method, "/");
  if (auto it = by_name_.find(method); it != by_name_.end()) return &it->second;
  const size_t slash = method.find('/');
  if (slash != absl::string_view::npos) {
    if (auto it = by_name_.find(method.substr(0, slash + 1)); it != by_name_.end()) {
      return &it->second;
    }
  }
  if (auto it = by_name_.find(""); it != by_name_.end()) return &it->second;
  return nullptr;
}

absl::StatusOr<MethodConfig> ParseMethodConfig(absl::string_view json) {
  absl::StatusOr<Struct> root = ParseObject(json);
  if (!root.ok()) return root.status();
  return MethodConfigOf(*root, "methodConfig");
}

RetryThrottle::RetryThrottle(const RetryThrottleConfig& config)
    : config_(config), milli_tokens_(config.max_milli_tokens) {}

bool RetryThrottle::RetryAllowed() const {
  return milli_tokens_.load(std::memory_order_relaxed) > config_.max_milli_tokens / 2;
}

void RetryThrottle::RecordFailure() {
  int t = milli_tokens_.load(std::memory_order_relaxed);
  while (
      !milli_tokens_.compare_exchange_weak(t, std::max(0, t - 1000), std::memory_order_relaxed)) {
  }
}

void RetryThrottle::RecordSuccess() {
  int t = milli_tokens_.load(std::memory_order_relaxed);
  while (!milli_tokens_.compare_exchange_weak(
      t, std::min(config_.max_milli_tokens, t + config_.token_ratio_milli),
      std::memory_order_relaxed)) {
  }
}

}  // namespace internal
}  // namespace rdmarpc
