#include "reflection/reflection_backend.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.pb.h"

namespace rdmarpc {
namespace reflection {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;
using google::protobuf::FileDescriptorProto;

// Appends `file` and, depth first, every file it imports that `seen` does
// not hold yet (gRPC's FillFileDescriptorResponse, in the same order).
void AppendWithImports(const FileDescriptor* file, absl::flat_hash_set<std::string>* seen,
                       std::vector<std::string>* out) {
  if (!seen->insert(file->name()).second) return;
  FileDescriptorProto proto;
  file->CopyTo(&proto);
  out->push_back(proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i) {
    // nullptr only for an import the pool could not build (a weak import
    // left out of the binary): there is nothing to send for it.
    const FileDescriptor* dependency = file->dependency(i);
    if (dependency != nullptr) AppendWithImports(dependency, seen, out);
  }
}

std::vector<std::string> FileWithImports(const FileDescriptor* file) {
  absl::flat_hash_set<std::string> seen;
  std::vector<std::string> out;
  AppendWithImports(file, &seen, &out);
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ReflectionBackend::ListServices() const {
  if (server_ == nullptr) return absl::NotFoundError("Services not found: no server was set");
  return server_->GetServiceNames();
}

absl::StatusOr<std::vector<std::string>> ReflectionBackend::FileByFilename(
    const std::string& filename) const {
  const FileDescriptor* file = pool_->FindFileByName(filename);
  if (file == nullptr) return absl::NotFoundError(absl::StrCat("File not found: ", filename));
  return FileWithImports(file);
}

absl::StatusOr<std::vector<std::string>> ReflectionBackend::FileContainingSymbol(
    const std::string& symbol) const {
  const FileDescriptor* file = pool_->FindFileContainingSymbol(symbol);
  if (file == nullptr) return absl::NotFoundError(absl::StrCat("Symbol not found: ", symbol));
  return FileWithImports(file);
}

absl::StatusOr<std::vector<std::string>> ReflectionBackend::FileContainingExtension(
    const std::string& containing_type, int32_t number) const {
  const Descriptor* type = pool_->FindMessageTypeByName(containing_type);
  if (type == nullptr) return absl::NotFoundError(absl::StrCat("Type not found: ", containing_type));
  const FieldDescriptor* extension = pool_->FindExtensionByNumber(type, number);
  if (extension == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("Extension not found: ", containing_type, " has no extension ", number));
  }
  return FileWithImports(extension->file());
}

absl::StatusOr<std::vector<int32_t>> ReflectionBackend::AllExtensionNumbersOfType(
    const std::string& type) const {
  const Descriptor* descriptor = pool_->FindMessageTypeByName(type);
  if (descriptor == nullptr) return absl::NotFoundError(absl::StrCat("Type not found: ", type));
  std::vector<const FieldDescriptor*> extensions;
  pool_->FindAllExtensions(descriptor, &extensions);
  std::vector<int32_t> numbers;
  numbers.reserve(extensions.size());
  for (const FieldDescriptor* extension : extensions) numbers.push_back(extension->number());
  std::sort(numbers.begin(), numbers.end());
  return numbers;
}

}  // namespace reflection
}  // namespace rdmarpc
