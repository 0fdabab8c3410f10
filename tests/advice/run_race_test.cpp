// The run race on a problem whose full-run answer is known in closed form: linear regression with
// Gaussian inputs of spread-out variances (a condition number of 100) trained by plain SGD under a
// cosine rate. A step at rate lr on a batch of B moves the expected squared error m_i along each
// input direction i (variance l_i) to
//   m_i' = m_i (1 - 4 lr l_i + 4 lr^2 l_i^2 (1 + 1/B)) + (4 lr^2 / B) l_i (sum_j l_j m_j + sigma^2)
// (the gradient 2 x (x.delta - sigma eps) and its noise), and the held-out loss is
// sum_i l_i m_i + sigma^2. The rule's rate grows with the batch until the range test caps it: past
// the cap a larger batch takes fewer steps at the same rate, and the slow directions are left
// further from the optimum at the run's end. The fastest batch without a worse model follows.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "advice/run_race_internal.h"
#include "batchwise/error.h"
#include "batchwise/recommend.h"
#include "batchwise/run_race.h"
#include "batchwise/schedule.h"
#include "batchwise/workload.h"

namespace batchwise {
namespace {

constexpr int64_t kDim = 16;
constexpr double kSigma2 = 0.1;
constexpr int64_t kSamples = 50000;

// Variances log-spaced from 1 down to 0.01.
std::vector<double> variances() {
  std::vector<double> l;
  for (int64_t i = 0; i < kDim; ++i) l.push_back(std::pow(0.01, static_cast<double>(i) / (kDim - 1)));
  return l;
}

Dataset regression(const at::Tensor& w_star, int64_t n) {
  std::vector<float> scale;
  for (double l : variances()) scale.push_back(static_cast<float>(std::sqrt(l)));
  Dataset d;
  d.name = "ill-conditioned-regression";
  d.inputs = at::randn({n, kDim}) * at::tensor(scale);
  d.targets = (d.inputs.matmul(w_star) + std::sqrt(kSigma2) * at::randn({n})).unsqueeze(1);
  return d;
}

at::Tensor squared_error(const at::Tensor& out, const at::Tensor& target) { return (out - target).pow(2).mean(); }

// A clock that moves a microsecond a reading (RunRaceOptions::clock): the race's wall time, and so
// whether a round past the plateau fits its three budgets, is the same however busy the machine is.
std::function<double()> ticking_clock() {
  auto now = std::make_shared<double>(0);
  return [now] { return *now += 1e-6; };
}

struct Problem {
  std::unique_ptr<ModuleWorkload> workload;
  Dataset held_out;

  explicit Problem(LossFn loss = squared_error, int64_t samples = kSamples) {
    at::manual_seed(5);
    const at::Tensor w_star = at::randn({kDim});
    const Dataset train = regression(w_star, samples);
    held_out = regression(w_star, 8192);
    torch::nn::Linear linear(torch::nn::LinearOptions(kDim, 1).bias(false));
    {
      at::NoGradGuard no_grad;
      linear->weight.copy_((w_star + 1).unsqueeze(0));  // one unit off along every direction
    }
    WorkloadInfo info;
    info.model = "linear";
    info.dataset = train.name;
    info.loss = "mse";
    info.optimizer = "sgd";
    info.lr = 0.05;
    workload = std::make_unique<ModuleWorkload>(
        info, torch::nn::AnyModule(linear),
        std::make_unique<torch::optim::SGD>(linear->parameters(), torch::optim::SGDOptions(0.05)), train,
        std::move(loss), c10::Device(c10::kCPU), 3);
  }
};

// The candidates both races of the closed-form problem take, and their samples/s where a step
// costs 1 ms plus 10 us a sample.
const std::vector<int64_t> kBatches{32, 64, 128, 256, 512, 1024};
// The entries a race's last round judged: a longer round that moved the answer keeps the first
// round's verdicts on the candidates it did not race beside its own, marked earlier_round.
std::vector<RunRaceEntry> last_round(const RunRace& race) {
  std::vector<RunRaceEntry> out;
  for (const RunRaceEntry& e : race.entries)
    if (!e.earlier_round) out.push_back(e);
  return out;
}

std::vector<double> step_rates(const std::vector<int64_t>& batches) {
  std::vector<double> rates;
  for (int64_t b : batches) rates.push_back(static_cast<double>(b) / (1e-3 + 1e-5 * static_cast<double>(b)));
  return rates;
}

// The expected held-out loss after a full run of `epochs` at `batch` under the cosine schedule,
// with the rate the race advised for it.
double expected_loss(const LrAdvice& advice, int64_t batch, double epochs) {
  const std::vector<double> l = variances();
  std::vector<double> m(kDim, 1.0);
  const int64_t steps = static_cast<int64_t>(std::ceil(epochs * kSamples / static_cast<double>(batch)));
  const double b = static_cast<double>(batch);
  for (int64_t k = 0; k < steps; ++k) {
    const double lr = scheduled_lr(advice, LrSchedule::Cosine, k, steps);
    double excess = 0;
    for (int64_t i = 0; i < kDim; ++i) excess += l[i] * m[i];
    for (int64_t i = 0; i < kDim; ++i)
      m[i] = m[i] * (1 - 4 * lr * l[i] + 4 * lr * lr * l[i] * l[i] * (1 + 1 / b)) +
             4 * lr * lr / b * l[i] * (excess + kSigma2);
  }
  double loss = kSigma2;
  for (int64_t i = 0; i < kDim; ++i) loss += l[i] * m[i];
  return loss;
}

// The race's pick is the closed form's fastest batch whose full-run loss is within 2 % of the
// best's, within one power-of-two step; no candidate trained the whole run; the workload comes
// back as it was.
TEST(RunRace, PicksTheClosedFormFastestBatchWithoutAWorseModel) {
  Problem problem;
  const std::vector<int64_t> batches = kBatches;
  const std::vector<double> rates = step_rates(batches);
  const auto before = problem.workload->module().parameters()[0].clone();
  const double epochs = 2;
  const RunRace race = race_runs(*problem.workload, problem.held_out,
                                 RunRaceOptions(batches, rates, LrAdviceOptions(32, 0.05))
                                     .epochs(epochs)
                                     .lr_schedule(LrSchedule::Cosine)
                                     .budget_s(6));
  EXPECT_TRUE(at::equal(before, problem.workload->module().parameters()[0]));
  EXPECT_EQ(problem.workload->optimizer().param_groups()[0].options().get_lr(), 0.05);
  EXPECT_EQ(race.measure, "loss");
  // how long its threads waited for a core, read on a CPU (Linux's schedstat; a note where it passes 0.1)
  if (std::filesystem::exists("/proc/self/schedstat"))
    EXPECT_TRUE(race.cpu_wait_share && *race.cpu_wait_share >= 0 && *race.cpu_wait_share <= 1);
  ASSERT_EQ(race.lengths_epochs.size(), 3u);
  EXPECT_NEAR(race.lengths_epochs[1], 2 * race.lengths_epochs[0], 1e-12);
  EXPECT_NEAR(race.lengths_epochs[2], 4 * race.lengths_epochs[0], 1e-12);
  EXPECT_LT(race.lengths_epochs[2], epochs / 2);
  ASSERT_TRUE(race.best_batch.has_value()) << fmt::format("{}", fmt::join(race.notes, "; "));

  ASSERT_EQ(race.runs.size(), 3u);
  EXPECT_EQ(race.reference_batch, 32);
  EXPECT_LT(race.runs[2].steps * 32, epochs * kSamples / 2);  // a fraction of the run, never all of it
  // The noise scale at the start and after the two longer runs: the three points its curve reads.
  EXPECT_FALSE(race.runs[0].b_simple.has_value());
  EXPECT_TRUE(race.runs[1].b_simple.has_value());
  EXPECT_TRUE(race.runs[2].b_simple.has_value());
  std::map<int64_t, double> expected;
  double lowest = 1e300;
  for (const RunRaceEntry& e : race.entries) {
    ASSERT_TRUE(e.message.empty()) << e.batch << ": " << e.message;
    expected[e.batch] = expected_loss(e.lr, e.batch, epochs);
    lowest = std::min(lowest, expected[e.batch]);
  }
  int64_t answer = 0;  // the fastest good batch: the rates grow with the batch
  for (const auto& [batch, loss] : expected)
    if (loss <= 1.02 * lowest) answer = batch;
  std::string table;
  for (const auto& [batch, loss] : expected) table += fmt::format(" {}:{:.4f}", batch, loss);
  EXPECT_GE(*race.best_batch, answer / 2) << "closed form " << answer << " (expected losses" << table << ")";
  EXPECT_LE(*race.best_batch, answer) << "never a batch worse than the closed form's fastest good one: closed form "
                                      << answer << " (expected losses" << table << ")";
  EXPECT_LT(answer, 1024) << "the problem must make the largest batch worse, or the test shows nothing:" << table;
  EXPECT_FALSE(race.pick_reason.empty());
  // The schedule is weighed and the answer stated either way; one proposed grows, pays and is good.
  EXPECT_FALSE(race.schedule_reason.empty());
  ASSERT_TRUE(race.batch_at_start && race.batch_at_end);
  if (race.schedule) {
    EXPECT_GE(race.schedule->saving, 0.05);
    EXPECT_LE(race.schedule->predicted_gap, race.tolerance);
    for (size_t k = 1; k < race.schedule->phases.size(); ++k)
      EXPECT_GE(race.schedule->phases[k].batch, 2 * race.schedule->phases[k - 1].batch);
  }
}

// The noise scale at the start measured at the optimizer's own rate, which here diverges (past the
// stability limit, lr < 1) while the race trains at the rates it advises from --lr 0.05: the noise
// scale is not read as unbounded (every batch efficient) but taken at its floor, and said.
TEST(RunRace, ANoiseScaleWhoseStepsDivergedIsNotReadAsUnbounded) {
  Problem problem;
  for (auto& group : problem.workload->optimizer().param_groups()) group.options().set_lr(1.5);
  const RunRace race = race_runs(*problem.workload, problem.held_out,
                                 RunRaceOptions({32, 64}, step_rates({32, 64}), LrAdviceOptions(32, 0.05))
                                     .epochs(1)
                                     .lr_schedule(LrSchedule::Cosine)
                                     .budget_s(2)
                                     .clock(ticking_clock()));
  ASSERT_TRUE(race.noise_at_start.has_value());
  EXPECT_EQ(*race.noise_at_start, 1.0);
  EXPECT_NE(fmt::format("{}", fmt::join(race.notes, "; "))
                .find("the noise scale at the start could not be measured (its training steps at batch"),
            std::string::npos)
      << fmt::format("{}", fmt::join(race.notes, "; "));
  EXPECT_EQ(problem.workload->optimizer().param_groups()[0].options().get_lr(), 1.5);
}

// The reference's rate diverges (lr 8 past this problem's stability limit of 1): the race recommends nothing and says
// its reference diverged, so that tune answers none rather than the knee at a rate seen to diverge.
TEST(RunRace, AReferenceWhoseRateDivergesIsMarkedAndPicksNothing) {
  Problem problem;
  const RunRace race = race_runs(*problem.workload, problem.held_out,
                                 RunRaceOptions({32, 64}, step_rates({32, 64}), LrAdviceOptions(32, 8))
                                     .epochs(1)
                                     .lr_schedule(LrSchedule::Cosine)
                                     .budget_s(2)
                                     .clock(ticking_clock()));
  EXPECT_TRUE(race.reference_diverged);
  EXPECT_FALSE(race.best_batch.has_value());
  ASSERT_FALSE(race.entries.empty());
  EXPECT_NE(race.entries.front().message.find("stopped being finite"), std::string::npos)
      << race.entries.front().message;
  const RunRace fine = race_runs(*problem.workload, problem.held_out,
                                 RunRaceOptions({32, 64}, step_rates({32, 64}), LrAdviceOptions(32, 0.05))
                                     .epochs(1)
                                     .lr_schedule(LrSchedule::Cosine)
                                     .budget_s(2)
                                     .clock(ticking_clock()));
  EXPECT_FALSE(fine.reference_diverged);
}

// A training set smaller than the noise scale's least batch (8): its steps take the whole set, not 8 samples of 6
// (the noise scale refuses a batch larger than the data, and 7 training samples had ended tune --epochs with "--batch
// 8: larger than the 7 training samples", a flag the user never gave).
TEST(RunRace, ATrainingSetSmallerThanTheNoiseScalesBatchIsMeasuredWhole) {
  EXPECT_EQ(detail::noise_batch_of({2, 4}, 6), 6);
  EXPECT_EQ(detail::noise_batch_of({2, 4}), 8);
  EXPECT_EQ(detail::noise_batch_of({64, 256}, 60000), 256);
  Problem few(squared_error, 6);
  const RunRace race = race_runs(*few.workload, few.held_out,
                                 RunRaceOptions({2, 4}, step_rates({2, 4}), LrAdviceOptions(2, 0.05))
                                     .epochs(1)
                                     .lr_schedule(LrSchedule::Cosine)
                                     .budget_s(2)
                                     .clock(ticking_clock()));
  EXPECT_TRUE(race.noise_at_start.has_value());
  EXPECT_EQ(fmt::format("{}", fmt::join(race.notes, "; ")).find("could not be measured"), std::string::npos)
      << fmt::format("{}", fmt::join(race.notes, "; "));
}

// Out of memory in the race's own steps (a limit on the process's, ulimit -v, can end them where the sweep's trials
// trained): the noise scale's micro-batches (8, of batch 64) run out, and the race goes on without the figure, saying
// so; the reference's compressed run runs out, and the race recommends nothing, naming it. Neither ends the run.
LossFn running_out_at(int64_t size, std::shared_ptr<bool> after_noise) {
  return [size, after_noise](const at::Tensor& out, const at::Tensor& target) {
    if (out.size(0) == 8) *after_noise = true;
    if (out.size(0) == size && (size == 8 || *after_noise))
      TORCH_CHECK_WITH(OutOfMemoryError, false, "host out of memory allocating 2.00 MiB: the system refused it");
    return squared_error(out, target);
  };
}

TEST(RunRace, OutOfMemoryInItsOwnStepsEndsNoRun) {
  const auto options = [] {
    return RunRaceOptions({32, 64}, step_rates({32, 64}), LrAdviceOptions(32, 0.05))
        .epochs(1)
        .lr_schedule(LrSchedule::Cosine)
        .budget_s(2)
        .clock(ticking_clock());
  };
  Problem noise(running_out_at(8, std::make_shared<bool>(false)));
  const RunRace without_noise = race_runs(*noise.workload, noise.held_out, options());
  const std::string notes = fmt::format("{}", fmt::join(without_noise.notes, "; "));
  EXPECT_NE(notes.find("the noise scale at the start could not be measured (its steps at batch 64 ran out of memory "
                       "(host out of memory allocating 2.00 MiB"),
            std::string::npos)
      << notes;
  EXPECT_EQ(*without_noise.noise_at_start, 1.0);
  EXPECT_TRUE(without_noise.best_batch.has_value()) << notes;  // the runs trained all the same

  Problem reference(running_out_at(32, std::make_shared<bool>(false)));
  const RunRace without_reference = race_runs(*reference.workload, reference.held_out, options());
  EXPECT_FALSE(without_reference.best_batch.has_value());
  EXPECT_EQ(without_reference.entries.front().message.rfind("failed: host out of memory allocating 2.00 MiB", 0), 0u)
      << without_reference.entries.front().message;
}

// The closed-form problem over a 16-epoch run, where every batch ends level (the closed form's
// losses agree within 2 %, so its answer is the fastest, 1,024): the race's longest compressed run
// is 0.49 epochs, five doublings short, and 1,024, far behind in its shorter run and closing, is
// contested. It races again beside the reference with every run twice as long, trains only the
// runs it had not, and its answer moves to 1,024; the workload comes back as it was.
TEST(RunRace, AContestedBatchRunLongerMovesTheAnswerToIt) {
  Problem problem;
  const std::vector<int64_t> batches = kBatches;
  const std::vector<double> rates = step_rates(batches);
  const auto before = problem.workload->module().parameters()[0].clone();
  std::vector<std::string> trained, rounds;
  const double epochs = 16;
  const RunRace race = race_runs(*problem.workload, problem.held_out,
                                 RunRaceOptions(batches, rates, LrAdviceOptions(32, 0.05))
                                     .epochs(epochs)
                                     .lr_schedule(LrSchedule::Cosine)
                                     .budget_s(6)
                                     .on_progress([&](const std::string& m) { trained.push_back(m); })
                                     .on_round([&](const std::string& m) { rounds.push_back(m); }));
  EXPECT_TRUE(at::equal(before, problem.workload->module().parameters()[0]));
  ASSERT_TRUE(race.best_batch.has_value()) << fmt::format("{}", fmt::join(race.notes, "; "));
  EXPECT_EQ(race.longer_rounds, 1);
  // Announced before it trained: why, what, and the most training it adds.
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].find("batch 1024, faster than batch 512, was judged worse on gaps that shrank as the run "
                           "doubled: racing it again beside batch 32 with every compressed run twice as long (to 0.983 "
                           "epochs), smallest first; up to about "),
            0u)
      << rounds[0];
  const std::vector<RunRaceEntry> longer = last_round(race);
  ASSERT_EQ(longer.size(), 2u);  // the reference and the contested batch only
  EXPECT_EQ(longer[0].batch, 32);
  EXPECT_EQ(longer[1].batch, 1024);
  EXPECT_EQ(*race.best_batch, 1024);
  double lowest = 1e300;
  for (const RunRaceEntry& e : longer) lowest = std::min(lowest, expected_loss(e.lr, e.batch, epochs));
  EXPECT_LE(expected_loss(longer[1].lr, 1024, epochs), 1.02 * lowest) << "the closed form's answer";
  // The first round's verdicts on the batches the longer round did not race stay, marked, with runs
  // half the race's lengths: 512 (the first round's pick) good, so the answer's range runs to it.
  ASSERT_EQ(race.entries.size(), kBatches.size());
  for (size_t i = 0; i < kBatches.size(); ++i) {
    EXPECT_EQ(race.entries[i].batch, kBatches[i]);
    EXPECT_EQ(race.entries[i].earlier_round, kBatches[i] != 32 && kBatches[i] != 1024) << kBatches[i];
  }
  const RunRaceEntry& first_pick = race.entries[kBatches.size() - 2];
  EXPECT_TRUE(first_pick.good);
  ASSERT_TRUE(first_pick.run.has_value());
  EXPECT_NEAR(first_pick.run->epochs, race.lengths_epochs[1], 1e-9);
  const std::optional<Recommendation> answer = recommend(race);
  ASSERT_TRUE(answer.has_value());
  EXPECT_NE(answer->reason.find("no worse a model either: batches 32, "), std::string::npos) << answer->reason;
  EXPECT_NE(answer->reason.find("512, 1024"), std::string::npos) << answer->reason;
  ASSERT_EQ(race.lengths_epochs.size(), 3u);
  EXPECT_NEAR(race.lengths_epochs[2], 0.98304, 1e-9);
  EXPECT_GT(std::log2(epochs / (race.lengths_epochs[2] / 2)), 5);  // the first race's was over five doublings short
  // The noise scale: measured after the reference's runs the first race trained, not after the one
  // the longer race added (only the schedule and the notes read it).
  ASSERT_EQ(race.runs.size(), 3u);
  EXPECT_TRUE(race.runs[0].b_simple.has_value());
  EXPECT_TRUE(race.runs[1].b_simple.has_value());
  EXPECT_FALSE(race.runs[2].b_simple.has_value());
  // Trained once each: the first race's 3 + 2 x 5 runs, then only the longer race's longest two.
  EXPECT_EQ(trained.size(), 15u) << fmt::format("{}", fmt::join(trained, "\n"));
  EXPECT_NE(trained.back().find("batch 1024"), std::string::npos) << trained.back();
  EXPECT_NE(trained.back().find("0.983"), std::string::npos) << trained.back();
  ASSERT_FALSE(race.notes.empty());
  EXPECT_NE(race.notes[0].find("batch 1024, faster than batch 512, was judged worse"), std::string::npos)
      << race.notes[0];
  EXPECT_NE(race.notes[0].find("batch 1024 is now judged no worse"), std::string::npos) << race.notes[0];
  EXPECT_TRUE(race.entries[1].good);
}

