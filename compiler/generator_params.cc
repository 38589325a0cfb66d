#include "generator_params.h"

#include <utility>
#include <vector>

#include "google/protobuf/compiler/code_generator.h"

namespace rdmarpc {
namespace compiler {

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
    } else {
      *error = "unknown parameter '" + key +
               "' (protoc-gen-rdmarpc accepts: include_prefix=DIR)";
      return false;
    }
  }
  *params = std::move(parsed);
  return true;
}

}  // namespace compiler
}  // namespace rdmarpc
