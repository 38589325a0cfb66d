# Configures PROJECT_DIR into BUILD_DIR and passes when that fails with
# output matching EXPECT (a regular expression).
#
#   cmake -DRDMARPC_SOURCE_DIR=... -DPROJECT_DIR=... -DBUILD_DIR=... -DEXPECT=...
#         -P expect_configure_failure.cmake

file(REMOVE_RECURSE "${BUILD_DIR}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${PROJECT_DIR}" -B "${BUILD_DIR}"
          "-DRDMARPC_SOURCE_DIR=${RDMARPC_SOURCE_DIR}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "configuring ${PROJECT_DIR} succeeded; expected it to fail")
endif()
string(REGEX REPLACE "[ \t\r\n]+" " " all "${out} ${err}")
if(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "configuring failed without '${EXPECT}':\n${out}\n${err}")
endif()
