// Time to a target metric at each candidate batch size: real training, held-out evaluation.
#include "batchwise/validate.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>

#include "batchwise/workload.h"
#include "check.h"

namespace batchwise {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool reached(const ValidateOptions& o, const ValidationPoint& p) {
  if (o.target_accuracy() > 0 && p.accuracy && *p.accuracy >= o.target_accuracy()) return true;
  return o.target_loss() > 0 && p.loss <= o.target_loss();
}

ValidationRun run_one(ModuleWorkload& w, const Dataset& held_out, const ValidateOptions& o, int64_t batch) {
  ValidationRun run;
  run.batch = batch;
  const double base_lr = o.base_lr() > 0 ? o.base_lr() : w.info().lr;
  run.lr = scale_lr(w.info().optimizer, o.base_batch(), base_lr, batch);
  // The rule's warm-up (5 epochs for linear scaling), capped so that a short validation still
  // trains most of its budget at the scaled rate.
  run.warmup_epochs = std::min<double>(run.lr.warmup_epochs, o.max_epochs() / 4);
  const int64_t epoch = w.data().size();
  const double warmup_samples = run.warmup_epochs * static_cast<double>(epoch);
  const int64_t eval_every = o.eval_every_samples() > 0 ? o.eval_every_samples() : std::max<int64_t>(1, epoch / 20);
  const int64_t max_samples = static_cast<int64_t>(std::ceil(o.max_epochs() * static_cast<double>(epoch)));

  int64_t samples = 0, next_eval = eval_every;
  double train_s = 0;
  while (true) {
    const double fraction = warmup_samples > 0 ? std::min(1.0, static_cast<double>(samples) / warmup_samples) : 1.0;
    w.set_lr(run.lr.base_lr + (run.lr.lr - run.lr.base_lr) * fraction);
    const auto start = Clock::now();
    const Batch b = w.next_batch(batch);
    const double loss = w.train_step(b).item<double>();  // reading it waits for the device
    train_s += since(start);
    samples += batch;
    ++run.steps;
    if (!std::isfinite(loss)) {
      run.message = fmt::format("the training loss became {} after {} steps: this learning rate ({:.4g}) diverges",
                                loss, run.steps, run.lr.lr);
      break;
    }
    if (samples >= next_eval || samples >= max_samples) {
      next_eval = samples + eval_every;
      const auto eval_start = Clock::now();
      const auto [held_loss, accuracy] = w.evaluate(held_out);
      run.eval_s += since(eval_start);
      run.curve.push_back({samples, run.steps, train_s, held_loss, accuracy});
      if (reached(o, run.curve.back())) {
        run.reached = true;
        break;
      }
    }
    if (samples >= max_samples) {
      run.message = fmt::format("not reached within --max-epochs {:g}", o.max_epochs());
      break;
    }
    if (o.max_seconds() > 0 && train_s >= o.max_seconds()) {
      run.message = fmt::format("not reached within --max-seconds {:g}", o.max_seconds());
      break;
    }
  }
  run.train_s = train_s;
  run.epochs = static_cast<double>(samples) / static_cast<double>(epoch);
  if (!run.curve.empty()) run.last = run.curve.back();
  return run;
}

}  // namespace

ValidationResult validate(Workload& workload, const Dataset& held_out, const ValidateOptions& o) {
  auto* w = dynamic_cast<ModuleWorkload*>(&workload);
  BATCHWISE_CHECK(w != nullptr, ConfigError,
                  "validate: {} is not a torch::nn module workload; time-to-accuracy needs batchwise's own training "
                  "loop and evaluation",
                  workload.info().model);
  BATCHWISE_CHECK(o.target_accuracy() > 0 || o.target_loss() > 0, ConfigError,
                  "validate: no target; give --target-accuracy (e.g. 0.85) or --target-loss (e.g. 0.4)");
  BATCHWISE_CHECK(o.target_accuracy() <= 1, ConfigError, "--target-accuracy {}: must be at most 1",
                  o.target_accuracy());
  BATCHWISE_CHECK(o.target_accuracy() == 0 || held_out.targets.scalar_type() == at::kLong, ConfigError,
                  "--target-accuracy: the held-out targets are not class labels (--loss mse); use --target-loss");
  BATCHWISE_CHECK(!o.batch_sizes().empty(), ConfigError, "validate: no candidate batch sizes");
  BATCHWISE_CHECK(o.max_epochs() > 0, ConfigError, "--max-epochs {}: must be positive", o.max_epochs());
  BATCHWISE_CHECK(held_out.size() > 0, DataError, "{}: the held-out set is empty", held_out.name);

  ValidationResult result;
  result.target = o.target_accuracy() > 0 ? fmt::format("test accuracy >= {:g}", o.target_accuracy())
                                          : fmt::format("test loss <= {:g}", o.target_loss());
  if (o.target_accuracy() > 0 && o.target_loss() > 0) result.target += fmt::format(" or test loss <= {:g}", o.target_loss());
  result.held_out = fmt::format("{} test split, {} samples", held_out.name, held_out.size());
  const std::unique_ptr<WorkloadState> initial = workload.save_state();
  const double lr_before = w->info().lr;
  for (const int64_t batch : o.batch_sizes()) {
    workload.restore_state(*initial);  // every candidate starts from the same weights and data order
    try {
      result.runs.push_back(run_one(*w, held_out, o, batch));
    } catch (const ConfigError&) {
      throw;  // a setting that no candidate can run with
    } catch (const std::exception& e) {  // out of memory at this batch, or a failing step: a result
      ValidationRun failed;
      failed.batch = batch;
      failed.lr = scale_lr(w->info().optimizer, o.base_batch(), o.base_lr() > 0 ? o.base_lr() : lr_before, batch);
      const std::string what = e.what();
      failed.message = "failed: " + what.substr(0, what.find('\n'));
      result.runs.push_back(failed);
    }
  }
  workload.restore_state(*initial);
  w->set_lr(lr_before);
  const ValidationRun* fastest = nullptr;
  for (const auto& r : result.runs)
    if (r.reached && (!fastest || r.train_s < fastest->train_s)) fastest = &r;
  if (fastest) result.fastest_batch = fastest->batch;
  return result;
}

Recommendation confirm(const Recommendation& rec, const ValidationResult& v) {
  const ValidationRun* predicted = nullptr;
  const ValidationRun* fastest = nullptr;
  for (const auto& r : v.runs) {
    if (r.batch == rec.batch) predicted = &r;
    if (v.fastest_batch && r.batch == *v.fastest_batch) fastest = &r;
  }
  auto took = [&](const ValidationRun& r) {
    return fmt::format("{:.1f} s of training ({} steps, {:.2f} epochs, lr {:.4g})", r.train_s, r.steps, r.epochs,
                       r.lr.lr);
  };
  Recommendation out = rec;
  if (!fastest) {
    out.reason = fmt::format("{}; not validated: no candidate reached {} ({})", rec.reason, v.target,
                             v.runs.empty() ? "none ran" : v.runs.front().message);
  } else if (fastest->batch == rec.batch) {
    out.reason = fmt::format("{}; validated: it reached {} soonest, in {}", rec.reason, v.target, took(*fastest));
  } else {
    out.batch = fastest->batch;
    out.reason = fmt::format(
        "batch {} reached {} soonest, in {}, where the predicted batch {} {}; the prediction was: {}", fastest->batch,
        v.target, took(*fastest), rec.batch,
        predicted ? (predicted->reached ? "took " + took(*predicted) : "did not reach it (" + predicted->message + ")")
                  : "was not run",
        rec.reason);
  }
  return out;
}

}  // namespace batchwise