// A longer round that moved the answer keeps the first round's verdicts on the candidates it did not
// race, in batch order and marked; the answer's range reads them, and a kept batch within the first
// round's noise that was not judged good (it had not left the start there) gets a note saying so.
TEST(RunRace, ALongerRoundKeepsTheFirstRoundsVerdictsInBatchOrder) {
  const auto entry = [](int64_t batch, double run_s, double gap, bool good) {
    RunRaceEntry e;
    e.batch = batch;
    e.full_run_s = run_s;
    e.predicted_gap = gap;
    e.good = good;
    return e;
  };
  RunRace first;
  first.reference_batch = 32;
  first.tolerance = 0.007;
  first.lengths_epochs = {0.1, 0.2, 0.4};
  first.entries = {entry(32, 100, 0, true), entry(64, 60, 0.002, false), entry(128, 40, 0.004, true),
                   entry(256, 30, 0.03, false), entry(512, 20, 0.05, false)};
  first.best_batch = 128;
  RunRace next = first;
  next.lengths_epochs = {0.2, 0.4, 0.8};
  next.entries = {entry(32, 100, 0, true), entry(512, 20, 0.005, true)};
  next.best_batch = 512;
  next.within_5_percent = {512};  // as the longer round judged it
  next.notes = {"the longer round's note"};
  detail::keep_first_round_verdicts(first, next);
  ASSERT_EQ(next.entries.size(), 5u);
  const std::vector<int64_t> order{32, 64, 128, 256, 512};
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(next.entries[i].batch, order[i]);
    EXPECT_EQ(next.entries[i].earlier_round, i > 0 && i < 4) << order[i];
  }
  EXPECT_TRUE(next.entries[2].good);
  EXPECT_FALSE(next.entries[3].good);
  EXPECT_EQ(next.within_5_percent, std::vector<int64_t>{512});
  ASSERT_EQ(next.notes.size(), 2u);
  EXPECT_EQ(next.notes[1],
            "in the first round, batch 64 within the held-out noise of batch 32 but did not leave the start in its "
            "longest compressed run (0.4 epochs), so it is not judged good");
  const std::optional<Recommendation> answer = recommend(next);
  ASSERT_TRUE(answer.has_value());
  EXPECT_NE(answer->reason.find("no worse a model either: batches 32, 128, 512"), std::string::npos) << answer->reason;
}

// The closed-form problem raced over `batches` at `rates` for a cosine run of `epochs` (budget 6 s),
// each compressed run's progress line kept in `trained`.
RunRace race_logged(const std::vector<int64_t>& batches, const std::vector<double>& rates, double epochs,
                    std::vector<std::string>& trained) {
  Problem problem;
  return race_runs(*problem.workload, problem.held_out,
                   RunRaceOptions(batches, rates, LrAdviceOptions(32, 0.05))
                       .epochs(epochs)
                       .lr_schedule(LrSchedule::Cosine)
                       .budget_s(6)
                       .on_progress([&](const std::string& m) { trained.push_back(m); }));
}

// Contested batches race longer smallest first, each beside those before it, up to the first the
// longer race still judges worse: no larger one can then be judged good (none is predicted nearer
// the reference than a smaller one), so it is not trained. With 2,048 and 4,096 among the
// candidates: at 24 epochs, 2,048 is judged good and 4,096, raced after it, worse (its loss ends
// twice as high in the closed form); at 16 epochs, 1,024 good, 2,048 worse and 4,096 not run.
TEST(RunRace, ContestedBatchesRaceLongerSmallestFirstUpToTheFirstStillWorse) {
  std::vector<int64_t> batches = kBatches;
  batches.insert(batches.end(), {2048, 4096});
  std::vector<double> rates = step_rates(batches);
  const size_t at_1024 = kBatches.size() - 1;
  rates[at_1024 + 1] = 1.3 * rates[at_1024];  // each run at least 5 % shorter than the last's
  rates[at_1024 + 2] = 1.6 * rates[at_1024];
  const auto race_for = [&](double epochs, std::vector<std::string>& trained) {
    return race_logged(batches, rates, epochs, trained);
  };
  std::vector<std::string> trained;
  const RunRace both = race_for(24, trained);
  ASSERT_TRUE(both.best_batch.has_value()) << fmt::format("{}", fmt::join(both.notes, "; "));
  EXPECT_EQ(both.longer_rounds, 1);
  const std::vector<RunRaceEntry> longer = last_round(both);
  ASSERT_EQ(longer.size(), 3u);
  EXPECT_EQ(longer[1].batch, 2048);
  EXPECT_TRUE(longer[1].good);
  EXPECT_EQ(longer[2].batch, 4096);
  EXPECT_FALSE(longer[2].good);
  EXPECT_EQ(*both.best_batch, 2048);
  EXPECT_EQ(both.entries.size(), batches.size());
  const double at_2048 = expected_loss(longer[1].lr, 2048, 24);
  EXPECT_LE(at_2048, 1.02 * expected_loss(longer[0].lr, 32, 24)) << "the closed form";
  EXPECT_GT(expected_loss(longer[2].lr, 4096, 24), 1.5 * at_2048) << "the closed form";
  EXPECT_NE(both.notes[0].find("batches 2048, 4096, faster than batch 1024, were judged worse"), std::string::npos)
      << both.notes[0];

  trained.clear();
  const RunRace stops = race_for(16, trained);
  ASSERT_TRUE(stops.best_batch.has_value()) << fmt::format("{}", fmt::join(stops.notes, "; "));
  EXPECT_EQ(*stops.best_batch, 1024);  // the closed form's fastest without loss is 2,048: one step
  const std::vector<RunRaceEntry> stopped = last_round(stops);
  ASSERT_EQ(stopped.size(), 3u);
  EXPECT_TRUE(stopped[1].good);
  EXPECT_FALSE(stopped[2].good);
  // 4,096, not run in the longer round, keeps its first-round verdict: worse.
  ASSERT_EQ(stops.entries.size(), batches.size());
  EXPECT_TRUE(stops.entries.back().earlier_round);
  EXPECT_FALSE(stops.entries.back().good);
  EXPECT_NE(stops.notes[0].find("batches 1024, 2048, 4096, faster than batch 512, were judged worse"),
            std::string::npos)
      << stops.notes[0];
  EXPECT_NE(stops.notes[0].find("up to the first still judged worse (4096 not run"), std::string::npos)
      << stops.notes[0];
  for (const std::string& m : trained)  // its longer run, 0.983 epochs, never trained
    EXPECT_FALSE(m.find("batch 4096") != std::string::npos && m.find("0.983") != std::string::npos) << m;
}

