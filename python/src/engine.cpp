// batchwise._engine: the C++ engine on a Python model, optimizer, loss and data, in the user's process.
//
// The Python objects are wrapped the way torchscript.cpp wraps a script module, so that they train
// through exactly the ModuleWorkload the built-in models train through (its trials, state snapshots,
// memory accounting, race, range tests and evaluation):
//   - PythonModel: a torch::nn module that registers the Python module's own parameter and buffer
//     tensors (the very TensorImpls Python computes with) and calls its forward;
//   - PythonOptimizer: a torch::optim optimizer over the same tensors whose step is the Python
//     optimizer's, whose learning rate is its param_groups' and whose state is its state_dict;
//   - the loss: the Python callable, or cross-entropy / mean squared error.
// The GIL is released while the engine runs (autograd's device threads may need it for a model's
// Python autograd functions) and taken for each call into Python. A Python exception is kept and
// raised again once the engine returns: out of memory (torch.OutOfMemoryError) becomes the engine's
// c10::OutOfMemoryError so the trial is an out-of-memory outcome; Ctrl-C ends the call.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/Exceptions.h>
#include <torch/extension.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "batchwise/batchwise.h"
#include "batchwise/html.h"
#include "batchwise/noise_text.h"
#include "batchwise/plan.h"
#include "batchwise/report.h"
#include "check.h"
#include "cpu_baseline.h"
#include "engine/data_readers.h"
#include "engine/eval_mode.h"
#include "engine/parameter_dtype.h"
#include "torch_error.h"

namespace py = pybind11;

namespace batchwise::python {
namespace {

// ---- calls into Python ---------------------------------------------------------------------------

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

Failure& failure() {
  static Failure f;
  return f;
}

// Out of memory as torch raises it in Python: its OutOfMemoryError (torch.cuda's before torch 2.5), or a
// RuntimeError in an allocator's words (cuBLAS's and cuDNN's failed workspaces, "CUDA error: out of
// memory"), as classify_failure reads them in C++.
bool is_oom(const py::error_already_set& e) {
  static const py::object torch = py::module_::import("torch");
  static const py::object oom = py::hasattr(torch, "OutOfMemoryError") ? torch.attr("OutOfMemoryError")
                                                                       : torch.attr("cuda").attr("OutOfMemoryError");
  return e.matches(oom) || (e.matches(PyExc_RuntimeError) && detail::says_out_of_memory(py::str(e.value())));
}

// `e`'s exception with its traceback (raised again when the call ends, it keeps it).
py::object with_traceback(const py::error_already_set& e) {
  const auto traceback = py::reinterpret_steal<py::object>(PyException_GetTraceback(e.value().ptr()));
  if (!traceback && e.trace()) PyException_SetTraceback(e.value().ptr(), e.trace().ptr());
  return e.value();
}

// The user's first error, which the call ends with: `e`, raised in `where`.
void keep_error(const std::string& where, const py::error_already_set& e) {
  Failure& failed = failure();
  if (failed.error) return;
  failed.error = with_traceback(e);
  failed.where = where;
}

// A Python exception other than Ctrl-C, out of call_python: out of memory is a trial's outcome (its
// traceback, which holds the trial's tensors, dropped); anything else is kept as the user's first
// error (the call ends with it) and thrown as a ModelError naming `where`.
[[noreturn]] void python_error(const std::string& where, py::error_already_set& e) {
  if (is_oom(e)) {
    std::string what = py::str(e.value());
    { py::error_already_set dropped = std::move(e); }  // its traceback holds the trial's tensors
    py::module_::import("gc").attr("collect")();
    throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, what);
  }
  keep_error(where, e);
  const std::string type = py::str(e.type().attr("__name__"));
  throw ModelError(fmt::format("{} raised {}: {}", where, type, std::string(py::str(e.value()))));
}

// Whether `e` stops the call rather than fails it: Ctrl-C's KeyboardInterrupt, or any exception that
// is no Exception (SystemExit, which a SIGTERM handler raises to end the process). The call ends
// interrupted, the user's state restored, and run() raises it again.
bool interrupts(const py::error_already_set& e) { return !e.matches(PyExc_Exception); }

// The first interrupt other than Ctrl-C is kept, after a Ctrl-C too: a SIGTERM handler's SystemExit
// during the restore that follows a Ctrl-C still ends the process.
void interrupted_by(const py::error_already_set& e) {
  Failure& failed = failure();
  if (!failed.interrupt && !e.matches(PyExc_KeyboardInterrupt)) failed.interrupt = with_traceback(e);
  failed.interrupted = true;
}

// Python's signal handlers, run where the engine looks for them (with the GIL): one that raised an
// interrupt (Ctrl-C's) interrupts the call, and one that raised another exception is the user's
// error, kept as python_error keeps one. Returns whether a handler raised.
bool run_signal_handlers() {
  if (PyErr_CheckSignals() == 0) return false;
  py::error_already_set e;
  if (interrupts(e))
    interrupted_by(e);
  else
    keep_error("a signal handler", e);
  return true;
}

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

// ---- the model -----------------------------------------------------------------------------------

at::Tensor unpack(const py::handle& object, const std::string& what) {
  BATCHWISE_CHECK(THPVariable_Check(object.ptr()), ModelError, "{} is a {}, not a tensor", what,
                  std::string(py::str(py::type::handle_of(object).attr("__name__"))));
  return THPVariable_Unpack(object.ptr());
}

// The Python module's parameters and buffers registered as its own, under flattened names (a tensor
// shared by two submodules, tied weights, once), and its forward called from C++. The adapter
// (batchwise/_inprocess.py) turns the forward's result into the logits.
class PythonModelImpl : public torch::nn::Module {
 public:
  PythonModelImpl(py::object adapter, std::string name)
      : adapter_(std::move(adapter)),
        name_(std::move(name)),
        forward_(name_ + ".forward"),
        output_(forward_ + "'s output") {
    auto flat = [](std::string s) {
      for (auto& c : s) c = c == '.' ? '_' : c;
      return s;
    };
    int index = 0;
    for (const auto& item : adapter_.attr("parameters")()) {
      const at::Tensor p = unpack(item[py::int_(1)], "a parameter");
      register_parameter(fmt::format("p{}_{}", index++, flat(py::str(item[py::int_(0)]))), p, p.requires_grad());
    }
    for (const auto& item : adapter_.attr("buffers")())
      register_buffer(fmt::format("b{}_{}", index++, flat(py::str(item[py::int_(0)]))),
                      unpack(item[py::int_(1)], "a buffer"));
    torch::nn::Module::train(adapter_.attr("training")().cast<bool>());
  }
  at::Tensor forward(const at::Tensor& input) {
    return call_python(forward_, [&] { return unpack(adapter_.attr("forward")(input), output_); });
  }
  void train(bool on) override {
    call_python(
        name_ + ".train", [&] { adapter_.attr("train")(on); }, /*restoring=*/true);  // modes come back
    torch::nn::Module::train(on);
  }
  // Dropped with the GIL held: the engine may free the workload from a thread without it.
  ~PythonModelImpl() override {
    py::gil_scoped_acquire gil;
    adapter_ = py::object();
  }

