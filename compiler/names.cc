#include "names.h"

#include <cstdio>

#include "google/protobuf/compiler/cpp/names.h"

namespace rdmarpc {
namespace compiler {

bool IsCppKeyword(const std::string& name) {
  // From [lex.key] and [lex.digraph] of C++20 (a superset of C++17's).
  static const std::set<std::string>* const kKeywords = new std::set<std::string>{
      "alignas",   "alignof",      "and",          "and_eq",        "asm",
      "auto",      "bitand",       "bitor",        "bool",          "break",
      "case",      "catch",        "char",         "char8_t",       "char16_t",
      "char32_t",  "class",        "compl",        "concept",       "const",
      "consteval", "constexpr",    "constinit",    "const_cast",    "continue",
      "co_await",  "co_return",    "co_yield",     "decltype",      "default",
      "delete",    "do",           "double",       "dynamic_cast",  "else",
      "enum",      "explicit",     "export",       "extern",        "false",
      "float",     "for",          "friend",       "goto",          "if",
      "inline",    "int",          "long",         "mutable",       "namespace",
      "new",       "noexcept",     "not",          "not_eq",        "nullptr",
      "operator",  "or",           "or_eq",        "private",       "protected",
      "public",    "register",     "reinterpret_cast", "requires",  "return",
      "short",     "signed",       "sizeof",       "static",        "static_assert",
      "static_cast", "struct",     "switch",       "template",      "this",
      "thread_local", "throw",     "true",         "try",           "typedef",
      "typeid",    "typename",     "union",        "unsigned",      "using",
      "virtual",   "void",         "volatile",     "wchar_t",       "while",
      "xor",       "xor_eq",
  };
  return kKeywords->count(name) > 0;
}

std::set<std::string> ReservedMemberNames(const google::protobuf::ServiceDescriptor* service) {
  return {
      // Members and nested types of the generated class S and its nested
      // Service, StubInterface, StubInterface::async_interface, Stub and
      // Stub::async classes (a method named like the class that declares it
      // would be a constructor), and of the gMock class Mock<S>Stub.
      "Service", "StubInterface", "async_interface", "Stub", "NewStub", "async",
      "service_full_name", "channel_", "async_stub_",
      // Members of ::rdmarpc::Service the generated constructor calls or that
      // users and the Server call on a generated Service; a method of the
      // same name would hide them.
      "full_name", "methods", "AddMethod",
      // A member of S::Service named S would be legal, but S::Stub::S reads
      // like a constructor; keep the rule simple and reserve it too.
      service->name(),
      CppServiceName(service),
  };
}

std::string CppServiceName(const google::protobuf::ServiceDescriptor* service) {
  // The members of the generated class S itself: a nested class or member
  // function named like its enclosing class is ill-formed.
  static const std::set<std::string>* const kReserved =
      new std::set<std::string>{"Service", "StubInterface", "Stub", "NewStub",
                                "service_full_name"};
  // A file without a package puts S in the global namespace, where a class
  // named like a namespace the generated code (or the .pb.h it includes)
  // uses is ill-formed: "class rdmarpc" clashes with namespace ::rdmarpc.
  static const std::set<std::string>* const kGlobalNamespaces =
      new std::set<std::string>{"rdmarpc", "absl", "std", "google"};
  const bool global = service->file()->package().empty();
  std::string name = service->name();
  while (IsCppKeyword(name) || kReserved->count(name) > 0 ||
         (global && kGlobalNamespaces->count(name) > 0)) {
    name += '_';
  }
  return name;
}

namespace {

// The names protobuf's C++ generator declares at namespace scope for
// `enum_type`: the enum itself and, since it is an unscoped enum, its values
// (nested enums come out as Outer_Color with values Outer_Color_RED).
void AddEnumNames(const google::protobuf::EnumDescriptor* enum_type, std::set<std::string>* names) {
  const std::string name = google::protobuf::compiler::cpp::ClassName(enum_type);
  names->insert(name);
  const std::string value_prefix = enum_type->containing_type() == nullptr ? "" : name + "_";
  for (int i = 0; i < enum_type->value_count(); ++i) {
    names->insert(value_prefix + enum_type->value(i)->name());
  }
}

// The same for `message` and the types nested in it (Outer.Inner is class
// Outer_Inner at namespace scope).
void AddMessageNames(const google::protobuf::Descriptor* message, std::set<std::string>* names) {
  names->insert(google::protobuf::compiler::cpp::ClassName(message));
  for (int i = 0; i < message->nested_type_count(); ++i) {
    AddMessageNames(message->nested_type(i), names);
  }
  for (int i = 0; i < message->enum_type_count(); ++i) AddEnumNames(message->enum_type(i), names);
}

}  // namespace

std::string MockStubClassName(const google::protobuf::ServiceDescriptor* service) {
  const google::protobuf::FileDescriptor* file = service->file();
  // What the file's .pb.h and .rdmarpc.pb.h declare in the package's
  // namespace, where the mock goes.
  std::set<std::string> taken;
  for (int i = 0; i < file->message_type_count(); ++i) {
    AddMessageNames(file->message_type(i), &taken);
  }
  for (int i = 0; i < file->enum_type_count(); ++i) AddEnumNames(file->enum_type(i), &taken);
  for (int i = 0; i < file->extension_count(); ++i) taken.insert(file->extension(i)->name());
  for (int i = 0; i < file->service_count(); ++i) taken.insert(CppServiceName(file->service(i)));
  std::string name = "Mock" + service->name() + "Stub";
  while (taken.count(name) > 0) name += '_';
  return name;
}

std::vector<std::string> CppMethodNames(const google::protobuf::ServiceDescriptor* service) {
  const std::set<std::string> reserved = ReservedMemberNames(service);
  auto needs_mangling = [&reserved](const std::string& name) {
    return IsCppKeyword(name) || reserved.count(name) > 0;
  };
  // Names that stay as they are are taken first, so a mangled name never
  // takes the name of a later method that needed no mangling.
  std::set<std::string> taken;
  for (int i = 0; i < service->method_count(); ++i) {
    const std::string& name = service->method(i)->name();
    if (!needs_mangling(name)) taken.insert(name);
  }
  std::vector<std::string> names;
  names.reserve(service->method_count());
  for (int i = 0; i < service->method_count(); ++i) {
    std::string name = service->method(i)->name();
    if (needs_mangling(name)) {
      do {
        name += '_';
      } while (needs_mangling(name) || taken.count(name) > 0);
      taken.insert(name);
    }
    names.push_back(std::move(name));
  }
  return names;
}

std::vector<std::string> PackageNamespaces(const google::protobuf::FileDescriptor* file) {
  std::vector<std::string> namespaces;
  const std::string& package = file->package();
  size_t start = 0;
  while (start < package.size()) {
    size_t dot = package.find('.', start);
    if (dot == std::string::npos) dot = package.size();
    namespaces.push_back(package.substr(start, dot - start));
    start = dot + 1;
  }
  return namespaces;
}

std::string QualifiedServiceClass(const google::protobuf::ServiceDescriptor* service) {
  std::string qualified;
  for (const std::string& ns : PackageNamespaces(service->file())) {
    qualified += "::" + ns;
  }
  return qualified + "::" + CppServiceName(service);
}

std::string StripProtoExtension(const std::string& proto_file) {
  static const std::string kExtension = ".proto";
  if (proto_file.size() > kExtension.size() &&
      proto_file.compare(proto_file.size() - kExtension.size(), kExtension.size(),
                         kExtension) == 0) {
    return proto_file.substr(0, proto_file.size() - kExtension.size());
  }
  return proto_file;
}

namespace {

// proto_file with every character that cannot appear in an identifier
// written as "_XX", its hex code.
std::string EscapeForIdentifier(const std::string& proto_file) {
  std::string escaped;
  for (char c : proto_file) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      escaped += c;
    } else {
      char code[4];
      std::snprintf(code, sizeof(code), "_%02x", static_cast<unsigned char>(c));
      escaped += code;
    }
  }
  return escaped;
}

}  // namespace

std::string HeaderGuard(const std::string& proto_file) {
  return "RDMARPC_GENERATED_" + EscapeForIdentifier(proto_file) + "_INCLUDED";
}

std::string MockHeaderGuard(const std::string& proto_file) {
  return "RDMARPC_GENERATED_" + EscapeForIdentifier(proto_file) + "_MOCK_INCLUDED";
}

}  // namespace compiler
}  // namespace rdmarpc
