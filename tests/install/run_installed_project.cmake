# Installs rdmarpc from a build tree into a fresh prefix, checks the installed
# package, then configures, builds and runs tests/install/user_project against
# it through find_package(rdmarpc).
#
#   cmake -DRDMARPC_SOURCE_DIR=... -DRDMARPC_BUILD_DIR=... -DPREFIX=... -DUSER_PROJECT_DIR=...
#         -DUSER_BUILD_DIR=... -DCONFIG=<build type> -DLIBDIR=<lib dir>
#         -DCXX_COMPILER=... [-DSANITIZE_FLAGS=<flags>]
#         -P run_installed_project.cmake
#
# SANITIZE_FLAGS: the -fsanitize flags the rdmarpc build used; the libraries
# are instrumented, so the user program must be compiled and linked with the
# same flags.

foreach(var RDMARPC_SOURCE_DIR RDMARPC_BUILD_DIR PREFIX USER_PROJECT_DIR USER_BUILD_DIR LIBDIR CXX_COMPILER)
  if(NOT ${var})
    message(FATAL_ERROR "run_installed_project.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}): ${ARGN}")
  endif()
endfunction()

# A fresh prefix and build every time: a stale file from an earlier install
# must not make a broken install pass.
file(REMOVE_RECURSE "${PREFIX}" "${USER_BUILD_DIR}")

set(config_args "")
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
run("cmake --install" "${CMAKE_COMMAND}" --install "${RDMARPC_BUILD_DIR}" --prefix "${PREFIX}"
    ${config_args})

# The installed layout the README promises.
set(expected
  "include/rdmarpc/rdmarpc.h"
  "include/rdmarpc/channel.h"
  "include/rdmarpc/server.h"
  "include/rdmarpc/impl/unary_call.h"
  "include/rdmarpc/options.proto"
  "include/rdmarpc/options.pb.h"
  "bin/protoc-gen-rdmarpc"
  "${LIBDIR}/librdmarpc.a"
  "${LIBDIR}/libsoftrdma.a"
  "${LIBDIR}/librdmarpc_options_proto.a"
  "${LIBDIR}/cmake/rdmarpc/rdmarpcConfig.cmake"
  "${LIBDIR}/cmake/rdmarpc/rdmarpcConfigVersion.cmake"
  "${LIBDIR}/cmake/rdmarpc/rdmarpcTargets.cmake"
  "${LIBDIR}/cmake/rdmarpc/rdmarpc_generate.cmake")
foreach(file IN LISTS expected)
  if(NOT EXISTS "${PREFIX}/${file}")
    message(FATAL_ERROR "not installed: ${PREFIX}/${file}")
  endif()
endforeach()

# The package must not point back into the source or build tree: the user
# project below would still build while they exist, so check explicitly.
file(GLOB cmake_files "${PREFIX}/${LIBDIR}/cmake/rdmarpc/*.cmake")
foreach(file IN LISTS cmake_files)
  file(READ "${file}" text)
  foreach(tree "${RDMARPC_SOURCE_DIR}" "${RDMARPC_BUILD_DIR}")
    string(FIND "${text}" "${tree}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${file} refers to ${tree}; the installed package must be relocatable")
    endif()
  endforeach()
endforeach()

set(user_args
  "-DCMAKE_PREFIX_PATH=${PREFIX}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
if(CONFIG)
  list(APPEND user_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
endif()
if(SANITIZE_FLAGS)
  list(APPEND user_args
    "-DCMAKE_CXX_FLAGS=${SANITIZE_FLAGS}"
    "-DCMAKE_EXE_LINKER_FLAGS=${SANITIZE_FLAGS}")
endif()
run("configuring the user project" "${CMAKE_COMMAND}" -S "${USER_PROJECT_DIR}"
    -B "${USER_BUILD_DIR}" ${user_args})
run("building the user project" "${CMAKE_COMMAND}" --build "${USER_BUILD_DIR}" -j2
    ${config_args})
# The server and client share one process; 60 s is far beyond one call.
execute_process(COMMAND "${USER_BUILD_DIR}/app" RESULT_VARIABLE rc TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the user project's program failed (${rc})")
endif()
