# tandem_options: the warning and sanitizer flags every tandem target links.
add_library(tandem_options INTERFACE)
target_compile_options(tandem_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual
    # Options structs with designated initialisers (STYLE.md) leave defaulted members
    # out on purpose; GCC 12 warns about that under -Wextra.
    -Wno-missing-field-initializers>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${TANDEM_WERROR}>>:-Werror>
  # GCC 12 reports -Wrestrict false positives inside libstdc++'s string concatenation
  # at -O2/-O3 (GCC bug 105651); the warning has no true positives in our code to lose.
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>
  # nvcc: its own diagnostics, and the host compiler's warnings on the host side of .cu files
  # (no -Wpedantic/-Wold-style-cast/-Wconversion: nvcc's generated stubs break them).
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wshadow,-Wno-missing-field-initializers>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${TANDEM_WERROR}>>:-Werror=all-warnings -Xcompiler=-Werror>)
if(TANDEM_SANITIZE)
  target_compile_options(tandem_options INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(tandem_options INTERFACE -fsanitize=address,undefined)
endif()

# tandem_add_library(name folder sources... [DEPS targets...]): one library per folder.
function(tandem_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${TANDEM_ROOT})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE tandem_options)
endfunction()