// A contested batch races longer only where its run is at least 5 % shorter than the pick's and,
// once one is judged good, than that one's: a smaller saving is within the sweep's resolution.
TEST(RunRace, AContestedBatchSavingUnderFivePercentDoesNotRaceLonger) {
  std::vector<int64_t> batches = kBatches;
  batches.insert(batches.end(), {2048, 4096});
  const size_t at_1024 = kBatches.size() - 1;
  const auto race_for = [&](const std::vector<double>& rates, std::vector<std::string>& trained, double epochs = 24) {
    return race_logged(batches, rates, epochs, trained);
  };
  // 4,096's run 2.9 % shorter than 2,048's: 2,048 is judged good in the longer race, 4,096 not run.
  std::vector<double> rates = step_rates(batches);
  rates[at_1024 + 1] = 1.3 * rates[at_1024];
  rates[at_1024 + 2] = 1.03 * rates[at_1024 + 1];
  std::vector<std::string> trained;
  const RunRace skips = race_for(rates, trained);
  ASSERT_TRUE(skips.best_batch.has_value()) << fmt::format("{}", fmt::join(skips.notes, "; "));
  EXPECT_EQ(skips.longer_rounds, 1);
  ASSERT_EQ(last_round(skips).size(), 2u);
  EXPECT_EQ(skips.entries.size(), batches.size());
  EXPECT_EQ(*skips.best_batch, 2048);
  EXPECT_NE(skips.notes[0].find("batches 2048, 4096, faster than batch 1024, were judged worse"), std::string::npos)
      << skips.notes[0];
  EXPECT_NE(skips.notes[0].find("4096 not run (its run 2.9 % shorter than 2048's, judged good): a contested batch "
                                "races for a run at least 5 % shorter"),
            std::string::npos)
      << skips.notes[0];
  const std::string longest = fmt::format("{:.3g} epochs", skips.lengths_epochs.back());
  for (const std::string& m : trained)  // its longer run never trained
    EXPECT_FALSE(m.find("batch 4096") != std::string::npos && m.find(longest) != std::string::npos) << m;

  // The sweep's own curve: 2,048's run 4.5 % shorter than the pick 1,024's, 4,096's 6.7 %: both are
  // judged worse, only 4,096 races longer (still worse), and 1,024 stands (the closed form's 2,048 is
  // one step away).
  trained.clear();
  const RunRace one = race_for(step_rates(batches), trained);
  ASSERT_TRUE(one.best_batch.has_value()) << fmt::format("{}", fmt::join(one.notes, "; "));
  EXPECT_EQ(one.longer_rounds, 1);
  EXPECT_EQ(*one.best_batch, 1024);
  EXPECT_EQ(one.entries.size(), batches.size());
  EXPECT_FALSE(one.entries[at_1024 + 1].good);
  EXPECT_EQ(one.notes[0].rfind("batch 4096, faster than batch 1024, was judged worse", 0), 0u) << one.notes[0];
  for (const std::string& m : trained)
    EXPECT_FALSE(m.find("batch 2048") != std::string::npos && m.find("0.983") != std::string::npos) << m;

  // Left out, then a larger one races: at 16 epochs 1,024 is judged good, 2,048 (3 % faster than it)
  // is left out, and 4,096 (1.6x 1,024's samples/s) races beside them, still judged worse.
  rates = step_rates(batches);
  rates[at_1024 + 1] = 1.03 * rates[at_1024];
  rates[at_1024 + 2] = 1.6 * rates[at_1024];
  trained.clear();
  const RunRace past = race_for(rates, trained, 16);
  ASSERT_TRUE(past.best_batch.has_value()) << fmt::format("{}", fmt::join(past.notes, "; "));
  EXPECT_EQ(past.longer_rounds, 1);
  EXPECT_EQ(*past.best_batch, 1024);
  const std::vector<RunRaceEntry> raced = last_round(past);
  ASSERT_EQ(raced.size(), 3u) << past.notes[0];
  EXPECT_EQ(raced[1].batch, 1024);
  EXPECT_EQ(raced[2].batch, 4096);
  EXPECT_FALSE(raced[2].good);
  EXPECT_NE(past.notes[0].find("2048 not run (its run 2.9 % shorter than 1024's, judged good)"), std::string::npos)
      << past.notes[0];
  ASSERT_EQ(past.entries.size(), batches.size());  // 2,048 keeps the first round's verdict, marked
  EXPECT_EQ(past.entries[at_1024 + 1].batch, 2048);
  EXPECT_TRUE(past.entries[at_1024 + 1].earlier_round);
  EXPECT_FALSE(past.entries[at_1024 + 1].good);
  for (const std::string& m : trained)
    EXPECT_FALSE(m.find("batch 2048") != std::string::npos && m.find("0.983") != std::string::npos) << m;
}

// A schedule's share of samples that count: each phase's noise-scale share times its own
// correction, weighted by the samples it trains; its time, each phase's samples at its rate.
TEST(RunRace, AScheduleCountsEachPhaseAtItsBatch) {
  const std::vector<std::pair<double, double>> flat{{0, 100}};
  const auto [share, time] = schedule_share_and_time(flat, 4000, 1000, 32, {{64, 0}, {256, 2}}, {1, 0.5}, {100, 400});
  EXPECT_NEAR(share, 0.5 * (1 + 0.32) / (1 + 0.64) + 0.5 * 0.5 * (1 + 0.32) / (1 + 2.56), 1e-12);
  EXPECT_NEAR(time, 2000.0 / 100 + 2000.0 / 400, 1e-12);
  // One phase is the fixed batch's run_efficiency.
  const std::vector<std::pair<double, double>> grown{{0, 50}, {1000, 200}, {2000, 400}, {4000, 800}};
  EXPECT_NEAR(schedule_share_and_time(grown, 10000, 1000, 32, {{300, 0}}, {1}, {1}).first,
              run_efficiency(grown, 10000, 32, 300), 1e-12);
}

// A schedule saves time only on a batch faster than the pick, and the pick is the fastest good one:
// it is weighed over every judged batch, each phase's samples counting at the batch's measured share
// and each phase starting where its batch buys the more progress per second. Batch 1,024, worse as a
// fixed batch, pays from epoch 1 on where the noise scale has grown past it; 4,096, whose samples
// barely counted in the race, never does.
TEST(RunRace, AScheduleGrowsIntoAFasterBatchWorseAsAFixedOne) {
  const std::vector<std::pair<double, double>> noise{{0, 100}, {10000, 1000}, {20000, 2000}};
  const std::vector<double> samples{10000, 20000, 40000}, errors{0.3, 0.2, 0.15};
  const double run_samples = 20 * 60000.0;
  const auto race_with = [&](double share_1024, double samples_per_s_1024, double samples_per_s_4096 = 64000) {
    RunRace race;
    race.epochs = 20;
    race.lr_schedule = "cosine";
    race.reference_batch = 128;
    race.measure = "accuracy";
    race.tolerance = 0.007;
    for (const auto& [batch, rate, share] : std::vector<std::tuple<int64_t, double, double>>{
             {128, 30000, 1}, {1024, samples_per_s_1024, share_1024}, {4096, samples_per_s_4096, 0.001}}) {
      RunRaceEntry e;
      e.batch = batch;
      e.lr.lr = 0.1 * static_cast<double>(batch) / 128;
      e.samples_per_s = rate;
      e.full_run_s = run_samples / rate;
      e.efficiency = run_efficiency(noise, run_samples, 128, batch);
      e.share = share * e.efficiency;
      e.predicted_gap = batch == 128 ? 0 : 0.02;  // beyond the tolerance: neither is good as a fixed batch
      e.good = batch == 128;
      race.entries.push_back(e);
    }
    detail::propose_schedule(race, noise, samples, errors, run_samples, 1, 60000, race.entries[0]);
    return race;
  };
  const RunRace grows = race_with(0.8, 60000);
  ASSERT_TRUE(grows.schedule) << grows.schedule_reason;
  EXPECT_EQ(grows.schedule->text, "128:0,1024:1");
  EXPECT_NEAR(grows.schedule->full_run_s, 60000 / 30000.0 + 19 * 60000 / 60000.0, 1e-9);
  EXPECT_NEAR(grows.schedule->saving, 1 - 21.0 / 40, 1e-9);
  EXPECT_LE(grows.schedule->predicted_gap, grows.tolerance);
  EXPECT_EQ(grows.batch_at_start, 128);
  EXPECT_EQ(grows.batch_at_end, 1024);
  EXPECT_NE(grows.schedule_reason.find("a batch-size schedule saves 48 % of batch 128's 40 s: batch 128 from epoch 0"),
            std::string::npos)
      << grows.schedule_reason;
  // 1,024's samples barely counted either: the best batch stays 128 over the run.
  const RunRace flat = race_with(0.01, 60000);
  EXPECT_FALSE(flat.schedule);
  EXPECT_EQ(
      flat.schedule_reason,
      "no batch-size schedule: the batch whose samples buy the most progress per second is 128 at the run's start "
      "and 128 at its end, less than 2x growth");
  // Nothing raced is 5 % faster than the pick.
  const RunRace slow = race_with(0.8, 31000, 31500);
  EXPECT_FALSE(slow.schedule);
  EXPECT_NE(slow.schedule_reason.find("no batch-size schedule: none can save 5 % of batch 128's 40 s"),
            std::string::npos)
      << slow.schedule_reason;
}

// The share of samples that count: 1 at the reference, (1 + b0/Bn) / (1 + B/Bn) under a constant
// noise scale, closer to 1 where the noise scale grows over the run, and 1 for a noise scale that
// cannot be told from infinite.
TEST(RunRace, SamplesCountAsTheNoiseScaleSays) {
  const std::vector<std::pair<double, double>> flat{{0, 100}, {1000, 100}, {2000, 100}};
  EXPECT_NEAR(run_efficiency(flat, 10000, 32, 32), 1, 1e-12);
  EXPECT_NEAR(run_efficiency(flat, 10000, 32, 300), (1 + 0.32) / (1 + 3.0), 1e-12);
  const std::vector<std::pair<double, double>> growing{{0, 100}, {1000, 200}, {2000, 400}};  // linear in samples
  const double grown = run_efficiency(growing, 10000, 32, 300);
  EXPECT_GT(grown, (1 + 0.32) / (1 + 3.0));
  // By hand: Bn(S) = 100 + S/10 to 1000 samples, then 200 S/1000; the mean of the ratio over 10000.
  double sum = 0;
  for (int i = 0; i < 256; ++i) {
    const double s = 10000 * (i + 0.5) / 256, b = s <= 1000 ? 100 + s / 10 : 200 * s / 1000;
    sum += (1 + 32 / b) / (1 + 300 / b);
  }
  EXPECT_NEAR(grown, sum / 256, 1e-12);
  EXPECT_NEAR(run_efficiency({{0, 1e12}, {1000, 1e12}, {2000, 1e12}}, 10000, 32, 1024), 1, 1e-6);
}

// What a run of fewer samples that count ends behind: on a power law where the gains shrink, by
// the law; where they do not, every doubling lost costs the last gain; nothing where the last
// doubling bought nothing.
TEST(RunRace, ADeficitFollowsTheLearningCurve) {
  const std::vector<double> samples{1000, 2000, 4000};
  // error = 0.1 + S^-0.5: gains shrink by 2^-0.5 per doubling.
  std::vector<double> errors;
  for (double s : samples) errors.push_back(0.1 + std::pow(s, -0.5));
  EXPECT_NEAR(deficit(samples, errors, 64000, 0.5), std::pow(32000, -0.5) - std::pow(64000, -0.5), 1e-12);
  EXPECT_DOUBLE_EQ(deficit(samples, errors, 64000, 1), 0);
  EXPECT_DOUBLE_EQ(deficit(samples, {0.3, 0.2, 0.1}, 64000, 0.25), 0.1 * 2);  // not flattening: 2 doublings
  EXPECT_DOUBLE_EQ(deficit(samples, {0.3, 0.2, 0.21}, 64000, 0.25), 0);
}

// The reference's loss at the run's end, which a loss gap is a share of: on the power law through its
// three runs, but never below the law through the last two with its floor at zero. Losses of 1.0,
// 0.70 and 0.48 (gains shrinking by 0.73) fit a floor of -0.125, whose law reaches zero 34x past the
// last run: a gap of 0.005 was 68 % of the loss there, and every batch but the reference was judged
// worse.
TEST(RunRace, TheLossAtTheRunsEndIsNoLossBelowZeroFloor) {
  const std::vector<double> samples{1000, 2000, 4000};
  std::vector<double> errors;  // 0.1 + S^-0.5: a floor above zero, as measured
  for (double s : samples) errors.push_back(0.1 + std::pow(s, -0.5));
  EXPECT_NEAR(detail::error_at(samples, errors, 64000), 0.1 + std::pow(64000, -0.5), 1e-12);
  const double end = detail::error_at(samples, {1.0, 0.70, 0.48}, 30 * 4000);
  EXPECT_NEAR(end, 0.48 * std::pow(0.48 / 0.70, std::log2(30.0)), 1e-12);
  EXPECT_GT(end, 0.07);
  EXPECT_DOUBLE_EQ(detail::error_at(samples, {0.3, 0.2, 0.1}, 64000), 0.05);   // not flattening: at least half
  EXPECT_DOUBLE_EQ(detail::error_at(samples, {0.3, 0.2, 0.21}, 64000), 0.21);  // the last doubling bought nothing
}

