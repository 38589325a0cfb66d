# Runs protoc with protoc-gen-rdmarpc on one .proto and passes only when
# protoc exits non-zero AND its stderr matches EXPECT (a regex). ctest's
# PASS_REGULAR_EXPRESSION alone would ignore the exit code.
#
#   cmake -DPROTOC=... -DPLUGIN=... -DIDL_DIR=... -DPROTO_DIR=... -DPROTO=x.proto
#         -DOUT_DIR=... [-DOPT=param] -DEXPECT=regex -P expect_protoc_failure.cmake

file(MAKE_DIRECTORY "${OUT_DIR}")
set(opt_args "")
if(DEFINED OPT)
  set(opt_args "--rdmarpc_opt=${OPT}")
endif()
execute_process(
  COMMAND "${PROTOC}" "--plugin=protoc-gen-rdmarpc=${PLUGIN}" "--rdmarpc_out=${OUT_DIR}"
          ${opt_args} "-I${PROTO_DIR}" "-I${IDL_DIR}" "${PROTO}"
  WORKING_DIRECTORY "${PROTO_DIR}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
message(STATUS "protoc exit status: ${rc}\nstderr: ${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "protoc succeeded on ${PROTO}; expected it to fail")
endif()
if(NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "protoc's stderr does not match '${EXPECT}'")
endif()