 private:
  py::object adapter_;
  std::string name_, forward_, output_;  // the names a step's calls give an error, made once
};
TORCH_MODULE(PythonModel);

// ---- the optimizer -------------------------------------------------------------------------------

// A parameter group's options: its learning rate is the Python group's "lr", in the engine's terms
// the reference group's (the first whose rate is not 0: a frozen backbone at 0 ahead of a trained
// head leaves the head's): the engine reads and sets one rate (the workload's), and each group keeps
// the ratio to it it had when the call began (a head at a tenth of the body's rate stays at a tenth;
// a group at 0 stays frozen).
class GroupOptions : public torch::optim::OptimizerCloneableOptions<GroupOptions>, public DescribesOptimizer {
 public:
  GroupOptions(std::shared_ptr<py::object> adapter, int group, int reference, double ratio,
               OptimizerSettings settings = {})
      : adapter_(std::move(adapter)), group_(group), reference_(reference), ratio_(ratio), settings_(settings) {}
  // The reference group's momentum, betas, eps and weight decay as the call found them (the run plan
  // says them).
  OptimizerSettings optimizer_settings() const override { return settings_; }
  double get_lr() const override {
    return call_python("the optimizer's learning rate", [&] {
      return ratio_ > 0 ? adapter_->attr("get_lr")(group_).cast<double>() / ratio_
                        : adapter_->attr("get_lr")(reference_).cast<double>();
    });
  }
  void set_lr(const double lr) override {
    call_python("the optimizer's learning rate", [&] { adapter_->attr("set_lr")(group_, lr * ratio_); });
  }

 private:
  std::shared_ptr<py::object> adapter_;  // shared: copying a py::object needs the GIL
  int group_, reference_;
  double ratio_;  // the group's rate over the reference group's
  OptimizerSettings settings_;
};

class PythonOptimizer : public torch::optim::Optimizer {
 public:
  PythonOptimizer(std::shared_ptr<py::object> adapter, const std::vector<std::vector<at::Tensor>>& groups,
                  std::string name)
      : Optimizer(std::vector<torch::optim::OptimizerParamGroup>{}, std::make_unique<GroupOptions>(adapter, 0, 0, 1.0)),
        adapter_(std::move(adapter)),
        name_(std::move(name)),
        step_(name_ + ".step") {
    // Each group's options set after it is added: add_param_group starts from a clone of the
    // defaults (group 0's) and merges in only the options of LibTorch's own optimizers, so every
    // group's rate would otherwise be read and set on group 0.
    py::gil_scoped_acquire gil;
    const auto lr = [this](int group) { return adapter_->attr("get_lr")(group).cast<double>(); };
    const int reference = adapter_->attr("reference_group")().cast<int>();
    const double first = lr(reference);
    OptimizerSettings settings;
    std::tie(settings.momentum, settings.beta1, settings.beta2, settings.eps, settings.weight_decay) =
        adapter_->attr("optimizer_settings")(reference).cast<std::tuple<double, double, double, double, double>>();
    for (size_t i = 0; i < groups.size(); ++i) {
      const int group = static_cast<int>(i);
      add_param_group(torch::optim::OptimizerParamGroup(groups[i]));
      param_groups().back().set_options(
          std::make_unique<GroupOptions>(adapter_, group, reference, first > 0 ? lr(group) / first : 1.0, settings));
    }
  }
  ~PythonOptimizer() override {
    py::gil_scoped_acquire gil;
    adapter_.reset();
  }
  at::Tensor step(LossClosure closure) override {
    call_python(step_, [&] { adapter_->attr("step")(); });
    return {};
  }
  // The state is the Python optimizer's state_dict, serialised by torch.save: a copy the next steps
  // cannot change, loaded back with load_state_dict (which drops the states created since).
  void save(torch::serialize::OutputArchive& archive) const override {
    const std::string bytes =
        call_python(name_ + ".state_dict", [&] { return adapter_->attr("save_optimizer")().cast<std::string>(); });
    archive.write("python_state_dict", c10::IValue(bytes));
  }
  void load(torch::serialize::InputArchive& archive) override {
    c10::IValue bytes;
    archive.read("python_state_dict", bytes);
    call_python(
        name_ + ".load_state_dict", [&] { adapter_->attr("load_optimizer")(py::bytes(bytes.toStringRef())); },
        /*restoring=*/true);
  }

