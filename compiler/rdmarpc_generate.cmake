# rdmarpc_generate(): compile .proto files with protoc and protoc-gen-rdmarpc
# into a target.
#
#   rdmarpc_generate(TARGET <target>
#                    PROTOS <a.proto> [<b.proto>...]
#                    [IMPORT_DIRS <dir>...]
#                    [PROTOC_OUT_DIR <dir>]
#                    [GENERATE_MOCKS])
#
# For each PROTOS entry foo/bar.proto (relative paths are relative to
# CMAKE_CURRENT_SOURCE_DIR) runs protoc with --cpp_out and --rdmarpc_out and
# adds foo/bar.pb.h, foo/bar.pb.cc, foo/bar.rdmarpc.pb.h and
# foo/bar.rdmarpc.pb.cc to <target>. The path of a generated file below the
# output directory is the .proto's path below the import directory that
# contains it, so `#include "bar.rdmarpc.pb.h"` works for a .proto found
# through its own directory. Two PROTOS that come to the same path that way
# (a/greeter.proto and b/greeter.proto, each found through its own directory)
# are refused with a FATAL_ERROR naming both: protobuf names a file by that
# path, so one program cannot hold both; an IMPORT_DIRS entry above both
# (IMPORT_DIRS .) gives them a/greeter.proto and b/greeter.proto.
#
#   TARGET          an existing target (executable or library).
#   IMPORT_DIRS     protoc -I directories, searched first, in order (relative
#                   to CMAKE_CURRENT_SOURCE_DIR). After them come the directory
#                   of each .proto, then rdmarpc's idl/ (for
#                   `import "rdmarpc/options.proto";`).
#   PROTOC_OUT_DIR  where generated files go (relative to
#                   CMAKE_CURRENT_BINARY_DIR); default CMAKE_CURRENT_BINARY_DIR.
#   GENERATE_MOCKS  also generate foo/bar_mock.rdmarpc.pb.h (plugin parameter
#                   generate_mock_code=true): a gMock class Mock<Service>Stub
#                   of each service's StubInterface, for unit tests. The header
#                   includes "gmock/gmock.h"; the target that includes it links
#                   gMock itself (GTest::gmock).
#
# The output directory becomes a PUBLIC include directory of <target>, which
# links rdmarpc_options_proto and through it protobuf::libprotobuf, PUBLIC
# (keyword form: use target_link_libraries(<target> PRIVATE|PUBLIC ...)
# elsewhere too).
# The runtime itself is linked by the user: rdmarpc::rdmarpc.
#
# Call it once per .proto and output directory: to share generated code among
# several targets (an app and its tests with GENERATE_MOCKS), generate into a
# library and link that library. A second call for the same .proto and
# output directory fails with a FATAL_ERROR that says so.
#
# Example (the whole of what a user's CMakeLists needs):
#   add_subdirectory(third_party/rdmarpc)
#   add_executable(app main.cc)
#   rdmarpc_generate(TARGET app PROTOS protos/app.proto)   # -> #include "app.rdmarpc.pb.h"
#   target_link_libraries(app PRIVATE rdmarpc::rdmarpc)
#
# Works from any project that did add_subdirectory(path/to/rdmarpc): paths
# come from this file's location and cached variables, not CMAKE_SOURCE_DIR.

