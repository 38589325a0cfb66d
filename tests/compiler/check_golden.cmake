# Runs protoc with protoc-gen-rdmarpc on the golden .proto files and compares
# the output byte for byte with the checked-in golden files
# (MODE=check, the ctest), or copies the output over them (MODE=update, the
# rdmarpc_update_golden target / update_golden.sh).
#
#   cmake -DPROTOC=... -DPLUGIN=... -DSOURCE_DIR=tests/compiler -DIDL_DIR=idl
#         -DOUT_DIR=... -DMODE=check|update -P check_golden.cmake

foreach(var PROTOC PLUGIN SOURCE_DIR IDL_DIR OUT_DIR MODE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_golden.cmake: -D${var}=... is required")
  endif()
endforeach()

# Paths relative to SOURCE_DIR, as protoc sees them (-I${SOURCE_DIR}).
set(protos golden/golden_test.proto golden/no_package.proto golden/service_names.proto)

file(REMOVE_RECURSE "${OUT_DIR}")
file(MAKE_DIRECTORY "${OUT_DIR}")
execute_process(
  COMMAND "${PROTOC}" "--plugin=protoc-gen-rdmarpc=${PLUGIN}" "--rdmarpc_out=${OUT_DIR}"
          "-I${SOURCE_DIR}" "-I${IDL_DIR}" ${protos}
  WORKING_DIRECTORY "${SOURCE_DIR}"
  RESULT_VARIABLE rc
  ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "protoc failed (${rc}):\n${err}")
endif()

set(mismatches "")
foreach(proto IN LISTS protos)
  string(REGEX REPLACE "\\.proto$" "" base "${proto}")
  foreach(ext .rdmarpc.pb.h .rdmarpc.pb.cc)
    set(golden "${SOURCE_DIR}/${base}${ext}")
    set(actual "${OUT_DIR}/${base}${ext}")
    if(MODE STREQUAL "update")
      execute_process(COMMAND "${CMAKE_COMMAND}" -E copy "${actual}" "${golden}")
      message(STATUS "updated ${golden}")
      continue()
    endif()
    execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${golden}" "${actual}"
                    RESULT_VARIABLE different)
    if(different)
      # Straight to stdout: message() would re-indent the diff.
      execute_process(COMMAND "${CMAKE_COMMAND}" -E echo "${base}${ext} differs from the golden file:")
      execute_process(COMMAND diff -u "${golden}" "${actual}")
      string(APPEND mismatches " ${base}${ext}")
    endif()
  endforeach()
endforeach()

if(mismatches)
  message(FATAL_ERROR
    "Generated code differs from the golden files (diff above):${mismatches}\n"
    "If the change is intended, regenerate the golden files with\n"
    "  tests/compiler/update_golden.sh <build-dir>\n"
    "(or: cmake --build <build-dir> --target rdmarpc_update_golden)\n"
    "and commit them with the change.")
endif()