 private:
  std::shared_ptr<py::object> adapter_;
  std::string name_, step_;
};

// ---- the workload --------------------------------------------------------------------------------

std::vector<std::vector<at::Tensor>> optimizer_groups(const py::object& adapter) {
  std::vector<std::vector<at::Tensor>> groups;
  for (const auto& group : adapter.attr("optimizer_groups")()) {
    groups.emplace_back();
    for (const auto& p : group) groups.back().push_back(unpack(p, "an optimizer parameter"));
  }
  return groups;
}

Dataset dataset(const py::object& adapter, const char* which) {
  py::object data = adapter.attr(which);
  Dataset d;
  if (data.is_none()) return d;
  d.name = py::str(data.attr("name"));
  d.inputs = unpack(data.attr("inputs"), "the data's inputs");
  d.targets = unpack(data.attr("targets"), "the data's targets");
  d.num_classes = data.attr("num_classes").cast<int64_t>();
  return d;
}

LossFn loss_function(const py::object& adapter, const std::string& name) {
  auto shared = std::make_shared<py::object>(adapter);
  std::shared_ptr<void> release(nullptr, [shared](void*) mutable {  // the last copy lets go under the GIL
    py::gil_scoped_acquire gil;
    *shared = py::object();
  });
  return [shared, release, name](const at::Tensor& output, const at::Tensor& target) {
    return call_python(name, [&] { return unpack(shared->attr("loss")(output, target), name + "'s result"); });
  };
}

// The ModuleWorkload, with the user's Python that runs inside backward taken as call_python takes
// the rest: a custom autograd.Function's backward, a hook, torch.utils.checkpoint's recomputation run
// on autograd's threads, which hand an exception on as torch's python_error, out of reach of
// call_python. Ctrl-C there ends the call (it was a trial's error, and the call went on), out of
// memory is the trial's outcome (a recomputation past the budget), anything else is the user's
// first error, named (it was an error trial reading "python_error", and the fit searched below it).
class PythonWorkload : public ModuleWorkload {
 public:
  template <class... Args>
  PythonWorkload(std::string where, Args&&... args)
      : ModuleWorkload(std::forward<Args>(args)...), where_(std::move(where)) {}
  at::Tensor train_step(const Batch& batch) override {
    return taken([&] { return ModuleWorkload::train_step(batch); });
  }
  at::Tensor backward(const Batch& batch, double weight) override {
    return taken([&] { return ModuleWorkload::backward(batch, weight); });
  }
  std::optional<StepPhases> profiled_step(int64_t batch) override {
    return taken([&] { return ModuleWorkload::profiled_step(batch); });
  }

