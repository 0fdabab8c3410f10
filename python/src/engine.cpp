// batchwise._engine: the C++ engine on a Python model, optimizer, loss and data, in the user's process.
//
// The user's objects become a ModuleWorkload (python_calls.h, adapter.cpp); here each call's options,
// its plan of phases, its progress lines and its report. The GIL is released while the engine runs
// (autograd's device threads may need it for a model's Python autograd functions) and taken for each
// call into Python.
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
#include "python_calls.h"
#include "torch_error.h"

namespace batchwise::python {
namespace {

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
  const std::string output_text = fmt::format("{} column{} of {}'s output ([{}])", columns, columns == 1 ? "" : "s",
                                              workload.info().model, fmt::join(output.sizes(), ", "));
  throw DataError(fmt::format(
      "{} ({}): its labels run {}, which cross-entropy reads by label{}; give labels from 0 to {}{}{}{}", what,
      data.name,
      lowest < 0 ? fmt::format("from {}, below the first of the {}", lowest, output_text)
                 : fmt::format("to {}, past the {}", classes - 1, output_text),
      workload.device().is_cuda()
          ? " (on CUDA a label out of range is a device-side assert, after which this process can use the GPU no more)"
          : "",
      columns - 1, lowest == 1 && classes == columns + 1 ? " (labels that start at 1: y - 1)" : "",
      classes > columns ? fmt::format(", or a model with {} outputs", classes) : "",
      columns == 1 && classes == 2 && lowest == 0  // one logit for two classes: a binary loss, not cross-entropy
          ? "; a model of one output for labels 0 and 1 trains with loss=torch.nn.BCEWithLogitsLoss() on float targets"
          : ""));
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
  struct ClearFailure {  // on every way out, with the GIL: the user's exception, its traceback and its tensors go
    ~ClearFailure() { failure() = Failure{}; }
  } clear_failure;
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
  // The label a cross-entropy (or NLL) loss skips; none where the loss is not one (probe_labels).
  const py::object skipped = adapter.attr("cross_entropy_ignore_index");
  const bool probe = !skipped.is_none();
  const int64_t ignore_index = probe ? skipped.cast<int64_t>() : 0;
  if (probe) workload->set_ignored_label(ignore_index);  // its samples count in no accuracy, as in no loss
  // Every option is read here, with the GIL.
  const Plan p = plan(o, progress, report.budget_bytes, workload->device().is_cuda());
  std::exception_ptr error;
  {
    py::gil_scoped_release nogil;
    try {
      // The user's forward and loss run here: what they raise is the call's failure, as in training (outside
      // this block it had stayed in the failure slot, a Ctrl-C in it an "interrupted" error)
      detail::refuse_values_the_loss_cannot_take(*workload, workload->data(), "data", python_repair);
      if (held_out.size() > 0)
        detail::refuse_values_the_loss_cannot_take(*workload, held_out, "held_out", python_repair);
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
  Failure failed = std::move(failure());  // the slot itself is cleared on the way out (ClearFailure)
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
  m.def("write_output", &write_output, py::arg("path"), py::arg("text"), py::arg("what"),
        py::call_guard<py::gil_scoped_release>(),  // a FIFO's reader may be a thread of this process
        "Writes text where path leads (a link's target): into a descriptor, FIFO or device, or to a file replaced "
        "whole (a file of its own beside it, renamed into place with the mode the file had); raises ConfigError "
        "naming `what`");
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
