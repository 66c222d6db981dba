# Compiler flags beyond the language standard are checked before use: a flag one compiler or
# version refuses must cost that compiler a little speed, never the build. ringgrad is tested with
# GCC 12 and clang 14 / 16 (README.md, "Compilers"); GCC 13 dropped a --param that GCC 12 knew, and
# a build that passed it unchecked failed there.
include(CheckCXXCompilerFlag)

# ringgrad_supported_cxx_flags(OUT flag...): the flags of the list this C++ compiler accepts, in
# order. Each answer is cached (RINGGRAD_CXX_FLAG_<flag>), so a reconfigure does not ask again.
function(ringgrad_supported_cxx_flags out)
  set(kept "")
  foreach(flag IN LISTS ARGN)
    string(MAKE_C_IDENTIFIER "RINGGRAD_CXX_FLAG_${flag}" var)
    check_cxx_compiler_flag("${flag}" ${var})
    if(${var})
      list(APPEND kept "${flag}")
    endif()
  endforeach()
  set(${out} "${kept}" PARENT_SCOPE)
endfunction()