 private:
  template <class F>
  auto taken(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (::python_error& e) {
      py::gil_scoped_acquire gil;
      // The error set again, with references of its own; e's go, so that out of memory's traceback
      // (the trial's tensors) can be freed by python_error's gc.
      e.restore();
      Py_CLEAR(e.type);
      Py_CLEAR(e.value);
      Py_CLEAR(e.traceback);
      py::error_already_set error;
      if (!interrupts(error)) python_error(where_, error);
      interrupted_by(error);
      throw Error("interrupted");
    }
  }
  std::string where_;
};

// Values that are not finite numbers (in the model's type: a value past float16's range is infinite there)
// which the user's model and loss do not take, refused before anything trains, as the CLI refuses a file's:
// a run had trained on them, answered batch 1 and blamed its rate. Taken where the loss on (up to 64 of) the
// samples that hold them is finite: a masked loss over targets where NaN marks a missing label, a model that
// fills NaN inputs.
void refuse_values_the_loss_cannot_take(ModuleWorkload& w, const Dataset& d, const char* which) {
  for (const auto& [values, kind] : {std::pair{d.inputs, "inputs"}, std::pair{d.targets, "targets"}}) {
    if (!values.is_floating_point()) continue;
    const detail::NonFinite bad = detail::nonfinite_rows(values, 64);
    if (bad.count == 0) continue;
    Dataset holding = d;
    const at::Tensor rows = at::tensor(bad.rows, at::kLong);
    holding.inputs = d.inputs.index_select(0, rows), holding.targets = d.targets.index_select(0, rows);
    if (std::isfinite(w.evaluate(holding, 64).first)) continue;
    throw DataError(fmt::format(
        "{}: {} of its {} samples hold {} that are not finite numbers (NaN or infinity) in the model's type ({}), "
        "the first sample {}, and the loss on them is not finite: drop or repair those samples (keep = "
        "torch.isfinite({}).reshape(len(x), -1).all(1); x, y = x[keep], y[keep]), bring values past the type's "
        "range into it, or mask them in your loss",
        which, bad.count, values.size(0), kind,
        w.info().parameter_dtype.empty() ? std::string(c10::toString(values.scalar_type())) : w.info().parameter_dtype,
        bad.rows[0], std::string(kind) == "targets" ? "y" : "x"));
  }
}

std::unique_ptr<ModuleWorkload> make_python_workload(const py::object& adapter) {
  const std::string model_name = py::str(adapter.attr("model_name"));
  const std::string optimizer_name = py::str(adapter.attr("optimizer_name"));
  Dataset data = dataset(adapter, "data");
  PythonModel model(adapter, model_name);
  auto shared = std::make_shared<py::object>(adapter);
  auto optimizer = std::make_unique<PythonOptimizer>(shared, optimizer_groups(adapter), optimizer_name);
  WorkloadInfo info;
  info.model = model_name;
  info.dataset = data.name;
  info.loss = py::str(adapter.attr("loss_name"));
  info.optimizer = py::str(adapter.attr("optimizer_kind"));
  info.lr = adapter.attr("get_lr")(adapter.attr("reference_group")()).cast<double>();
  info.input_shape = data.sample_shape();
  info.num_classes = data.num_classes;
  info.dataset_size = data.size();
  info.trainable_parameter_count = 0;
  for (const auto& p : model->parameters()) {
    info.parameter_count += p.numel();
    if (p.requires_grad()) *info.trainable_parameter_count += p.numel();
  }
  for (const auto& p : model->parameters()) info.parameter_bytes += static_cast<int64_t>(p.nbytes());
  for (const auto& b : model->buffers()) info.parameter_bytes += static_cast<int64_t>(b.nbytes());
  info.parameter_dtype = detail::parameter_dtype(*model);  // a model built in bf16 trains so: said beside "fp32"
  const c10::Device device(std::string(py::str(adapter.attr("device"))));
  const auto seed = adapter.attr("seed").cast<uint64_t>();
  // Where the loss raised: "Net's loss", or a LightningModule's own hook ("LitNet.training_step")
  const std::string loss_where =
      py::hasattr(adapter, "loss_where") ? std::string(py::str(adapter.attr("loss_where"))) : model_name + "'s loss";
  auto workload = std::make_unique<PythonWorkload>(model_name + "'s backward pass", info, torch::nn::AnyModule(model),
                                                   std::move(optimizer), std::move(data),
                                                   loss_function(adapter, loss_where), device, seed);
  workload->set_optimizer_state_bytes([shared, optimizer_name] {
    return call_python(optimizer_name + ".state",
                       [&] { return (*shared).attr("optimizer_state_bytes")().cast<int64_t>(); });
  });
  return workload;
}

// ---- progress ------------------------------------------------------------------------------------

// The CLI's progress lines (tools/batchwise/session.cpp), handed to a Python callable.
class Progress {
 public:
  explicit Progress(py::object sink) : sink_(std::make_shared<py::object>(std::move(sink))) {}
  void operator()(const std::string& line) const {
    if (sink_->is_none()) return;
    call_python("the progress callback", [&] { (*sink_)(line); });
  }
  void trial(const Trial& t, int index, int planned) const {
    // A re-measure outside the plan (index -1) reads "again", as the CLI's line does.
    const std::string of = index < 0     ? std::string("again")
                           : planned > 0 ? fmt::format("{}/{}", index + 1, planned)
                                         : fmt::format("{}", index + 1);
    const std::string what = t.outcome == Outcome::Ok && t.samples_per_s > 0
                                 ? fmt::format("{:.0f} samples/s", t.samples_per_s)
                                 : std::string(to_string(t.outcome));
    (*this)(fmt::format("[trial {}] batch {}: {}, peak {} ({:.1f} s elapsed)", of, t.batch, what,
                        format_bytes(t.peak_bytes), elapsed()));
  }
  void stage(const TuneStage& t) const {
    if (t.phase > 0)
      (*this)(fmt::format("[{}/{}] {}", t.phase, t.phases, t.what));
    else
      (*this)(t.what);
  }
  void race(const RaceProgress& p) const {
    const std::string key = fmt::format("{} {}", p.rung, p.index);
    if (!log_->pass(key)) return;
    (*this)(fmt::format(
        "[race rung {}/{}, {}/{}] batch {}: epoch {:.2f}, held-out loss {:.3f} ({:.0f} s elapsed, ~{:.0f} s "
        "left)",
        p.rung, p.rungs, p.index, p.count, p.batch, p.epochs, p.loss, p.elapsed_s, p.left_s));
  }
  // A compressed run of the run race: its first line, then one a 10 s (its lines come once a second,
  // which the CLI rewrites in place); its lines share their key (compressed_run_key).
  void run_race(const std::string& text) const {
    if (!log_->pass(compressed_run_key(text))) return;
    (*this)(text);
  }
  void validate(const ValidateProgress& p) const {
    const std::string key = fmt::format("validate {}", p.index);
    if (!log_->pass(key)) return;
    (*this)(fmt::format(
        "[validate {}/{}] {}: epoch {:.2f}, held-out loss {:.3f}{}, {:.1f} s trained ({}at most "
        "{:.0f} s left; {:.0f} s elapsed)",
        p.index + 1, p.count, p.schedule.empty() ? fmt::format("batch {}", p.batch) : "schedule " + p.schedule,
        p.epochs, p.loss, p.accuracy ? fmt::format(", accuracy {:.4f}", *p.accuracy) : std::string(), p.train_s,
        p.target_left_s ? fmt::format("~{:.0f} s to the target, ", *p.target_left_s) : std::string(), p.limit_left_s,
        p.elapsed_s));
  }
  FitOptions with(FitOptions o) const {
    return o.on_trial([p = *this](const Trial& t, int i, int n) { p.trial(t, i, n); });
  }
  SweepOptions with(SweepOptions o) const {
    return o.on_trial([p = *this](const Trial& t, int i, int n) { p.trial(t, i, n); });
  }