// Why the pick is the answer says what its numbers are: a gap that took a smaller batch's says
// which, and the reference picked beside a faster batch that failed is the fastest of those judged.
TEST(RunRace, ThePicksReasonSaysWhatItsGapIs) {
  RunRace race;
  race.measure = "accuracy";
  race.epochs = 35;
  race.tolerance = 0.0075;
  race.reference_batch = 64;
  race.lengths_epochs = {0.1, 0.2, 0.4};
  race.runs.resize(3);
  race.runs[1].accuracy = 0.80;
  race.runs[2].accuracy = 0.85;
  const auto entry = [](int64_t batch, double full_run_s) {
    RunRaceEntry e;
    e.batch = batch;
    e.full_run_s = full_run_s;
    e.samples_per_s = 1000;
    return e;
  };
  race.entries = {entry(64, 60), entry(128, 50), entry(256, 40)};
  race.entries[1].shorter_run = CompressedRun();
  race.entries[1].shorter_run->accuracy = 0.78;
  race.entries[1].run = CompressedRun();
  race.entries[1].run->accuracy = 0.84;
  race.entries[1].gap_trend = 0.6;
  race.entries[1].predicted_gap = 0.005;
  race.entries[1].gap_as = 256;
  EXPECT_NE(detail::pick_reason(race, race.entries[1])
                .find("ends 0.50 accuracy points behind (taken as far behind as batch 256: a larger batch is not "
                      "predicted nearer), within the held-out noise of 0.75 accuracy points"),
            std::string::npos)
      << detail::pick_reason(race, race.entries[1]);
  // its gaps as they read: 2.00 points behind after 0.2 epochs, and ahead after 0.4 (it had read "-1.00 accuracy
  // points")
  race.entries[1].run->accuracy = 0.86;
  EXPECT_NE(detail::pick_reason(race, race.entries[1])
                .find("against batch 64's runs, 2.00 accuracy points behind after 0.2 epochs and 1.00 accuracy points "
                      "ahead after 0.4"),
            std::string::npos)
      << detail::pick_reason(race, race.entries[1]);
  race.entries[1].run->accuracy = 0.84;
  race.entries[2].message = "failed: out of memory";
  EXPECT_NE(detail::pick_reason(race, race.entries[0])
                .find("every faster batch judged (the notes name those that were not) is predicted to end further "
                      "behind it"),
            std::string::npos)
      << detail::pick_reason(race, race.entries[0]);
  race.entries[2].message.clear();
  EXPECT_NE(detail::pick_reason(race, race.entries[0]).find("every faster batch is predicted to end"),
            std::string::npos);
}

// The share of a run that counted for a batch ending at `error`: where the reference's curve reaches
// it, within the held-out noise counting as level, and none where the curve is flat and it is
// behind beyond the noise.
TEST(RunRace, AMeasuredShareIsWhereTheReferencesCurveReachesTheError) {
  const std::vector<double> samples{1000, 2000, 4000};
  EXPECT_DOUBLE_EQ(measured_share(samples, {0.3, 0.2, 0.1}, 0.1, 0), 1);
  EXPECT_DOUBLE_EQ(measured_share(samples, {0.3, 0.2, 0.1}, 0.2, 0), 0.5);      // not flattening: one doubling back
  EXPECT_DOUBLE_EQ(measured_share(samples, {0.3, 0.2, 0.1}, 0.104, 0.005), 1);  // within the noise
  std::vector<double> errors;                                                   // 0.1 + S^-0.5
  for (double s : samples) errors.push_back(0.1 + std::pow(s, -0.5));
  EXPECT_NEAR(measured_share(samples, errors, 0.1 + std::pow(3000.0, -0.5), 0), 0.75, 1e-9);
  EXPECT_DOUBLE_EQ(measured_share(samples, {0.3, 0.2, 0.2}, 0.21, 0.005), 0);  // flat, behind beyond the noise
}

// A candidate's gap behind the reference shrinks per doubling of the run as it did between its two
// compressed runs: halving at most, never growing; a gap within twice the held-out noise, or none
// at the longer run, has no trend of its own.
TEST(RunRace, AGapIsCarriedOnAsItShrankBetweenTheTwoRuns) {
  EXPECT_DOUBLE_EQ(*gap_trend(0.04, 0.03, 0.005), 0.75);
  EXPECT_DOUBLE_EQ(*gap_trend(0.04, 0.01, 0.005), 0.5);  // a steeper fall is not carried over the run
  EXPECT_DOUBLE_EQ(*gap_trend(0.04, 0.06, 0.005), 1.0);  // a growing gap stands as it is
  EXPECT_FALSE(gap_trend(0.009, 0.03, 0.005));           // the shorter run's gap is near the noise
  EXPECT_FALSE(gap_trend(0.04, -0.001, 0.005));          // level at the longer run: nothing to carry
}

// Gaps carried to the run's end: each by its own trend, by the nearest larger batch's where its own
// is near the noise, never below a smaller batch's; a failed candidate keeps its place and nothing
// else.
// A fast device's default budget (4 epochs at its best samples/s) buys compressed runs of a few
// steps: the H200's transformer race at 2048 trained 3, 6 and 11 steps of a 4-epoch run. The budget
// grows until the reference's shortest run takes 32 steps, at most every candidate's full run and
// at most the ceiling; where it already buys that many (a CPU), it stays as it was.
TEST(RunRace, AFastDeviceBuysTheReferenceEnoughSteps) {
  const std::vector<int64_t> transformer{2048, 4096, 8192, 16384, 32768, 65536};
  const std::vector<double> h200{247917, 315736, 338439, 362840, 376279, 370379};
  double full = 7 * 240000 / h200[0];
  for (size_t i = 1; i < h200.size(); ++i) full += 6 * 240000 / h200[i];
  // 32 steps at 2048 are more than a quarter of the run's 118: every candidate's full run.
  EXPECT_NEAR(run_race_train_s(0.64, 30, transformer, h200, 4, 60000), full / 4, 1e-9);
  EXPECT_NEAR(full / 4, 6.82, 0.01);

  const std::vector<int64_t> resnet{256, 512, 1024, 2048, 4096, 8192};
  const std::vector<double> rates{21307, 25026, 26835, 27618, 28377, 28728};
  double per_share = 7 * 360000 / rates[0];
  for (size_t i = 1; i < rates.size(); ++i) per_share += 6 * 360000 / rates[i];
  // 8.35 s give 256 about 23 steps in 0.016 of the run; 32 steps need 32 x 256 / 360,000 of it.
  const double raised = run_race_train_s(8.35, 30, resnet, rates, 6, 60000);
  EXPECT_NEAR(raised, 32.0 * 256 / 360000 * per_share, 1e-9);
  EXPECT_NEAR(raised, 11.7, 0.05);
  EXPECT_DOUBLE_EQ(run_race_train_s(8.35, 10, resnet, rates, 6, 60000), 10);  // the ceiling
  // A CPU's lenet: 30 s already give batch 16 hundreds of steps.
  EXPECT_DOUBLE_EQ(
      run_race_train_s(30, 30, {16, 32, 64, 128, 256, 512}, {5000, 9000, 14000, 18000, 20000, 21000}, 15, 60000), 30);
  // Nothing to race: the default stands.
  EXPECT_DOUBLE_EQ(run_race_train_s(2, 30, {64}, {1000}, 4, 60000), 2);
}

// The compressed lengths follow the budget and the sweep's samples/s, which move a few percent from
// one tune to the next. The reference's shortest run takes a number of steps on a grid (2^k or
// 3 x 2^(k-1)), so two tunes whose readings differ by 4 % train the same runs from the same weights
// and data order, and pick the same batch.
TEST(RunRace, ThroughputReadingsAFewPercentApartTrainTheSameRuns) {
  Problem problem;
  const std::vector<int64_t> batches{32, 64, 128, 256};
  std::vector<double> rates, faster;
  for (int64_t b : batches) {
    rates.push_back(static_cast<double>(b) / (1e-3 + 1e-5 * static_cast<double>(b)));
    faster.push_back(1.04 * rates.back());
  }
  const auto race = [&](const std::vector<double>& r) {
    return race_runs(
        *problem.workload, problem.held_out,
        RunRaceOptions(batches, r, LrAdviceOptions(32, 0.05)).epochs(2).lr_schedule(LrSchedule::Cosine).budget_s(2));
  };
  const RunRace a = race(rates), b = race(faster);
  ASSERT_EQ(a.runs.size(), 3u);
  ASSERT_EQ(b.runs.size(), 3u);
  // 2 s buy batch 32 about 99 steps at the first readings and 103 at the second: both train 96.
  EXPECT_EQ(a.runs[0].steps, 96);
  for (size_t l = 0; l < 3; ++l) {
    EXPECT_EQ(a.runs[l].steps, b.runs[l].steps);
    EXPECT_EQ(a.runs[l].loss, b.runs[l].loss) << "the same run, trained again from the same state";
  }
  ASSERT_EQ(a.entries.size(), b.entries.size());
  for (size_t i = 1; i < a.entries.size(); ++i) {
    ASSERT_TRUE(a.entries[i].run && b.entries[i].run) << a.entries[i].message << b.entries[i].message;
    EXPECT_EQ(a.entries[i].run->steps, b.entries[i].run->steps);
    EXPECT_EQ(a.entries[i].run->loss, b.entries[i].run->loss);
  }
  EXPECT_EQ(a.best_batch, b.best_batch);
  EXPECT_EQ(a.reference_batch, 32);
  // A budget planned for exactly 32 steps (run_race_train_s on a fast device) trains 32, not 24.
  double per_share = 7 * 2 * kSamples / rates[0];
  for (size_t i = 1; i < rates.size(); ++i) per_share += 6 * 2 * kSamples / rates[i];
  const RunRace exact = race_runs(*problem.workload, problem.held_out,
                                  RunRaceOptions(batches, rates, LrAdviceOptions(32, 0.05))
                                      .epochs(2)
                                      .lr_schedule(LrSchedule::Cosine)
                                      .budget_s(32.0 * 32 / (2 * kSamples) * per_share));
  ASSERT_FALSE(exact.runs.empty());
  EXPECT_EQ(exact.runs[0].steps, 32);
  // A budget that buys less than a step of a run of 3 of the reference's steps: one step, and the
  // longest compressed run no longer than the run.
  const RunRace tiny = race_runs(*problem.workload, problem.held_out,
                                 RunRaceOptions(batches, rates, LrAdviceOptions(32, 0.05))
                                     .epochs(96.0 / kSamples)
                                     .lr_schedule(LrSchedule::Cosine)
                                     .budget_s(1e-6));
  ASSERT_EQ(tiny.lengths_epochs.size(), 3u);
  EXPECT_LE(tiny.lengths_epochs.back(), 96.0 / kSamples * (1 + 1e-9));
}

// A candidate larger than the fastest and no faster cannot be the pick (a larger batch is never
// predicted nearer the reference): it is not raced, the budget falls by its share (the others
// train the same runs), and the notes say so.
TEST(RunRace, CandidatesLargerThanTheFastestAndNoFasterAreNotRaced) {
  Problem problem;
  const std::vector<int64_t> batches{32, 64, 128, 256};
  const std::vector<double> rates{24000, 72000, 69600, 71760};  // 128 and 256 a little slower than 64
  const auto race = [&](std::vector<int64_t> b, std::vector<double> r) {
    return race_runs(*problem.workload, problem.held_out,
                     RunRaceOptions(std::move(b), std::move(r), LrAdviceOptions(32, 0.05))
                         .epochs(2)
                         .lr_schedule(LrSchedule::Cosine)
                         .budget_s(2));
  };
  const RunRace all = race(batches, rates);
  ASSERT_EQ(all.entries.size(), 2u);
  EXPECT_EQ(all.entries[0].batch, 32);
  EXPECT_EQ(all.entries[1].batch, 64);
  ASSERT_TRUE(all.best_batch);
  bool said = false;
  for (const auto& n : all.notes)
    said = said || n.find(
                       "batches 128, 256 not raced: larger than batch 64, the fastest candidate by the sweep "
                       "(72000 samples/s), and no faster, so none could be the pick") != std::string::npos;
  EXPECT_TRUE(said) << fmt::format("{}", fmt::join(all.notes, "\n"));
  // The report says which batches were not judged: "no worse a model" names only raced ones.
  EXPECT_EQ(all.not_raced, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(all.within_5_percent, std::vector<int64_t>{*all.best_batch});  // 32 is 3x slower than 64
  const auto advice = recommend(all);
  ASSERT_TRUE(advice);
  EXPECT_NE(advice->reason.find("; batches 128, 256 not raced (larger and no faster than the fastest candidate; "
                                "not judged)"),
            std::string::npos)
      << advice->reason;
  // Out of order in, the same race. The budget falls by 128's and 256's share, so 32 and 64 train
  // the runs they would beside them: 2 s buy batch 32 about 115 steps in its shortest run beside all
  // three (96 on the step grid); the whole 2 s beside 64 alone would buy about 167 (128).
  const RunRace shuffled = race({256, 64, 128, 32}, {71760, 72000, 69600, 24000});
  ASSERT_EQ(all.runs.size(), 3u);
  ASSERT_EQ(shuffled.runs.size(), 3u);
  EXPECT_EQ(all.runs[0].steps, 96);
  for (size_t l = 0; l < all.runs.size(); ++l) EXPECT_EQ(shuffled.runs[l].steps, all.runs[l].steps);
  // Two candidates always race, the larger slower or not; the fastest the largest leaves all in.
  EXPECT_EQ(race({32, 64}, {72000, 24000}).entries.size(), 2u);
  EXPECT_EQ(race({32, 64, 128}, {24000, 48000, 72000}).entries.size(), 3u);
  // A bad rate among the larger batches is named, not folded into the budget.
  try {
    race({32, 64, 128}, {24000, 72000, 0});
    ADD_FAILURE() << "a rate of 0 was raced";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("batch 128 with 0 samples/s"), std::string::npos) << e.what();
  }
}

