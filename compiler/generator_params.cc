#include "generator_params.h"

#include <utility>
#include <vector>

#include "google/protobuf/compiler/code_generator.h"

namespace rdmarpc {
namespace compiler {
namespace {

constexpr char kAccepted[] =
    "(protoc-gen-rdmarpc accepts: include_prefix=DIR, generate_mock_code=true|false)";

}  // namespace

bool ParseGeneratorParams(const std::string& parameter, GeneratorParams* params,
                          std::string* error) {
  std::vector<std::pair<std::string, std::string>> pairs;
  google::protobuf::compiler::ParseGeneratorParameter(parameter, &pairs);
  GeneratorParams parsed;
  for (const auto& [key, value] : pairs) {
    if (key == "include_prefix") {
      parsed.include_prefix = value;
      // Accept "proto" as well as "proto/": the prefix names a directory.
      if (!parsed.include_prefix.empty() && parsed.include_prefix.back() != '/') {
        parsed.include_prefix += '/';
      }
    } else if (key == "generate_mock_code") {
      // Only "true" and "false", as gRPC's plugin accepts for the same key:
      // a bare "generate_mock_code" or "=1" fails instead of guessing.
      if (value == "true") {
        parsed.generate_mock_code = true;
      } else if (value == "false") {
        parsed.generate_mock_code = false;
      } else {
        *error = "parameter generate_mock_code has value '" + value +
                 "'; expected true or false";
        return false;
      }
    } else {
      *error = "unknown parameter '" + key + "' " + kAccepted;
      return false;
    }
  }
  *params = std::move(parsed);
  return true;
}

}  // namespace compiler
}  // namespace rdmarpc