 private:
  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  std::shared_ptr<py::object> sink_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  // The same race entry, validation run or compressed run within 10 s of its last line: one line a
  // 10 s, as the CLI's live line would show it (shared by the copies the callbacks hold).
  std::shared_ptr<LogThrottle> log_ = std::make_shared<LogThrottle>();
};

// ---- options -------------------------------------------------------------------------------------

// The options, named as the CLI's flags (batchwise/_inprocess.py checks names and types).
struct Options {
  explicit Options(const py::dict& d) : d_(d) {}
  template <class T>
  T get(const char* key, T fallback) const {
    return d_.contains(key) && !d_[key].is_none() ? d_[key].cast<T>() : fallback;
  }
  FitOptions fit(int64_t budget) const {
    return FitOptions()
        .budget_bytes(budget)
        .target(get("target", 0.9))
        .mode(parse_fit_mode(get<std::string>("mode", "model")))
        .min(get<int64_t>("min", 1))
        .max(get<int64_t>("max", 65536))
        .multiple_of(get<int64_t>("multiple_of", 1))
        .steps(get("fit_steps", 2))
        .warmup(get("warmup", 0))
        .trial_timeout_s(get("trial_timeout", 0.0))
        .monitor(!get("no_monitor", false));
  }
  SweepOptions sweep(int64_t budget) const {
    return SweepOptions()
        .batch_sizes(get("batch_sizes", std::vector<int64_t>{}))
        .warmup(get("warmup", 2))
        .steps(get("steps", 5))
        .repetitions(get("repetitions", 3))
        .min_time_s(get("min_time", 0.1))
        .budget_bytes(budget)
        .trial_timeout_s(get("trial_timeout", 0.0))
        .monitor(!get("no_monitor", false));
  }

