# The public headers: ringgrad.h and every project header it reaches through #include "...".
# Only these are installed, so a header that no public one includes (the communication thread,
# the backends' internals, core/native/*, the CPU and CUDA kernels) stays an implementation detail
# that can change freely. A header added to the public API is installed once a public header
# includes it; nothing else needs listing.
#
#   ringgrad_public_headers(<out-var> <root> <first-header> [EXCLUDE_DIRS dir...])
#
# EXCLUDE_DIRS: top-level folders whose headers are left out (dist/ when built without MPI, where
# ringgrad.h includes them only under #ifdef RINGGRAD_WITH_MPI).
function(ringgrad_public_headers out root first)
  cmake_parse_arguments(ARG "" "" "EXCLUDE_DIRS" ${ARGN})
  set(found "")
  set(pending "${first}")
  while(pending)
    list(POP_FRONT pending header)
    if(header IN_LIST found)
      continue()
    endif()
    list(APPEND found "${header}")
    file(STRINGS "${root}/${header}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" included "${line}")
      string(REGEX MATCH "^[^/]+" top "${included}")
      if(EXISTS "${root}/${included}" AND NOT top IN_LIST ARG_EXCLUDE_DIRS)
        list(APPEND pending "${included}")
      endif()
    endforeach()
  endwhile()
  # Configure again when one of them changes: its includes decide what is installed.
  list(TRANSFORM found PREPEND "${root}/" OUTPUT_VARIABLE paths)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${paths})
  set(${out} "${found}" PARENT_SCOPE)
endfunction()
