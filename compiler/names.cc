#include "names.h"

#include <cstdio>
#include <cstring>
#include <initializer_list>

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

namespace {

// `s` from `pos` on is one of `words`; returns the length matched, or 0.
size_t MatchWord(const std::string& s, size_t pos, std::initializer_list<const char*> words) {
  for (const char* w : words) {
    if (s.compare(pos, std::string::npos, w) == 0) return std::strlen(w);
  }
  return 0;
}

// <stdint.h> / <inttypes.h>: INT8_C, UINT64_MAX, INT_FAST16_MIN,
// INT_LEAST8_WIDTH, INTMAX_C, PRId64, SCNuPTR, ...
bool IsStdintMacro(const std::string& name) {
  static const std::initializer_list<const char*> kWidths = {
      "8", "16", "32", "64", "MAX", "PTR", "FAST8", "FAST16", "FAST32", "FAST64",
      "LEAST8", "LEAST16", "LEAST32", "LEAST64"};
  if (name.size() > 4 && (name.compare(0, 3, "PRI") == 0 || name.compare(0, 3, "SCN") == 0) &&
      std::strchr("diouxX", name[3]) != nullptr) {
    return MatchWord(name, 4, kWidths) > 0;
  }
  size_t pos = name.compare(0, 4, "UINT") == 0 ? 4 : name.compare(0, 3, "INT") == 0 ? 3 : 0;
  if (pos == 0) return false;
  if (name.compare(pos, 1, "_") == 0) ++pos;  // INT_FAST8_MAX
  for (const char* width : kWidths) {
    const std::string w = width;
    if (name.compare(pos, w.size(), w) != 0) continue;
    const std::string rest = name.substr(pos + w.size());
    if (rest == "_C" || rest == "_MAX" || rest == "_MIN" || rest == "_WIDTH") return true;
  }
  return false;
}

}  // namespace

