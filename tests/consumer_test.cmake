# Installs batchwise from the build tree into a scratch prefix, builds examples/consumer against the
# installed package (find_package(batchwise)), and runs it: the package is known to work.
# Run by CTest with -DBUILD=<build dir> -DSOURCE=<source dir> -DWORK=<scratch dir> -DTORCH_PREFIX=<...>
# -DGENERATOR=<the build's CMake generator> -DCXX=<the build's compiler> [-DSANITIZE=<its sanitizers>]
# (a sanitized library links only into a program built with the same sanitizers: scripts/sanitize.sh).
file(REMOVE_RECURSE "${WORK}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD}" --prefix "${WORK}/prefix" RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
# fmt is private to the library (header-only, no dependency of the package): no installed header may need it
file(GLOB_RECURSE headers "${WORK}/prefix/include/batchwise/*.h")
foreach(header IN LISTS headers)
  file(STRINGS "${header}" fmt_includes REGEX "#include [<\"]fmt/")
  if(fmt_includes)
    message(FATAL_ERROR "${header} is installed and includes fmt, which the package does not provide: ${fmt_includes}")
  endif()
endforeach()
set(launcher "")
find_program(CCACHE ccache)
if(CCACHE)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE})
endif()
set(compiler "")
if(CXX)
  set(compiler -DCMAKE_CXX_COMPILER=${CXX})
endif()
set(sanitize "")
if(SANITIZE)
  set(sanitize "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE}" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE}/examples/consumer" -B "${WORK}/build" -G "${GENERATOR}"
                        "-DCMAKE_PREFIX_PATH=${WORK}/prefix;${TORCH_PREFIX}" -DCMAKE_BUILD_TYPE=Release ${launcher}
                        ${compiler} ${sanitize}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "configuring the consumer against the installed package failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK}/build" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "building the consumer failed:\n${out}\n${err}")
endif()
execute_process(COMMAND "${WORK}/build/consumer" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(rc OR NOT out MATCHES "consumer: batch [0-9]+ fits" OR NOT out MATCHES "consumer: tune recommends batch [0-9]+")
  message(FATAL_ERROR "the consumer did not report a fitted batch and tune's recommendation (exit ${rc}):\n${out}\n${err}")
endif()