// The good batches whose runs are within 5 % of the pick's are named beside it: closer than the
// sweep orders them (the pick's run at least 95 % of theirs). A worse batch, or a good one whose
// run the pick's is 5 % shorter than, is not: 512 at 9.69 s (9.2 / 9.69 = 0.949).
TEST(RunRace, GoodBatchesWithinFivePercentOfThePicksTimeAreNamed) {
  std::vector<RunRaceEntry> entries;
  for (const auto& [batch, run_s, good] : std::vector<std::tuple<int64_t, double, bool>>{
           {32, 10.0, true}, {64, 9.68, true}, {128, 9.2, true}, {256, 8.0, false}, {512, 9.69, true}}) {
    RunRaceEntry e;
    e.batch = batch;
    e.full_run_s = run_s;
    e.good = good;
    entries.push_back(e);
  }
  EXPECT_EQ(detail::within_5_percent(entries, entries[2]), (std::vector<int64_t>{64, 128}));
  RunRace race;
  race.entries = entries;
  race.best_batch = 128;
  race.pick_reason = "batch 128 finishes the run soonest";
  race.within_5_percent = {64, 128};
  auto advice = recommend(race);
  ASSERT_TRUE(advice);
  EXPECT_NE(advice->reason.find("; batch 64 is within 5 % of batch 128's time by the sweep's samples/s, closer "
                                "than the sweep can order them: either trains about as fast"),
            std::string::npos)
      << advice->reason;
  race.within_5_percent = {128};  // the pick alone: nothing to say
  advice = recommend(race);
  ASSERT_TRUE(advice);
  EXPECT_EQ(advice->reason.find("within 5 %"), std::string::npos) << advice->reason;
}

