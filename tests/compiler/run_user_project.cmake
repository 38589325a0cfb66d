# Configures and builds tests/compiler/user_project -- a project that pulls in
# rdmarpc with add_subdirectory and calls rdmarpc_generate -- and runs its
# program when the runtime exists.
#
#   cmake -DRDMARPC_SOURCE_DIR=... -DUSER_PROJECT_DIR=... -DBUILD_DIR=...
#         -P run_user_project.cmake

execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${USER_PROJECT_DIR}" -B "${BUILD_DIR}"
          "-DRDMARPC_SOURCE_DIR=${RDMARPC_SOURCE_DIR}"
          -DRDMARPC_BUILD_TESTS=OFF -DRDMARPC_BUILD_EXAMPLES=OFF -DRDMARPC_BUILD_BENCH=OFF
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the user project failed (${rc})")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" -j2 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the user project failed (${rc})")
endif()
if(EXISTS "${BUILD_DIR}/app")
  execute_process(COMMAND "${BUILD_DIR}/app" RESULT_VARIABLE rc TIMEOUT 60)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the user project's program failed (${rc})")
  endif()
else()
  message(STATUS "no runtime library yet: checked that the generated code compiles")
endif()
