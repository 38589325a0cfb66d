# RdmarpcInstall.cmake: `cmake --install` rules and the CMake package config,
# so that another project can write
#
#   find_package(rdmarpc REQUIRED)
#   add_executable(app main.cc)
#   rdmarpc_generate(TARGET app PROTOS app.proto)
#   target_link_libraries(app PRIVATE rdmarpc::rdmarpc)
#
# Installed layout (P = the install prefix):
#   P/include/rdmarpc/*.h, impl/*.h     the public API (runtime/include/rdmarpc)
#   P/include/rdmarpc/options.proto     for `import "rdmarpc/options.proto";`
#   P/include/rdmarpc/options.pb.h      its generated C++ (rdmarpc::options_proto)
#   P/lib/lib*.a                        rdmarpc, softrdma, rdmarpc_options_proto and
#                                       any other library of ours rdmarpc links
#   P/bin/protoc-gen-rdmarpc            the protoc plugin
#   P/lib/cmake/rdmarpc/                rdmarpcConfig.cmake, rdmarpcConfigVersion.cmake,
#                                       rdmarpcTargets*.cmake, rdmarpc_generate.cmake
#
# Included at the end of the top-level CMakeLists.txt, after every target
# exists: the targets are defined in other directories (install(TARGETS) may
# name them since CMake 3.13) and this file only adds install-time properties.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# As a subproject (add_subdirectory) rdmarpc adds nothing to the user's
# `cmake --install` unless asked to.
option(RDMARPC_INSTALL "Add rdmarpc's install rules and package config" ${PROJECT_IS_TOP_LEVEL})
if(NOT RDMARPC_INSTALL)
  return()
endif()

set(RDMARPC_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/rdmarpc" CACHE STRING
    "Where rdmarpcConfig.cmake is installed, relative to the install prefix")

# Before the runtime exists (early in a fresh tree) there is nothing to
# install that a user could link.
foreach(_rdmarpc_required rdmarpc softrdma rdmarpc_options_proto protoc-gen-rdmarpc)
  if(NOT TARGET ${_rdmarpc_required})
    message(STATUS "RdmarpcInstall: no install rules (target ${_rdmarpc_required} missing)")
    return()
  endif()
endforeach()

