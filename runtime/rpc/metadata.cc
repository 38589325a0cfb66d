// metadata.cc: see metadata.h.
#include "runtime/rpc/metadata.h"

#include <cstdint>
#include <iterator>
#include <utility>

#include "absl/base/internal/endian.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace rdmarpc {
namespace internal {
namespace {

void PutU32(std::string* out, size_t v) {
  char b[4];
  absl::little_endian::Store32(b, static_cast<uint32_t>(v));
  out->append(b, 4);
}

bool TakeField(absl::string_view* in, absl::string_view* field) {
  if (in->size() < 4) return false;
  const uint32_t len = absl::little_endian::Load32(in->data());
  in->remove_prefix(4);
  if (len > in->size()) return false;
  *field = in->substr(0, len);
  in->remove_prefix(len);
  return true;
}

bool ValidKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

}  // namespace

size_t MetadataBytes(const Metadata& md) {
  size_t n = 0;
  for (const auto& [k, v] : md) n += k.size() + v.size();
  return n;
}

absl::Status ValidateMetadata(const Metadata& md, size_t limit, absl::string_view what,
                              bool allow_pushback) {
  for (const auto& [key, value] : md) {
    if (key.empty()) return absl::InternalError(absl::StrCat(what, " has an empty key"));
    for (char c : key) {
      if (!ValidKeyChar(c)) {
        return absl::InternalError(absl::StrCat(what, " key \"", absl::CHexEscape(key),
                                                "\" has a character other than a-z, 0-9, "
                                                "'-', '_' and '.'"));
      }
    }
    if (absl::StartsWith(key, "grpc-") && !(allow_pushback && key == "grpc-retry-pushback-ms")) {
      return absl::InternalError(
          absl::StrCat(what, " key \"", key, "\" uses the reserved prefix grpc-"));
    }
    if (absl::EndsWith(key, "-bin")) continue;
    for (char c : value) {
      if (c < 0x20 || c > 0x7E) {
        return absl::InternalError(absl::StrCat(
            what, " value of key \"", key, "\" has a non-printable byte (only keys ending in "
            "-bin carry binary values): \"", absl::CHexEscape(value), "\""));
      }
    }
  }
  const size_t bytes = MetadataBytes(md);
  if (bytes > limit) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " of ", bytes,
                                                     " bytes exceeds max_metadata_bytes ", limit));
  }
  return absl::OkStatus();
}

std::string EncodeMetadata(const Metadata& md) {
  std::string out;
  for (const auto& [k, v] : md) {
    PutU32(&out, k.size());
    out.append(k);
    PutU32(&out, v.size());
    out.append(v);
  }
  return out;
}

bool DecodeMetadata(absl::string_view bytes, Metadata* md) {
  Metadata decoded;
  while (!bytes.empty()) {
    absl::string_view k, v;
    if (!TakeField(&bytes, &k) || !TakeField(&bytes, &v)) return false;
    decoded.emplace(std::string(k), std::string(v));
  }
  md->merge(decoded);
  return true;
}

absl::Status TakeServerMetadata(absl::string_view bytes, absl::string_view peer, size_t limit,
                                Metadata* initial, Metadata* trailing) {
  // Decoded aside: a list that fails (to decode, or the limit) must leave
  // nothing behind, not the entries before the fault.
  Metadata got_initial, got_trailing;
  const bool decoded = trailing != nullptr
                           ? DecodeResponseMetadata(bytes, &got_initial, &got_trailing)
                           : DecodeMetadata(bytes, &got_initial);
  if (!decoded) {
    return absl::InternalError(absl::StrCat(trailing != nullptr ? "" : "initial ",
                                            "metadata of ", bytes.size(), " bytes from ", peer,
                                            " did not decode"));
  }
  for (const auto& [what, md] :
       {std::pair<const char*, const Metadata*>{"initial", &got_initial},
        {"trailing", &got_trailing}}) {
    if (MetadataBytes(*md) > limit) {
      // Refused metadata is not shown to the caller.
      return absl::ResourceExhaustedError(absl::StrCat("server ", what, " metadata of ",
                                                       MetadataBytes(*md), " bytes exceeds ",
                                                       "max_metadata_bytes ", limit));
    }
  }
  initial->insert(std::make_move_iterator(got_initial.begin()),
                  std::make_move_iterator(got_initial.end()));
  if (trailing != nullptr) {
    trailing->insert(std::make_move_iterator(got_trailing.begin()),
                     std::make_move_iterator(got_trailing.end()));
  }
  return absl::OkStatus();
}

std::string EncodeResponseMetadata(const Metadata& initial, const Metadata& trailing) {
  if (initial.empty() && trailing.empty()) return std::string();
  std::string first = EncodeMetadata(initial);
  std::string out;
  PutU32(&out, first.size());
  out += first;
  out += EncodeMetadata(trailing);
  return out;
}

bool DecodeResponseMetadata(absl::string_view bytes, Metadata* initial, Metadata* trailing) {
  if (bytes.empty()) return true;
  absl::string_view first;
  if (!TakeField(&bytes, &first)) return false;
  return DecodeMetadata(first, initial) && DecodeMetadata(bytes, trailing);
}

}  // namespace internal
}  // namespace rdmarpc
