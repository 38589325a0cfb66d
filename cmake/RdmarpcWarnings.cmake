# Our own code builds with -Wall -Wextra -Werror; generated protobuf code and
# third-party headers are not ours and are included as SYSTEM where possible.
function(rdmarpc_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
endfunction()
