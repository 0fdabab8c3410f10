// The user's Python objects as the engine's: their model, optimizer, loss and data wrapped as a
// ModuleWorkload (python_calls.h says how), and every call into their code made with the GIL held and
// its exception kept, so that the call into the engine ends with it.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/Exceptions.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "batchwise/error.h"
#include "batchwise/plan.h"
#include "check.h"
#include "engine/data_readers.h"
#include "engine/parameter_dtype.h"
#include "python_calls.h"
#include "torch_error.h"

namespace batchwise::python {
namespace {

// ---- calls into Python ---------------------------------------------------------------------------

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

}  // namespace

Failure& failure() {
  static Failure& f = *new Failure;  // never destroyed: at exit, a Python object it held outlived the interpreter
  return f;
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

namespace {

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
    return call_python(forward_, [&] {
      const py::object out = adapter_.attr("forward")(input);
      if (py::isinstance<py::dict>(out)) {  // the adapter takes a dict's 'logits': this one has none
        std::vector<std::string> keys;
        for (const auto& item : py::reinterpret_borrow<py::dict>(out))
          if (keys.size() < 6) keys.push_back(py::repr(item.first));
        throw ModelError(
            fmt::format("{} is a dict of {}, without 'logits': return the logits (a tensor), or a dict "
                        "with 'logits'",
                        output_, fmt::join(keys, ", ")));
      }
      return unpack(out, output_);
    });
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
    std::vector<double> ratios;
    for (size_t i = 0; i < groups.size(); ++i) ratios.push_back(first > 0 ? lr(static_cast<int>(i)) / first : 1.0);
    if (std::any_of(ratios.begin(), ratios.end(), [](double r) { return r != 1; })) settings.group_rates = ratios;
    for (size_t i = 0; i < groups.size(); ++i) {
      add_param_group(torch::optim::OptimizerParamGroup(groups[i]));
      param_groups().back().set_options(
          std::make_unique<GroupOptions>(adapter_, static_cast<int>(i), reference, ratios[i], settings));
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

}  // namespace

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

namespace {

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
      : ModuleWorkload(ValuesCheckedLater{}, std::forward<Args>(args)...), where_(std::move(where)) {}
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

}  // namespace

// How a Python caller drops the samples whose values are not finite numbers (refuse_values_the_loss_cannot_take)
std::string python_repair(const char* kind) {
  const char* x = std::string(kind) == "targets" ? "y" : "x";
  return fmt::format("keep = torch.isfinite({}).reshape(len(x), -1).all(1); x, y = x[keep], y[keep]", x);
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
  detail::count_parameters(info, *model);  // its type too: a model built in bf16 trains so, said beside "fp32"
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

}  // namespace batchwise::python
