# Runs protoc with protoc-gen-rdmarpc on one .proto and passes when protoc
# succeeds and the generated file OUTPUT (relative to OUT_DIR) matches EXPECT.
#
#   cmake -DPROTOC=... -DPLUGIN=... -DIDL_DIR=... -DPROTO_DIR=... -DPROTO=x.proto
#         -DOUT_DIR=... [-DOPT=param] -DOUTPUT=x.rdmarpc.pb.cc -DEXPECT=regex
#         -P expect_protoc_output.cmake

file(REMOVE_RECURSE "${OUT_DIR}")
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
  ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "protoc failed (${rc}):\n${err}")
endif()
file(READ "${OUT_DIR}/${OUTPUT}" text)
if(NOT text MATCHES "${EXPECT}")
  message(FATAL_ERROR "${OUTPUT} does not match '${EXPECT}':\n${text}")
endif()
