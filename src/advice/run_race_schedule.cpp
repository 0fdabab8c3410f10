// The batch-size schedule the run race weighs against its pick: where the batch whose samples buy
// the most progress per second grows along the run (as the noise scale does), phases of growing
// batches, each at its advised rate, priced by McCandlish et al.'s (2018) efficiency with the noise
// scale measured along the reference's compressed runs.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "advice/run_race_internal.h"
#include "batchwise/run_race.h"
#include "batchwise/schedule.h"
#include "batchwise/units.h"

namespace batchwise {

namespace {

using detail::kNoiseUnbounded;

// The noise scale's growth with the samples trained is carried on as a power of them, at most
// linear: a steeper growth between two noisy measurements is not extrapolated over the run.
constexpr double kMostNoiseGrowth = 1.0;
// Points of the mean over the run in run_efficiency.
constexpr int kEfficiencyPoints = 256;
// A batch-size schedule is weighed where the batch whose samples buy the most progress per second
// grows at least this much over the run, and proposed where it saves at least kScheduleSaving of the
// pick's time (issue #30: a schedule must pay for the complication of changing the batch).
constexpr double kScheduleGrowth = 2;
constexpr double kScheduleSaving = 0.05;  // as kLeastSaving (run_race_internal.h), for its own reason
// Where its phases may switch: every sixteenth of the run, or whole epochs near them in a run of 16
// epochs or more.
constexpr int kSwitchPoints = 16;

}  // namespace

double noise_at(const std::vector<std::pair<double, double>>& noise, double s) {
  if (noise.size() == 1) return noise[0].second;
  const auto& [s0, b0] = noise[0];
  const auto& [s1, b1] = noise[1];
  if (s <= s1) return b0 + (b1 - b0) * (s - s0) / std::max(s1 - s0, 1e-12);
  if (noise.size() == 2) return b1;
  for (size_t i = 2; i < noise.size(); ++i) {
    const auto& [sa, ba] = noise[i - 1];
    const auto& [sb, bb] = noise[i];
    // A power of the samples through the two.
    const double k = ba > 0 && bb > 0 && sa > 0 && sb > sa ? std::log(bb / ba) / std::log(sb / sa) : 0.0;
    if (s <= sb) return ba * std::pow(s / sa, k);
    if (i + 1 == noise.size()) return bb * std::pow(s / sb, std::clamp(k, 0.0, kMostNoiseGrowth));
  }
  return noise.back().second;
}

std::pair<double, double> schedule_share_and_time(const std::vector<std::pair<double, double>>& noise,
                                                  double run_samples, int64_t dataset, int64_t reference,
                                                  const std::vector<BatchPhase>& phases,
                                                  const std::vector<double>& correction,
                                                  const std::vector<double>& samples_per_s) {
  if (phases.empty() || run_samples <= 0) return {1, 0};
  const auto epoch = static_cast<double>(dataset);
  double sum = 0;
  for (int i = 0; i < kEfficiencyPoints; ++i) {
    const double s = run_samples * (i + 0.5) / kEfficiencyPoints;
    const size_t k = &phase_at(phases, s / epoch) - phases.data();
    const double b = noise.empty() ? kNoiseUnbounded : noise_at(noise, s);
    sum += correction[k] * (1 + static_cast<double>(reference) / b) / (1 + static_cast<double>(phases[k].batch) / b);
  }
  double time = 0;
  for (size_t k = 0; k < phases.size(); ++k) {
    const double from = std::min(run_samples, phases[k].from_epoch * epoch);
    const double to = k + 1 < phases.size() ? std::min(run_samples, phases[k + 1].from_epoch * epoch) : run_samples;
    time += std::max(0.0, to - from) / samples_per_s[k];
  }
  return {sum / kEfficiencyPoints, time};
}

double run_efficiency(const std::vector<std::pair<double, double>>& noise, double run_samples, int64_t reference,
                      int64_t batch) {
  if (noise.empty() || run_samples <= 0) return 1;
  const auto b_noise = [&](double s) { return noise_at(noise, s); };
  double sum = 0;
  for (int i = 0; i < kEfficiencyPoints; ++i) {
    const double b = b_noise(run_samples * (i + 0.5) / kEfficiencyPoints);
    sum += (1 + static_cast<double>(reference) / b) / (1 + static_cast<double>(batch) / b);
  }
  return sum / kEfficiencyPoints;
}

namespace {
// The schedule's phases switch at these epochs: sixteenths of the run, whole epochs near them in a
// run of 16 epochs or more.
std::vector<double> switch_epochs(double epochs) {
  std::vector<double> out;
  for (int k = 1; k < kSwitchPoints; ++k) {
    double e = epochs * k / kSwitchPoints;
    if (epochs >= kSwitchPoints) e = std::round(e);
    if (e > 0 && e < epochs && (out.empty() || e > out.back())) out.push_back(e);
  }
  return out;
}

// A gap behind the reference as the race measures it.
std::string gap_words(const RunRace& race, double gap) {
  return race.measure == "accuracy" ? fmt::format("{:.2f} accuracy points", 100 * gap)
                                    : fmt::format("{:.1f} % of the loss", 100 * gap);
}

// Why no schedule can save kScheduleSaving of the pick's time: none is faster than its fastest
// phase; empty where one can.
std::string no_saving_reason(const std::vector<const RunRaceEntry*>& usable, const RunRaceEntry& pick) {
  const RunRaceEntry* fastest = &pick;
  for (const RunRaceEntry* e : usable)
    if (e->full_run_s < fastest->full_run_s) fastest = e;
  if (1 - fastest->full_run_s / pick.full_run_s >= kScheduleSaving) return {};
  return fastest->batch == pick.batch
             ? fmt::format(
                   "no batch-size schedule: none can save time on batch {}'s {}, the fastest run of "
                   "any batch a schedule can use (raced and trained)",
                   pick.batch, format_seconds(pick.full_run_s))
             : fmt::format(
                   "no batch-size schedule: none can save {:.0f} % of batch {}'s {}, as the fastest "
                   "batch a schedule can use (raced and trained), {}, would train the whole run in {}",
                   100 * kScheduleSaving, pick.batch, format_seconds(pick.full_run_s), fastest->batch,
                   format_seconds(fastest->full_run_s));
}

}  // namespace
namespace detail {

// kScheduleGrowth and kScheduleSaving are the 2x and 5 % of its declaration.
void propose_schedule(RunRace& race, const std::vector<std::pair<double, double>>& noise,
                      const std::vector<double>& samples, const std::vector<double>& errors, double run_samples,
                      double loss_at_end, int64_t dataset, const RunRaceEntry& pick) {
  // Phases at every judged batch, a worse one too: a schedule can only save time on a batch faster
  // than the pick, and the pick is the fastest good one. Each phase's samples count at its own measured
  // share (the correction), and a phase follows another only where its batch buys at least as much
  // progress per second: a batch whose samples barely count never pays as a last phase, however little
  // error the learning curve carried far past the race leaves to lose (mlp AdamW: 4,096, 12.8 points
  // behind, as a last phase "as good as" 1,024 while only good batches were weighed).
  std::vector<const RunRaceEntry*> usable;
  for (const auto& e : race.entries)
    if (e.message.empty() && e.efficiency > 0 && e.share > 0) usable.push_back(&e);
  const auto reference = static_cast<double>(race.reference_batch);
  const auto correction = [](const RunRaceEntry& e) { return std::min(1.0, e.share / e.efficiency); };
  const auto progress = [&](const RunRaceEntry& e, double s) {  // samples that count per second at s
    const double b = std::min(kNoiseUnbounded, noise_at(noise, s));
    return e.samples_per_s * correction(e) * (1 + reference / b) / (1 + static_cast<double>(e.batch) / b);
  };
  const auto cheapest = [&](double s) {  // the batch whose samples count the most per second at s
    const RunRaceEntry* best = nullptr;
    double most = 0;
    for (const RunRaceEntry* e : usable)
      if (const double p = progress(*e, s); p > most) most = p, best = e;
    return best;
  };
  const RunRaceEntry* start = cheapest(run_samples / kEfficiencyPoints);
  const RunRaceEntry* end = cheapest(run_samples);
  if (!start || !end) return;
  race.batch_at_start = start->batch;
  race.batch_at_end = end->batch;
  race.schedule_reason = no_saving_reason(usable, pick);
  if (!race.schedule_reason.empty()) return;
  if (static_cast<double>(end->batch) < kScheduleGrowth * static_cast<double>(start->batch)) {
    race.schedule_reason = fmt::format(
        "no batch-size schedule: the batch whose samples buy the most progress per second is {} at the run's start "
        "and {} at its end, less than {:g}x growth",
        start->batch, end->batch, kScheduleGrowth);
    return;
  }
  const std::vector<double> switches = switch_epochs(race.epochs);
  std::optional<ScheduleAdvice> best;
  const auto weigh = [&](const std::vector<const RunRaceEntry*>& in, const std::vector<double>& from) {
    // Each phase from where its batch buys at least the progress per second of the one before.
    for (size_t k = 1; k < in.size(); ++k)
      if (const double s = from[k] * static_cast<double>(dataset); progress(*in[k], s) < progress(*in[k - 1], s))
        return;
    ScheduleAdvice a;
    std::vector<double> corrections, rates;
    for (size_t k = 0; k < in.size(); ++k) {
      a.phases.push_back({in[k]->batch, from[k]});
      a.lrs.push_back(in[k]->lr.lr);
      corrections.push_back(correction(*in[k]));
      rates.push_back(in[k]->samples_per_s);
    }
    std::tie(a.share, a.full_run_s) =
        schedule_share_and_time(noise, run_samples, dataset, race.reference_batch, a.phases, corrections, rates);
    a.predicted_gap = deficit(samples, errors, run_samples, a.share) / loss_at_end;
    // Within the tolerance, as a fixed batch must be: every fixed batch faster than the pick is beyond
    // it, so what a schedule saves is the growing batch's, not the tolerance's.
    if (a.predicted_gap > race.tolerance || (best && a.full_run_s >= best->full_run_s)) return;
    a.saving = 1 - a.full_run_s / pick.full_run_s;
    a.text = schedule_text(a.phases);
    best = a;
  };
  const auto grows = [](const RunRaceEntry* a, const RunRaceEntry* b) {
    return static_cast<double>(b->batch) >= kScheduleGrowth * static_cast<double>(a->batch);
  };
  for (size_t i = 0; i < usable.size(); ++i)
    for (size_t j = i + 1; j < usable.size(); ++j) {
      if (!grows(usable[i], usable[j])) continue;
      for (size_t t = 0; t < switches.size(); ++t) {
        weigh({usable[i], usable[j]}, {0, switches[t]});
        for (size_t k = j + 1; k < usable.size(); ++k)
          if (grows(usable[j], usable[k]))
            for (size_t u = t + 1; u < switches.size(); ++u)
              weigh({usable[i], usable[j], usable[k]}, {0, switches[t], switches[u]});
      }
    }
  if (!best) {
    race.schedule_reason = fmt::format(
        "no batch-size schedule: the best batch grows from {} to {} over the run, but every schedule of growing "
        "phases, each from where its batch buys the more progress per second, is predicted to end further behind "
        "batch {} than the tolerance of {}",
        start->batch, end->batch, race.reference_batch, gap_words(race, race.tolerance));
    return;
  }
  if (best->saving < kScheduleSaving) {
    race.schedule_reason = fmt::format(
        "no batch-size schedule: the best batch grows from {} to {} over the run, but the fastest schedule within the "
        "tolerance, {}, {} batch {}'s {}, less than the {:.0f} % a schedule must save",
        start->batch, end->batch, best->text,
        best->saving > 0 ? fmt::format("saves {:.1f} % of", 100 * best->saving) : std::string("is no faster than"),
        pick.batch, format_seconds(pick.full_run_s), 100 * kScheduleSaving);
    return;
  }
  std::vector<std::string> phases;
  for (size_t k = 0; k < best->phases.size(); ++k)
    phases.push_back(
        fmt::format("{} from epoch {:g} (lr {:.4g})", best->phases[k].batch, best->phases[k].from_epoch, best->lrs[k]));
  race.schedule_reason = fmt::format(
      "a batch-size schedule saves {:.0f} % of batch {}'s {}: batch {} ({}), predicted to end {} behind "
      "batch {}'s run, within the tolerance of {} (the best batch grows from {} to {} along the run, as the noise "
      "scale does; each phase at its batch's advised rate, one warm-up, the {} shape over the whole run); measure it "
      "with `batchwise validate (your workload's flags) --epochs {:g} --lr-schedule {} --batch-sizes {} "
      "--batch-schedule {}`",
      100 * best->saving, pick.batch, format_seconds(pick.full_run_s), fmt::join(phases, ", then "),
      format_seconds(best->full_run_s), gap_words(race, best->predicted_gap), race.reference_batch,
      gap_words(race, race.tolerance), start->batch, end->batch, race.lr_schedule, race.epochs, race.lr_schedule,
      pick.batch, best->text);
  race.schedule = best;
}

}  // namespace detail

}  // namespace batchwise