 private:
  py::dict d_;
};

// The report's header: context, workload, budget and target, as the CLI's Session makes it.
Report base_report(Workload& workload, WorkloadRunner& runner, int64_t budget, double target) {
  Report r;
  r.context = make_context(workload.device().is_cuda() ? resolve_device(workload.device().str()) : DeviceSpec{});
  r.context.device_total_bytes = runner.device_total_bytes();
  r.workload = runner.info();
  r.budget_bytes = checked_budget_bytes(runner, budget);  // a memory_budget above the device's memory refused
  r.target = target;
  return r;
}

void rule_learning_rate(Report& r, int64_t base_batch) {
  const std::optional<Optimizer> optimizer = known_optimizer(r.workload.optimizer);
  if (r.lr || !r.recommendation || r.workload.lr <= 0 || !optimizer) return;
  r.lr = unmeasured_lr(*optimizer, base_batch, r.workload.lr, r.recommendation->batch);
}

// validate's should_stop: a Ctrl-C (Python's signal handler raised) stops it after the step under
// way, and the runs that ended come back in batchwise.Interrupted's report; so does any other
// exception a handler raised, which the call then ends with. Asked between steps without the GIL;
// the GIL is taken to run Python's handlers, as call_python does. tune's too, as each phase ends:
// after a Ctrl-C or an error of the user's code every Python call fails at once, and the phases
// after it had run on, on trials that trained nothing (the run plan divided by an unset batch).
bool interrupt_asked() {
  py::gil_scoped_acquire gil;
  Failure& failed = failure();
  if (!failed.interrupted && !failed.error) run_signal_handlers();
  return failed.interrupted || failed.error;
}

// Every option of one call, read with the GIL before the engine runs without it.
struct Plan {
  FitOptions fit;
  SweepOptions sweep;
  TuneOptions tune;
  NoiseOptions noise;
  std::optional<ValidateOptions> validate;
  int64_t base_batch = 32;
};

Plan plan(const Options& o, const Progress& progress, int64_t budget, bool cuda) {
  Plan p;
  p.fit = progress.with(o.fit(budget));
  p.sweep = progress.with(o.sweep(budget));
  p.base_batch = o.get<int64_t>("base_batch", 32);
  p.tune = TuneOptions()
               // warmup= is the sweep's here, as tune --warmup is: the fit's trials take none
               .fit(FitOptions(p.fit).max(o.get<int64_t>("max", cuda ? 65536 : 4096)).warmup(0))
               .sweep(SweepOptions(p.sweep).stop_after_flat(o.get("sweep_all", false) ? -1 : 0))
               .noise(!o.get("no_noise", false))
               .noise_steps(o.get("noise_steps", 20))
               .race(!o.get("no_race", false))
               .race_budget_s(o.get("advice_budget", 0.0))
               .target_accuracy(o.get("target_accuracy", 0.0))
               .target_loss(o.get("target_loss", 0.0))
               .base_batch(p.base_batch)
               .epochs(o.get("epochs", 0.0))
               .lr_schedule(parse_lr_schedule(o.get<std::string>("lr_schedule", "constant")))
               .loader_search(false)
               .on_run_race([progress](const std::string& text) { progress.run_race(text); })
               .on_stage([progress](const TuneStage& s) { progress.stage(s); })
               .on_race([progress](const RaceProgress& r) { progress.race(r); })
               .should_stop(interrupt_asked);
  p.noise = NoiseOptions()
                .batch(o.get<int64_t>("batch", 256))
                .micro_batch(o.get<int64_t>("micro_batch", 32))
                .steps(o.get("noise_steps", 50))
                .train(!o.get("fixed_weights", false))
                .smoothing(o.get("smoothing", 0.9))
                .limit_bytes(budget);
  const std::vector<int64_t> candidates = o.get("batch_sizes", std::vector<int64_t>{});
  const std::string schedule = o.get<std::string>("batch_schedule", "");
  p.validate = ValidateOptions(candidates)
                   .target_accuracy(o.get("target_accuracy", 0.0))
                   .target_loss(o.get("target_loss", 0.0))
                   .epochs(o.get("epochs", 0.0))
                   .lr_schedule(parse_lr_schedule(o.get<std::string>("lr_schedule", "constant")))
                   .batch_schedule(schedule.empty() ? std::vector<BatchPhase>{}
                                                    : parse_batch_schedule(schedule, "batch_schedule"))
                   .max_epochs(o.get("max_epochs", 3.0))
                   .max_seconds(o.get("max_seconds", 600.0))
                   .eval_every_samples(o.get<int64_t>("eval_every", 0))
                   .base_batch(p.base_batch)
                   .held_out_samples(o.get<int64_t>("held_out_samples", 0))
                   .stop_slower_than(o.get("stop_slower_than", 0.0))
                   .measure_lr(!o.get("rule_lr", false))
                   .limit_bytes(budget)
                   .on_progress([progress](const ValidateProgress& v) { progress.validate(v); })
                   .should_stop(interrupt_asked);
  return p;
}

// Class labels the model's output has no column for: cross-entropy (and NLL) reads the column at each
// label, and on CUDA a label past them is a device-side assert, after which this process can use the
// GPU no more (nor put the user's state back); on a CPU torch raises mid-trial. Where the loss is one
// of those (`ignore_index`: the label it skips), the first two samples of `data` go through the model
// alone (eval mode, no gradient, the modes put back; the caller's StateGuard puts back anything the
// forward changed) before anything trains, and labels below 0 or past its width are refused, naming
// `what`. A loss of the user's own is not probed: it may read labels its own way (a metric-learning
// loss beside an embedding). The training data's probe is a courtesy: a forward that refuses two
// samples (a model given `min=4`) leaves the trials to meet what it is; the held-out data's ends the
// call, as probe_held_out would.
void probe_labels(ModuleWorkload& workload, const Dataset& data, const std::string& what, int64_t ignore_index,
                  bool forgiving) {
  if (data.num_classes <= 0 || data.targets.dim() != 1 || data.size() == 0) return;
  const at::Tensor labels = data.targets.masked_select(data.targets.ne(ignore_index));
  if (labels.numel() == 0) return;
  const int64_t lowest = labels.min().item<int64_t>(), classes = labels.max().item<int64_t>() + 1;
  at::Tensor output;
  try {
    const detail::EvalMode eval(workload.module());  // each module's mode put back however the forward ends
    at::NoGradGuard no_grad;
    output =
        workload.model().forward(data.inputs.narrow(0, 0, std::min<int64_t>(2, data.size())).to(workload.device()));
  } catch (const std::exception&) {
    Failure& failed = failure();
    if (failed.interrupted) throw;
    if (failed.error && forgiving && failed.where == workload.info().model + ".forward") {
      py::gil_scoped_acquire gil;  // the forward's own error alone: the trials will say whether it is one
      failed.error = py::object();
      failed.where.clear();
      return;
    }
    if (failed.error) {  // the user's code raised: its exception, named so
      failed.where =
          fmt::format("{} ({}), its first samples evaluated before training, in {}", what, data.name, failed.where);
      throw;
    }
    return;  // another failure (out of memory) is the trials' to meet and report
  }
  if (output.dim() != 2) return;
  const int64_t columns = output.size(1);
  if (lowest >= 0 && classes <= columns) return;
  const std::string output_text =
      fmt::format("{} columns of {}'s output ([{}])", columns, workload.info().model, fmt::join(output.sizes(), ", "));
  throw DataError(fmt::format(
      "{} ({}): its labels run {}, which cross-entropy reads by label{}; give labels from 0 to {}{}{}", what, data.name,
      lowest < 0 ? fmt::format("from {}, below the first of the {}", lowest, output_text)
                 : fmt::format("to {}, past the {}", classes - 1, output_text),
      workload.device().is_cuda()
          ? " (on CUDA a label out of range is a device-side assert, after which this process can use the GPU no more)"
          : "",
      columns - 1, lowest == 1 && classes == columns + 1 ? " (labels that start at 1: y - 1)" : "",
      classes > columns ? fmt::format(", or a model with {} outputs", classes) : ""));
}

// The held-out data through the model and the loss, its first two samples, before anything trains:
// data the model cannot be judged on fails here, naming held_out, not at the race's first evaluation
// minutes in. It is not held to the training data's kind, as the CLI's test split is (check_held_out:
// its shape excepted, which the model may take): soft training targets beside hard test labels are
// the loss's to take, and a tensor's type is the user's to choose.
void probe_held_out(ModuleWorkload& workload, const Dataset& held_out) {
  const std::string what = fmt::format("held_out ({}), its first samples evaluated before training", held_out.name);
  try {
    (void)workload.evaluate(head(held_out, 2));
  } catch (const std::exception& e) {
    Failure& failed = failure();
    if (failed.error) {  // the user's code raised: its exception, named so
      failed.where = fmt::format("{}, in {}", what, failed.where);
      throw;
    }
    if (failed.interrupted) throw;
    throw DataError(fmt::format("{}: {}; give held-out data of the kind the model and the loss take", what,
                                detail::error_line(detail::plain_what(e))));
  }
}

// `command` on the engine's side of the call (without the GIL), into `report`.
void execute(const std::string& command, const Plan& p, ModuleWorkload& workload, WorkloadRunner& runner,
             const Dataset& held_out, Report& report) {
  if (command == "fit") {
    report.fit = fit(runner, p.fit);
    report.recommendation = recommend(report.fit, std::nullopt);
    if (report.fit->batch)  // it fits the memory, and is larger than these data: said, as the CLI's fit says it
      if (std::string w = larger_than_training_set_warning({*report.fit->batch}, workload.data().size()); !w.empty())
        report.context.warnings.push_back(std::move(w));
  } else if (command == "sweep") {
    report.sweep = sweep(runner, p.sweep);
    for (const std::string& w : report.sweep->warnings()) report.context.warnings.push_back(w);
    // within the training set, as the CLI's sweep answers and warns: a larger batch repeats samples in a step
    if (std::string w = larger_than_dataset_warning(report.sweep->points, workload.data().size()); !w.empty())
      report.context.warnings.push_back(std::move(w));
    SweepAnswer answer = recommend_sweep(*report.sweep, workload.data().size(), report.budget_bytes, report.target);
    report.recommendation = answer.recommendation;  // within the target, as the CLI's
    for (std::string& w : answer.warnings) report.context.warnings.push_back(std::move(w));
  } else if (command == "noise") {
    try {
      report.noise = measure_noise_scale(workload, p.noise);
    } catch (const std::exception& e) {  // past the budget: the batch asked, as the CLI's noise says it
      if (failure().interrupted || failure().error || detail::classify_failure(e).first != Outcome::Oom) throw;
      throw ConfigError(detail::noise_does_not_fit(p.noise.batch(), p.noise.limit_bytes(),
                                                   detail::error_line(detail::plain_what(e))));
    }
  } else if (command == "validate") {
    std::vector<int64_t> trained = p.validate->batch_sizes();  // a schedule's phases' batches too
    for (const BatchPhase& phase : p.validate->batch_schedule())
      if (std::find(trained.begin(), trained.end(), phase.batch) == trained.end()) trained.push_back(phase.batch);
    if (std::string w = larger_than_training_set_warning(trained, workload.data().size());
        !w.empty())  // trained as asked, as the CLI's validate does, and said
      report.context.warnings.push_back(std::move(w));
    report.validation = validate(workload, held_out, *p.validate);
    for (std::string& w : validation_warnings(*report.validation)) report.context.warnings.push_back(std::move(w));
    if (!report.validation->interrupted) report.recommendation = recommend(*report.validation);  // not from a part
    if (report.recommendation) report.lr = fixed_run(*report.validation, report.recommendation->batch)->lr;
  } else {
    TuneSubject subject(workload);
    if (held_out.size() > 0) subject.held_out = [&] { return held_out; };
    report = tune(std::move(subject), p.tune, std::move(report));
  }
  rule_learning_rate(report, p.base_batch);
  // A sweep or a validation in which nothing trained says so, as the CLI's does.
  for (const NothingTrained& none : nothing_trained(report))
    if (!none.warning.empty()) report.context.warnings.push_back(none.warning);
  for (std::string& w : workload.take_restore_failures()) report.context.warnings.push_back(std::move(w));
}

// Runs `command` on the adapter's workload without the GIL, then raises what Python raised.
// (the report's JSON or None, where, the exception, kept, unrestored): the user's code raised where there is
// an exception; kept: a Ctrl-C stopped validate, and the JSON holds the runs that ended; unrestored: None, or
// the call putting the user's state back that raised (what it puts back is as the trial left it).
py::tuple run(const py::object& adapter, const py::dict& options, const std::string& command) {
  // One call at a time (_inprocess.py's _call refuses a second): the CPU count, its limit and the failure slot are
  // the process's.
  failure() = Failure{};
  const Options o(options);
  const Progress progress(options.contains("progress") ? py::object(options["progress"]) : py::none());
  auto workload = make_python_workload(adapter);
  // On CPU the budget is this model's training's: the process's other counted tensors (made since the
  // engine loaded) are its baseline, left out of every figure and of the limit until the call ends.
  struct Baseline {
    ~Baseline() { detail::set_cpu_baseline_bytes(0); }
  } baseline;
  if (!workload->device().is_cuda()) {
    detail::set_cpu_baseline_bytes(0);
    const StateBytes own = workload->state_bytes();
    const int64_t others = CpuMemoryTracker::install().current_bytes() - own.parameter_bytes - own.gradient_bytes -
                           own.optimizer_state_bytes;
    detail::set_cpu_baseline_bytes(std::max<int64_t>(0, others));
  }
  WorkloadRunner runner(*workload);
  const int64_t budget = o.get<int64_t>("memory_budget", 0);
  Report report = base_report(*workload, runner, budget, o.get("target", 0.9));
  Dataset held_out = dataset(adapter, "held_out");
  refuse_values_the_loss_cannot_take(*workload, workload->data(), "data");
  if (held_out.size() > 0) refuse_values_the_loss_cannot_take(*workload, held_out, "held_out");
  // The label a cross-entropy (or NLL) loss skips; none where the loss is not one (probe_labels).
  const py::object skipped = adapter.attr("cross_entropy_ignore_index");
  const bool probe = !skipped.is_none();
  const int64_t ignore_index = probe ? skipped.cast<int64_t>() : 0;
  // Every option is read here, with the GIL.
  const Plan p = plan(o, progress, report.budget_bytes, workload->device().is_cuda());
  std::exception_ptr error;
  {
    py::gil_scoped_release nogil;
    try {
      const bool judged = held_out.size() > 0 && (command == "validate" || command == "tune");
      if (probe || judged) {
        StateGuard kept(*workload);  // what the probes' forwards change (a buffer a forward updates) comes back
        if (probe) probe_labels(*workload, workload->data(), "data", ignore_index, /*forgiving=*/true);
        if (probe && judged) probe_labels(*workload, held_out, "held_out", ignore_index, /*forgiving=*/false);
        if (judged) probe_held_out(*workload, held_out);
      }
      execute(command, p, *workload, runner, held_out, report);
    } catch (...) {
      error = std::current_exception();
    }
  }
  workload.reset();
  Failure failed = std::move(failure());
  failure() = Failure{};
  // An interrupt other than Ctrl-C (a SIGTERM handler's SystemExit) is raised again as it was.
  if (failed.interrupt) {
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(failed.interrupt.ptr())), failed.interrupt.ptr());
    throw py::error_already_set();
  }
  // A validation the Ctrl-C stopped between its steps: the runs that ended, for batchwise.Interrupted.
  const bool kept = !error && !failed.error && report.validation && report.validation->interrupted;
  if (failed.interrupted && !kept) {
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
  }
  // The user's first exception: _inprocess.py raises it as the cause of a batchwise.TrainingError
  // when nothing usable came of the call.
  const py::object where = failed.error ? py::object(py::str(failed.where)) : py::object(py::none());
  const py::object cause = failed.error ? failed.error : py::object(py::none());
  if (error && !failed.error) std::rethrow_exception(error);
  const py::object unrestored =
      failed.unrestored.empty() ? py::object(py::none()) : py::object(py::str(failed.unrestored));
  return py::make_tuple(error ? py::object(py::none()) : py::object(py::str(to_json(report))), where, cause, kept,
                        unrestored);
}

