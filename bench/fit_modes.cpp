// fit modes side by side: model, binsearch, power, and our reimplementation of Ultralytics'
// AutoBatch method, on the same workloads, budget and target, in one run. Prints a markdown table
// for docs/benchmarks.md. Build with -DBATCHWISE_BUILD_BENCH=ON, then:
//   build/bench/batchwise_bench_fit [budget_mib]
//
// "ultralytics (ours)" reimplements the method described in Ultralytics' AutoBatch: one
// forward+backward pass (no optimizer step) at batches 1, 2, 4, 8, 16, a least-squares line of
// peak memory against batch, solved for the target fraction of the budget, with no verification
// trial. Their default fraction is 0.6 and they clamp the result to 1..1024; here the fraction is
// the same 0.9 target as the other modes and there is no clamp, so the comparison is of the method.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "batchwise/choices.h"
#include "batchwise/fit.h"
#include "batchwise/memory.h"
#include "batchwise/workload.h"

using namespace batchwise;

namespace {

// Forward and backward only, as Ultralytics' probes do: no optimizer step, so no optimizer state.
class ForwardBackwardOnly final : public Workload {
 public:
  explicit ForwardBackwardOnly(ModuleWorkload& inner) : inner_(inner) {}
  WorkloadInfo info() const override { return inner_.info(); }
  c10::Device device() const override { return inner_.device(); }
  Batch next_batch(int64_t b) override { return inner_.next_batch(b); }
  at::Tensor train_step(const Batch& b) override {
    inner_.module().zero_grad();
    at::Tensor loss = inner_.loss()(inner_.model().forward(b.input), b.target);
    loss.backward();
    return loss.detach();
  }
  std::unique_ptr<WorkloadState> save_state() override { return inner_.save_state(); }
  void restore_state(const WorkloadState& s) override { inner_.restore_state(s); }

 private:
  ModuleWorkload& inner_;
};

struct Row {
  std::string method;
  std::optional<int64_t> batch;
  size_t trials = 0;
  int steps = 0;
  double wall_s = 0;
};

Row ultralytics(Workload& w, int64_t budget, double target) {
  auto& inner = dynamic_cast<ModuleWorkload&>(w);
  ForwardBackwardOnly probe(inner);
  Row row{"ultralytics (ours)"};
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> xs, ys;
  for (int64_t b : {1, 2, 4, 8, 16}) {
    const Trial t = run_trial(probe, TrialOptions(b).warmup(0).steps(1).limit_bytes(budget));
    ++row.trials;
    row.steps += t.steps_run;
    if (t.outcome != Outcome::Ok) break;
    xs.push_back(static_cast<double>(b));
    ys.push_back(static_cast<double>(t.peak_bytes));
  }
  if (xs.size() >= 2) {
    const double n = static_cast<double>(xs.size());
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      sx += xs[i];
      sy += ys[i];
      sxx += xs[i] * xs[i];
      sxy += xs[i] * ys[i];
    }
    const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    const double intercept = (sy - slope * sx) / n;
    if (slope > 0)
      row.batch = static_cast<int64_t>(std::floor((target * static_cast<double>(budget) - intercept) / slope));
  }
  row.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return row;
}

Row run_fit(Workload& w, FitMode mode, int64_t budget, double target) {
  const auto start = std::chrono::steady_clock::now();
  const FitResult r = fit(w, FitOptions().mode(mode).budget_bytes(budget).target(target));
  Row row{to_string(mode), r.batch, r.trials.size()};
  for (const auto& t : r.trials) row.steps += t.steps_run;
  row.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t budget = (argc > 1 ? std::stoll(argv[1]) : 48) << 20;
  const double target = 0.9;
  CpuMemoryTracker::install();
  const std::pair<const char*, const char*> workloads[] = {
      {"mlp", "sgd"},    {"mlp", "adam"},    {"mlp", "adamw"},       {"lenet", "sgd"},
      {"lenet", "adam"}, {"lenet", "adamw"}, {"transformer", "sgd"}, {"transformer", "adam"}};
  fmt::print(
      "| workload | method | batch found | exact maximum | overshoot | trials | steps | wall s | wall / binsearch |\n");
  fmt::print("|---|---|---:|---:|---|---:|---:|---:|---:|\n");
  int overshoots[4] = {0, 0, 0, 0};
  double wall[4] = {0, 0, 0, 0};
  for (const auto& [model, optimizer] : workloads) {
    auto w = make_workload(WorkloadOptions()
                               .model(model)
                               .optimizer(*known_optimizer(optimizer))
                               .dataset("synthetic")
                               .synthetic_size(1024)
                               .seq_len(16)
                               .device("cpu"));
    std::vector<Row> rows{run_fit(*w, FitMode::Binsearch, budget, target), run_fit(*w, FitMode::Model, budget, target),
                          run_fit(*w, FitMode::Power, budget, target), ultralytics(*w, budget, target)};
    const int64_t exact = *rows[0].batch;
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const bool over = r.batch && *r.batch > exact;
      overshoots[i] += over;
      wall[i] += r.wall_s;
      fmt::print("| {}/{} | {} | {} | {} | {} | {} | {} | {:.2f} | {:.2f} |\n", model, optimizer, r.method,
                 r.batch ? std::to_string(*r.batch) : "none", exact, over ? "**yes**" : "no", r.trials, r.steps,
                 r.wall_s, r.wall_s / rows[0].wall_s);
    }
  }
  const char* names[] = {"binsearch", "model", "power", "ultralytics (ours)"};
  fmt::print("\n| method | overshoots (of 8) | total wall s | wall / binsearch |\n|---|---:|---:|---:|\n");
  for (int i = 0; i < 4; ++i)
    fmt::print("| {} | {} | {:.1f} | {:.2f} |\n", names[i], overshoots[i], wall[i], wall[i] / wall[0]);
  return 0;
}
