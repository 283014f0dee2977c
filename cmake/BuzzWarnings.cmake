# Project warning set, applied per target with buzz_warnings(<target>).
set(BUZZ_WARNING_FLAGS
    -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2
    -Wno-unused-parameter -Wvla -Wpointer-arith)
if(BUZZ_WERROR)
  list(APPEND BUZZ_WARNING_FLAGS -Werror)
endif()

function(buzz_warnings target)
  target_compile_options(${target} PRIVATE ${BUZZ_WARNING_FLAGS})
  target_compile_definitions(${target} PRIVATE _GNU_SOURCE)
endfunction()
