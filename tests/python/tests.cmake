# The Python package (python/) and its framework callbacks, run with the virtual environment's
# Python (BATCHWISE_TEST_PYTHON, set in tests/CMakeLists.txt) against the batchwise binary. Each
# framework's tests skip (exit 77, with the reason) where the framework is not installed:
# Lightning, Transformers and Keras are test-only packages (scripts/bootstrap.sh test installs them).
#   ctest -R '^Python\.'
# Included from tests/CMakeLists.txt after BATCHWISE_TEST_PYTHON is set.
if(NOT BATCHWISE_TEST_PYTHON)
  message(FATAL_ERROR "tests/python/tests.cmake: include it after BATCHWISE_TEST_PYTHON is set")
endif()
set(_bw_py_tests ${CMAKE_CURRENT_LIST_DIR})

# The package without a framework (its lines, stop and errors), then a plain torch loop swept.
add_test(NAME Python.PackagePrintsTheProtocolAndAPlainLoopSweeps
  COMMAND ${BATCHWISE_TEST_PYTHON} ${_bw_py_tests}/protocol_test.py --batchwise $<TARGET_FILE:batchwise_cli>)
set_tests_properties(Python.PackagePrintsTheProtocolAndAPlainLoopSweeps
  PROPERTIES LABELS cpu TIMEOUT 180 SKIP_RETURN_CODE 77)

# Per framework (framework_test.py's argument, then the test name's part), its checks:
#   sweep         samples/s from the callback's step lines at two batch sizes; its sweep.json
#                 places the fit's budget, so it is the fit's fixture
#   fit           under a CPU budget, finds the smaller of the two
#   unchanged     without batchwise's variables, the callback changes no step and no output
#   accumulation  samples per optimizer step (Lightning and the Trainer)
#   honest        a script that ignores {batch}, and one that trains no step, are error trials
#   loader        (the Trainer) a get_train_dataloader of the script's own: its loader's batch counts
set(_bw_check_names
  sweep:SweepTimesTheCallbacksStepLines fit:FitFindsTheBatchUnderACpuBudget
  unchanged:UnchangedWithoutBatchwise accumulation:StepLinesCountAccumulatedSamples
  honest:AScriptThatTrainsAnotherBatchOrNoneIsNoMeasure loader:StepLinesCountTheBatchItsLoaderGives)
foreach(_bw_framework lightning:Lightning transformers:Transformers keras:Keras)
  string(REPLACE ":" ";" _bw_pair ${_bw_framework})
  list(GET _bw_pair 0 _bw_arg)
  list(GET _bw_pair 1 _bw_title)
  foreach(_bw_check ${_bw_check_names})
    string(REPLACE ":" ";" _bw_pair ${_bw_check})
    list(GET _bw_pair 0 _bw_check_arg)
    list(GET _bw_pair 1 _bw_check_title)
    if(_bw_arg STREQUAL "keras" AND _bw_check_arg STREQUAL "accumulation")
      continue()  # Keras's accumulation is the optimizer's; the issue asks it of Lightning and the Trainer
    endif()
    if(_bw_check_arg STREQUAL "loader" AND NOT _bw_arg STREQUAL "transformers")
      continue()  # the Trainer's get_train_dataloader, which a subclass overrides
    endif()
    set(_bw_name Python.${_bw_title}.${_bw_check_title})
    add_test(NAME ${_bw_name}
      COMMAND ${BATCHWISE_TEST_PYTHON} ${_bw_py_tests}/framework_test.py ${_bw_arg} ${_bw_check_arg}
              --batchwise $<TARGET_FILE:batchwise_cli> --work ${CMAKE_CURRENT_BINARY_DIR}/python/${_bw_arg})
    set_tests_properties(${_bw_name} PROPERTIES LABELS cpu TIMEOUT 180 SKIP_RETURN_CODE 77)
    if(_bw_check_arg STREQUAL "sweep")
      set_tests_properties(${_bw_name} PROPERTIES FIXTURES_SETUP python_${_bw_arg}_sweep)
    elseif(_bw_check_arg STREQUAL "fit")
      set_tests_properties(${_bw_name} PROPERTIES FIXTURES_REQUIRED python_${_bw_arg}_sweep)
    endif()
  endforeach()
endforeach()

# In process (python/batchwise/_inprocess.py over the compiled engine, batchwise._engine): fit,
# sweep and tune on a torchvision model and a module TorchScript cannot script.
if(TARGET batchwise_python)
  foreach(_bw_check fit:FitsACpuBudgetExactly state:LeavesModelOptimizerAndRngsBitIdentical
                    oom:OutOfMemoryLeavesNothingHeld error:AnExceptionInTheModelNamesIt
                    tune:TunesADatasetWithHeldOutDataWithoutTorchScript options:ChecksOptionsByName
                    lightning:LightningModuleFitsAndTunesInProcess epochs:TunesTheUsersRunWithEpochs
                    interrupt:CtrlCStopsTheCallWithTheModelRestored
                    validate:ValidatesFullRunsAndMeasuresNoiseInProcess)
    string(REPLACE ":" ";" _bw_pair ${_bw_check})
    list(GET _bw_pair 0 _bw_arg)
    list(GET _bw_pair 1 _bw_title)
    add_test(NAME Python.InProcess.${_bw_title}
      COMMAND ${CMAKE_COMMAND} -E env BATCHWISE_ENGINE=$<TARGET_FILE:batchwise_python>
              ${BATCHWISE_TEST_PYTHON} ${_bw_py_tests}/inprocess_test.py ${_bw_arg})
    set_tests_properties(Python.InProcess.${_bw_title} PROPERTIES LABELS cpu TIMEOUT 240 SKIP_RETURN_CODE 77)
    # An instrumented engine loads only into a Python that preloads the sanitizers' shared runtime
    # (python/CMakeLists.txt links it so). Python and torch are not instrumented: their allocations
    # outlive the process by design, so leaks are not checked there; what the engine does is.
    if(BATCHWISE_SANITIZE AND BATCHWISE_SANITIZER_RUNTIME)
      set_property(TEST Python.InProcess.${_bw_title} APPEND PROPERTY ENVIRONMENT
                   "LD_PRELOAD=${BATCHWISE_SANITIZER_RUNTIME}"
                   "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1")
    elseif(BATCHWISE_SANITIZE)
      set_tests_properties(Python.InProcess.${_bw_title} PROPERTIES DISABLED TRUE)
    endif()
  endforeach()
endif()
if(TARGET batchwise_python)
  # pip wheel --no-build-isolation ./python packages the engine, and the wheel's batchwise fits a model.
  add_test(NAME Python.Package.AWheelCarriesTheEngine
    COMMAND ${CMAKE_COMMAND} -E env BATCHWISE_ENGINE=$<TARGET_FILE:batchwise_python>
            ${BATCHWISE_TEST_PYTHON} ${_bw_py_tests}/wheel_test.py --work ${CMAKE_CURRENT_BINARY_DIR}/python/wheel)
  set_tests_properties(Python.Package.AWheelCarriesTheEngine PROPERTIES LABELS cpu TIMEOUT 240 SKIP_RETURN_CODE 77)
  if(BATCHWISE_SANITIZE)
    set_tests_properties(Python.Package.AWheelCarriesTheEngine PROPERTIES DISABLED TRUE)
  endif()
endif()
