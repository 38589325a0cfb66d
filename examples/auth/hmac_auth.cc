// hmac_auth.cc: see hmac_auth.h.
#include "hmac_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <fstream>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace rdmarpc {
namespace examples {
namespace {

constexpr size_t kNonceBytes = 8;
constexpr size_t kTagBytes = 16;
constexpr char kConnectLabel[] = "rdmarpc-connect";
constexpr char kCallScheme[] = "RDMARPC-HMAC-SHA256 ";

std::string HmacSha256(absl::string_view key, absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool SameBytes(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLe(absl::string_view in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  return v;
}

std::string CallSigningInput(uint32_t key_id, absl::string_view method, int64_t ms,
                             absl::string_view nonce_hex) {
  return absl::StrCat("rdmarpc-call\n", key_id, "\n", method, "\n", ms, "\n", nonce_hex);
}

// A decimal as the signer writes it: digits only, no leading zero.
template <typename T>
bool ParseCanonical(absl::string_view text, T* out) {
  if (text.empty() || text.size() > 19 || !absl::c_all_of(text, absl::ascii_isdigit) ||
      (text.size() > 1 && text[0] == '0')) {
    return false;
  }
  return absl::SimpleAtoi(text, out);
}

constexpr char kCallNotValid[] = "RDMARPC-HMAC-SHA256 signature not valid";

absl::Status CheckTime(absl::Time signed_at, absl::Time now, absl::Duration window) {
  const absl::Duration skew = absl::AbsDuration(now - signed_at);
  if (skew > window) {
    return absl::UnauthenticatedError(
        absl::StrCat("signed at ", absl::FormatTime(signed_at), ", ",
                     absl::FormatDuration(absl::Trunc(skew, absl::Milliseconds(1))),
                     " from this host's clock (window ", absl::FormatDuration(window), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status HmacKeyring::Add(uint16_t key_id, std::string name, std::string secret) {
  if (secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat("secret of key ", key_id, " has ", secret.size(),
                                                   " bytes; need at least ", kMinSecretBytes));
  }
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("key ", key_id, " has no name"));
  if (!keys_.emplace(key_id, HmacKey{std::move(name), std::move(secret)}).second) {
    return absl::InvalidArgumentError(absl::StrCat("key id ", key_id, " is given twice"));
  }
  return absl::OkStatus();
}

const HmacKey* HmacKeyring::Find(uint16_t key_id) const {
  auto it = keys_.find(key_id);
  return it == keys_.end() ? nullptr : &it->second;
}

absl::StatusOr<HmacKeyring> HmacKeyring::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read keyring ", path));
  HmacKeyring ring;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string uncommented = line.substr(0, line.find('#'));
    absl::string_view text = absl::StripAsciiWhitespace(uncommented);
    if (text.empty()) continue;
    std::vector<std::string> f = absl::StrSplit(text, ' ', absl::SkipEmpty());
    uint32_t id = 0;
    std::string secret;
    if (f.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", n, ": ", f.size(), " fields; expected \"KEY_ID NAME SECRET_HEX\""));
    }
    if (!absl::SimpleAtoi(f[0], &id) || id > 0xffff) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", n, ": key id '", f[0], "' is not a number 0..65535"));
    }
    if (f[2].size() % 2 != 0 || !absl::c_all_of(f[2], absl::ascii_isxdigit)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n, ": the secret of key ", id,
                                                     " is not hex (an even count of 0-9a-f)"));
    }
    secret = absl::HexStringToBytes(f[2]);
    if (absl::Status s = ring.Add(static_cast<uint16_t>(id), f[1], secret); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n, ": ", s.message()));
    }
  }
  return ring;
}

absl::StatusOr<std::string> RandomNonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), kNonceBytes) != 1) {
    return absl::InternalError("RAND_bytes failed: no randomness for a nonce");
  }
  return nonce;
}

std::string MakeHmacConnectionToken(uint16_t key_id, absl::string_view secret, absl::Time time,
                                    absl::string_view nonce) {
  std::string token;
  PutLe(&token, key_id, 2);
  PutLe(&token, static_cast<uint64_t>(absl::ToUnixMillis(time)), 8);
  token.append(nonce.data(), nonce.size());
  const std::string tag = HmacSha256(secret, absl::StrCat(kConnectLabel, token));
  token.append(tag, 0, kTagBytes);
  return token;
}

std::string MakeHmacCallAuthorization(uint16_t key_id, absl::string_view secret,
                                      absl::string_view method, absl::Time time,
                                      absl::string_view nonce) {
  const int64_t ms = absl::ToUnixMillis(time);
  const std::string nonce_hex = absl::BytesToHexString(nonce);
  const std::string sig =
      absl::BytesToHexString(HmacSha256(secret, CallSigningInput(key_id, method, ms, nonce_hex)));
  return absl::StrCat(kCallScheme, "key=", key_id, ",ts=", ms, ",nonce=", nonce_hex, ",sig=", sig);
}

absl::StatusOr<std::string> HmacConnectionCredentials::GetToken(absl::string_view) {
  absl::StatusOr<std::string> nonce = RandomNonce();
  if (!nonce.ok()) return absl::UnavailableError(nonce.status().message());
  return MakeHmacConnectionToken(key_id_, secret_, absl::Now(), *nonce);
}