// What tune plans for the run race counts only the candidates it races: 128 and 256, a little
// slower than 64, take no range test and no evaluation, and the training budget falls by their
// share of the compressed runs; where nothing is left out, the options stand as given.
TEST(RunRace, ThePlanCountsOnlyTheCandidatesRaced) {
  const RunRaceOptions o = RunRaceOptions({32, 64, 128, 256}, {24000, 72000, 69600, 71760}, LrAdviceOptions(32, 0.05))
                               .epochs(2)
                               .lr_schedule(LrSchedule::Cosine)
                               .budget_s(2);
  const RunRaceOptions raced = raced_options(o);
  EXPECT_EQ(raced.batches(), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(raced.samples_per_s(), (std::vector<double>{24000, 72000}));
  // The compressed runs' cost, each candidate's full run in proportion to 1/rate: the reference's
  // three (1 + 2 + 4 of f) and the others' two (2 + 4), as run_race.h's cost model counts them.
  const auto cost = [](const std::vector<double>& rates) {
    double c = 7 / rates[0];
    for (size_t i = 1; i < rates.size(); ++i) c += 6 / rates[i];
    return c;
  };
  EXPECT_NEAR(raced.budget_s(), 2 * cost({24000, 72000}) / cost({24000, 72000, 69600, 71760}), 1e-9);
  const auto step_s = [](int64_t) { return 1e-3; };
  const double evaluation = 1e-3 / 3;  // 1,024 held-out samples at batch 1,024, forward only
  EXPECT_NEAR(run_race_overhead_s(o, 1024, step_s),
              2 * o.lr().steps() * 1e-3 + 3 * o.noise_steps() * 8 * 1e-3 + (1 + 3 + 2) * evaluation, 1e-12);
  const RunRaceOptions all = raced_options(RunRaceOptions(o).samples_per_s({24000, 48000, 60000, 72000}));
  EXPECT_EQ(all.batches().size(), 4u);
  EXPECT_DOUBLE_EQ(all.budget_s(), 2);
}

TEST(RunRace, GapsAreCarriedInBatchOrder) {
  const double noise = 0.0075, doublings = 6;
  const std::vector<std::optional<CompressedGaps>> gaps{
      CompressedGaps{0.010, 0.012},  // near the noise: the next larger batch's trend, 0.6
      CompressedGaps{0.050, 0.030},  // its own trend, 0.6
      std::nullopt,                  // failed
      CompressedGaps{0.160, 0.120},  // 0.75
      CompressedGaps{0.260, 0.156},  // 0.6: would end nearer than the batch before it
      CompressedGaps{0.030, -0.01},  // level at 4f, yet not ahead of the smaller batches
  };
  const auto c = carry_gaps(gaps, noise, doublings);
  ASSERT_EQ(c.size(), gaps.size());
  EXPECT_DOUBLE_EQ(c[0]->trend, 0.6);
  EXPECT_NEAR(c[0]->gap, 0.012 * std::pow(0.6, 6), 1e-12);
  EXPECT_NEAR(c[1]->gap, 0.030 * std::pow(0.6, 6), 1e-12);
  EXPECT_FALSE(c[2]);
  EXPECT_DOUBLE_EQ(c[3]->trend, 0.75);
  EXPECT_NEAR(c[3]->gap, 0.120 * std::pow(0.75, 6), 1e-12);
  EXPECT_DOUBLE_EQ(c[4]->trend, 0.6);
  EXPECT_DOUBLE_EQ(c[4]->gap, c[3]->gap);
  EXPECT_DOUBLE_EQ(c[5]->gap, c[3]->gap);
  // Which smaller candidate's gap a larger one takes, for the report to say so beside it.
  EXPECT_FALSE(c[0]->as || c[1]->as || c[3]->as);
  EXPECT_EQ(c[4]->as, 3u);
  EXPECT_EQ(c[5]->as, 3u);
  EXPECT_DOUBLE_EQ(carry_gaps({CompressedGaps{0.02, 0.03}}, noise, 0)[0]->gap,
                   0.03);  // no doublings left: as it stands
}

// The reference's middle run enters every candidate's gap at its length. lenet AdamW at 15 epochs,
// tune seed 0: batch 16's error fell 2.77 points from 0.068 to 0.137 epochs and 4.30 from there to
// 0.273; no learning curve steepens so, and the bend is within the noise of three runs (sqrt(6) x
// 0.81 points). Read as measured, every gap at 0.137 epochs was 0.77 points smaller and seemed to
// grow, every faster batch was judged worse, and 16 (1.95x the fastest good batch's time) was
// picked; read on the line, 128's gap shrinks as the run doubles, and 32 to 128 are judged no worse
// (their full runs end within 0.2 points of 16's).
TEST(RunRace, AMiddleRunBelowTheLineWithinTheNoiseIsReadOnTheLine) {
  const double noise = 0.0081, doublings = std::log2(15 / 0.2731);
  const std::vector<double> errors{1 - 0.7201, 1 - 0.7478, 1 - 0.7908};
  const std::optional<double> middle = line_through_middle(errors, noise);
  ASSERT_TRUE(middle);
  EXPECT_NEAR(*middle, 0.5 * (errors[0] + errors[2]), 1e-12);
  EXPECT_FALSE(line_through_middle({0.30, 0.25, 0.22}, noise));  // flattening: as measured
  EXPECT_FALSE(line_through_middle({0.90, 0.89, 0.85}, noise));  // a plateau's exit: a bend beyond the noise
  EXPECT_FALSE(line_through_middle({0.30, 0.25}, noise));
  // The bound: a bend of sqrt(6) x the noise (2.449 x 0.01) is read on the line, a larger one is not.
  EXPECT_TRUE(line_through_middle({0.5, 0.5 * (0.8 + 0.0244), 0.3}, 0.01));
  EXPECT_FALSE(line_through_middle({0.5, 0.5 * (0.8 + 0.0246), 0.3}, 0.01));

  // Batches 32 to 512: the errors after 0.137 and 0.273 epochs.
  const std::vector<std::pair<double, double>> runs{{1 - 0.7434, 1 - 0.7798},
                                                    {1 - 0.7423, 1 - 0.7828},
                                                    {1 - 0.7359, 1 - 0.7738},
                                                    {1 - 0.7090, 1 - 0.7413},
                                                    {1 - 0.6931, 1 - 0.7189}};
  const auto judged_good = [&](double middle_error) {
    std::vector<std::optional<CompressedGaps>> gaps;
    for (const auto& [shorter, longer] : runs)
      gaps.push_back(CompressedGaps{shorter - middle_error, longer - errors[2]});
    std::vector<bool> good;
    for (const auto& c : carry_gaps(gaps, noise, doublings)) good.push_back(c->gap <= noise);
    return good;
  };
  EXPECT_EQ(judged_good(errors[1]), (std::vector<bool>{false, false, false, false, false}));
  EXPECT_EQ(judged_good(*middle), (std::vector<bool>{true, true, true, false, false}));

  RunRace race;  // the gaps the report shows are read the same way
  race.measure = "accuracy";
  for (double e : errors) {
    CompressedRun r;
    r.accuracy = 1 - e, r.loss = e;
    race.runs.push_back(r);
  }
  CompressedRun run;
  run.accuracy = 0.7434, run.loss = 1 - 0.7434;
  EXPECT_NEAR(*compressed_gap(race, run, 1), 0.7478 - 0.7434, 1e-12);
  race.middle_on_line = 1 - *middle;
  EXPECT_NEAR(*compressed_gap(race, run, 1), 1 - *middle - 0.7434, 1e-12);
  EXPECT_NEAR(*compressed_gap(race, run, 2), 0.7908 - 0.7434, 1e-12);  // the longer runs as measured

  RunRace by_loss = race;  // a loss race reads the middle run's loss on the line: a share of it
  by_loss.measure = "loss";
  by_loss.middle_on_line = 0.62;
  run.loss = 0.65;
  EXPECT_NEAR(*compressed_gap(by_loss, run, 1), (0.65 - 0.62) / 0.62, 1e-12);
  EXPECT_NEAR(*compressed_gap(by_loss, run, 2), (0.65 - errors[2]) / errors[2], 1e-12);
}

// The race kept from mlp SGD's seed-0 tune at 35 epochs (bench/grids/mlp-sgd.race.json): 128 picked,
// every faster batch judged worse. 256's gap grew between its runs (4.29 then 4.84 points); 512 and
// larger were far behind in the shorter run and closing: those run longer, and only while the run
// is more than five doublings past the race and they are faster than the pick.
TEST(RunRace, CandidatesClosingFromFarBehindAreRunLongerFarFromTheRunsEnd) {
  RunRace race;
  race.epochs = 35;
  race.measure = "accuracy";
  race.tolerance = 0.0077;
  race.reference_batch = 128;
  race.best_batch = 128;
  race.lengths_epochs = {0.0683, 0.1365, 0.2731};
  for (double a : {0.7128, 0.7819, 0.8191}) {
    CompressedRun r;
    r.loss = 1 - a, r.accuracy = a;
    race.runs.push_back(r);
  }
  const auto entry = [](int64_t batch, double full_run_s, double shorter, double longer) {
    RunRaceEntry e;
    e.batch = batch, e.full_run_s = full_run_s;
    e.shorter_run = CompressedRun{}, e.run = CompressedRun{};
    e.shorter_run->accuracy = shorter, e.shorter_run->loss = 1 - shorter;
    e.run->accuracy = longer, e.run->loss = 1 - longer;
    return e;
  };
  RunRaceEntry reference;
  reference.batch = 128, reference.full_run_s = 58.6, reference.good = true;
  race.entries = {reference,
                  entry(256, 45.6, 0.7390, 0.7707),
                  entry(512, 39.6, 0.6751, 0.7485),
                  entry(1024, 36.6, 0.5357, 0.6790),
                  entry(2048, 33.1, 0.5049, 0.6061),
                  entry(4096, 32.8, 0.4471, 0.5333)};
  EXPECT_EQ(contested_batches(race), (std::vector<int64_t>{512, 1024, 2048, 4096}));

  RunRace near_the_end = race;  // 4 epochs: three doublings past the race
  near_the_end.epochs = 4;
  EXPECT_TRUE(contested_batches(near_the_end).empty());

  RunRace picked_1024 = race;  // only faster batches are contested
  picked_1024.best_batch = 1024;
  picked_1024.entries[3].good = true;
  EXPECT_EQ(contested_batches(picked_1024), (std::vector<int64_t>{2048, 4096}));

  RunRace near_the_noise = race;  // 512's shorter gap within twice the noise: no trend of its own
  near_the_noise.entries[2].shorter_run->accuracy = 0.7819 - 0.015;
  EXPECT_EQ(contested_batches(near_the_noise), (std::vector<int64_t>{1024, 2048, 4096}));

  RunRace failed = race;  // a candidate that failed is not run again
  failed.entries[4].message = "failed: out of memory";
  EXPECT_EQ(contested_batches(failed), (std::vector<int64_t>{512, 1024, 4096}));

  RunRace unjudged = race;  // no pick: nothing to contest
  unjudged.best_batch.reset();
  EXPECT_TRUE(contested_batches(unjudged).empty());
}

// The share of samples whose run ends `gap` behind: deficit's inverse on the learning curve; where
// the curve cannot fall that far, all of them for a gap within the noise and none beyond it.
TEST(RunRace, AGapIsAShareOfSamplesOnTheReferencesCurve) {
  const std::vector<double> samples{1000, 2000, 4000};
  std::vector<double> errors;  // 0.1 + S^-0.5
  for (double s : samples) errors.push_back(0.1 + std::pow(s, -0.5));
  const double gap = deficit(samples, errors, 64000, 0.3);
  EXPECT_NEAR(share_for_gap(samples, errors, 64000, gap, 0.001), 0.3, 1e-9);
  EXPECT_DOUBLE_EQ(share_for_gap(samples, errors, 64000, 0, 0.001), 1);
  EXPECT_DOUBLE_EQ(share_for_gap(samples, {0.3, 0.2, 0.2}, 64000, 0.004, 0.005), 1);  // flat, within the noise
  EXPECT_DOUBLE_EQ(share_for_gap(samples, {0.3, 0.2, 0.2}, 64000, 0.01, 0.005), 0);   // flat, behind beyond it
}

// A compressed run says how far it has come at most once a second of the race's clock: each report
// within one run further on than the last, a second or more later, with the mean training loss since
// the last; a race that takes no second between reports says nothing but each run's start.
TEST(RunRace, ACompressedRunSaysHowFarItHasComeOnceASecond) {
  Problem problem;
  std::vector<RunRaceStep> steps;
  const auto now = std::make_shared<double>(0);  // each read a tenth of a second on: two a step
  const RunRaceOptions o = RunRaceOptions({32, 256}, {20000, 80000}, LrAdviceOptions(32, 0.05))
                               .epochs(2)
                               .lr_schedule(LrSchedule::Cosine)
                               .budget_s(2)
                               .clock([now] { return *now += 0.1; })
                               .on_step([&](const RunRaceStep& p) { steps.push_back(p); });
  (void)race_runs(*problem.workload, problem.held_out, o);
  ASSERT_GE(steps.size(), 2u);
  for (size_t i = 0; i < steps.size(); ++i) {
    const RunRaceStep& p = steps[i];
    EXPECT_TRUE(p.batch == 32 || p.batch == 256) << p.batch;
    EXPECT_GT(p.epochs, 0);
    EXPECT_LE(p.epochs, 2);
    EXPECT_GE(p.step, 1);
    EXPECT_LE(p.step, p.steps);
    EXPECT_TRUE(std::isfinite(p.loss)) << p.loss;
    if (i == 0) continue;
    EXPECT_GE(p.elapsed_s, steps[i - 1].elapsed_s + 1 - 1e-9) << i;
    if (p.batch == steps[i - 1].batch && p.epochs == steps[i - 1].epochs) EXPECT_GT(p.step, steps[i - 1].step) << i;
  }
  steps.clear();
  (void)race_runs(*problem.workload, problem.held_out, RunRaceOptions(o).clock(ticking_clock()));
  EXPECT_TRUE(steps.empty()) << steps.size();
}

// A reference that has not left the start in its longest compressed run (a rate far too small for
// the budget) has no learning curve: the race recommends nothing and says why, rather than reading
// a flat curve as "fewer samples cost nothing" and picking the largest batch. It first races again
// with every compressed run twice as long, while a longest run twice as long fits the run.
TEST(RunRace, AReferenceThatNeverLeftTheStartPredictsNothing) {
  Problem problem;
  const RunRace race = race_runs(*problem.workload, problem.held_out,
                                 RunRaceOptions({32, 256, 1024}, {20000, 80000, 100000}, LrAdviceOptions(32, 1e-7))
                                     .epochs(2)
                                     .lr_schedule(LrSchedule::Cosine)
                                     .budget_s(2)
                                     .clock(ticking_clock()));
  EXPECT_FALSE(race.best_batch.has_value());
  const std::string notes = fmt::format("{}", fmt::join(race.notes, "; "));
  EXPECT_NE(notes.find("batch 32 (the reference) trained, with no learning curve: its longest compressed run"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("did not leave the start"), std::string::npos) << notes;
  // It ran again twice as long while a longest run twice as long fit the run, and did not leave it.
  EXPECT_NE(notes.find("batch 32 (the reference) did not leave the start in its longest compressed run (0.328 "
                       "epochs): the race ran again with every compressed run twice as long, 2 times (0.328 to 1.31 "
                       "epochs), and gave no answer either"),
            std::string::npos)
      << notes;
  // A longest run twice as long would pass the run's end: the next would be the whole run, past the budgets.
  EXPECT_NE(notes.find("racing again with its longest compressed run your whole run would train about 11 s more, "
                       "past 3 times the race's budget (2 s)"),
            std::string::npos)
      << notes;
  // The others were judged against nothing: each says so (the JSON had a bare good: false, read as worse)
  ASSERT_EQ(race.entries.size(), 3u);
  for (size_t i = 1; i < race.entries.size(); ++i)
    EXPECT_EQ(race.entries[i].message, "not judged: batch 32 (the reference) gave no learning curve")
        << race.entries[i].batch;
}

// A reference that left the start only in its longest compressed run gives the other batches no
// trend to read: their gaps are read after the two longer runs, and after the shorter one the
// reference was still on the plateau (mobilenet AdamW, a 2-epoch run: 32 level with 16 at chance
// after 0.34 epochs, 1.7 points behind after 0.68, carried as it stood and picked; full runs put it
// 1.8 behind). The race predicts nothing from it. Where a longest run twice as long would pass the
// run's end (0.66 epochs of a 0.5-epoch run), it races again with its longest run the whole run,
// whose gaps need no trend; with a reserve, the reserve joins first, as where it never left.
TEST(RunRace, AReferenceThatLeftTheStartOnlyInItsLongestRunRacesOnToTheRunsEnd) {
  Problem problem;
  std::map<std::string, int> trained;  // each compressed run, by what the progress line says of it
  std::vector<std::string> rounds;
  const RunRaceOptions o = RunRaceOptions({32, 256, 1024}, {20000, 80000, 100000}, LrAdviceOptions(32, 5e-5))
                               .epochs(0.5)  // the same compressed runs as 2 epochs'
                               .lr_schedule(LrSchedule::Cosine)
                               .budget_s(2)
                               .clock(ticking_clock());
  const RunRace race = race_runs(*problem.workload, problem.held_out,
                                 RunRaceOptions(o).on_progress([&](const std::string& m) { ++trained[m]; }));
  const std::string notes = fmt::format("{}", fmt::join(race.notes, "; "));
  EXPECT_EQ(trained.count("run race: batch 32, your 0.5-epoch run compressed to 0.328 epochs"), 1u);  // the first race
  EXPECT_EQ(trained.count("run race: batch 32, your 0.5-epoch run compressed to 0.5 epochs"), 1u);    // the round
  ASSERT_TRUE(race.best_batch.has_value()) << notes;
  EXPECT_FALSE(race.reference_stuck);
  EXPECT_EQ(race.plateau_rounds, 1);
  ASSERT_EQ(race.lengths_epochs.size(), 3u);
  EXPECT_NEAR(race.lengths_epochs[0], 0.125, 1e-9);
  EXPECT_NEAR(race.lengths_epochs[2], 0.5, 1e-9);
  EXPECT_NE(notes.find("batch 32 (the reference) left the start only in its longest compressed run (0.328 epochs): "
                       "the race ran again with its longest compressed run your whole run (0.125 to 0.5 epochs)"),
            std::string::npos)
      << notes;
  EXPECT_EQ(notes.find("grew from 9 at the start to ;"), std::string::npos) << notes;  // none measured along
  for (const RunRaceEntry& e : race.entries)                                           // every batch raced was judged
    if (e.batch != race.reference_batch && e.message.empty()) EXPECT_TRUE(e.predicted_gap.has_value()) << e.batch;
  const RunRace joined = race_runs(*problem.workload, problem.held_out,
                                   RunRaceOptions(o).reserve({8, 16}).reserve_samples_per_s({8000, 14000}));
  ASSERT_TRUE(joined.first_reference.has_value());
  EXPECT_EQ(*joined.first_reference, 32);
  EXPECT_EQ(joined.reference_batch, 8);
  ASSERT_FALSE(joined.notes.empty());
  EXPECT_NE(joined.notes[0].find("batch 32 (the first reference) left the start only in its longest compressed run "
                                 "(0.328 epochs), so the reserve 8, 16 joined"),
            std::string::npos)
      << joined.notes[0];
}

// Where the reference left the start only in its longest compressed run and a run twice as long fits
// the run, the race runs again with every compressed run twice as long (those trained are not trained
// again): the reference's learning curve has then begun in both longer runs, and the gaps are read
// as in any race.
TEST(RunRace, AReferenceOffThePlateauOnlyInItsLongestRunRacesAgainTwiceAsLong) {
  Problem problem;
  std::map<std::string, int> trained;  // each compressed run, by what the progress line says of it
  std::vector<std::string> rounds;
  const RunRaceOptions o = RunRaceOptions({32, 256, 1024}, {20000, 80000, 100000}, LrAdviceOptions(32, 5e-5))
                               .epochs(2)
                               .lr_schedule(LrSchedule::Cosine)
                               .budget_s(2)
                               .clock(ticking_clock())
                               .on_progress([&](const std::string& m) { ++trained[m]; })
                               .on_round([&](const std::string& m) { rounds.push_back(m); });
  const RunRace race = race_runs(*problem.workload, problem.held_out, o);
  for (const auto& [run, times] : trained) EXPECT_EQ(times, 1) << run << ": trained again in a later round";
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].find("batch 32 (the reference) left the start only in its longest compressed run (0.328 "
                           "epochs): racing again with every compressed run twice as long (to 0.655 epochs), smallest "
                           "first; at least about "),
            0u)
      << rounds[0];
  // three budgets of 2 s
  EXPECT_NE(rounds[0].find(" s of training, within the 6 s of wall time its rounds have left"), std::string::npos)
      << rounds[0];
  EXPECT_EQ(trained.count("run race: batch 32, your 2-epoch run compressed to 0.655 epochs"), 1u);  // the new one
  EXPECT_EQ(trained.count("run race: batch 32, your 2-epoch run compressed to 0.328 epochs"), 1u);  // reused
  ASSERT_TRUE(race.best_batch.has_value()) << fmt::format("{}", fmt::join(race.notes, "; "));
  EXPECT_FALSE(race.reference_stuck);
  EXPECT_EQ(race.reference_batch, 32);
  ASSERT_EQ(race.lengths_epochs.size(), 3u);
  EXPECT_NEAR(race.lengths_epochs[0], 0.164, 0.001);
  EXPECT_NEAR(race.lengths_epochs[2], 0.655, 0.001);
  ASSERT_FALSE(race.notes.empty());
  EXPECT_NE(race.notes[0].find("batch 32 (the reference) left the start only in its longest compressed run (0.328 "
                               "epochs): the race ran again with every compressed run twice as long (0.164 to 0.655 "
                               "epochs)"),
            std::string::npos)
      << race.notes[0];
  double trained_s = 0;  // every run the answer reads, the ones trained in the race before included
  for (const CompressedRun& run : race.runs) trained_s += run.train_s;
  for (const RunRaceEntry& e : race.entries) {  // every batch raced was judged
    if (e.batch != race.reference_batch && e.message.empty()) EXPECT_TRUE(e.predicted_gap.has_value()) << e.batch;
    if (e.shorter_run) trained_s += e.shorter_run->train_s;
    if (e.run) trained_s += e.run->train_s;
  }
  EXPECT_GE(race.wall_s, trained_s);  // the rounds' wall time is the first race's and every round's
  EXPECT_EQ(race.plateau_rounds, 1);
}