bool IsStandardMacro(const std::string& name) {
  // Macros of the C and POSIX headers that generated code includes through
  // the C++ library, Abseil and protobuf: a method or service with such a
  // name would be macro-expanded ("assert" takes one argument, "EOF" becomes
  // (-1)). From C17 7.2-7.24 (<assert.h>, <errno.h>, <limits.h>,
  // <stdint.h>, <inttypes.h>, <stdio.h>, <stdlib.h>, <stddef.h>, <math.h>,
  // <setjmp.h>, <stdarg.h>, <signal.h>, <locale.h>, <time.h>, <float.h>),
  // the errno values of Linux (a superset of POSIX.1-2017's), glibc's
  // <endian.h>, <limits.h> and <time.h> extensions, and the `linux` and
  // `unix` that GCC defines in its GNU modes (-std=gnu++17, CMake's default).
  static const std::set<std::string>* const kMacros = new std::set<std::string>{
      "assert", "errno", "offsetof", "setjmp", "va_arg", "va_copy", "va_end", "va_start",
      "alloca", "linux", "unix",
      "NULL", "EOF", "BUFSIZ", "FILENAME_MAX", "FOPEN_MAX", "L_tmpnam", "TMP_MAX",
      "SEEK_SET", "SEEK_CUR", "SEEK_END", "_IOFBF", "_IOLBF", "_IONBF",
      "EXIT_SUCCESS", "EXIT_FAILURE", "RAND_MAX", "MB_CUR_MAX", "MB_LEN_MAX",
      "CLOCKS_PER_SEC", "TIME_UTC", "LC_ALL", "LC_COLLATE", "LC_CTYPE", "LC_MONETARY",
      "LC_NUMERIC", "LC_TIME", "SIG_DFL", "SIG_ERR", "SIG_IGN", "SIGABRT", "SIGFPE",
      "SIGILL", "SIGINT", "SIGSEGV", "SIGTERM", "INFINITY", "NAN", "HUGE_VAL",
      "HUGE_VALF", "HUGE_VALL", "FP_INFINITE", "FP_NAN", "FP_NORMAL", "FP_SUBNORMAL",
      "FP_ZERO", "FP_ILOGB0", "FP_ILOGBNAN", "MATH_ERRNO", "MATH_ERREXCEPT",
      "math_errhandling", "CHAR_BIT", "CHAR_MIN", "CHAR_MAX", "SCHAR_MIN", "SCHAR_MAX",
      "UCHAR_MAX", "SHRT_MIN", "SHRT_MAX", "USHRT_MAX", "INT_MIN", "INT_MAX", "UINT_MAX",
      "LONG_MIN", "LONG_MAX", "ULONG_MAX", "LLONG_MIN", "LLONG_MAX", "ULLONG_MAX",
      "PTRDIFF_MIN", "PTRDIFF_MAX", "SIZE_MAX", "SIG_ATOMIC_MIN", "SIG_ATOMIC_MAX",
      "WCHAR_MIN", "WCHAR_MAX", "WINT_MIN", "WINT_MAX", "WEOF", "FLT_MAX", "FLT_MIN",
      "FLT_EPSILON", "FLT_DIG", "FLT_RADIX", "DBL_MAX", "DBL_MIN", "DBL_EPSILON",
      "DBL_DIG", "LDBL_MAX", "LDBL_MIN", "LDBL_EPSILON", "DECIMAL_DIG",
      "PATH_MAX", "NAME_MAX", "PIPE_BUF", "IOV_MAX", "FD_SETSIZE", "LITTLE_ENDIAN",
      "BIG_ENDIAN", "PDP_ENDIAN", "BYTE_ORDER", "CLOCK_REALTIME", "CLOCK_MONOTONIC",
      "CLOCK_PROCESS_CPUTIME_ID", "CLOCK_THREAD_CPUTIME_ID", "htobe16", "htobe32",
      "htobe64", "htole16", "htole32", "htole64", "be16toh", "be32toh", "be64toh",
      "le16toh", "le32toh", "le64toh",
      "E2BIG", "EACCES", "EADDRINUSE", "EADDRNOTAVAIL", "EADV", "EAFNOSUPPORT", "EAGAIN",
      "EALREADY", "EBADE", "EBADF", "EBADFD", "EBADMSG", "EBADR", "EBADRQC", "EBADSLT",
      "EBFONT", "EBUSY", "ECANCELED", "ECHILD", "ECHRNG", "ECOMM", "ECONNABORTED",
      "ECONNREFUSED", "ECONNRESET", "EDEADLK", "EDEADLOCK", "EDESTADDRREQ", "EDOM", "EDOTDOT",
      "EDQUOT", "EEXIST", "EFAULT", "EFBIG", "EHOSTDOWN", "EHOSTUNREACH", "EIDRM", "EILSEQ",
      "EINPROGRESS", "EINTR", "EINVAL", "EIO", "EISCONN", "EISDIR", "EISNAM", "EKEYEXPIRED",
      "EKEYREJECTED", "EKEYREVOKED", "EL2HLT", "EL2NSYNC", "EL3HLT", "EL3RST", "ELIBACC",
      "ELIBBAD", "ELIBEXEC", "ELIBMAX", "ELIBSCN", "ELNRNG", "ELOOP", "EMEDIUMTYPE", "EMFILE",
      "EMLINK", "EMSGSIZE", "EMULTIHOP", "ENAMETOOLONG", "ENAVAIL", "ENETDOWN", "ENETRESET",
      "ENETUNREACH", "ENFILE", "ENOANO", "ENOBUFS", "ENOCSI", "ENODATA", "ENODEV", "ENOENT",
      "ENOEXEC", "ENOKEY", "ENOLCK", "ENOLINK", "ENOMEDIUM", "ENOMEM", "ENOMSG", "ENONET",
      "ENOPKG", "ENOPROTOOPT", "ENOSPC", "ENOSR", "ENOSTR", "ENOSYS", "ENOTBLK", "ENOTCONN",
      "ENOTDIR", "ENOTEMPTY", "ENOTNAM", "ENOTRECOVERABLE", "ENOTSOCK", "ENOTSUP", "ENOTTY",
      "ENOTUNIQ", "ENXIO", "EOPNOTSUPP", "EOVERFLOW", "EOWNERDEAD", "EPERM", "EPFNOSUPPORT",
      "EPIPE", "EPROTO", "EPROTONOSUPPORT", "EPROTOTYPE", "ERANGE", "EREMCHG", "EREMOTE",
      "EREMOTEIO", "ERESTART", "ERFKILL", "EROFS", "ESHUTDOWN", "ESOCKTNOSUPPORT", "ESPIPE",
      "ESRCH", "ESRMNT", "ESTALE", "ESTRPIPE", "ETIME", "ETIMEDOUT", "ETOOMANYREFS", "ETXTBSY",
      "EUCLEAN", "EUNATCH", "EUSERS", "EWOULDBLOCK", "EXDEV", "EXFULL",
  };
  return kMacros->count(name) > 0 || IsStdintMacro(name);
}

