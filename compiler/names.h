// compiler/names.h: how .proto names become C++ names in generated code.
//
// Messages keep protobuf's own C++ names (compiler/cpp/names.h), so the
// generated stubs name exactly the classes protoc's C++ generator emits.
// Packages become nested namespaces ("a.b" -> a::b), as protobuf does.
//
// Method names follow one mangling rule, applied everywhere a method's C++
// name appears (Service, Stub, Stub::async):
//
//   A method keeps its .proto name unless that name is a C++ keyword, a
//   macro of the C and POSIX headers (IsStandardMacro: "assert", "EOF",
//   "INT_MAX", "EINVAL") or a name the generated classes use themselves
//   (ReservedMemberNames). Such a
//   name gets a trailing '_' ("delete" -> "delete_", "Stub" -> "Stub_"), and
//   one more '_' at a time while the result is still reserved or is the C++
//   name of another method of the service ("delete" beside a method really
//   called "delete_" -> "delete__"). Methods are mangled in .proto order.
//
// (The rule can produce a double underscore, which C++ reserves for the
// implementation; that happens only when the .proto itself holds both
// names, e.g. "delete" and "delete_", and compilers accept it.)
//
// Service classes follow the same rule with their own reserved names: a
// service called "delete", "EOF", "Service", "CallbackService",
// "StubInterface", "Stub", "NewStub" or "service_full_name" becomes class
// delete_, EOF_, Service_, ... (protobuf itself appends '_' to message names
// that are keywords); the '_' are added while the name is still reserved or
// is taken by another name in the namespace (a message, enum, enum value or
// extension as the .pb.h of the file or of an import in the same package
// declares it, or another service of the file).
// Names the runtime declares in namespace rdmarpc are not avoided: a file
// whose package is `rdmarpc` itself must not name a service like one of
// them (Server, Channel, ...).
//
// The gMock class of a service S (NAME_mock.rdmarpc.pb.h) is MockSStub, as
// gRPC names it, after the .proto name of S, beside S in S's namespace; it
// gets a trailing '_' while another name the file puts in that namespace
// takes it: a service class, an extension, or a message, enum or enum value
// as protobuf names them there (nested ones too: Outer.Inner is Outer_Inner).
//
// Only the C++ name changes: the wire name stays "/package.Service/delete".
#ifndef RDMARPC_COMPILER_NAMES_H_
#define RDMARPC_COMPILER_NAMES_H_

#include <set>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"

namespace rdmarpc {
namespace compiler {

// True for C++17 keywords, alternative operator tokens ("and", "not") and the
// C++20 keywords, so generated code keeps compiling under newer standards.
bool IsCppKeyword(const std::string& name);

// True for the macros of the C17 library headers (<stdint.h> and
// <inttypes.h> families included: INT64_C, UINT_FAST8_MAX, PRId64), Linux's
// errno values, a few glibc extensions (alloca, PATH_MAX, htobe32,
// CLOCK_MONOTONIC, ...) and GCC's `linux` / `unix` of its GNU modes, which
// the headers generated code includes may define: a method or service of
// that name would be macro-expanded ("assert", "EOF", "EINVAL"). Macros of
// other libraries a user's code includes are not known.
bool IsStandardMacro(const std::string& name);

// Names a method of `service` may not have in C++: the members and nested
// types of the generated classes (Service, CallbackService, StubInterface,
// async_interface, Stub, NewStub, async, service_full_name, channel_,
// async_stub_), those of
// the ::rdmarpc::Service base that generated code calls (full_name, methods,
// AddMethod), and the service's own name, both as in the .proto and as a
// C++ class.
std::set<std::string> ReservedMemberNames(const google::protobuf::ServiceDescriptor* service);

// The C++ names of the classes generated for `file`'s services, in .proto
// order, after the rule above.
std::vector<std::string> CppServiceNames(const google::protobuf::FileDescriptor* file);

// The names the generated .cc gives its own helpers for a service S, in an
// unnamed namespace inside S's: the table of its methods' full names
// (kSMethodNames) and the functions that return its methods' retry or
// hedging configs (SMethodConfig0, SMethodConfig1, ...). Each gets a
// trailing '_' while it is taken by a name of the namespace (a message,
// enum, enum value or extension of the file or of a same-package import, a
// service class, another helper).
struct ServiceHelperNames {
  std::string method_names;          // "kSMethodNames"
  std::string method_config_prefix;  // "SMethodConfig", before the method's index
};
// For each of `file`'s services, in .proto order.
std::vector<ServiceHelperNames> CppServiceHelperNames(const google::protobuf::FileDescriptor* file);

// The C++ name of the class generated for `service`, after the rule above;
// in a file without a package, also not rdmarpc, absl, std or google, the
// global namespaces generated code names ("service rdmarpc {}" -> rdmarpc_).
std::string CppServiceName(const google::protobuf::ServiceDescriptor* service);

// The name of the gMock class of `service`, after the rule above
// ("a.b.S" -> "MockSStub", in namespace a::b).
std::string MockStubClassName(const google::protobuf::ServiceDescriptor* service);

// The C++ names of the methods of `service`, in .proto order, after the
// mangling rule above.
std::vector<std::string> CppMethodNames(const google::protobuf::ServiceDescriptor* service);

// The namespaces of `file`'s package, outermost first ("a.b" -> {"a", "b"});
// empty for a file without a package.
std::vector<std::string> PackageNamespaces(const google::protobuf::FileDescriptor* file);

// The fully qualified C++ name of a service class, with a leading "::"
// ("a.b.S" -> "::a::b::S", "a.b.Stub" -> "::a::b::Stub_").
std::string QualifiedServiceClass(const google::protobuf::ServiceDescriptor* service);

// "foo/bar.proto" -> "foo/bar", "foo/bar.protodevel" -> "foo/bar", as
// protoc's C++ generator names its output (any other name is returned
// unchanged).
std::string StripProtoExtension(const std::string& proto_file);

// An include guard unique to `proto_file`'s generated header: every character
// that cannot appear in an identifier becomes "_XX" (its hex code), so
// "foo/bar.proto" and "foo_bar.proto" give different guards.
std::string HeaderGuard(const std::string& proto_file);

// The include guard of `proto_file`'s NAME_mock.rdmarpc.pb.h: like
// HeaderGuard, ending in "_MOCK_INCLUDED". No HeaderGuard has that ending:
// an escaped name has '_' only before two lowercase hex digits.
std::string MockHeaderGuard(const std::string& proto_file);

}  // namespace compiler
}  // namespace rdmarpc

#endif  // RDMARPC_COMPILER_NAMES_H_
