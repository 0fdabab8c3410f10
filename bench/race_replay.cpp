// The batch race replayed from a tune report: the candidates that report's sweep gives
// (race_candidates) at its measured samples/s, with the reserve (race_reserve), on the report's
// workload from the same seed: for a race whose outcome depended on one run's sweep
// (docs/benchmarks.md#advice). Build with -DBATCHWISE_BUILD_BENCH=ON, then:
//   build/bench/batchwise_bench_race_replay REPORT.json SEED BUDGET_S [TARGET_ACCURACY [EVALUATIONS]]
// BUDGET_S is the race's training budget (the report's first note gives its first rung's slice);
// TARGET_ACCURACY 0 for none; EVALUATIONS per entry and rung (default 3, as tune).
// The run race instead (tune --epochs), with the report's epochs and rate schedule and the reserve
// as tune gives it; BUDGET_S is its training budget (tune's stage line gives it):
//   build/bench/batchwise_bench_race_replay REPORT.json SEED BUDGET_S run
// DATA_DIR=DIR in the environment: the data tune read with --data-dir DIR.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>

#include "batchwise/choices.h"
#include "batchwise/error.h"
#include "batchwise/race.h"
#include "batchwise/report.h"
#include "batchwise/run_race.h"
#include "batchwise/workload.h"
#include "report/report_file.h"

using namespace batchwise;

int main(int argc, char** argv) try {
  if (argc < 4) {
    fmt::print(stderr, "usage: {} REPORT.json SEED BUDGET_S [TARGET_ACCURACY [EVALUATIONS]]\n", argv[0]);
    return 2;
  }
  const Report report = report_from_json(batchwise::detail::read_text(argv[1]), argv[1]);
  if (!report.sweep) throw ConfigError(fmt::format("{}: no sweep to replay the race from", argv[1]));
  const auto rates = [&](const std::vector<int64_t>& batches) { return race_rates(report.sweep->points, batches); };
  const std::vector<int64_t> candidates = race_candidates(report.sweep->points);
  const std::vector<int64_t> reserve = race_reserve(report.sweep->points, candidates);
  WorkloadOptions options;
  options.model(report.workload.model)
      .dataset(report.workload.dataset)
      .optimizer(*known_optimizer(report.workload.optimizer))
      .lr(report.workload.lr)
      .data_dir(std::getenv("DATA_DIR") ? std::getenv("DATA_DIR") : "")  // a subset's, as tune's --data-dir
      .seed(std::stoull(argv[2]))
      .device("cpu");
  auto workload = make_workload(options);
  auto& w = dynamic_cast<ModuleWorkload&>(*workload);
  const double budget = std::stod(argv[3]);
  const int64_t base_batch = report.lr ? report.lr->scaled.base_batch : 32;  // tune's --base-batch
  if (argc > 4 && std::string(argv[4]) == "run") {
    if (!report.run_race) throw ConfigError(fmt::format("{}: no run race to replay (tune --epochs N)", argv[1]));
    fmt::print("run race: candidates {} at {::.0f} samples/s, reserve {}; budget {:g} s\n", candidates,
               rates(candidates), reserve, budget);
    const RunRace race =
        race_runs(w, load_test_split(options),  // the whole test split, as tune's run race
                  RunRaceOptions(candidates, rates(candidates), LrAdviceOptions(base_batch, report.workload.lr))
                      .epochs(report.run_race->epochs)
                      .lr_schedule(parse_lr_schedule(report.run_race->lr_schedule))
                      .budget_s(budget)
                      .noise_at_start(report.noise ? report.noise->b_simple : std::nullopt)
                      .reserve(reserve)
                      .reserve_samples_per_s(rates(reserve)));
    for (const auto& n : race.notes) fmt::print("note: {}\n", n);
    fmt::print("lengths {::.3g} epochs at batch {}\n", race.lengths_epochs, race.reference_batch);
    for (const RunRaceEntry& e : race.entries)
      fmt::print("batch {:>5}{}: good {}, predicted gap {}, {}\n", e.batch, e.earlier_round ? " (first round)" : "",
                 e.good, e.predicted_gap ? fmt::format("{:.4f}", *e.predicted_gap) : "-",
                 e.run && e.run->accuracy
                     ? fmt::format("accuracy {:.3f} after {:.3g} epochs", *e.run->accuracy, e.run->epochs)
                     : e.message);
    fmt::print("pick: {} (wall {:.0f} s): {}\n", race.best_batch ? std::to_string(*race.best_batch) : "none",
               race.wall_s, race.pick_reason);
    return 0;
  }
  fmt::print("candidates {} at {::.0f} samples/s, reserve {}; budget {:g} s\n", candidates, rates(candidates), reserve,
             budget);
  const BatchRace race =
      race_batches(w, head(load_test_split(options), 2048),
                   BatchRaceOptions(candidates, rates(candidates), LrAdviceOptions(base_batch, report.workload.lr))
                       .budget_s(budget)
                       .max_wall_s(3 * budget + 30)
                       .target_accuracy(argc > 4 ? std::stod(argv[4]) : 0)
                       .evaluations(argc > 5 ? std::stoi(argv[5]) : 3)
                       .reserve(reserve)
                       .reserve_samples_per_s(rates(reserve)));
  for (const auto& n : race.notes) fmt::print("note: {}\n", n);
  for (const RaceEntry& e : race.entries) {
    fmt::print("batch {:>5}: {} rungs, {:.1f} s of training at lr {:.4g}, held-out loss {:.3f}, accuracy {:.3f}{}\n",
               e.batch, e.rungs, e.train_s, e.lr.lr, e.curve.back().loss, e.curve.back().accuracy.value_or(0),
               e.target_s ? fmt::format(", target at {:.1f} s", *e.target_s) : "");
    std::string curve;
    for (const auto& p : e.curve) curve += fmt::format(" ({:.3f} s, {:.4f})", p.train_s, p.loss);
    fmt::print("  curve:{}\n", curve);
  }
  fmt::print("pick: {} (wall {:.0f} s)\n", race.best_batch ? std::to_string(*race.best_batch) : "none", race.wall_s);
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "error: {}\n", e.what());
  return 1;
}
