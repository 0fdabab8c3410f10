#pragma once
/// The answer for the run the user will do (`tune --epochs N --lr-schedule cosine`): which batch
/// finishes N epochs soonest without a worse model, from measurements along a shortened run rather
/// than a whole one. The reference batch (the smallest candidate) trains the user's schedule
/// squeezed into three fractions of the run, each twice the one before: the final held-out quality
/// of each is a learning curve in the run's length, and the gradient noise scale at the start and
/// at the end of the two longer ones shows how the critical batch grows as training goes on
/// (McCandlish et al. 2018). Each other candidate trains the two longer compressed runs itself: how far behind the
/// reference's it ends at each length, and how that gap shrank as the run doubled, carried on to
/// the run's end (the critical batch grows as the loss falls, so a larger batch's lag early in a
/// run overstates its lag at the end: Merrill et al. 2025), is how far behind its full run is
/// predicted to end (docs/advice.md, "The run's answer").
#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/choices.h"
#include "batchwise/data.h"
#include "batchwise/error.h"
#include "batchwise/fields.h"
#include "batchwise/lr.h"
#include "batchwise/schedule.h"

namespace batchwise {

class ModuleWorkload;

/// Where a compressed run of the run race is (RunRaceOptions::on_step): `step` of `steps` of a run of
/// `epochs` (the user's run compressed) at `batch`; `loss`: the mean training loss over the steps
/// since the last report; `elapsed_s`: the race's wall time so far (on RunRaceOptions::clock).
struct RunRaceStep {
  int64_t batch = 0;
  double epochs = 0;
  int64_t step = 0, steps = 0;
  double loss = 0;
  double elapsed_s = 0;
};

/// race_runs' settings. Example:
/// `race_runs(w, test, RunRaceOptions({64, 256, 1024}, rates, LrAdviceOptions(32, 0.01)).epochs(10))`.
struct RunRaceOptions {
  RunRaceOptions(std::vector<int64_t> batches, std::vector<double> samples_per_s, LrAdviceOptions lr)
      : batches_(std::move(batches)), samples_per_s_(std::move(samples_per_s)), lr_(std::move(lr)) {}
  /// The candidates, and each one's measured samples/s (the sweep's): the full run's time, and how
  /// long each compressed run takes, follow from them.
  TORCH_ARG(std::vector<int64_t>, batches);
  TORCH_ARG(std::vector<double>, samples_per_s);
  /// Each candidate's rate is advised as tune advises it (advise_lr at that batch).
  TORCH_ARG(LrAdviceOptions, lr);
  /// The user's run: its length in epochs and the rate's shape after the warm-up.
  TORCH_ARG(double, epochs) = 0;
  TORCH_ARG(LrSchedule, lr_schedule) = LrSchedule::Cosine;
  /// Training seconds of the compressed runs together (predicted from the samples_per_s): the
  /// reference's three and every other candidate's two longer ones. At most a quarter, half and the
  /// whole run.
  TORCH_ARG(double, budget_s) = 30;
  /// The noise scale at the start (tune measured it already); unset: measured here.
  TORCH_ARG(std::optional<double>, noise_at_start);
  /// Training steps of each noise-scale measurement.
  TORCH_ARG(int, noise_steps) = 20;
  /// Batches held back (a sweep's smaller ones: race_reserve), and each one's samples/s: REQUIRES the
  /// same length. When the reference's longest compressed run does not leave the start, or is the
  /// whole run and ends ahead of every larger candidate beyond the noise, they race once more beside
  /// that reference, the smallest of them the new reference (one more budget; the range tests
  /// already run are reused); the larger candidates stay out, since they take fewer steps in as
  /// many samples than a reference that did not leave the start or ended ahead of them. A race whose
  /// reference has not left the start in its middle run (without a reserve, or the reserve's) runs
  /// again with every compressed run twice as long until it has, within three more budgets of wall
  /// time and the run's length (its notes say so).
  TORCH_ARG(std::vector<int64_t>, reserve);
  TORCH_ARG(std::vector<double>, reserve_samples_per_s);
  /// Called before each compressed run: the batch, which run of how many.
  TORCH_ARG(std::function<void(const std::string&)>, on_progress);
  /// Called within a compressed run, at most once a second of the race's clock (a step that ends a
  /// second or more after the last report): where it is. A long run (mobilenet's whole 2-epoch run,
  /// a minute or more here) says how far it has come.
  TORCH_ARG(std::function<void(const RunRaceStep&)>, on_step);
  /// Called where the race goes on past its first race, before it trains more: the reserve joins, a
  /// round past the plateau or a longer round for contested candidates starts; says why, and about
  /// how much training it adds (what the plan left to "up to"). The notes say what came of it.
  TORCH_ARG(std::function<void(const std::string&)>, on_round);
  /// Seconds on a monotonic clock, read for the race's wall time (which the rounds past the plateau
  /// spend against their three budgets) and the runs' training times; unset: std::chrono::steady_clock.
  /// Tests inject one, so that no decision rests on this machine's speed.
  TORCH_ARG(std::function<double()>, clock);
  /// Seconds of wall time (on `clock`) the whole race may take, its rounds included; past them it
  /// starts no more compressed runs and stops one under way between its steps: the candidates not
  /// run are not judged, and where the reference's runs did not finish it recommends nothing
  /// (RunRace::stopped_at_wall_limit). The race plans its runs from the sweep's samples/s, so a
  /// machine that trains several times slower than the sweep measured (another process took the
  /// cores) would otherwise run them for as much longer. tune gives the most it states for the race.
  /// 0: no limit.
  TORCH_ARG(double, max_wall_s) = 0;
};

/// One compressed run of the reference batch, and the noise scale at its end.
struct CompressedRun {
  double epochs = 0;  ///< its length
  int64_t steps = 0;
  int64_t warmup_steps = 0;              ///< the full run's warm-up steps, at most a quarter of this run's
  double train_s = 0;                    ///< measured training time (evaluation excluded)
  std::optional<double> loss, accuracy;  ///< held-out, after the last step; none when it diverged
  /// The noise scale at its end (the reference's two longer runs only; none for the run a longer
  /// round adds); 1e12 where the gradient could not be told from its noise, at least 1.
  std::optional<double> b_simple;
};

/// The JSON fields of a CompressedRun, in JSON order (fields.h).
template <class V, class T, IfRecord<T, CompressedRun> = 0>
void fields(V& v, T& r) {
  v("epochs", r.epochs);
  v("steps", r.steps);
  v("warmup_steps", r.warmup_steps);
  v("train_s", r.train_s);
  v("loss", r.loss);
  v("accuracy", r.accuracy);
  v("b_simple", r.b_simple);
}

/// A candidate's gap behind the reference is carried to the run's end shrinking per doubling as it
/// did between its two compressed runs, but at most halving: a steeper fall between two noisy
/// readings is not extrapolated over the run (lenet's 15 epochs are 5 doublings past the race).
inline constexpr double kLeastGapTrend = 0.5;

/// One candidate.
struct RunRaceEntry {
  int64_t batch = 0;
  LrAdvice lr;
  double samples_per_s = 0;
  double full_run_s = 0;  ///< the user's run at the measured samples/s: epochs x samples / samples_per_s
  /// The share of the run's samples that count against the reference's: run_efficiency, times the
  /// advised rate over the rule's (relative to the reference's) where a range test capped it.
  double efficiency = 1;
  double cap_factor = 1;
  /// Its own runs of the two longer compressed lengths (not the reference's), and the share of
  /// samples that counted in the longer, read off the reference's learning curve (1: as good as the
  /// reference).
  std::optional<CompressedRun> shorter_run, run;
  std::optional<double> measured_efficiency;
  /// The factor its gap behind the reference's run is carried on by per doubling to the run's end:
  /// gap_trend of its two runs' gaps (at least kLeastGapTrend); where that has none (its shorter run's gap within twice
  /// the held-out noise), the nearest larger candidate's; else 1.
  std::optional<double> gap_trend;
  /// The share of the full run's samples that count against the reference's: where the reference's
  /// learning curve puts a run that ends `predicted_gap` behind it (the schedule weighs phases by it).
  double share = 1;
  /// The quality behind the reference's at the run's end: the longer compressed run's gap, carried
  /// on by gap_trend per doubling to the run's length, and at least a smaller candidate's, in
  /// accuracy points (class labels) or a share of the loss.
  std::optional<double> predicted_gap;
  /// The smaller candidate whose predicted gap this one's takes, where its own carried gap was
  /// smaller (a larger batch is not predicted to end nearer the reference); unset where its own.
  std::optional<int64_t> gap_as;
  bool good = false;    ///< predicted_gap within the tolerance: no worse model than the reference's
  std::string message;  ///< why it failed; empty otherwise
  /// Judged in the race's first round and not raced in the longer round that moved the answer
  /// (RunRace::longer_rounds): its verdict, gap_trend and predicted_gap are the first round's, and its
  /// runs half the race's lengths (lengths_epochs[0] and [1]), read against the first round's
  /// reference runs of those lengths.
  bool earlier_round = false;
  /// The race passed its wall limit (RunRaceOptions::max_wall_s) before its runs finished: not
  /// judged, neither good nor worse; `message` says which run.
  bool past_wall_limit = false;
};

/// The JSON fields of a RunRaceEntry, in JSON order (fields.h).
template <class V, class T, IfRecord<T, RunRaceEntry> = 0>
void fields(V& v, T& e) {
  v("batch", e.batch);
  v("lr", e.lr.lr);
  v("lr_capped", e.lr.capped);
  v("samples_per_s", e.samples_per_s);
  v("full_run_s", e.full_run_s);
  v("efficiency", e.efficiency);
  v("cap_factor", e.cap_factor);
  v("shorter_run", e.shorter_run);
  v("run", e.run);
  v("measured_efficiency", e.measured_efficiency);
  v("gap_trend", e.gap_trend);
  v("share", e.share);
  v("predicted_gap", e.predicted_gap);
  v("gap_as", e.gap_as);
  v("good", e.good);
  v("message", e.message);
  v("earlier_round", e.earlier_round);
  v("past_wall_limit", e.past_wall_limit);
}

/// A batch-size schedule the run race proposes: phases whose batch grows as the noise scale does,
/// each at its batch's advised rate, predicted to end within the tolerance of the reference, and
/// faster than the pick.
struct ScheduleAdvice {
  std::vector<BatchPhase> phases;
  std::string text;          ///< as validate --batch-schedule takes it: "64:0,256:2"
  std::vector<double> lrs;   ///< each phase's advised rate, in order
  double full_run_s = 0;     ///< the run at each phase's measured samples/s
  double share = 1;          ///< of its samples, the share that count against the reference's
  double predicted_gap = 0;  ///< as RunRaceEntry::predicted_gap
  double saving = 0;         ///< 1 - full_run_s / the pick's full_run_s
};

/// The JSON fields of a ScheduleAdvice, in JSON order (fields.h).
template <class V, class T, IfRecord<T, ScheduleAdvice> = 0>
void fields(V& v, T& a) {
  // The phases travel as their text, as validate --batch-schedule takes it, and are read back from it.
  v.property(
      "text", a, [](const auto& advice) { return advice.text; },
      [](auto& advice, const std::string& text) {
        advice.text = text;
        try {
          advice.phases = parse_batch_schedule(text, "run_race.schedule.text");
        } catch (const ConfigError&) {  // a report edited by hand: the text is kept, the phases are not
          advice.phases.clear();
        }
      });
  v("lrs", a.lrs);
  v("full_run_s", a.full_run_s);
  v("share", a.share);
  v("predicted_gap", a.predicted_gap);
  v("saving", a.saving);
}

struct RunRace {
  double epochs = 0;  ///< the user's run
  std::string lr_schedule;
  int64_t reference_batch = 0;         ///< the smallest candidate: the one that trains
  std::vector<double> lengths_epochs;  ///< its three compressed runs' lengths
  std::vector<CompressedRun> runs;     ///< in that order
  /// Whether the longest compressed run was the whole run (the shortest a quarter of it): its gaps
  /// were read at the run's end, carried nowhere; each candidate trained the user's run once.
  bool whole_run() const { return !lengths_epochs.empty() && lengths_epochs.back() >= epochs * (1 - 1e-9); }
  std::optional<double> noise_at_start;
  /// The learning curve: the error (1 - accuracy, or the loss) fell by gains[0] from the first run
  /// to the second and gains[1] from the second to the third. Where the second gain is smaller and
  /// positive, the error above its floor is a power of the samples, S^-curve_exponent, carried to
  /// the run's end; otherwise each doubling is taken to buy the last gain (no exponent).
  std::vector<double> gains;
  std::optional<double> curve_exponent;
  /// The reference's middle run's quality (accuracy, or loss) as every candidate's gap at its length
  /// is read: where its second doubling gained more than its first (a learning curve does not
  /// steepen as its run doubles) by no more than the noise of three runs (line_through_middle), the
  /// line through its other two; none where it did not bend so (its measured quality stands).
  std::optional<double> middle_on_line;
  /// What the quality is ("accuracy" with class labels, else "loss"), and the gap a good candidate
  /// may have: max(0.005, two standard errors of a proportion over the held-out set), or 2 %.
  std::string measure;
  double tolerance = 0;
  std::string held_out;               ///< the held-out set's name and size
  std::vector<RunRaceEntry> entries;  ///< in batch order
  /// The fastest full run among the good candidates; none when the reference did not train.
  std::optional<int64_t> best_batch;
  std::string pick_reason;
  /// The batch judged (good or not; a longer round's own, not the entries kept from the first round)
  /// whose samples buy the most progress per second at the run's start and at its end (the noise
  /// scale there, each candidate's samples/s and measured share); a batch-size schedule is weighed
  /// only where the second is at least twice the first.
  std::optional<int64_t> batch_at_start, batch_at_end;
  /// The fastest schedule of two or three growing phases at judged batches, good or not (each at
  /// least twice the one before and from where it buys at least the progress per second of the one
  /// before, switching at a sixteenth of the run or a whole epoch), predicted to end within the
  /// tolerance of the reference, where it saves at least 5 % of the pick's time; why none otherwise
  /// (whenever there is a pick).
  std::optional<ScheduleAdvice> schedule;
  std::string schedule_reason;
  std::vector<std::string> notes;
  double wall_s = 0;  ///< the whole race: range tests, training, noise scales, evaluations
  /// On a CPU: the share of the race's time its threads waited for a core while ready to run (as
  /// ValidationRun::cpu_wait_share). Above kSharedCpuShare a note says the race shared the CPU: its
  /// verdicts train fixed samples and stand, its wall time does not (an --advice-budget suggested
  /// from it counts the quiet machine's share of it). None where Linux does not give it.
  std::optional<double> cpu_wait_share;
  /// The reference's longest compressed run did not bring the held-out loss 2 % below the initial
  /// weights', or only that run did (it has no learning curve yet to read the gaps by) and it was
  /// not the whole run (whose gaps need no curve: they are read at its end): no pick. Also where the
  /// rounds past the plateau then failed (plateau_round_failed).
  bool reference_stuck = false;
  /// The reference's loss stopped being finite in a compressed run: no candidate was judged, so no pick,
  /// and tune answers none (its fallback, the knee or goodput, would hand out a rate no run showed to
  /// train) and the CLI exits 1. (A reference whose loss rose but stayed finite is reference_stuck: the
  /// batch race follows, and a larger batch that trains at the rate can be its answer.)
  bool reference_diverged = false;
  /// Where the reserve joined (RunRaceOptions::reserve): the reference of the first race, which did
  /// not leave the start, or which trained the whole run (its longest compressed run was the run)
  /// and ended ahead of every larger candidate beyond the noise.
  std::optional<int64_t> first_reference;
  /// How many times the race ran again with every compressed run twice as long (at most once, within
  /// its budget), for the candidates faster than its pick that it judged worse on gaps that shrank as
  /// the run doubled, more than five doublings short of the run (contested_batches; its notes say
  /// which and what it found); 0 where none was. The rounds past the plateau at the start
  /// (RunRaceOptions::reserve) are not counted here: plateau_rounds does.
  int longer_rounds = 0;
  /// How many times the race ran again with every compressed run twice as long because its reference
  /// had not left the plateau at the start in its middle run (at most while a longest run twice as
  /// long fits the run, then once with the longest run the whole run, within kPlateauBudgets more
  /// budgets); 0 where none ran. Where none answered, the race is the one before them.
  int plateau_rounds = 0;
  /// The last round past the plateau gave no answer because its reference failed (its loss stopped
  /// being finite, or a step failed), not because it stayed on the plateau: reference_stuck stays
  /// true (tune's batch race follows, as after a plateau), and the notes say how it failed.
  bool plateau_round_failed = false;
  /// The candidates left out for being larger than the fastest by the sweep's samples/s and no
  /// faster, so none could be the pick (whether each would have been good is not known); in batch
  /// order. A reserve's race leaves others out of `entries` too (first_reference; its notes say
  /// which); a longer round keeps the first round's verdicts (RunRaceEntry::earlier_round).
  std::vector<int64_t> not_raced;
  /// The candidates judged good whose full run by the sweep's samples/s is within 5 % of the pick's,
  /// the pick among them, in batch order: closer than the sweep orders them (it calls a batch 5 %
  /// slower than a smaller one dominated), and than a full run's time repeats on a busy machine, so
  /// any of them trains about as fast. Only the pick where none is; empty without a pick.
  std::vector<int64_t> within_5_percent;
  /// The race passed RunRaceOptions::max_wall_s where it had more to train: it trained nothing more
  /// (no run, no reserve, no round), the candidates whose runs it did not finish are not judged
  /// (RunRaceEntry::past_wall_limit), and where the reference's runs did not finish there is no pick;
  /// a reserve's race or a round it cut short gives way to the race before it. notes[0] says so.
  bool stopped_at_wall_limit = false;
};

/// The JSON fields of a RunRace, in JSON order (fields.h).
template <class V, class T, IfRecord<T, RunRace> = 0>
void fields(V& v, T& r) {
  v("epochs", r.epochs);
  v("lr_schedule", r.lr_schedule);
  v("reference_batch", r.reference_batch);
  v("lengths_epochs", r.lengths_epochs);
  v("runs", r.runs);
  v("noise_at_start", r.noise_at_start);
  v("gains", r.gains);
  v("curve_exponent", r.curve_exponent);
  v("middle_on_line", r.middle_on_line);
  v("measure", r.measure);
  v("tolerance", r.tolerance);
  v("held_out", r.held_out);
  v("entries", r.entries);
  v("best_batch", r.best_batch);
  v("pick_reason", r.pick_reason);
  v("batch_at_start", r.batch_at_start);
  v("batch_at_end", r.batch_at_end);
  v("schedule", r.schedule);
  v("schedule_reason", r.schedule_reason);
  v("notes", r.notes);
  v("wall_s", r.wall_s);
  v("cpu_wait_share", r.cpu_wait_share, When{r.cpu_wait_share.has_value()});
  v("first_reference", r.first_reference, When{r.first_reference.has_value()});
  v("longer_rounds", r.longer_rounds);
  v("plateau_rounds", r.plateau_rounds);
  v("plateau_round_failed", r.plateau_round_failed);
  v("reference_diverged", r.reference_diverged);
  v("not_raced", r.not_raced);
  v("within_5_percent", r.within_5_percent);
  v("stopped_at_wall_limit", r.stopped_at_wall_limit);
}

/// How far behind the reference's compressed run of the same length (race.runs[l]; the middle one
/// as race.middle_on_line reads it, where set) a candidate's `run` ended: accuracy points, or a share
/// of the loss (race.measure); none where either has no quality, or where `run` is not of that
/// length (an entry kept from a race's first round: RunRaceEntry::earlier_round).
std::optional<double> compressed_gap(const RunRace& race, const std::optional<CompressedRun>& run, size_t l);

/// Where an entry's predicted gap is a smaller candidate's (RunRaceEntry::gap_as), the words that say
/// so beside it in a table; empty otherwise.
std::string gap_as_note(const RunRaceEntry& e);

/// An entry's gap_trend in a table: "0.83"; "0.50*" where its gap fell faster and was carried at
/// kLeastGapTrend, which floored_trend_note explains under the table; "-" without one.
std::string gap_trend_text(const std::optional<double>& trend);
/// Under a table where some entry's gap_trend is floored; empty where none is.
std::string floored_trend_note(const RunRace& race);

/// Where an entry's verdict is the first round's (RunRaceEntry::earlier_round), the words that say so
/// beside it in a table; empty otherwise.
std::string earlier_round_note(const RunRaceEntry& e);

/// For a table's caption, where a longer round kept the first round's batches: " (the first round's to 0.205
/// and 0.41: their gaps not shown)", the lengths they trained; "" where it kept none.
std::string first_round_lengths_note(const RunRace& race);

/// The words that start a compressed run's progress lines (RunRaceOptions::on_progress, and what a
/// caller shows of RunRaceOptions::on_step after them): "run race: batch 32, your 15-epoch run
/// compressed to 0.328 epochs". A log groups a run's lines by them (compressed_run_key).
std::string compressed_run_text(int64_t batch, double run_epochs, double epochs);

/// What a compressed run's progress lines share, whatever follows (compressed_run_text's words up to
/// " epochs"): the key a log groups them by, printing a run's first line and then one every 10 s.
std::string compressed_run_key(const std::string& line);

/// The candidates (the reference aside) the race did not judge because it passed its wall limit
/// before their runs finished (RunRaceEntry::past_wall_limit), in batch order.
std::vector<int64_t> past_wall_limit(const RunRace& race);

/// The middle of the reference's three errors (1 - accuracy, or the loss, after runs each twice as
/// long as the one before) on the line through the other two, where the second gain exceeds the
/// first by at most sqrt(6) x `noise` (the held-out noise, two standard errors of one run: the bend
/// 2 e1 - e0 - e2 has sqrt(6) of them; the loss's fixed 2 % gets the same bound); none where it does
/// not exceed it, or exceeds it by more. No learning curve steepens as its run doubles, and the
/// middle run enters every candidate's gap at its length: read as measured, a middle run that ended
/// worse than its line by noise makes every gap there smaller and every gap seem to grow into the
/// longer run (lenet AdamW, 15 epochs, tune seeds 0 and 5: 16 picked, 1.95x the fastest good
/// batch's time). Only the gaps read it: the learning curve (gains, its exponent, the shares and the
/// schedule) keeps the measured run.
std::optional<double> line_through_middle(const std::vector<double>& errors, double noise);

/// The candidates a judged race runs longer (race_runs): those faster than its pick (their full run
/// at least 5 % shorter: a smaller saving is within the sweep's resolution) that it judged
/// worse on a gap well beyond the held-out noise (twice the tolerance) in their shorter compressed
/// run that shrank in their longer one, where the longest compressed run is more than five
/// doublings short of the run. Their gap's trend, read from two runs a handful of steps long, is
/// carried over the most doublings, and a trend still steepening decides the answer (mlp at 35
/// epochs: 512 and 1,024 read x0.57-0.77 per doubling; their full runs end as if x0.65-0.68).
/// In batch order; none otherwise.
std::vector<int64_t> contested_batches(const RunRace& race);

/// The candidates race_runs races, and the budget it trains them with: of three or more, where the
/// fastest by samples_per_s is not the smallest, those larger than it left out and the budget cut by
/// their share of the compressed runs (so the others train the runs they would beside them);
/// `options` as given otherwise, and where a rate or a batch is not positive (race_runs names it).
/// `not_raced`, where given: the candidates left out, in batch order.
RunRaceOptions raced_options(const RunRaceOptions& options, std::vector<int64_t>* not_raced = nullptr);

/// The run race's seconds beyond its compressed runs' training: a range test per candidate raced
/// (`lr.steps` steps), the noise scale at the start (unless given) and after the reference's two
/// longer runs, and a held-out evaluation (`held_out_size` samples, forward only at batch 1024) before the
/// reference's runs and after each run. `step_s(batch)`: a training step's seconds (time_plan.h's StepCost::at).
double run_race_overhead_s(const RunRaceOptions& options, int64_t held_out_size,
                           const std::function<double(int64_t)>& step_s);

/// The run race's training seconds where --advice-budget is not given: `default_s` (tune's
/// default_race_budget_s, which a fast device caps at 4 epochs at its best samples/s) raised, where
/// the compressed runs it buys would give the reference (the smallest of `batches`) fewer than
/// kReferenceSteps steps in its shortest run, to what gives it that many; at most what trains every
/// candidate's full run (the compressed runs' cap, a quarter of the run) and at most
/// `ceiling_s` (tune's: twice what tune took before the race, at least 30 s). A fast device's short default
/// budget would otherwise leave the reference a handful of steps, too few to read a curve from
/// (docs/benchmarks.md, "On a GPU").
double run_race_train_s(double default_s, double ceiling_s, const std::vector<int64_t>& batches,
                        const std::vector<double>& samples_per_s, double epochs, int64_t dataset);

/// The reference's steps in its shortest compressed run that run_race_train_s buys at least: a
/// candidate up to 8x its batch then trains kFewestSteps (8) in its shorter run, the least the race
/// reads as a learning curve.
inline constexpr int64_t kReferenceSteps = 32;

/// A race whose reference has not left the plateau at the start in its middle compressed run runs
/// again with every compressed run twice as long, within this many more budgets of wall time
/// (RunRaceOptions::reserve): what the batch race that tune runs where the run race gives no answer
/// trains on a plateau (up to twice its budget) and its range tests and evaluations, which the
/// rounds need little of. tune's stated most counts them.
inline constexpr double kPlateauBudgets = 3;

/// Runs the reference's compressed runs and noise scales from the workload's current state
/// (restored before each and after the last; its rate too), and judges every candidate raced: of
/// three or more, where the fastest by samples_per_s is not the smallest, those larger than it
/// are left out (the notes name them; docs/advice.md says when that can move the answer), and the
/// budget falls by their share, so the others train the same runs; the noise scale is measured at
/// the batch the candidates given choose. Throws ConfigError for fewer than two candidates,
/// mismatched or non-positive rates, or no run length.
RunRace race_runs(ModuleWorkload& workload, const Dataset& held_out, const RunRaceOptions& options);

/// How far behind a run of `efficiency` x `run_samples` ends against one of `run_samples`, on the
/// learning curve through `errors` after `samples` (three runs, each twice the one before): the
/// error above its floor as A S^-alpha where the gains shrink, else the last gain per doubling.
double deficit(const std::vector<double>& samples, const std::vector<double>& errors, double run_samples,
               double efficiency);

/// The samples at which the learning curve through `errors` (as deficit reads it) reaches `error`,
/// as a share of samples.back(), at most 1: how much of a run of that length counted for a batch
/// that ended at `error`. 0 where the curve is flat and `error` is above its last point by more
/// than `tolerance`; 1 where it is within it.
double measured_share(const std::vector<double>& samples, const std::vector<double>& errors, double error,
                      double tolerance);

/// How a candidate's gap behind the reference (its error minus the reference's) changed from a
/// compressed run (`shorter`) to one twice as long (`longer`): their ratio, the factor its gap is
/// carried on by per doubling to the run's end, at least 0.5 (a steeper fall between two noisy
/// readings is not extrapolated) and at most 1 (a growing gap is carried as it stands). None where
/// the shorter gap is within twice `noise` (near the noise a ratio of two gaps is mostly noise's) or
/// the longer is level.
std::optional<double> gap_trend(double shorter, double longer, double noise);

/// A candidate's gaps behind the reference (its error minus the reference's, in the measure's
/// units) after the two longer compressed runs.
struct CompressedGaps {
  double shorter = 0, longer = 0;
};

/// A candidate's gap at the run's end, and the factor per doubling it was carried on by.
struct CarriedGap {
  double gap = 0;
  double trend = 1;
  /// Where its own carried gap was smaller than a smaller candidate's and took that one's: the
  /// smaller candidate's index in the gaps given.
  std::optional<size_t> as;
};

/// The gaps at the run's end, `doublings` doublings of the run past the longer compressed run, for
/// candidates in batch order (the reference left out; none for one that failed, which keeps its
/// place): each longer gap carried on by its gap_trend per doubling, or by the nearest larger
/// candidate's where it has none, or as it stands; and never below a smaller candidate's (`as`
/// names the one whose gap it takes).
std::vector<std::optional<CarriedGap>> carry_gaps(const std::vector<std::optional<CompressedGaps>>& gaps, double noise,
                                                  double doublings);

/// The share of samples at which a run on the learning curve (as deficit reads it) ends `gap`
/// behind a run of `run_samples`: deficit's inverse. Where the curve cannot fall by `gap` (flat, or
/// short of it), 1 for a gap within `noise`, else 0.
double share_for_gap(const std::vector<double>& samples, const std::vector<double>& errors, double run_samples,
                     double gap, double noise);

/// The noise scale after `samples` of training through `noise` ((samples trained, B_simple) points
/// in order, the first at 0 samples): linear between the first two, a power of the samples between
/// each later pair, and the last pair's power (between 0 and 1: a noisy measurement's steeper
/// growth, or a fall, is not carried on) beyond the last.
double noise_at(const std::vector<std::pair<double, double>>& noise, double samples);

/// A schedule's share of samples that count against the reference's and its run's time: phases
/// over a run of `run_samples` (from_epoch x `dataset` samples on), each batch's own share
/// `correction` (its rate cap and measured lag: RunRaceEntry::share over its efficiency) times the
/// noise scale's (1 + reference / B_noise(S)) / (1 + batch / B_noise(S)) where it trains, and its
/// `samples_per_s`. `correction` and `samples_per_s` are per phase.
std::pair<double, double> schedule_share_and_time(const std::vector<std::pair<double, double>>& noise,
                                                  double run_samples, int64_t dataset, int64_t reference,
                                                  const std::vector<BatchPhase>& phases,
                                                  const std::vector<double>& correction,
                                                  const std::vector<double>& samples_per_s);

/// The share of a run's samples at `batch` that count against the same run at `reference`: the
/// mean over the run's `run_samples` of (1 + reference / B_noise(S)) / (1 + batch / B_noise(S)),
/// with B_noise(S) = noise_at(noise, S).
double run_efficiency(const std::vector<std::pair<double, double>>& noise, double run_samples, int64_t reference,
                      int64_t batch);

}  // namespace batchwise