# The libraries of ours that rdmarpc links, directly or through each other.
# They are static, so a user's link needs every one of them, PRIVATE or not;
# collecting them here keeps the package complete when the runtime is split
# into more libraries later.
function(_rdmarpc_collect_our_libraries out)
  set(seen "")
  set(todo ${ARGN})
  while(todo)
    list(POP_FRONT todo name)
    # LINK_LIBRARIES may hold generator expressions such as $<LINK_ONLY:x>;
    # unwrap the simple one-argument forms, skip the rest (not our targets).
    string(REGEX REPLACE "^\\$<LINK_ONLY:([^$<>]+)>$" "\\1" name "${name}")
    if(name MATCHES "[$<>]" OR NOT TARGET "${name}")
      continue()
    endif()
    get_target_property(aliased "${name}" ALIASED_TARGET)
    if(aliased)
      set(name "${aliased}")
    endif()
    get_target_property(imported "${name}" IMPORTED)
    if(imported OR name IN_LIST seen)
      continue()
    endif()
    list(APPEND seen "${name}")
    foreach(prop LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(deps "${name}" ${prop})
      if(deps)
        list(APPEND todo ${deps})
      endif()
    endforeach()
  endwhile()
  set(${out} "${seen}" PARENT_SCOPE)
endfunction()

# Include directories inside the source or build tree mean nothing once
# installed (and install(EXPORT) refuses them): keep them for the build only.
# The installed targets get P/include instead (INCLUDES DESTINATION below).
# With ALL, every plain directory becomes build-only: for a library whose
# headers are not installed (softrdma), whose system directories (rdma-core's,
# libnl3's) consumers get from PkgConfig::IBVERBS anyway, and would otherwise
# pin this machine's paths into the package.
function(_rdmarpc_build_only_include_dirs target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "ALL" "" "")
  foreach(prop INTERFACE_INCLUDE_DIRECTORIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES)
    get_target_property(dirs ${target} ${prop})
    if(NOT dirs)
      continue()
    endif()
    set(fixed "")
    foreach(dir IN LISTS dirs)
      string(FIND "${dir}/" "${PROJECT_SOURCE_DIR}/" in_source)
      string(FIND "${dir}/" "${PROJECT_BINARY_DIR}/" in_build)
      if(NOT dir MATCHES "^\\$<" AND
         (ARG_ALL OR in_source EQUAL 0 OR in_build EQUAL 0))
        set(dir "$<BUILD_INTERFACE:${dir}>")
      endif()
      list(APPEND fixed "${dir}")
    endforeach()
    set_property(TARGET ${target} PROPERTY ${prop} "${fixed}")
  endforeach()
endfunction()

_rdmarpc_collect_our_libraries(_rdmarpc_install_libs rdmarpc rdmarpc_options_proto)
foreach(_rdmarpc_lib IN LISTS _rdmarpc_install_libs)
  # Only these two have their headers installed (below).
  if(_rdmarpc_lib STREQUAL "rdmarpc" OR _rdmarpc_lib STREQUAL "rdmarpc_options_proto")
    _rdmarpc_build_only_include_dirs(${_rdmarpc_lib})
  else()
    _rdmarpc_build_only_include_dirs(${_rdmarpc_lib} ALL)
  endif()
endforeach()

# Exported names: rdmarpc::rdmarpc, rdmarpc::softrdma, rdmarpc::options_proto
# (the same as the in-tree alias), rdmarpc::protoc-gen-rdmarpc.
set_target_properties(rdmarpc_options_proto PROPERTIES EXPORT_NAME options_proto)

install(TARGETS ${_rdmarpc_install_libs}
  EXPORT rdmarpcTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(TARGETS protoc-gen-rdmarpc
  EXPORT rdmarpcTargets
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")

install(DIRECTORY "${PROJECT_SOURCE_DIR}/runtime/include/rdmarpc"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
  FILES_MATCHING PATTERN "*.h")

# rdmarpc's own .proto files go beside the headers, as protobuf installs
# google/protobuf/*.proto, so `-I P/include` serves both #include and import.
install(DIRECTORY "${RDMARPC_IDL_DIR}/rdmarpc"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
  FILES_MATCHING PATTERN "*.proto")
# Their generated headers, found in the library's own sources so that this
# file does not depend on where idl/CMakeLists.txt generates them.
get_target_property(_rdmarpc_idl_sources rdmarpc_options_proto SOURCES)
list(FILTER _rdmarpc_idl_sources INCLUDE REGEX "/rdmarpc/[^/]+\\.pb\\.h$")
install(FILES ${_rdmarpc_idl_sources} DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/rdmarpc")

install(EXPORT rdmarpcTargets
  NAMESPACE rdmarpc::
  DESTINATION "${RDMARPC_INSTALL_CMAKEDIR}")

# The package config, written from here so that the install rules stay in
# one file. @PACKAGE_INIT@ and @PACKAGE_..@ are filled in by
# configure_package_config_file, which makes the paths relative to the
# config file's own location (the installed tree can be moved).
file(WRITE "${PROJECT_BINARY_DIR}/rdmarpcConfig.cmake.in" [=[
# rdmarpcConfig.cmake: the rdmarpc package, for find_package(rdmarpc).
#
#   find_package(rdmarpc REQUIRED)
#   add_executable(app main.cc)
#   rdmarpc_generate(TARGET app PROTOS app.proto)   # -> #include "app.rdmarpc.pb.h"
#   target_link_libraries(app PRIVATE rdmarpc::rdmarpc)
#
# Imported targets: rdmarpc::rdmarpc (the runtime), rdmarpc::options_proto
# (rdmarpc/options.proto compiled), rdmarpc::softrdma (the software RDMA
# device the runtime links), rdmarpc::protoc-gen-rdmarpc (the protoc plugin).
# Also defines rdmarpc_generate() (see rdmarpc_generate.cmake beside this
# file) and RDMARPC_IDL_DIR, the directory holding rdmarpc/options.proto.

@PACKAGE_INIT@

# rdmarpc/options.proto lies in the installed include directory. Set before
# find_dependency: the config files of our dependencies run the same
# PACKAGE_INIT and overwrite PACKAGE_PREFIX_DIR.
set_and_check(RDMARPC_IDL_DIR "@PACKAGE_CMAKE_INSTALL_INCLUDEDIR@")

# ALIASes of non-global imported targets (below) need CMake 3.18.
if(CMAKE_VERSION VERSION_LESS 3.18)
  set(rdmarpc_FOUND FALSE)
  set(rdmarpc_NOT_FOUND_MESSAGE "rdmarpc needs CMake 3.18 or newer, this is ${CMAKE_VERSION}")
  return()
endif()

# Every dependency the static libraries carry, found the way rdmarpc's own
# build found them (cmake/RdmarpcDeps.cmake), so the target names in
# rdmarpcTargets.cmake resolve.
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(Protobuf)
find_dependency(absl CONFIG)
find_dependency(gflags CONFIG)
find_dependency(glog CONFIG)
find_dependency(PkgConfig)
foreach(_rdmarpc_pc IN ITEMS "IBVERBS;libibverbs" "RDMACM;librdmacm" "HTTPLIB;cpp-httplib" "CARES;libcares")
  list(GET _rdmarpc_pc 0 _rdmarpc_pc_prefix)
  list(GET _rdmarpc_pc 1 _rdmarpc_pc_module)
  if(NOT TARGET PkgConfig::${_rdmarpc_pc_prefix})
    pkg_check_modules(${_rdmarpc_pc_prefix} QUIET IMPORTED_TARGET ${_rdmarpc_pc_module})
    if(NOT ${_rdmarpc_pc_prefix}_FOUND)
      set(rdmarpc_FOUND FALSE)
      set(rdmarpc_NOT_FOUND_MESSAGE
          "rdmarpc needs ${_rdmarpc_pc_module} (pkg-config module not found)")
      return()
    endif()
  endif()
endforeach()

include("${CMAKE_CURRENT_LIST_DIR}/rdmarpcTargets.cmake")

# rdmarpc_generate() names the plugin and the options library by their
# in-tree target names; give the imported targets those names as well.
if(NOT TARGET protoc-gen-rdmarpc)
  add_executable(protoc-gen-rdmarpc ALIAS rdmarpc::protoc-gen-rdmarpc)
endif()
if(NOT TARGET rdmarpc_options_proto)
  add_library(rdmarpc_options_proto ALIAS rdmarpc::options_proto)
endif()
include("${CMAKE_CURRENT_LIST_DIR}/rdmarpc_generate.cmake")

check_required_components(rdmarpc)
]=])
configure_package_config_file(
  "${PROJECT_BINARY_DIR}/rdmarpcConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/rdmarpcConfig.cmake"
  INSTALL_DESTINATION "${RDMARPC_INSTALL_CMAKEDIR}"
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
# 0.x: a minor release may break the API, so only the same minor matches.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/rdmarpcConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMinorVersion)
install(FILES
  "${PROJECT_BINARY_DIR}/rdmarpcConfig.cmake"
  "${PROJECT_BINARY_DIR}/rdmarpcConfigVersion.cmake"
  "${PROJECT_SOURCE_DIR}/compiler/rdmarpc_generate.cmake"
  DESTINATION "${RDMARPC_INSTALL_CMAKEDIR}")
