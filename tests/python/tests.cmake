# The Python package (python/) and its framework callbacks, run with the virtual environment's
# Python (BATCHWISE_TEST_PYTHON, set in tests/CMakeLists.txt) against the batchwise binary. Each
# framework test skips (exit 77, with the reason) where its framework is not installed: Lightning,
# Transformers and Keras are test-only packages (scripts/bootstrap.sh test installs them).
#   ctest -R '^Python\.'            all of them
# Included from tests/CMakeLists.txt after BATCHWISE_TEST_PYTHON is set.
if(NOT BATCHWISE_TEST_PYTHON)
  message(FATAL_ERROR "tests/python/tests.cmake: include it after BATCHWISE_TEST_PYTHON is set")
endif()
set(_bw_py_tests ${CMAKE_CURRENT_LIST_DIR})

# The package without frameworks (its lines, stop and errors), then a plain torch loop swept.
add_test(NAME Python.Protocol
  COMMAND ${BATCHWISE_TEST_PYTHON} ${_bw_py_tests}/protocol_test.py --batchwise $<TARGET_FILE:batchwise_cli>)
set_tests_properties(Python.Protocol PROPERTIES LABELS cpu TIMEOUT 120 SKIP_RETURN_CODE 77)

# Per framework: sweep (samples/s from the callback's step lines; its sweep.json places the fit's
# budget, so it is the fit's fixture), fit under a CPU budget, unchanged without batchwise, and
# gradient accumulation (samples per optimizer step; Lightning and the Trainer).
foreach(_bw_framework lightning transformers keras)
  set(_bw_checks sweep fit unchanged)
  if(NOT _bw_framework STREQUAL "keras")
    list(APPEND _bw_checks accumulation)
  endif()
  foreach(_bw_check ${_bw_checks})
    set(_bw_name Python.${_bw_framework}.${_bw_check})
    add_test(NAME ${_bw_name}
      COMMAND ${BATCHWISE_TEST_PYTHON} ${_bw_py_tests}/framework_test.py ${_bw_framework} ${_bw_check}
              --batchwise $<TARGET_FILE:batchwise_cli> --work ${CMAKE_CURRENT_BINARY_DIR}/python/${_bw_framework})
    set_tests_properties(${_bw_name} PROPERTIES LABELS cpu TIMEOUT 180 SKIP_RETURN_CODE 77)
  endforeach()
  set_tests_properties(Python.${_bw_framework}.sweep PROPERTIES FIXTURES_SETUP python_${_bw_framework}_sweep)
  set_tests_properties(Python.${_bw_framework}.fit PROPERTIES FIXTURES_REQUIRED python_${_bw_framework}_sweep)
endforeach()