// ---- the report's field names -------------------------------------------------------------------

// A visitor over the records' field lists (fields.h) that keeps only their names: {field: null, or the
// nested record's names}, a vector of records by its element's. The Python Report (batchwise/
// _inprocess.py) knows from it which attributes a record has, so a misspelt one is an error, not None.
class Names {
 public:
  template <class T, class = void>
  struct IsRecord : std::false_type {};
  template <class T>
  struct IsRecord<T, std::void_t<decltype(fields(std::declval<Names&>(), std::declval<const T&>()))>> : std::true_type {
  };
  template <class T>
  struct Unwrap {
    using type = T;
  };
  template <class T>
  struct Unwrap<std::optional<T>> : Unwrap<T> {};
  template <class T, class A>
  struct Unwrap<std::vector<T, A>> : Unwrap<T> {};

  template <class M, class... When>
  void operator()(const char* name, const M&, When...) {
    out_[name] = shape<typename Unwrap<M>::type>();
  }
  template <class F>
  void object(const char* name, F&& list) {
    Names nested;
    list(nested);
    out_[name] = std::move(nested.out_);
  }
  template <class F>
  void object(const char* name, When, F&& list) {
    object(name, list);
  }
  template <class M>
  void computed(const char* name, const M& value) {
    (*this)(name, value);
  }
  template <class R, class G, class S, class... C>
  void property(const char* name, const R& record, G&& get, S&&, C...) {
    (*this)(name, get(record));
  }
  template <class M>
  static py::object shape() {
    if constexpr (IsRecord<M>::value) {
      Names names;
      const M record{};
      fields(names, record);
      return std::move(names.out_);
    } else {
      return py::none();
    }
  }

