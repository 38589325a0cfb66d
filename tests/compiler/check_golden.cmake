# Runs protoc with protoc-gen-rdmarpc on the golden .proto files, once
# without parameters and once with generate_mock_code=true, and compares the
# output byte for byte with the checked-in golden files NAME.rdmarpc.pb.h,
# NAME.rdmarpc.pb.cc and NAME_mock.rdmarpc.pb.h (MODE=check, the ctest), or
# copies the output over them (MODE=update, the rdmarpc_update_golden target
# / update_golden.sh).
#
#   cmake -DPROTOC=... -DPLUGIN=... -DSOURCE_DIR=tests/compiler -DIDL_DIR=idl
#         -DOUT_DIR=... -DMODE=check|update -P check_golden.cmake

foreach(var PROTOC PLUGIN SOURCE_DIR IDL_DIR OUT_DIR MODE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_golden.cmake: -D${var}=... is required")
  endif()
endforeach()

# Paths relative to SOURCE_DIR, as protoc sees them (-I${SOURCE_DIR}).
set(protos golden/golden_test.proto golden/no_package.proto golden/service_names.proto
           golden/streaming.proto)

# Runs protoc with the plugin, parameter string `opt` (may be empty), on
# all the protos into `out_dir`.
function(run_plugin out_dir opt)
  set(opt_args "")
  if(opt)
    set(opt_args "--rdmarpc_opt=${opt}")
  endif()
  file(REMOVE_RECURSE "${out_dir}")
  file(MAKE_DIRECTORY "${out_dir}")
  execute_process(
    COMMAND "${PROTOC}" "--plugin=protoc-gen-rdmarpc=${PLUGIN}" "--rdmarpc_out=${out_dir}"
            ${opt_args} "-I${SOURCE_DIR}" "-I${IDL_DIR}" ${protos}
    WORKING_DIRECTORY "${SOURCE_DIR}"
    RESULT_VARIABLE rc
    ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "protoc ${opt_args} failed (${rc}):\n${err}")
  endif()
endfunction()

# Without parameters: NAME.rdmarpc.pb.h/.cc and nothing else. With
# generate_mock_code=true: the same two files, byte for byte, and
# NAME_mock.rdmarpc.pb.h.
set(plain_dir "${OUT_DIR}/plain")
set(mock_dir "${OUT_DIR}/generate_mock_code")
run_plugin("${plain_dir}" "")
run_plugin("${mock_dir}" "generate_mock_code=true")

set(mismatches "")
# Compares (or, with MODE=update, copies) `actual` with the golden file
# SOURCE_DIR/`name`.
function(check_file name actual)
  set(golden "${SOURCE_DIR}/${name}")
  if(MODE STREQUAL "update")
    execute_process(COMMAND "${CMAKE_COMMAND}" -E copy "${actual}" "${golden}")
    message(STATUS "updated ${golden}")
    return()
  endif()
  execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${golden}" "${actual}"
                  RESULT_VARIABLE different)
  if(different)
    # Straight to stdout: message() would re-indent the diff.
    execute_process(COMMAND "${CMAKE_COMMAND}" -E echo "${actual} differs from the golden file:")
    execute_process(COMMAND diff -u "${golden}" "${actual}")
    set(mismatches "${mismatches} ${actual}" PARENT_SCOPE)
  endif()
endfunction()

foreach(proto IN LISTS protos)
  string(REGEX REPLACE "\\.proto$" "" base "${proto}")
  foreach(ext .rdmarpc.pb.h .rdmarpc.pb.cc)
    check_file("${base}${ext}" "${plain_dir}/${base}${ext}")
    if(NOT MODE STREQUAL "update")
      check_file("${base}${ext}" "${mock_dir}/${base}${ext}")
    endif()
  endforeach()
  check_file("${base}_mock.rdmarpc.pb.h" "${mock_dir}/${base}_mock.rdmarpc.pb.h")
  if(EXISTS "${plain_dir}/${base}_mock.rdmarpc.pb.h")
    string(APPEND mismatches " ${plain_dir}/${base}_mock.rdmarpc.pb.h (written without generate_mock_code=true)")
  endif()
endforeach()

if(mismatches)
  message(FATAL_ERROR
    "Generated code differs from the golden files (diff above):${mismatches}\n"
    "If the change is intended, regenerate the golden files with\n"
    "  tests/compiler/update_golden.sh <build-dir>\n"
    "(or: cmake --build <build-dir> --target rdmarpc_update_golden)\n"
    "and commit them with the change.")
endif()