std::set<std::string> ReservedMemberNames(const google::protobuf::ServiceDescriptor* service) {
  return {
      // Members and nested types of the generated class S and its nested
      // Service, CallbackService, StubInterface, StubInterface::async_interface,
      // Stub and Stub::async classes (a method named like the class that
      // declares it would be a constructor), and of the gMock class Mock<S>Stub.
      "Service", "CallbackService", "StubInterface", "async_interface", "Stub", "NewStub",
      "async", "service_full_name", "channel_", "async_stub_",
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

namespace {

// Whether a service called `name` gets a C++ name of its own (the rule in
// names.h): a keyword, a standard macro, a member of the generated class S
// itself (a nested class or member function named like its enclosing class is
// ill-formed), or, in a file without a package, a global namespace that
// generated code (or the .pb.h it includes) uses ("class rdmarpc" clashes
// with namespace ::rdmarpc).
bool ServiceNameNeedsMangling(const std::string& name, bool global) {
  static const std::set<std::string>* const kReserved = new std::set<std::string>{
      "Service", "CallbackService", "StubInterface", "Stub", "NewStub", "service_full_name"};
  static const std::set<std::string>* const kGlobalNamespaces =
      new std::set<std::string>{"rdmarpc", "absl", "std", "google"};
  return IsCppKeyword(name) || IsStandardMacro(name) || kReserved->count(name) > 0 ||
         (global && kGlobalNamespaces->count(name) > 0);
}

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

// Adds what `file`'s .pb.h declares in its package's namespace.
void AddFileNames(const google::protobuf::FileDescriptor* file, std::set<std::string>* names) {
  for (int i = 0; i < file->message_type_count(); ++i) {
    AddMessageNames(file->message_type(i), names);
  }
  for (int i = 0; i < file->enum_type_count(); ++i) AddEnumNames(file->enum_type(i), names);
  for (int i = 0; i < file->extension_count(); ++i) names->insert(file->extension(i)->name());
}

// What the .pb.h of `file` and of every file it imports, directly or not,
// in the same package declare in that package's namespace (a .pb.h
// includes the .pb.h of each import).
std::set<std::string> ProtobufNamespaceNames(const google::protobuf::FileDescriptor* file) {
  std::set<std::string> names;
  std::set<const google::protobuf::FileDescriptor*> seen;
  std::vector<const google::protobuf::FileDescriptor*> todo = {file};
  while (!todo.empty()) {
    const google::protobuf::FileDescriptor* f = todo.back();
    todo.pop_back();
    if (!seen.insert(f).second) continue;
    if (f->package() == file->package()) AddFileNames(f, &names);
    for (int i = 0; i < f->dependency_count(); ++i) todo.push_back(f->dependency(i));
  }
  return names;
}

}  // namespace

std::vector<std::string> CppServiceNames(const google::protobuf::FileDescriptor* file) {
  const bool global = file->package().empty();
  // A mangled name steps aside from every other name in the namespace: the
  // .pb.h's (of this file and its same-package imports), the services that
  // keep their .proto names (protoc already refuses a service named like a
  // message of the package), and the names given to the services mangled
  // before it, in .proto order.
  std::set<std::string> taken = ProtobufNamespaceNames(file);
  for (int i = 0; i < file->service_count(); ++i) {
    const std::string& name = file->service(i)->name();
    if (!ServiceNameNeedsMangling(name, global)) taken.insert(name);
  }
  std::vector<std::string> names;
  names.reserve(file->service_count());
  for (int i = 0; i < file->service_count(); ++i) {
    std::string name = file->service(i)->name();
    if (ServiceNameNeedsMangling(name, global)) {
      do {
        name += '_';
      } while (ServiceNameNeedsMangling(name, global) || taken.count(name) > 0);
      taken.insert(name);
    }
    names.push_back(std::move(name));
  }
  return names;
}

std::string CppServiceName(const google::protobuf::ServiceDescriptor* service) {
  return CppServiceNames(service->file())[static_cast<size_t>(service->index())];
}

std::vector<ServiceHelperNames> CppServiceHelperNames(const google::protobuf::FileDescriptor* file) {
  // The helpers are qualified where used (::pkg::kSMethodNames), and a
  // qualified lookup finds a name declared in the namespace itself before
  // one in the unnamed namespace inside it: they step aside from the .pb.h's
  // names, the service classes and each other.
  std::set<std::string> taken = ProtobufNamespaceNames(file);
  const std::vector<std::string> service_names = CppServiceNames(file);
  taken.insert(service_names.begin(), service_names.end());
  std::vector<ServiceHelperNames> helpers;
  helpers.reserve(file->service_count());
  for (int i = 0; i < file->service_count(); ++i) {
    const google::protobuf::ServiceDescriptor* service = file->service(i);
    const std::string& cpp_name = service_names[static_cast<size_t>(i)];
    ServiceHelperNames h;
    h.method_names = "k" + cpp_name + "MethodNames";
    while (taken.count(h.method_names) > 0) h.method_names += '_';
    taken.insert(h.method_names);
    h.method_config_prefix = cpp_name + "MethodConfig";
    auto prefix_taken = [&]() {
      for (int m = 0; m < service->method_count(); ++m) {
        if (taken.count(h.method_config_prefix + std::to_string(m)) > 0) return true;
      }
      return false;
    };
    while (prefix_taken()) h.method_config_prefix += '_';
    for (int m = 0; m < service->method_count(); ++m) {
      taken.insert(h.method_config_prefix + std::to_string(m));
    }
    helpers.push_back(std::move(h));
  }
  return helpers;
}

std::string MockStubClassName(const google::protobuf::ServiceDescriptor* service) {
  const google::protobuf::FileDescriptor* file = service->file();
  // What the file's .pb.h and .rdmarpc.pb.h declare in the package's
  // namespace, where the mock goes.
  std::set<std::string> taken = ProtobufNamespaceNames(file);
  for (const std::string& name : CppServiceNames(file)) taken.insert(name);
  std::string name = "Mock" + service->name() + "Stub";
  while (taken.count(name) > 0) name += '_';
  return name;
}

std::vector<std::string> CppMethodNames(const google::protobuf::ServiceDescriptor* service) {
  const std::set<std::string> reserved = ReservedMemberNames(service);
  auto needs_mangling = [&reserved](const std::string& name) {
    return IsCppKeyword(name) || IsStandardMacro(name) || reserved.count(name) > 0;
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
  // The two extensions protoc's C++ generator strips (StripProto in
  // google/protobuf/compiler/code_generator.cc), so NAME.pb.h is its NAME.
  for (const std::string extension : {".protodevel", ".proto"}) {
    if (proto_file.size() > extension.size() &&
        proto_file.compare(proto_file.size() - extension.size(), extension.size(),
                           extension) == 0) {
      return proto_file.substr(0, proto_file.size() - extension.size());
    }
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