// Where the longest compressed run is the whole run, every gap is read at the run's end and carried
// nowhere: a reference off the plateau only there is judged, not left without an answer (the
// reserve's 32 on mobilenet_v3_small with SGD, 2 epochs: at chance after 1 epoch, 0.83 accuracy
// after 2; the batch race had answered at a constant rate instead).
TEST(RunRace, AReferenceOffThePlateauOnlyInTheWholeRunIsJudgedThere) {
  Problem problem;
  const RunRace race = race_runs(*problem.workload, problem.held_out,
                                 RunRaceOptions({32, 256, 1024}, {20000, 80000, 100000}, LrAdviceOptions(32, 5e-5))
                                     .epochs(0.32768)  // the 2-epoch race's first runs, the longest now the whole run
                                     .lr_schedule(LrSchedule::Cosine)
                                     .budget_s(1000));
  const std::string notes = fmt::format("{}", fmt::join(race.notes, "; "));
  ASSERT_EQ(race.lengths_epochs.size(), 3u);
  EXPECT_NEAR(race.lengths_epochs[2], 0.32768, 1e-9);
  EXPECT_FALSE(race.reference_stuck) << notes;
  EXPECT_EQ(race.plateau_rounds, 0);
  ASSERT_TRUE(race.best_batch.has_value()) << notes;
  EXPECT_NE(notes.find("batch 32 (the reference) left the start only in its longest compressed run, your whole "
                       "0.32768-epoch run (held-out loss"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("every gap is read at the run's end, not carried"), std::string::npos) << notes;
  for (const RunRaceEntry& e : race.entries) {  // each gap is the one measured at the run's end (shares of the loss)
    if (e.batch == race.reference_batch) continue;
    ASSERT_TRUE(e.predicted_gap && e.run) << e.batch << ": " << e.message;
    const double measured = std::max(0.0, *compressed_gap(race, e.run, 2));
    if (!e.gap_as) EXPECT_NEAR(*e.predicted_gap, measured, 1e-6 + 0.05 * measured) << e.batch;
  }
  // At the base rate scaled with the batch, the larger batches end the run a little ahead: the fastest
  // is picked, and its reason says it ended ahead.
  EXPECT_EQ(*race.best_batch, 1024) << notes;
  EXPECT_NE(race.pick_reason.find("it ended the whole run"), std::string::npos) << race.pick_reason;
  EXPECT_NE(race.pick_reason.find("ahead of batch 32"), std::string::npos) << race.pick_reason;
}

// A candidate whose longest compressed run did not leave the start is not judged good, however
// near the reference it ended: here the larger batches train on half the gradient (their loss
// halved), so at the whole run, where the reference has just left the plateau, they have not, and
// end within the loss's 2 % of it. Judged good, the fastest would be picked for its speed.
TEST(RunRace, ACandidateStillAtTheStartIsNotJudgedGood) {
  Problem problem([](const at::Tensor& out, const at::Tensor& target) {
    const at::Tensor loss = squared_error(out, target);
    return at::GradMode::is_enabled() && target.size(0) >= 256 ? 0.5 * loss : loss;
  });
  const RunRace race = race_runs(*problem.workload, problem.held_out,
                                 RunRaceOptions({32, 256, 1024}, {20000, 80000, 100000}, LrAdviceOptions(32, 5e-5))
                                     .epochs(0.32768)
                                     .lr_schedule(LrSchedule::Cosine)
                                     .budget_s(1000));
  const std::string notes = fmt::format("{}", fmt::join(race.notes, "; "));
  ASSERT_TRUE(race.best_batch.has_value()) << notes;
  EXPECT_EQ(*race.best_batch, 32) << notes;
  ASSERT_EQ(race.entries.size(), 3u);
  for (size_t i = 1; i < race.entries.size(); ++i) {
    const RunRaceEntry& e = race.entries[i];
    ASSERT_TRUE(e.predicted_gap.has_value()) << e.batch << ": " << e.message;
    EXPECT_LE(*e.predicted_gap, race.tolerance) << e.batch;  // within the noise of the reference
    EXPECT_FALSE(e.good) << e.batch;
  }
  EXPECT_NE(notes.find("batches 256, 1024 within the held-out noise of batch 32 but did not leave the start in their "
                       "longest compressed run (0.328 epochs"),
            std::string::npos)
      << notes;
}

// A round past the plateau whose reference fails (its loss stops being finite in the longer run)
// gives no answer, and the race says so: plateau_round_failed, so tune's warning does not blame the
// plateau alone (its batch race still follows). The loss fails after the reference's 1,408th step
// at batch 32: the first race trains 896 (0.082, 0.164 and 0.328 epochs), the round's new 0.655-epoch
// run 1,024 more.
TEST(RunRace, ARoundPastThePlateauWhoseReferenceFailsSaysSo) {
  const auto steps = std::make_shared<int64_t>(0);
  Problem problem([steps](const at::Tensor& out, const at::Tensor& target) {
    const at::Tensor loss = squared_error(out, target);
    if (target.size(0) != 32 || !at::GradMode::is_enabled() || ++*steps <= 1408) return loss;
    return loss * std::numeric_limits<double>::quiet_NaN();
  });
  const RunRace race = race_runs(*problem.workload, problem.held_out,
                                 RunRaceOptions({32, 256, 1024}, {20000, 80000, 100000}, LrAdviceOptions(32, 1e-7))
                                     .epochs(2)
                                     .lr_schedule(LrSchedule::Cosine)
                                     .budget_s(2)
                                     .clock(ticking_clock()));
  const std::string notes = fmt::format("{}", fmt::join(race.notes, "; "));
  EXPECT_FALSE(race.best_batch.has_value()) << notes;
  EXPECT_TRUE(race.reference_stuck) << notes;  // tune's batch race follows, as after a plateau
  EXPECT_TRUE(race.plateau_round_failed) << notes;
  EXPECT_EQ(race.plateau_rounds, 1);
  EXPECT_NE(notes.find("batch 32 (the reference) did not leave the start in its longest compressed run (0.328 "
                       "epochs): the race ran again with every compressed run twice as long (0.164 to 0.655 epochs), "
                       "and gave no answer either (batch 32: the training loss or its held-out loss stopped being "
                       "finite in its 0.655-epoch run"),
            std::string::npos)
      << notes;
  EXPECT_GT(race.wall_s, 0);
}

// Where the reference never leaves the start, the reserve's smaller batches join, the smallest the
// new reference, and the race runs once more; where that one does not either, nothing is picked,
// and the notes say both.
// 1,024, slower than 256, is not raced in either race, and the reserve's note counts it left out.
TEST(RunRace, AReserveJoinsWhenTheReferenceNeverLeftTheStart) {
  Problem problem;
  const RunRaceOptions o = RunRaceOptions({32, 256, 1024}, {20000, 100000, 90000}, LrAdviceOptions(32, 1e-7))
                               .epochs(2)
                               .lr_schedule(LrSchedule::Cosine)
                               .budget_s(2)
                               .clock(ticking_clock())
                               .reserve({8, 16})
                               .reserve_samples_per_s({8000, 14000});
  std::vector<std::string> rounds;
  const RunRace race = race_runs(*problem.workload, problem.held_out,
                                 RunRaceOptions(o).on_round([&](const std::string& m) { rounds.push_back(m); }));
  EXPECT_FALSE(race.best_batch.has_value());
  // The reserve's race, then its two rounds past the plateau, each announced before it trained.
  ASSERT_EQ(rounds.size(), 3u) << fmt::format("{}", fmt::join(rounds, "\n"));
  EXPECT_EQ(rounds[0].find("batch 32 (the first reference) did not leave the start in 0.328 epochs: the reserve 8, "
                           "16 races beside it, batch 8 the reference, for one more budget (about 2 s of training)"),
            0u)
      << rounds[0];
  EXPECT_EQ(rounds[1].find("batch 8 (the reference) did not leave the start in its longest compressed run"), 0u)
      << rounds[1];
  EXPECT_EQ(rounds[2].find("batch 8 (the reference) still had not left the start in its middle compressed run"), 0u)
      << rounds[2];
  ASSERT_TRUE(race.first_reference.has_value());
  EXPECT_EQ(*race.first_reference, 32);
  EXPECT_EQ(race.reference_batch, 8);
  ASSERT_EQ(race.entries.size(), 3u);  // the reserve and the first reference; 256 and 1024 stay out
  EXPECT_EQ(race.entries.front().batch, 8);
  EXPECT_EQ(race.entries.back().batch, 32);
  ASSERT_FALSE(race.notes.empty());
  EXPECT_NE(race.notes[0].find("batch 32 (the first reference) did not leave the start"), std::string::npos)
      << race.notes[0];
  EXPECT_NE(race.notes[0].find("the reserve 8, 16 joined, batch 8 the reference, for one more budget, without 256, "
                               "1024 (larger"),
            std::string::npos)
      << race.notes[0];
  EXPECT_NE(race.notes[0].find("it did not leave the start either; no pick"), std::string::npos) << race.notes[0];
  ASSERT_GE(race.notes.size(), 2u);  // the reserve's race, run longer past the plateau, in vain
  EXPECT_EQ(race.notes[1].find("batch 8 (the reference) did not leave the start in its longest compressed run"), 0u)
      << race.notes[1];
  EXPECT_NE(race.notes[1].find("the race ran again with every compressed run twice as long, 2 times (0.0819 to "
                               "0.328 epochs), and gave no answer either"),
            std::string::npos)
      << race.notes[1];
  EXPECT_NE(race.notes[1].find("past 3 times the race's budget (2 s)"), std::string::npos) << race.notes[1];
  // A reference that learns leaves the reserve out.
  const RunRace learned =
      race_runs(*problem.workload, problem.held_out, RunRaceOptions(o).lr(LrAdviceOptions(32, 0.05)).budget_s(4));
  EXPECT_FALSE(learned.first_reference.has_value());
  EXPECT_EQ(learned.reference_batch, 32);
  EXPECT_EQ(learned.entries.size(), 2u);
  EXPECT_EQ(learned.not_raced, std::vector<int64_t>{1024});
  EXPECT_EQ(race.not_raced, std::vector<int64_t>{1024});
  EXPECT_THROW(race_runs(*problem.workload, problem.held_out, RunRaceOptions(o).reserve_samples_per_s({1})),
               ConfigError);
}

// Where the race trained the whole run (its longest compressed run is the run: a fast device's, or
// a short run) and the reference ended ahead of every larger candidate beyond the noise, the best
// batch may lie below the candidates: the reserve joins, as where the reference never left the
// start. On a compressed run the smallest batch leads as a rule, and nothing joins.
TEST(RunRace, AReserveJoinsWhenTheReferenceLedTheWholeRun) {
  Problem problem;
  const RunRaceOptions o = RunRaceOptions({256, 4096}, {100000, 400000}, LrAdviceOptions(32, 0.05))
                               .epochs(2)
                               .lr_schedule(LrSchedule::Cosine)
                               .budget_s(1000)  // every run in full: f is a quarter
                               .reserve({64, 128})
                               .reserve_samples_per_s({40000, 70000});
  const RunRace race = race_runs(*problem.workload, problem.held_out, o);
  ASSERT_TRUE(race.first_reference.has_value()) << fmt::format("{}", fmt::join(race.notes, "; "));
  EXPECT_EQ(*race.first_reference, 256);
  EXPECT_EQ(race.reference_batch, 64);
  ASSERT_EQ(race.entries.size(), 3u);  // 64, 128 and the first reference; 4,096 stays out
  EXPECT_EQ(race.entries.back().batch, 256);
  ASSERT_FALSE(race.notes.empty());
  EXPECT_NE(race.notes[0].find("batch 256 (the first reference) ended your whole 2-epoch run ahead of every larger "
                               "candidate beyond the noise, so the reserve 64, 128 joined, batch 64 the reference"),
            std::string::npos)
      << race.notes[0];
  // The pick is the closed form's fastest batch within 2 % of the best of the three (the rates grow
  // with the batch), within one power-of-two step, as in the closed-form test above.
  ASSERT_TRUE(race.best_batch.has_value()) << fmt::format("{}", fmt::join(race.notes, "; "));
  std::map<int64_t, double> expected;
  double lowest = 1e300;
  for (const RunRaceEntry& e : race.entries) {
    ASSERT_TRUE(e.message.empty()) << e.batch << ": " << e.message;
    expected[e.batch] = expected_loss(e.lr, e.batch, 2);
    lowest = std::min(lowest, expected[e.batch]);
  }
  int64_t answer = 0;
  for (const auto& [batch, loss] : expected)
    if (loss <= 1.02 * lowest) answer = batch;
  EXPECT_TRUE(*race.best_batch == answer || *race.best_batch == answer / 2 || *race.best_batch == answer * 2)
      << "picked " << *race.best_batch << ", the closed form's answer " << answer;

  // Compressed to a tenth of the run, the same lead joins nothing.
  const RunRace compressed = race_runs(*problem.workload, problem.held_out, RunRaceOptions(o).budget_s(0.5));
  EXPECT_LT(compressed.lengths_epochs.back(), 2.0);
  EXPECT_FALSE(compressed.first_reference.has_value());
  EXPECT_EQ(compressed.reference_batch, 256);
}

// A clock a microsecond a reading that jumps `by` seconds when a progress line beginning `at` comes:
// the machine slowed (another process took the cores) from that compressed run on.
struct SlowingClock {
  std::shared_ptr<double> now = std::make_shared<double>(0);
  std::function<double()> clock() const {
    return [now = now] { return *now += 1e-6; };
  }
  std::function<void(const std::string&)> slow_at(std::string at, double by) const {
    return [now = now, at = std::move(at), by](const std::string& line) {
      if (line.rfind(at, 0) == 0) *now += by;
    };
  }
};

// The three-candidate race of the plateau tests (a 2-epoch run, a budget of 2 s) with a wall limit of
// 100 s, the reserve 8 and 16 where `reserve`, on a clock that jumps past the limit at the progress
// line beginning `at`.
RunRace slowed_race(const Problem& problem, double lr, const std::string& at, bool reserve) {
  const SlowingClock slow;
  RunRaceOptions o = RunRaceOptions({32, 256, 1024}, {20000, 80000, 100000}, LrAdviceOptions(32, lr))
                         .epochs(2)
                         .lr_schedule(LrSchedule::Cosine)
                         .budget_s(2)
                         .clock(slow.clock())
                         .max_wall_s(100)
                         .on_progress(slow.slow_at(at, 1000));
  if (reserve) o.reserve({8, 16}).reserve_samples_per_s({8000, 14000});
  return race_runs(*problem.workload, problem.held_out, o);
}

// The race plans its runs from the sweep's samples/s; on a machine that slows it would run on for
// as much longer. Past its wall limit it starts no more runs and stops one under way between its
// steps: the candidates not finished are not judged (their messages say so), no round runs after,
// the answer is the best of those judged at low confidence, and the workload comes back as it was.
TEST(RunRace, ARaceOnAMachineThatSlowedStopsAtItsWallLimit) {
  Problem problem;
  const auto before = problem.workload->module().parameters()[0].clone();
  const SlowingClock slow;
  const RunRaceOptions o = RunRaceOptions(kBatches, step_rates(kBatches), LrAdviceOptions(32, 0.05))
                               .epochs(2)
                               .lr_schedule(LrSchedule::Cosine)
                               .budget_s(6)
                               .clock(slow.clock())
                               .max_wall_s(100)
                               .on_progress(slow.slow_at("run race: batch 128,", 1000));
  const RunRace race = race_runs(*problem.workload, problem.held_out, o);
  const std::string notes = fmt::format("{}", fmt::join(race.notes, "; "));
  EXPECT_TRUE(at::equal(before, problem.workload->module().parameters()[0]));
  EXPECT_TRUE(race.stopped_at_wall_limit);
  ASSERT_TRUE(race.best_batch.has_value()) << notes;
  EXPECT_LE(*race.best_batch, 64);  // the reference or 64: the only ones judged
  EXPECT_EQ(race.longer_rounds, 0);
  ASSERT_FALSE(race.notes.empty());
  EXPECT_EQ(race.notes[0],
            "the race stopped at its wall limit, 100 s: the machine trained slower than the sweep measured (another "
            "process on the cores?); it trained nothing after that (no run, no reserve, no round); batches 128, 256, "
            "512, 1024, whose runs it had not finished, are not judged");
  ASSERT_EQ(race.entries.size(), kBatches.size());
  EXPECT_TRUE(race.entries[0].message.empty()) << race.entries[0].message;
  EXPECT_TRUE(race.entries[1].message.empty()) << race.entries[1].message;  // 64: both runs before the jump
  EXPECT_EQ(race.entries[2].message.find("not judged: the race passed its wall limit (100 s) during its"), 0u)
      << race.entries[2].message;
  EXPECT_FALSE(race.entries[2].shorter_run.has_value());  // cut in its shorter run: nothing of it is kept
  EXPECT_FALSE(race.entries[2].run.has_value());
  EXPECT_FALSE(race.entries[1].past_wall_limit);
  for (size_t i = 2; i < race.entries.size(); ++i) EXPECT_TRUE(race.entries[i].past_wall_limit) << kBatches[i];
  for (size_t i = 3; i < race.entries.size(); ++i) {
    EXPECT_EQ(race.entries[i].message.find("not judged: the race passed its wall limit (100 s) before its"), 0u)
        << race.entries[i].batch << ": " << race.entries[i].message;
    EXPECT_FALSE(race.entries[i].good);
  }
  const auto rec = recommend(race);
  ASSERT_TRUE(rec.has_value());
  EXPECT_NE(rec->reason.find("batches 128, 256, 512, 1024 not judged: the race stopped at its wall limit before "
                             "their runs finished"),
            std::string::npos)
      << rec->reason;
  Evidence evidence;
  evidence.run_race = &race;
  EXPECT_EQ(with_confidence(*rec, evidence).confidence, Confidence::Low);

  // Without the jump the same race judges every candidate; without a limit the jump only slows it.
  const RunRace quiet = race_runs(*problem.workload, problem.held_out, RunRaceOptions(o).on_progress({}));
  EXPECT_FALSE(quiet.stopped_at_wall_limit);
  const RunRace unlimited = race_runs(*problem.workload, problem.held_out, RunRaceOptions(o).max_wall_s(0));
  EXPECT_FALSE(unlimited.stopped_at_wall_limit);
  for (const RunRace* r : {&quiet, &unlimited})
    for (const RunRaceEntry& e : r->entries) EXPECT_TRUE(e.message.empty()) << e.batch << ": " << e.message;
  EXPECT_THROW(race_runs(*problem.workload, problem.held_out, RunRaceOptions(o).max_wall_s(-1)), ConfigError);
}

// A longer round that passes the wall limit judges nothing: the first round's answer stands (the
// closed-form 16-epoch race of AContestedBatchRunLongerMovesTheAnswerToIt, its round cut in 1,024's
// longest run).
TEST(RunRace, ALongerRoundPastTheWallLimitLeavesTheAnswerAsItWas) {
  Problem problem;
  const SlowingClock slow;
  const RunRace race =
      race_runs(*problem.workload, problem.held_out,
                RunRaceOptions(kBatches, step_rates(kBatches), LrAdviceOptions(32, 0.05))
                    .epochs(16)
                    .lr_schedule(LrSchedule::Cosine)
                    .budget_s(6)
                    .clock(slow.clock())
                    .max_wall_s(100)
                    .on_progress(slow.slow_at("run race: batch 1024, your 16-epoch run compressed to 0.983", 1000)));
  const std::string notes = fmt::format("{}", fmt::join(race.notes, "; "));
  EXPECT_TRUE(race.stopped_at_wall_limit);
  EXPECT_EQ(race.longer_rounds, 1);
  ASSERT_TRUE(race.best_batch.has_value()) << notes;
  EXPECT_EQ(*race.best_batch, 512);                 // the first round's pick
  ASSERT_EQ(race.entries.size(), kBatches.size());  // the first round's entries, every one judged
  for (const RunRaceEntry& e : race.entries) {
    EXPECT_TRUE(e.message.empty()) << e.batch << ": " << e.message;
    EXPECT_FALSE(e.earlier_round);
  }
  ASSERT_GE(race.notes.size(), 2u);
  EXPECT_EQ(race.notes[0].find("the race stopped at its wall limit, 100 s"), 0u) << race.notes[0];
  EXPECT_NE(race.notes[1].find("1024 not judged: the race passed its wall limit"), std::string::npos) << race.notes[1];
  EXPECT_NE(race.notes[1].find("it stopped at the race's wall limit before judging it, so batch 512 stands"),
            std::string::npos)
      << race.notes[1];
  const auto rec = recommend(race);
  ASSERT_TRUE(rec.has_value());
  Evidence evidence;
  evidence.run_race = &race;
  const Recommendation rated = with_confidence(*rec, evidence);
  EXPECT_EQ(rated.confidence, Confidence::Low);
  EXPECT_NE(rated.confidence_reason.find("before it raced on to check its answer"), std::string::npos)
      << rated.confidence_reason;
}

// The reserve's race cut short in its reference's first run judged nothing: the first race stands,
// and a note says the reserve raced and what stopped it.
TEST(RunRace, AReservesRacePastTheWallLimitLeavesTheFirstRace) {
  Problem problem;
  const RunRace race = slowed_race(problem, 1e-7, "run race: batch 8,", true);
  EXPECT_TRUE(race.stopped_at_wall_limit);
  EXPECT_FALSE(race.best_batch.has_value());
  EXPECT_FALSE(race.first_reference.has_value());  // the first race's entries, not the reserve's
  EXPECT_EQ(race.reference_batch, 32);
  EXPECT_TRUE(race.reference_stuck);  // as the first race found it; tune's batch race does not follow
  EXPECT_EQ(race.plateau_rounds, 0);
  ASSERT_GE(race.notes.size(), 2u);
  EXPECT_EQ(race.notes[0].find("the race stopped at its wall limit, 100 s"), 0u) << race.notes[0];
  EXPECT_EQ(race.notes[1].find("batch 32 (the first reference) did not leave the start in"), 0u) << race.notes[1];
  EXPECT_NE(race.notes[1].find("so the reserve 8, 16 raced beside it, batch 8 the reference, and the race passed its "
                               "wall limit before that race judged: no pick"),
            std::string::npos)
      << race.notes[1];
}

// A round past the plateau cut short in its reference's run judged nothing: no pick, not counted as
// a failure of the round (plateau_round_failed), and no round after it.
TEST(RunRace, ARoundPastThePlateauPastTheWallLimitEndsTheRounds) {
  Problem problem;
  const RunRace race = slowed_race(problem, 1e-7, "run race: batch 32, your 2-epoch run compressed to 0.655", false);
  const std::string notes = fmt::format("{}", fmt::join(race.notes, "; "));
  EXPECT_TRUE(race.stopped_at_wall_limit);
  EXPECT_FALSE(race.best_batch.has_value());
  EXPECT_FALSE(race.plateau_round_failed);
  EXPECT_EQ(race.plateau_rounds, 1);
  EXPECT_NE(notes.find("the race ran again with every compressed run twice as long (0.164 to 0.655 epochs), and gave "
                       "no answer either (batch 32: the race passed its wall limit (100 s) during its 0.655-epoch run"),
            std::string::npos)
      << notes;
  EXPECT_EQ(notes.find("the race stopped at its wall limit, 100 s: "), 0u) << notes;
}

// Past the wall limit in the reference's runs there is nothing to judge by: no pick, nothing races
// after it (tune's batch race does not follow either), and tune's answer says why it is goodput's.
TEST(RunRace, ARaceWhoseReferencePassedItsWallLimitRecommendsNothing) {
  Problem problem;
  const RunRace race = slowed_race(problem, 0.05, "run race: batch 32,", true);
  EXPECT_TRUE(race.stopped_at_wall_limit);
  EXPECT_FALSE(race.best_batch.has_value());
  EXPECT_FALSE(race.first_reference.has_value());  // the reserve did not join
  EXPECT_EQ(race.plateau_rounds, 0);
  EXPECT_TRUE(race.runs.empty());
  EXPECT_EQ(race.entries.front().message,
            fmt::format("the race passed its wall limit (100 s) during its {:.3g}-epoch run: the machine trained "
                        "slower than the sweep measured (another process on the cores?)",
                        race.lengths_epochs.front()));
  EXPECT_TRUE(race.entries.front().past_wall_limit);
  ASSERT_FALSE(race.notes.empty());
  EXPECT_NE(race.notes[0].find("it trained nothing after that (no run, no reserve, no round); its reference's runs "
                               "did not finish: no pick"),
            std::string::npos)
      << race.notes[0];
  EXPECT_FALSE(recommend(race).has_value());
  // tune's answer is then goodput's (or the knee's), and its confidence says why.
  Recommendation goodput;
  goodput.batch = 64;
  Evidence evidence;
  evidence.run_race = &race;
  evidence.goodput = true;
  const Recommendation rated = with_confidence(goodput, evidence);
  EXPECT_EQ(rated.confidence, Confidence::Low);
  EXPECT_EQ(rated.confidence_reason.find("the run race stopped at its wall limit before its reference's runs "
                                         "finished (the machine trained far slower than the sweep measured), so the "
                                         "answer is the noise scale's goodput"),
            0u)
      << rated.confidence_reason;
}

TEST(RunRace, RefusesWhatItCannotRace) {
  Problem problem;
  EXPECT_THROW(
      race_runs(*problem.workload, problem.held_out, RunRaceOptions({32}, {1000}, LrAdviceOptions(32, 0.05)).epochs(1)),
      ConfigError);
  EXPECT_THROW(
      race_runs(*problem.workload, problem.held_out, RunRaceOptions({32, 64}, {1000, 2000}, LrAdviceOptions(32, 0.05))),
      ConfigError);  // no epochs
}

// A log passes a compressed run's first line, then one every 10 s: its step lines share the run's key
// at every length, "1 epoch" as "0.328 epochs", and two lengths have two keys.
TEST(RunRace, ACompressedRunsStepLinesShareItsKeyAtEveryLength) {
  for (const double epochs : {0.328, 1.0}) {
    const std::string start = compressed_run_text(32, 4, epochs);
    EXPECT_EQ(compressed_run_key(start + ": 50 % (10 of 20 steps), training loss 1.2; 3 s elapsed"),
              compressed_run_key(start))
        << start;
  }
  EXPECT_EQ(compressed_run_key(compressed_run_text(32, 4, 1.0)),
            "run race: batch 32, your 4-epoch run compressed to 1");
  EXPECT_NE(compressed_run_key(compressed_run_text(32, 4, 1.0)), compressed_run_key(compressed_run_text(32, 4, 0.5)));
}

// A gap that fell faster than halving between the two compressed runs is carried at kLeastGapTrend: its
// table cell is marked, and a note under the table says why (a row read 34 % then 1.1 % beside 0.50).
TEST(RunRace, AFlooredGapTrendIsMarkedAndExplained) {
  EXPECT_EQ(gap_trend_text(std::nullopt), "-");
  EXPECT_EQ(gap_trend_text(0.83), "0.83");
  EXPECT_EQ(gap_trend_text(kLeastGapTrend), "0.50*");
  RunRace race;
  race.entries.resize(2);
  race.entries[0].gap_trend = 0.83;
  EXPECT_EQ(floored_trend_note(race), "");
  race.entries[1].gap_trend = kLeastGapTrend;
  EXPECT_NE(floored_trend_note(race).find("fell faster between the two compressed runs, and is carried at x0.50 a "
                                          "doubling"),
            std::string::npos)
      << floored_trend_note(race);
}

}  // namespace
}  // namespace batchwise
