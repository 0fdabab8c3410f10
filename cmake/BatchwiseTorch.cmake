# The one place that finds LibTorch. It defines:
#   batchwise::torch      an INTERFACE target carrying Torch's libraries, includes and flags
#   BATCHWISE_WITH_CUDA   ON when the Torch found was built with CUDA (its CUDA paths are compiled)
#
# Point the build at a Torch with -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')".
# Without it, we ask the python3 on PATH (or BATCHWISE_PYTHON) where its torch lives.
if(TARGET batchwise::torch)
  return()
endif()

find_package(Torch QUIET)
if(NOT Torch_FOUND)
  find_program(BATCHWISE_PYTHON NAMES python3 python)
  if(BATCHWISE_PYTHON)
    execute_process(COMMAND ${BATCHWISE_PYTHON} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE _bw_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_bw_torch_prefix)
      list(APPEND CMAKE_PREFIX_PATH "${_bw_torch_prefix}")
    endif()
  endif()
  find_package(Torch)
endif()
if(NOT Torch_FOUND)
  set(_bw_no_torch "batchwise needs LibTorch. Install PyPI's torch into a virtual environment and pass "
    "-DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'), "
    "or run scripts/bootstrap.sh, which does both.")
  if(BATCHWISE_TORCH_FROM_PACKAGE)  # find_package(batchwise): fail the find, softly under QUIET
    string(CONCAT batchwise_NOT_FOUND_MESSAGE ${_bw_no_torch})
    set(batchwise_FOUND FALSE)
    return()
  endif()
  message(FATAL_ERROR ${_bw_no_torch})
endif()

add_library(batchwise_torch INTERFACE)
add_library(batchwise::torch ALIAS batchwise_torch)
target_link_libraries(batchwise_torch INTERFACE ${TORCH_LIBRARIES})
if(TORCH_CXX_FLAGS)
  separate_arguments(_bw_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(batchwise_torch INTERFACE ${_bw_torch_flags})
endif()

set(BATCHWISE_WITH_CUDA OFF)
if(TARGET torch_cuda OR TORCH_LIBRARIES MATCHES "torch_cuda|c10_cuda")
  set(BATCHWISE_WITH_CUDA ON)
endif()

# PyPI's wheel keeps its CUDA, cuDNN and NCCL libraries in site-packages/nvidia/*/lib and finds them
# at run time through its own RUNPATH; the linker needs to be told, or it resolves libtorch_cuda's
# NCCL against an older system copy.
get_filename_component(_bw_torch_root "${TORCH_INSTALL_PREFIX}" ABSOLUTE)
file(GLOB _bw_nvidia_libs LIST_DIRECTORIES true "${_bw_torch_root}/../nvidia/*/lib")
foreach(_dir ${_bw_nvidia_libs})
  target_link_options(batchwise_torch INTERFACE "LINKER:-rpath-link,${_dir}")
endforeach()
set(BATCHWISE_TORCH_VERSION "${Torch_VERSION}")
message(STATUS "batchwise: Torch ${Torch_VERSION} at ${_bw_torch_root} (CUDA paths compiled: ${BATCHWISE_WITH_CUDA})")