 private:
  py::dict out_;
};

}  // namespace
}  // namespace batchwise::python

PYBIND11_MODULE(_engine, m) {
  using namespace batchwise;
  m.doc() = "batchwise's C++ engine on Python models (use batchwise.fit, sweep and tune)";
  CpuMemoryTracker::install();  // every CPU tensor from here on is counted (the model's are moved in)
  static py::exception<Error> error(m, "Error", PyExc_RuntimeError);
  static py::exception<ConfigError> config(m, "ConfigError", PyExc_ValueError);
  static py::exception<DataError> data(m, "DataError", PyExc_ValueError);
  static py::exception<ModelError> model(m, "ModelError", error.ptr());
  static py::exception<DeviceError> device(m, "DeviceError", error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ConfigError& e) {
      PyErr_SetString(config.ptr(), e.what());
    } catch (const DataError& e) {
      PyErr_SetString(data.ptr(), e.what());
    } catch (const ModelError& e) {
      PyErr_SetString(model.ptr(), e.what());
    } catch (const DeviceError& e) {
      PyErr_SetString(device.ptr(), e.what());
    } catch (const Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });
  m.def("run", &python::run, py::arg("adapter"), py::arg("options"), py::arg("command"),
        "Runs fit, sweep or tune on an adapter (batchwise/_inprocess.py): (report JSON or None, where, the "
        "user's first exception or None, kept, the restoring call that raised or None)");
  m.def(
      "check_options",
      [](const py::dict& options, const std::string& command) {
        const python::Options o(options);
        const double epochs = o.get("epochs", 0.0), accuracy = o.get("target_accuracy", 0.0),
                     loss = o.get("target_loss", 0.0);
        if (command == "tune")
          check_tune_options(TuneOptions()
                                 .epochs(epochs)
                                 .target_accuracy(accuracy)
                                 .target_loss(loss)
                                 .race(!o.get("no_race", false))
                                 .race_budget_s(o.get("advice_budget", 0.0)));
        if (command == "validate") check_targets(epochs, accuracy, loss);
      },
      py::arg("options"), py::arg("command"),
      "Raises ConfigError where the options ask what the command cannot answer, whatever the data (before it "
      "reads any)");
  m.def(
      "html", [](const std::string& report_json) { return to_html(report_json); }, "The report's HTML page");
  m.def(
      "table", [](const std::string& report_json) { return to_table(report_from_json(report_json, "the report")); },
      "The report's console table");
  m.def(
      "summary", [](const std::string& report_json) { return to_summary(report_from_json(report_json, "the report")); },
      "The report's short console view (tune without --verbose): the answer and its why in a few lines");
  m.def("parse_bytes", [](const std::string& text) { return parse_bytes(text, "memory_budget"); });
  m.def("parse_batch_sizes", [](const std::string& text) { return parse_batch_sizes(text, "batch_sizes"); });
  m.def(
      "out_of_bound",
      [](const std::string& flag, double value, const std::string& text) {
        const OptionBound* bound = find_option_bound(flag);
        return bound ? out_of_bound(*bound, value, text) : std::string();
      },
      "Why `value` (written `text`) is outside the CLI flag's bounds (choices.h's option_bounds), or \"\"");
  m.def(
      "counted_bytes", [] { return CpuMemoryTracker::install().current_bytes(); },
      "CPU tensor bytes counted now (the budget's measure)");
  m.def(
      "untracked",
      [](const py::function& f) {
        UntrackedScope scope;
        return f();
      },
      "Calls f with its CPU allocations left out of the count (data held in RAM, not the device's)");
  m.def(
      "report_fields", [] { return python::Names::shape<Report>(); },
      "The report's fields: {name: None, or the nested record's fields}");
  m.attr("torch_version") = TORCH_VERSION;
}
