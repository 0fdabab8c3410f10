#pragma once
// The engine on the user's Python objects (batchwise._engine): calls into their code, and the workload
// made of their model, optimizer, loss and data.
//
// The Python objects are wrapped the way torchscript.cpp wraps a script module, so that they train
// through exactly the ModuleWorkload the built-in models train through (its trials, state snapshots,
// memory accounting, race, range tests and evaluation):
//   - PythonModel: a torch::nn module that registers the Python module's own parameter and buffer
//     tensors (the very TensorImpls Python computes with) and calls its forward;
//   - PythonOptimizer: a torch::optim optimizer over the same tensors whose step is the Python
//     optimizer's, whose learning rate is its param_groups' and whose state is its state_dict;
//   - the loss: the Python callable, or cross-entropy / mean squared error.
// Each call into Python takes the GIL (call_python). A Python exception is kept and raised again once
// the engine returns: out of memory (torch.OutOfMemoryError) becomes the engine's c10::OutOfMemoryError
// so the trial is an out-of-memory outcome; Ctrl-C ends the call.
#include <fmt/format.h>
#include <torch/extension.h>

#include <memory>
#include <string>
#include <type_traits>

#include "batchwise/data.h"
#include "batchwise/error.h"
#include "batchwise/workload.h"

namespace batchwise::python {

namespace py = pybind11;

// What went wrong in Python during one engine call: the first exception other than out of memory
// (raised again, as the cause of a batchwise error, when the engine returns) and whether Ctrl-C was
// pressed. Out of memory is not kept: its traceback holds the trial's activations.
struct Failure {
  py::object error;   // the exception, with its traceback
  std::string where;  // "MyNet.forward"
  bool interrupted = false;
  // The call putting the user's state back that raised (their optimizer's load_state_dict, a module's
  // train): what it puts back is then as the trial left it. Empty where none did, or where the same
  // call put it back later (a StateGuard's restore after the trial's own).
  std::string unrestored;
  // What interrupted it where that was not Ctrl-C: an exception that is no Exception (a SIGTERM
  // handler's SystemExit), raised again as it was when the call ends.
  py::object interrupt;
};

Failure& failure();

// A Python exception other than Ctrl-C, out of call_python: out of memory is a trial's outcome, anything
// else the user's first error (kept: the call ends with it), thrown as a ModelError naming `where`.
[[noreturn]] void python_error(const std::string& where, py::error_already_set& e);
// Whether `e` stops the call rather than fails it (KeyboardInterrupt, SystemExit: no Exception).
bool interrupts(const py::error_already_set& e);
// Records the interrupt `e` (the first other than Ctrl-C kept): the call ends interrupted.
void interrupted_by(const py::error_already_set& e);
// Runs Python's signal handlers; returns whether one raised (an interrupt, or the user's error, kept).
bool run_signal_handlers();

// Runs `f` (which calls into Python) with the GIL held. `where` names the call for the error.
// `restoring`: the call puts the user's state back (the modules' modes, the optimizer's state_dict),
// so it runs after Ctrl-C too, when every other call is refused; a Ctrl-C that comes before or
// during it is taken (the call ends interrupted) and the call runs again, to its end.
template <class F>
auto call_python(const std::string& where, F&& f, bool restoring = false) -> decltype(f()) {
  py::gil_scoped_acquire gil;
  Failure& failed = failure();
  if (failed.interrupted && !restoring) throw Error("interrupted");
  // The user's code raised: the call ends with that error (_inprocess.py), so none of the user's
  // code runs again in it; the engine's phases end at their next call into Python.
  if (failed.error && !restoring) throw Error(fmt::format("stopped: {} raised earlier", failed.where));
  // A signal that came while the engine ran without the GIL
  if (run_signal_handlers() && !restoring)
    throw Error(failed.interrupted ? "interrupted" : "stopped: a signal handler raised");
  for (int cut = 0;; ++cut) {
    try {
      const auto put_back = [&] {  // the same call put back what it failed to before
        if (restoring && failed.unrestored == where) failed.unrestored.clear();
      };
      if constexpr (std::is_void_v<decltype(f())>) {
        f();
        put_back();
        return;
      } else {
        auto result = f();
        put_back();
        return result;
      }
    } catch (py::error_already_set& e) {
      if (!interrupts(e)) {
        if (restoring) failed.unrestored = where;
        python_error(where, e);
      }
      interrupted_by(e);
      if (!restoring || cut == 3) throw Error("interrupted");  // a restore every Ctrl-C cuts: given up
    }
  }
}

// The adapter's `which` data ("data", "held_out") as a Dataset; empty where it is None.
Dataset dataset(const py::object& adapter, const char* which);

// How a Python caller drops the samples holding values that are not finite numbers, for
// detail::refuse_values_the_loss_cannot_take (engine/data_readers.h), which the engine calls before anything trains
// (the workload is made without it: its model's errors are the call's to report).
std::string python_repair(const char* kind);

// The workload of the adapter's (batchwise/_inprocess.py) model, optimizer, loss and data.
std::unique_ptr<ModuleWorkload> make_python_workload(const py::object& adapter);

}  // namespace batchwise::python
