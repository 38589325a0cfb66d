// hmac_auth.h: rdmarpc authentication with shared secrets (rdmarpc/security.h),
// as an example to copy. Each client holds one key (a 16-bit key id and a
// secret of at least 16 bytes); the server holds a keyring of them. The
// secret never travels: both levels send an HMAC-SHA256 (RFC 2104, FIPS
// 180-4; OpenSSL's HMAC) over a fresh random nonce and the time.
//
// Per connection (HmacConnectionCredentials / HmacConnectionAuthenticator):
// the 34-byte token in the rdma_cm connect request is
//   u16 key_id | u64 unix time in ms | 8-byte nonce |
//   first 16 bytes of HMAC-SHA256(secret, "rdmarpc-connect" key_id time nonce)
// (integers little-endian). The server refuses it (UNAUTHENTICATED) when the
// key is unknown, the MAC does not match, the time is more than `window`
// away from its own clock (either way, so a token is good for up to twice
// the window), or the (key, nonce) pair was seen within the window (a
// replay); it names the peer by the key's name otherwise. A 128-bit
// truncated tag is what RFC 2104 section 5 and NIST SP 800-107 allow; the
// token has to fit rdma_cm's 35 bytes. The token names no server, and each
// server process remembers its own nonces: a captured token can be used
// once more on every other server that shares the keyring, within the
// window.
//
// Per call (HmacCallCredentials / HmacAuthMetadataProcessor): the metadata
//   authorization: RDMARPC-HMAC-SHA256 key=ID,ts=MS,nonce=HEX16,sig=HEX64
// with sig = HMAC-SHA256(secret, "rdmarpc-call\n" ID "\n" METHOD "\n" MS "\n"
// NONCE), so a signature is good for one key, one method and `window` of
// time either way. Numbers must be written as the signer writes them (no
// sign, no leading zero), each field once, and a call carries one
// authorization entry. The processor consumes it, names the caller by the
// key's name and answers "x-authenticated-as: NAME" in the initial
// metadata; a call signed with another key than its connection's is
// PERMISSION_DENIED. A refusal tells the client only "not valid", not
// whether the key exists. It keeps no replay cache: the attempts of a call
// retried under a retry or hedging policy carry the same metadata (a
// per-call signature is a bearer token for the window, as AWS Signature
// V4's is).
//
// Usage:
//   HmacKeyring keys;
//   keys.Add(7, "alice", secret);                       // server
//   so.connection_authenticator = std::make_shared<HmacConnectionAuthenticator>(keys);
//   so.auth_metadata_processor = std::make_shared<HmacAuthMetadataProcessor>(keys);
//   co.connection_credentials = std::make_shared<HmacConnectionCredentials>(7, secret);
//   co.call_credentials = std::make_shared<HmacCallCredentials>(7, secret);
#ifndef RDMARPC_EXAMPLES_AUTH_HMAC_AUTH_H_
#define RDMARPC_EXAMPLES_AUTH_HMAC_AUTH_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rdmarpc/security.h"

namespace rdmarpc {
namespace examples {

inline constexpr size_t kHmacConnectionTokenBytes = 34;
inline constexpr size_t kMinSecretBytes = 16;
// The AuthContext properties of an authenticated peer: its key's name (the
// identity) and id.
inline constexpr char kHmacKeyNameProperty[] = "hmac_key_name";
inline constexpr char kHmacKeyIdProperty[] = "hmac_key_id";
// What the checks read the time from (tests give their own).
using Clock = std::function<absl::Time()>;

struct HmacKey {
  std::string name;
  std::string secret;
};

// The server's keys, by key id. Fill before the server starts; read-only
// afterwards (any thread).
class HmacKeyring {
 public:
  // INVALID_ARGUMENT: a secret shorter than kMinSecretBytes, an empty name,
  // or an id already present.
  absl::Status Add(uint16_t key_id, std::string name, std::string secret);
  const HmacKey* Find(uint16_t key_id) const;
  size_t size() const { return keys_.size(); }

  // Reads "KEY_ID NAME SECRET" lines (SECRET in hex; '#' starts a comment).
  // INVALID_ARGUMENT names the line that does not parse; NOT_FOUND when the
  // file cannot be read.
  static absl::StatusOr<HmacKeyring> FromFile(const std::string& path);

 private:
  std::map<uint16_t, HmacKey> keys_;
};

// The connection token for `key_id` and `secret` at `time` with `nonce`
// (8 bytes). HmacConnectionCredentials calls it with the clock and a random
// nonce; tests call it directly.
std::string MakeHmacConnectionToken(uint16_t key_id, absl::string_view secret, absl::Time time,
                                    absl::string_view nonce);
// The authorization value for one call of `method`.
std::string MakeHmacCallAuthorization(uint16_t key_id, absl::string_view secret,
                                      absl::string_view method, absl::Time time,
                                      absl::string_view nonce);

// 8 random bytes (OpenSSL's RAND_bytes). INTERNAL when it fails.
absl::StatusOr<std::string> RandomNonce();

class HmacConnectionCredentials final : public ConnectionCredentials {
 public:
  HmacConnectionCredentials(uint16_t key_id, std::string secret)
      : key_id_(key_id), secret_(std::move(secret)) {}
  absl::StatusOr<std::string> GetToken(absl::string_view server) override;

 private:
  const uint16_t key_id_;
  const std::string secret_;
};

class HmacConnectionAuthenticator final : public ConnectionAuthenticator {
 public:
  // `window`: how far a token's time may be from `clock`, either way; also
  // how long its nonce is remembered.
  explicit HmacConnectionAuthenticator(HmacKeyring keys, absl::Duration window = absl::Seconds(30),
                                       Clock clock = absl::Now)
      : keys_(std::move(keys)), window_(window), clock_(std::move(clock)) {}
  absl::Status Authenticate(absl::string_view token, absl::string_view peer,
                            AuthContext* context) override;

 private:
  const HmacKeyring keys_;
  const absl::Duration window_;
  const Clock clock_;
  absl::Mutex mu_;
  // key id and nonce -> the token's time; pruned of entries older than the
  // window.
  absl::flat_hash_map<std::string, absl::Time> seen_ ABSL_GUARDED_BY(mu_);
  absl::Time last_prune_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

class HmacCallCredentials final : public CallCredentials {
 public:
  HmacCallCredentials(uint16_t key_id, std::string secret)
      : key_id_(key_id), secret_(std::move(secret)) {}
  absl::Status GetMetadata(absl::string_view target, absl::string_view method,
                           Metadata* metadata) override;

 private:
  const uint16_t key_id_;
  const std::string secret_;
};

class HmacAuthMetadataProcessor final : public AuthMetadataProcessor {
 public:
  // `window`: how far a signature's time may be from `clock`, either way.
  explicit HmacAuthMetadataProcessor(HmacKeyring keys, absl::Duration window = absl::Minutes(5),
                                     Clock clock = absl::Now)
      : keys_(std::move(keys)), window_(window), clock_(std::move(clock)) {}
  // Checks the signature against the call's key, method (":path") and time.
  absl::Status Process(const InputMetadata& metadata, AuthContext* context,
                       OutputMetadata* consumed, OutputMetadata* response) override;

 private:
  const HmacKeyring keys_;
  const absl::Duration window_;
  const Clock clock_;
};

}  // namespace examples
}  // namespace rdmarpc

#endif  // RDMARPC_EXAMPLES_AUTH_HMAC_AUTH_H_
