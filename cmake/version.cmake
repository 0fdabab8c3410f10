# Run at build time (cmake -P): writes version.h with the current commit, and touches it only when
# the text changes, so a rebuild after a new commit restamps reports without rebuilding the rest.
if(NOT "$ENV{BATCHWISE_BUILD_COMMIT}" STREQUAL "")
  # A copy of the tree without .git, or with an older one (scripts/gpu-check.sh on a lent machine,
  # from the pack's commit.txt), says its commit here.
  set(BATCHWISE_BUILD_COMMIT "$ENV{BATCHWISE_BUILD_COMMIT}")
else()
  execute_process(COMMAND git rev-parse --short=7 HEAD WORKING_DIRECTORY "${SRC}"
                  OUTPUT_VARIABLE BATCHWISE_BUILD_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT BATCHWISE_BUILD_COMMIT)
    set(BATCHWISE_BUILD_COMMIT "unknown")
  else()
    execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY "${SRC}"
                    OUTPUT_VARIABLE _dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_dirty)
      string(APPEND BATCHWISE_BUILD_COMMIT "-dirty")
    endif()
  endif()
endif()
configure_file("${IN}" "${OUT}" @ONLY)