absl::Status HmacConnectionAuthenticator::Authenticate(absl::string_view token, absl::string_view,
                                                       AuthContext* context) {
  const absl::Time now = clock_();
  if (token.size() != kHmacConnectionTokenBytes) {
    return absl::UnauthenticatedError(absl::StrCat("connection token of ", token.size(),
                                                   " bytes; an HMAC token has ",
                                                   kHmacConnectionTokenBytes));
  }
  const uint16_t key_id = static_cast<uint16_t>(GetLe(token, 2));
  const HmacKey* key = keys_.Find(key_id);
  if (key == nullptr) return absl::UnauthenticatedError(absl::StrCat("unknown key id ", key_id));
  const absl::string_view signed_part = token.substr(0, 2 + 8 + kNonceBytes);
  const std::string tag = HmacSha256(key->secret, absl::StrCat(kConnectLabel, signed_part));
  if (!SameBytes(token.substr(signed_part.size()), absl::string_view(tag).substr(0, kTagBytes))) {
    return absl::UnauthenticatedError(
        absl::StrCat("connection token for key ", key_id, " has a wrong MAC"));
  }
  const absl::Time signed_at =
      absl::FromUnixMillis(static_cast<int64_t>(GetLe(token.substr(2), 8)));
  if (absl::Status s = CheckTime(signed_at, now, window_); !s.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("connection token for key ", key_id, " ", s.message()));
  }
  {
    absl::MutexLock lock(&mu_);
    if (now - last_prune_ > window_) {
      // Older than the window both ways: its token is refused by time now.
      for (auto it = seen_.begin(); it != seen_.end();) {
        if (now - it->second > 2 * window_) {
          seen_.erase(it++);
        } else {
          ++it;
        }
      }
      last_prune_ = now;
    }
    // Key id and nonce: the first 2 and last 8 bytes of the signed part.
    std::string seen_key = absl::StrCat(token.substr(0, 2), token.substr(10, kNonceBytes));
    if (!seen_.emplace(std::move(seen_key), signed_at).second) {
      return absl::UnauthenticatedError(
          absl::StrCat("connection token for key ", key_id, " was used before (a replay)"));
    }
  }
  context->AddProperty(kHmacKeyNameProperty, key->name);
  context->AddProperty(kHmacKeyIdProperty, absl::StrCat(key_id));
  context->SetPeerIdentityPropertyName(kHmacKeyNameProperty);
  return absl::OkStatus();
}

absl::Status HmacCallCredentials::GetMetadata(absl::string_view, absl::string_view method,
                                              Metadata* metadata) {
  absl::StatusOr<std::string> nonce = RandomNonce();
  if (!nonce.ok()) return absl::UnavailableError(nonce.status().message());
  metadata->emplace("authorization",
                    MakeHmacCallAuthorization(key_id_, secret_, method, absl::Now(), *nonce));
  return absl::OkStatus();
}

absl::Status HmacAuthMetadataProcessor::Process(const InputMetadata& metadata, AuthContext* context,
                                                OutputMetadata* consumed,
                                                OutputMetadata* response) {
  auto path = metadata.find(":path");
  auto auth = metadata.find("authorization");
  if (auth == metadata.end() || !absl::StartsWith(auth->second, kCallScheme)) {
    response->emplace("www-authenticate", "RDMARPC-HMAC-SHA256");
    return absl::UnauthenticatedError("no RDMARPC-HMAC-SHA256 authorization metadata");
  }
  if (metadata.count("authorization") != 1) {
    return absl::UnauthenticatedError("more than one authorization entry");
  }
  std::map<std::string, std::string> fields;
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(auth->second).substr(sizeof(kCallScheme) - 1), ',')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (!fields.emplace(kv.first, kv.second).second) {
      return absl::UnauthenticatedError(
          absl::StrCat("malformed authorization: field '", kv.first, "' given twice"));
    }
  }
  uint32_t key_id = 0;
  int64_t ms = 0;
  if (fields.size() != 4 || !ParseCanonical(fields["key"], &key_id) || key_id > 0xffff ||
      !ParseCanonical(fields["ts"], &ms) || fields["nonce"].size() != 2 * kNonceBytes ||
      fields["sig"].size() != 64) {
    return absl::UnauthenticatedError(
        "malformed authorization: expected key=ID,ts=MS,nonce=HEX16,sig=HEX64");
  }
  // An unknown key and a wrong signature read the same to the caller.
  const HmacKey* key = keys_.Find(static_cast<uint16_t>(key_id));
  if (key == nullptr) return absl::UnauthenticatedError(kCallNotValid);
  const std::string method = path == metadata.end() ? "" : path->second;
  const std::string want = absl::BytesToHexString(
      HmacSha256(key->secret, CallSigningInput(key_id, method, ms, fields["nonce"])));
  if (!SameBytes(fields["sig"], want)) return absl::UnauthenticatedError(kCallNotValid);
  if (absl::Status s = CheckTime(absl::FromUnixMillis(ms), clock_(), window_); !s.ok()) {
    return absl::UnauthenticatedError(absl::StrCat("call signature ", s.message()));
  }
  const std::vector<std::string> connection_key = context->FindPropertyValues(kHmacKeyIdProperty);
  if (!connection_key.empty() && connection_key != std::vector<std::string>{fields["key"]}) {
    // The connection authenticated with another key: one client lending
    // another its key.
    return absl::PermissionDeniedError(absl::StrCat("call signed with key ", key_id,
                                                    " on a connection of key ", connection_key[0]));
  }
  if (connection_key.empty()) context->AddProperty(kHmacKeyIdProperty, fields["key"]);
  if (!context->IsPeerAuthenticated()) {
    context->AddProperty(kHmacKeyNameProperty, key->name);
    context->SetPeerIdentityPropertyName(kHmacKeyNameProperty);
  }
  consumed->emplace(auth->first, auth->second);
  response->emplace("x-authenticated-as", key->name);
  return absl::OkStatus();
}

}  // namespace examples
}  // namespace rdmarpc
