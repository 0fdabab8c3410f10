// The utilisation monitor's cost on the steps it watches, measured finely enough to see 0.5 %:
// one process trains lenet on Fashion-MNIST continuously and switches the monitor on and off every
// block of steps (on, off, off, on, on, off, ...: an ABBA order, so that a drift in the machine
// hits both alike). Each block is a trial as batchwise runs one: the monitor is started for it
// (sampling every 0.25 s, as trials do), told of every step boundary (where, on CPU, it takes its
// due samples, outside the timed steps) and finished after it. Per pair of neighbouring blocks the
// ratio of median step times is taken; the median of those ratios, with a bootstrap 95 % interval,
// is the monitor's cost. Build with -DBATCHWISE_BUILD_BENCH=ON, then:
//   build/bench/batchwise_bench_monitor [pairs] [steps_per_block] [batch]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <random>
#include <vector>

#include "batchwise/units.h"
#include "batchwise/utilisation.h"
#include "batchwise/workload.h"

using namespace batchwise;

int main(int argc, char** argv) {
  const int pairs = argc > 1 ? std::atoi(argv[1]) : 40;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 150;
  const int64_t batch = argc > 3 ? std::atoll(argv[3]) : 64;
  auto workload = make_workload(WorkloadOptions().model("lenet").device("cpu"));
  using clock = std::chrono::steady_clock;
  int samples = 0, between = 0;
  double cost_s = 0, monitored_s = 0;
  auto block = [&](bool monitored) {
    std::optional<UtilisationMonitor> monitor;
    if (monitored) monitor.emplace(0.25, -1);
    std::vector<double> times;
    const auto block_start = clock::now();
    for (int i = 0; i < steps; ++i) {
      const auto start = clock::now();
      (void)workload->train_step(workload->next_batch(batch)).item<double>();
      times.push_back(std::chrono::duration<double>(clock::now() - start).count());
      if (monitor) monitor->step_boundary();
    }
    if (monitor) {
      const UtilisationSummary u = monitor->finish();
      samples += u.samples;
      between += u.samples_between_steps;
      const double block_s = std::chrono::duration<double>(clock::now() - block_start).count();
      cost_s += u.overhead_percent / 100 * block_s;
      monitored_s += block_s;
    }
    return median(times);
  };
  for (int i = 0; i < 3; ++i) (void)block(false);  // warm-up
  std::vector<double> ratios, on_all, off_all;
  for (int p = 0; p < pairs; ++p) {
    const bool on_first = p % 2 == 0;  // ABBA
    const double first = block(on_first), second = block(!on_first);
    const double on = on_first ? first : second, off = on_first ? second : first;
    ratios.push_back(on / off);
    on_all.push_back(on);
    off_all.push_back(off);
  }
  std::mt19937 rng(1);
  std::vector<double> boot;
  for (int b = 0; b < 2000; ++b) {
    std::vector<double> sample;
    for (size_t i = 0; i < ratios.size(); ++i) sample.push_back(ratios[rng() % ratios.size()]);
    boot.push_back(median(sample));
  }
  std::sort(boot.begin(), boot.end());
  const double cost = median(ratios) - 1;
  fmt::print("lenet, batch {}, {} pairs of {}-step blocks (monitor at 4 Hz on / off, ABBA order)\n", batch, pairs,
             steps);
  fmt::print("median step: {:.3f} ms with the monitor, {:.3f} ms without\n", 1e3 * median(on_all),
             1e3 * median(off_all));
  fmt::print("step-time cost of the monitor: {:+.2f} % (95 % bootstrap interval {:+.2f} % to {:+.2f} %)\n", 100 * cost,
             100 * (boot[50] - 1), 100 * (boot[1949] - 1));
  fmt::print(
      "the monitor's own time: {} samples, {} of them between steps; {:.1f} us per sample, {:.3f} % of the "
      "monitored wall time\n",
      samples, between, 1e6 * cost_s / std::max(samples, 1), 100 * cost_s / monitored_s);
  return 0;
}