function(rdmarpc_generate)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "GENERATE_MOCKS" "TARGET;PROTOC_OUT_DIR"
                        "PROTOS;IMPORT_DIRS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "rdmarpc_generate: unknown arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_TARGET)
    message(FATAL_ERROR "rdmarpc_generate: TARGET is required")
  endif()
  if(NOT TARGET "${ARG_TARGET}")
    message(FATAL_ERROR "rdmarpc_generate: '${ARG_TARGET}' is not a target; "
                        "call add_executable/add_library first")
  endif()
  if(NOT ARG_PROTOS)
    message(FATAL_ERROR "rdmarpc_generate(TARGET ${ARG_TARGET}): PROTOS is empty")
  endif()

  # Imported targets from find_package are visible only below the directory
  # that found them; when rdmarpc is a subproject the caller may not see
  # protobuf::protoc, so fall back to FindProtobuf's cached path.
  if(TARGET protobuf::protoc)
    set(protoc protobuf::protoc)
  elseif(Protobuf_PROTOC_EXECUTABLE)
    set(protoc "${Protobuf_PROTOC_EXECUTABLE}")
  else()
    message(FATAL_ERROR "rdmarpc_generate: protoc not found (find_package(Protobuf) failed?)")
  endif()

  set(idl_dir "${RDMARPC_IDL_DIR}")
  if(NOT idl_dir)
    # This file sits in compiler/; idl/ is its sibling.
    get_filename_component(idl_dir "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../idl" ABSOLUTE)
  endif()

  if(ARG_PROTOC_OUT_DIR)
    get_filename_component(out_dir "${ARG_PROTOC_OUT_DIR}" ABSOLUTE
                           BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  else()
    set(out_dir "${CMAKE_CURRENT_BINARY_DIR}")
  endif()

  # Import directories: IMPORT_DIRS, each .proto's own directory, idl/.
  set(import_dirs "")
  foreach(dir IN LISTS ARG_IMPORT_DIRS)
    get_filename_component(dir "${dir}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND import_dirs "${dir}")
  endforeach()
  set(abs_protos "")
  foreach(proto IN LISTS ARG_PROTOS)
    get_filename_component(abs "${proto}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    if(NOT EXISTS "${abs}")
      message(FATAL_ERROR "rdmarpc_generate(TARGET ${ARG_TARGET}): ${abs} does not exist")
    endif()
    list(APPEND abs_protos "${abs}")
    get_filename_component(dir "${abs}" DIRECTORY)
    list(APPEND import_dirs "${dir}")
  endforeach()
  list(APPEND import_dirs "${idl_dir}")
  list(REMOVE_DUPLICATES import_dirs)
  set(import_flags "")
  foreach(dir IN LISTS import_dirs)
    list(APPEND import_flags "-I${dir}")
  endforeach()

  set(rdmarpc_opt "")
  if(ARG_GENERATE_MOCKS)
    set(rdmarpc_opt "--rdmarpc_opt=generate_mock_code=true")
  endif()

  set(generated "")
  set(seen_rels "")
  set(seen_abs "")
  foreach(abs IN LISTS abs_protos)
    # protoc names outputs after the .proto's path below the first import
    # directory that contains it; work out the same path here.
    set(rel "")
    foreach(dir IN LISTS import_dirs)
      file(RELATIVE_PATH candidate "${dir}" "${abs}")
      if(NOT candidate MATCHES "^\\.\\./" AND NOT IS_ABSOLUTE "${candidate}")
        set(rel "${candidate}")
        break()
      endif()
    endforeach()
    # protobuf names a file by this path (its descriptor pool holds one file
    # per name), and the outputs are named after it: two .proto files that
    # map to one path cannot be generated side by side, nor linked together.
    list(FIND seen_rels "${rel}" clash)
    if(NOT clash EQUAL -1)
      list(GET seen_abs ${clash} other)
      message(FATAL_ERROR
        "rdmarpc_generate(TARGET ${ARG_TARGET}): ${other} and ${abs} are both "
        "'${rel}' below their import directories; protobuf names a file by that path, "
        "so one program cannot hold both. Add an IMPORT_DIRS entry that contains "
        "both (e.g. IMPORT_DIRS .) so that each gets its own path.")
    endif()
    list(APPEND seen_rels "${rel}")
    list(APPEND seen_abs "${abs}")
    # The name protoc gives the outputs: without .proto (or the legacy
    # .protodevel), as its C++ generator and protoc-gen-rdmarpc strip them.
    string(REGEX REPLACE "\\.proto(devel)?$" "" base "${rel}")
    # An earlier call that generated the same files for another target (in
    # the same output directory) would make CMake refuse the second rule
    # with a message about ".rule" files; say what to do instead.
    get_property(owner GLOBAL PROPERTY "RDMARPC_GENERATED_${out_dir}/${base}")
    if(owner AND NOT owner STREQUAL ARG_TARGET)
      message(FATAL_ERROR
        "rdmarpc_generate(TARGET ${ARG_TARGET}): ${rel} is already generated into "
        "${out_dir} for target ${owner}. Generate it once, into a library "
        "(add_library(x_proto STATIC) + rdmarpc_generate(TARGET x_proto ... "
        "[GENERATE_MOCKS])), and link that library from both targets, or give this "
        "call its own PROTOC_OUT_DIR.")
    endif()
    set_property(GLOBAL PROPERTY "RDMARPC_GENERATED_${out_dir}/${base}" "${ARG_TARGET}")
    set(outputs
      "${out_dir}/${base}.pb.h"
      "${out_dir}/${base}.pb.cc"
      "${out_dir}/${base}.rdmarpc.pb.h"
      "${out_dir}/${base}.rdmarpc.pb.cc")
    if(ARG_GENERATE_MOCKS)
      list(APPEND outputs "${out_dir}/${base}_mock.rdmarpc.pb.h")
    endif()
    # --dependency_out lets the build rerun protoc when an imported .proto
    # changes, not only the one named here.
    set(depfile "${out_dir}/${base}.rdmarpc.d")
    add_custom_command(
      OUTPUT ${outputs}
      COMMAND "${CMAKE_COMMAND}" -E make_directory "${out_dir}"
      COMMAND ${protoc}
              "--plugin=protoc-gen-rdmarpc=$<TARGET_FILE:protoc-gen-rdmarpc>"
              "--cpp_out=${out_dir}"
              "--rdmarpc_out=${out_dir}"
              ${rdmarpc_opt}
              "--dependency_out=${depfile}"
              ${import_flags}
              "${abs}"
      DEPENDS "${abs}" protoc-gen-rdmarpc ${protoc}
      DEPFILE "${depfile}"
      COMMENT "rdmarpc_generate: protoc ${rel}"
      VERBATIM)
    list(APPEND generated ${outputs})
  endforeach()

  target_sources(${ARG_TARGET} PRIVATE ${generated})
  # protobuf's .pb.cc are not ours: keep the target's warnings on them but
  # never fail the build on one (another compiler or protobuf version may
  # warn where GCC 12 with protobuf 3.21 does not). Our .rdmarpc.pb.cc stay
  # under the target's own flags.
  set(protobuf_sources ${generated})
  list(FILTER protobuf_sources INCLUDE REGEX "\\.pb\\.cc$")
  list(FILTER protobuf_sources EXCLUDE REGEX "\\.rdmarpc\\.pb\\.cc$")
  set_source_files_properties(${protobuf_sources} TARGET_DIRECTORY ${ARG_TARGET}
                              PROPERTIES COMPILE_OPTIONS "-Wno-error")
  target_include_directories(${ARG_TARGET} PUBLIC "${out_dir}")
  # rdmarpc_options_proto brings protobuf::libprotobuf (PUBLIC) with it, which
  # is all a caller that cannot see protobuf::libprotobuf gets.
  target_link_libraries(${ARG_TARGET} PUBLIC rdmarpc_options_proto)
  if(TARGET protobuf::libprotobuf)
    target_link_libraries(${ARG_TARGET} PUBLIC protobuf::libprotobuf)
  endif()
endfunction()
