// The training step of a ModuleWorkload: accumulated gradients equal to the full batch's, the step
// profile's phases, and bf16 and fp16 steps on the CPU (autocast, loss scaling).
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "batchwise/choices.h"
#include "batchwise/error.h"
#include "batchwise/memory.h"
#include "batchwise/plan.h"
#include "batchwise/trial.h"
#include "batchwise/workload.h"
#include "engine/held_out_probe.h"
#include "support/workloads.h"

namespace batchwise {
namespace {

using namespace test;

// ---- the table of built-in datasets --------------------------------------------------------------

// One row per dataset, found by its name; a test split exactly where the row names one, and the
// message for a dataset without one lists those that have it, from the table.
TEST(BuiltinDatasets, EachRowIsFoundByNameAndNamesItsTestSplit) {
  ASSERT_GE(builtin_datasets().size(), 6u);
  for (const BuiltinDataset& d : builtin_datasets()) {
    EXPECT_EQ(find_builtin_dataset(d.name), &d) << d.name;
    EXPECT_EQ(static_cast<bool>(d.load_test), !d.test_split.empty()) << d.name;
    EXPECT_TRUE(static_cast<bool>(d.load)) << d.name;
  }
  EXPECT_EQ(find_builtin_dataset("imagenet"), nullptr);
  try {
    (void)load_test_split(WorkloadOptions().dataset("csv"));
    FAIL() << "csv has no test split";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--dataset csv: validation and tune --epochs need a held-out test split, and only fashion-mnist "
                 "(t10k), cifar10 "
                 "(test_batch.bin) and synthetic (further samples of the same task) have one; give yours with "
                 "--test-data-file, or hold out part of your data with --held-out-split 0.1");
  }
  try {  // npy's samples and labels are two files, so its test split's are too
    (void)load_test_split(WorkloadOptions().dataset("npy"));
    FAIL() << "npy has no test split";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("give yours with --test-data-file and --test-labels-file, or hold out"),
              std::string::npos)
        << e.what();
  }
  const Dataset test = load_test_split(WorkloadOptions().dataset("synthetic").synthetic_size(64).seed(3));
  EXPECT_EQ(test.size(), 1000);  // at least 1000 samples, a fifth of the training set's size
}

// A built-in test split is of its training data's kind, --loss mse included, where the training
// labels stay classes and the test split's become one-hot values (check_held_out passes them).
TEST(BuiltinDatasets, EachTestSplitIsOfItsTrainingDatasKindUnderEitherLoss) {
  CpuMemoryTracker::install();
  for (const Loss loss : {Loss::CrossEntropy, Loss::Mse})
    for (const char* dataset : {"fashion-mnist", "synthetic"}) {
      const WorkloadOptions o =
          WorkloadOptions().model("mlp").dataset(dataset).synthetic_size(256).loss(loss).device("cpu");
      auto w = make_workload(o);
      EXPECT_NO_THROW(check_held_out(load_test_split(o), as_module(*w).data())) << dataset << " " << to_string(loss);
    }
  // A model wider than the labels (--num-classes): the one-hot values as wide as its output.
  const WorkloadOptions wide =
      WorkloadOptions().model("mlp").dataset("fashion-mnist").num_classes(12).loss(Loss::Mse).device("cpu");
  auto w = make_workload(wide);
  const Dataset test = load_test_split(wide);
  EXPECT_EQ(test.targets.size(1), 12);
  EXPECT_NO_THROW(check_held_out(test, as_module(*w).data()));
  // The transformer's synthetic sequences under --loss mse: one-hot values too, no classes to be judged by (they had
  // stayed labels, and tune and validate had judged them by an accuracy at chance)
  const WorkloadOptions sequences = WorkloadOptions()
                                        .model("transformer")
                                        .dataset("synthetic")
                                        .synthetic_size(64)
                                        .seq_len(16)
                                        .loss(Loss::Mse)
                                        .device("cpu");
  auto t = make_workload(sequences);
  ModuleWorkload& m = as_module(*t);
  EXPECT_EQ(m.data().num_classes, 0);
  EXPECT_TRUE(m.data().targets.is_floating_point());
  EXPECT_NO_THROW(check_held_out(load_test_split(sequences), m.data()));
  EXPECT_TRUE(std::isfinite(m.train_step(m.next_batch(8)).item<double>()));
}

// A test split of another sample shape is the model's to take: resnet18 (global pooling) evaluates
// images wider than those it trains on, untouched by it; an mlp, whose first layer is as wide as a
// training sample, does not, and the refusal says both shapes and why.
TEST(BuiltinDatasets, AHeldOutSplitOfAnotherShapePassesWhereTheModelTakesIt) {
  for (const char* model : {"resnet18", "mlp"}) {
    auto w = tiny(model);
    ModuleWorkload& m = as_module(*w);
    std::vector<int64_t> shape = m.data().sample_shape();
    const std::string trained = fmt::format("{}", fmt::join(shape, "x"));
    shape.back() += 4;
    shape.insert(shape.begin(), 3);
    Dataset wider = m.data();
    wider.name = "wider";
    wider.inputs = at::rand(shape).to(m.data().inputs.scalar_type());
    wider.targets = m.data().targets.narrow(0, 0, 3);
    shape.erase(shape.begin());
    const std::vector<at::Tensor> before = copies(m.module().parameters());
    if (std::string(model) == "resnet18") {
      EXPECT_NO_THROW(check_held_out(wider, m));
      const std::vector<at::Tensor> after = m.module().parameters();
      for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(before[i].equal(after[i])) << "parameter " << i;
      EXPECT_TRUE(m.module().is_training()) << "the training mode is put back";
      continue;
    }
    try {
      check_held_out(wider, m);
      ADD_FAILURE() << "an mlp took samples wider than its first layer";
    } catch (const DataError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(fmt::format("wider: its samples are {}, and the model trains on {}'s {} and does not take "
                                       "them (",
                                       fmt::join(shape, "x"), m.data().name, trained),
                           0),
                0u)
          << what;
      EXPECT_NE(what.find("); give a test split of the training data's kind"), std::string::npos) << what;
    }
  }
}

// A pass whose training cannot be undone says so on the workload, for the report's warnings (StateGuard had dropped
// the failure, and a throw from it lost what the pass had measured); an exception on its way out still goes on.
TEST(StateGuard, AStateThatCannotBePutBackIsNoted) {
  Unrestorable w(small());
  { const StateGuard guard(w); }
  const std::vector<std::string> said = w.take_restore_failures();
  ASSERT_EQ(said.size(), 1u);
  EXPECT_EQ(said[0],
            "the model and optimizer could not be put back as they were before a pass that trained them, so what was "
            "measured after it started from the pass's training: out of memory copying the weights");
  EXPECT_TRUE(w.take_restore_failures().empty()) << "taken once";
  try {
    const StateGuard guard(w);
    throw ConfigError("the first failure");
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "the first failure");
  }
  EXPECT_EQ(w.take_restore_failures().size(), 1u);
}

// ---- the learning rate of several parameter groups ----------------------------------------------

// A rate the advice sets (a race's, a schedule's step) keeps each group's ratio to the first group with a rate above
// 0: a frozen group ahead of it stays frozen, a head at a tenth stays at a tenth (every group had been set to the one
// rate, so a frozen backbone trained in every trial and a C++ user's head ran at the body's rate), and the run plan's
// settings are the reference group's.
struct ThreePartsImpl : torch::nn::Module {
  torch::nn::Linear frozen{register_module("frozen", torch::nn::Linear(4, 4))};
  torch::nn::Linear body{register_module("body", torch::nn::Linear(4, 4))};
  torch::nn::Linear head{register_module("head", torch::nn::Linear(4, 2))};
  at::Tensor forward(const at::Tensor& x) { return head(body(frozen(x)).relu()); }
};
TORCH_MODULE(ThreeParts);

// A custom optimizer whose options do not say their rate (LibTorch's get_lr throws unless overridden).
struct PlainOptions : torch::optim::OptimizerCloneableOptions<PlainOptions> {};
class PlainSgd : public torch::optim::Optimizer {
 public:
  explicit PlainSgd(const std::vector<at::Tensor>& params)
      : Optimizer({torch::optim::OptimizerParamGroup(params)}, std::make_unique<PlainOptions>()) {}
  at::Tensor step(LossClosure) override {
    const at::NoGradGuard no_grad;
    for (auto& group : param_groups())
      for (auto& p : group.params())
        if (p.grad().defined()) p.sub_(p.grad() * 0.1);
    return {};
  }
};

TEST(ModuleWorkload, EachParamGroupKeepsItsRatioToTheReferenceGroupsRate) {
  ThreeParts model;
  const torch::nn::Linear frozen = model->frozen, body = model->body, head = model->head;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(frozen->parameters(),
                      std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0).momentum(0.5)));
  groups.emplace_back(body->parameters(),
                      std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.1).momentum(0.9)));
  groups.emplace_back(head->parameters(),
                      std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.01).momentum(0.9)));
  auto optimizer = std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(0.1));
  Dataset data;
  data.inputs = at::randn({32, 4});
  data.targets = at::randint(0, 2, {32});
  data.num_classes = 2;
  WorkloadInfo info;
  info.lr = 0.1;
  ModuleWorkload w(
      info, torch::nn::AnyModule(model), std::move(optimizer), data,
      [](const at::Tensor& out, const at::Tensor& y) { return at::cross_entropy_loss(out, y); }, c10::Device(c10::kCPU),
      1);
  w.set_lr(0.4);
  const auto rate = [&w](size_t group) { return w.optimizer().param_groups()[group].options().get_lr(); };
  EXPECT_EQ(rate(0), 0.0);
  EXPECT_EQ(rate(1), 0.4);
  EXPECT_DOUBLE_EQ(rate(2), 0.04);
  w.set_lr(0);  // a schedule's last step, then its first again: the ratios are those the workload was made with
  w.set_lr(0.2);
  EXPECT_EQ(rate(0), 0.0);
  EXPECT_DOUBLE_EQ(rate(2), 0.02);
  const at::Tensor before = frozen->weight.clone();
  (void)w.train_step(w.next_batch(8));
  EXPECT_TRUE(at::equal(before, frozen->weight)) << "the frozen group trained";
  const OptimizerSettings settings = optimizer_settings(Optimizer::Sgd, &w);
  EXPECT_EQ(settings.momentum, 0.9) << "the reference group's, not the frozen one's";
  // the run plan says whose rate it names, and the others' ratios to it
  const RunPlan plan = plan_run(settings, 32, {{"recommended", unmeasured_lr(Optimizer::Sgd, 32, 0.1, 64)}});
  EXPECT_NE(std::find(plan.notes.begin(), plan.notes.end(),
                      "the rates above are param group 1's, the first whose rate is above 0; every other group keeps "
                      "its ratio to it, as batchwise sets them: group 0 at 0 (frozen), group 2 at 0.1x"),
            plan.notes.end())
      << fmt::format("{}", fmt::join(plan.notes, "\n"));
}

// A dataset the caller made (the C++ API) has a target per sample, as every reader checks its file, named; a
// WorkloadInfo without sizes gets the model's; and evaluate refuses a batch below 1 (0 had looped forever).
TEST(ModuleWorkload, ACallersDatasetIsCheckedAsAReadersIs) {
  const auto made = [](Dataset data, WorkloadInfo info = {}) {
    torch::nn::Linear model(4, 2);
    auto optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
    return std::make_unique<ModuleWorkload>(
        info, torch::nn::AnyModule(model), std::move(optimizer), data,
        [](const at::Tensor& out, const at::Tensor& y) { return at::cross_entropy_loss(out, y); },
        c10::Device(c10::kCPU), 1);
  };
  Dataset data;
  data.name = "mydata";
  data.inputs = at::randn({300, 4});
  data.targets = at::randint(0, 2, {300});
  data.num_classes = 2;
  Dataset short_targets = data;
  short_targets.targets = data.targets.narrow(0, 0, 90);
  EXPECT_THROW(
      {
        try {
          (void)made(short_targets);
        } catch (const DataError& e) {
          EXPECT_STREQ(e.what(), "mydata: 300 inputs and 90 targets; give one target per sample");
          throw;
        }
      },
      DataError);
  auto w = made(data);
  EXPECT_EQ(w->info().parameter_count, 4 * 2 + 2);
  EXPECT_EQ(w->info().trainable_parameter_count, std::optional<int64_t>(4 * 2 + 2));
  EXPECT_EQ(w->info().parameter_bytes, (4 * 2 + 2) * 4);
  EXPECT_EQ(w->info().parameter_dtype, "float32");
  EXPECT_EQ(w->info().dataset_size, 300);
  EXPECT_EQ(w->info().input_shape, std::vector<int64_t>{4});
  EXPECT_THROW((void)w->evaluate(data, 0), ConfigError);
  Dataset none = data;
  none.inputs = data.inputs.narrow(0, 0, 0);
  none.targets = data.targets.narrow(0, 0, 0);
  EXPECT_THROW((void)w->evaluate(none, 8), DataError);
}

// A NaN in a caller's dataset (the C++ API) is refused as a reader refuses a file's, unless the loss takes it (a
// masked loss over the labelled targets): it had failed the trials whose batches met it as "training diverged;
// lower --lr", and the fit had answered the batches small enough to miss it. The held-out set, in validate and the
// races, the same.
TEST(ModuleWorkload, ACallersNonFiniteValuesAreRefusedUnlessTheLossTakesThem) {
  const auto made = [](Dataset data, LossFn loss) {
    torch::nn::Linear model(4, 1);
    auto optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
    return std::make_unique<ModuleWorkload>(WorkloadInfo{}, torch::nn::AnyModule(model), std::move(optimizer), data,
                                            std::move(loss), c10::Device(c10::kCPU), 1);
  };
  const LossFn mse = [](const at::Tensor& out, const at::Tensor& y) { return at::mse_loss(out.squeeze(1), y); };
  const LossFn masked = [](const at::Tensor& out, const at::Tensor& y) {  // NaN: no label
    const at::Tensor labelled = at::isfinite(y);
    return at::mse_loss(out.squeeze(1).masked_select(labelled), y.masked_select(labelled));
  };
  Dataset data;
  data.name = "mydata";
  data.inputs = at::randn({300, 4});
  data.targets = at::randn({300});
  Dataset nan_inputs = data;
  nan_inputs.inputs = data.inputs.clone();
  nan_inputs.inputs[7][2] = std::nan("");
  nan_inputs.inputs[9][0] = INFINITY;
  try {
    (void)made(nan_inputs, masked);
    ADD_FAILURE() << "a NaN input was taken";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              "mydata: 2 of its 300 samples hold inputs that are not finite numbers (NaN or infinity) in the model's "
              "type (float32), the first sample 7, and the loss on them is not finite: drop or repair those samples "
              "(auto keep = at::isfinite(data.inputs.reshape({data.size(), -1})).all(1); data.inputs = "
              "data.inputs.index({keep}); data.targets = data.targets.index({keep})), bring values past the type's "
              "range into it, or mask them in your loss");
  }
  Dataset unlabelled = data;
  unlabelled.targets = data.targets.clone();
  unlabelled.targets[5] = std::nan("");
  EXPECT_THROW((void)made(unlabelled, mse), DataError);
  auto w = made(unlabelled, masked);  // the loss skips them
  EXPECT_TRUE(std::isfinite(w->train_step(w->next_batch(300)).item<double>()));
  Dataset held_out = data;
  held_out.name = "";
  held_out.inputs = nan_inputs.inputs;
  try {
    detail::probe_held_out(*w, held_out);
    ADD_FAILURE() << "a NaN held-out input was taken";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("the held-out data: 2 of its 300 samples hold inputs", 0), 0) << e.what();
  }
}

// evaluate's batch is its own, not a run's: halved where the memory held cannot take it (validate's runs hold the
// budget while they evaluate; it had been lifted, and a model past it at 1,024 samples took the machine's memory)
TEST(ModuleWorkload, AnEvaluationPastTheBudgetHalvesItsBatch) {
  struct QuadraticImpl : torch::nn::Module {  // b^2 x 256 bytes a forward: 256 MiB at 1,024, 4 MiB at 128
    QuadraticImpl() : fc(register_module("fc", torch::nn::Linear(4, 2))) {}
    at::Tensor forward(const at::Tensor& x) { return fc(x) + at::ones({x.size(0) * x.size(0), 64}).sum() * 0; }
    torch::nn::Linear fc{nullptr};
  };
  CpuMemoryTracker& tracker = CpuMemoryTracker::install();
  auto model = std::make_shared<QuadraticImpl>();
  auto optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
  Dataset data;
  data.inputs = at::randn({2048, 4});
  data.targets = at::randint(0, 2, {2048});
  data.num_classes = 2;
  ModuleWorkload w(
      {}, torch::nn::AnyModule(model), std::move(optimizer), data,
      [](const at::Tensor& out, const at::Tensor& y) { return at::cross_entropy_loss(out, y); }, c10::Device(c10::kCPU),
      1);
  const auto [loss, accuracy] = w.evaluate(data, 128);
  tracker.set_limit(tracker.current_bytes() + (16 << 20));
  std::pair<double, std::optional<double>> held;
  try {
    held = w.evaluate(data);  // 1,024 a batch
  } catch (...) {
    tracker.set_limit(0);
    throw;
  }
  tracker.set_limit(0);
  EXPECT_NEAR(held.first, loss, 1e-6);
  EXPECT_EQ(held.second, accuracy);
  // one sample past the budget is out of memory still
  tracker.set_limit(tracker.current_bytes() + 1);
  EXPECT_THROW((void)w.evaluate(data), c10::OutOfMemoryError);
  tracker.set_limit(0);
}

// A model that fails above a batch (as one that checks its input's size: the fit's limit is then that error, not
// memory) is evaluated at the largest batch it trained; one that never trained, or that fails at a batch it trained,
// says its own error (1,024 samples a batch had ended a tune in its race's first evaluation)
TEST(ModuleWorkload, AnEvaluationAboveTheBatchesAModelTakesTakesTheLargestItTrained) {
  struct CheckedImpl : torch::nn::Module {
    CheckedImpl() : fc(register_module("fc", torch::nn::Linear(4, 2))) {}
    at::Tensor forward(const at::Tensor& x) {
      if (x.size(0) > 40) throw std::runtime_error("batch too large for this model");
      return fc(x);
    }
    torch::nn::Linear fc{nullptr};
  };
  auto model = std::make_shared<CheckedImpl>();
  auto optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
  Dataset data;
  data.inputs = at::randn({100, 4});
  data.targets = at::randint(0, 2, {100});
  data.num_classes = 2;
  ModuleWorkload w(
      {}, torch::nn::AnyModule(model), std::move(optimizer), data,
      [](const at::Tensor& out, const at::Tensor& y) { return at::cross_entropy_loss(out, y); }, c10::Device(c10::kCPU),
      1);
  EXPECT_THROW((void)w.evaluate(data), std::runtime_error);  // nothing trained yet: the model's own error
  (void)w.train_step(w.next_batch(32));
  const auto [loss, accuracy] = w.evaluate(data, 25);
  const auto [held, held_accuracy] = w.evaluate(data);  // 100 samples a batch: in batches of 32
  EXPECT_NEAR(held, loss, 1e-6);
  EXPECT_EQ(held_accuracy, accuracy);
  ASSERT_TRUE(accuracy.has_value());
  struct AlwaysImpl : torch::nn::Module {  // fails at every batch: its error, once retried at the trained batch
    AlwaysImpl() : fc(register_module("fc", torch::nn::Linear(4, 2))) {}
    at::Tensor forward(const at::Tensor& x) {
      if (!is_training()) throw std::runtime_error("no evaluation here");
      return fc(x);
    }
    torch::nn::Linear fc{nullptr};
  };
  auto always = std::make_shared<AlwaysImpl>();
  ModuleWorkload failing(
      {}, torch::nn::AnyModule(always),
      std::make_unique<torch::optim::SGD>(always->parameters(), torch::optim::SGDOptions(0.1)), data,
      [](const at::Tensor& out, const at::Tensor& y) { return at::cross_entropy_loss(out, y); }, c10::Device(c10::kCPU),
      1);
  (void)failing.train_step(failing.next_batch(32));
  EXPECT_THROW((void)failing.evaluate(data), std::runtime_error);
}

// A custom optimizer's options without get_lr (LibTorch's base throws "has not been overridden") make a workload that
// trains as before: no ratios read, the one rate for every group where anything sets it (the workload had failed to
// be made, with torch's error).
TEST(ModuleWorkload, AnOptimizerWhoseOptionsDoNotSayTheirRateStillTrains) {
  ThreeParts model;
  Dataset data;
  data.inputs = at::randn({32, 4});
  data.targets = at::randint(0, 2, {32});
  data.num_classes = 2;
  ModuleWorkload w(
      WorkloadInfo{}, torch::nn::AnyModule(model), std::make_unique<PlainSgd>(model->parameters()), data,
      [](const at::Tensor& out, const at::Tensor& y) { return at::cross_entropy_loss(out, y); }, c10::Device(c10::kCPU),
      1);
  EXPECT_TRUE(w.lr_ratios().empty());
  const at::Tensor before = model->head->weight.clone();
  (void)w.train_step(w.next_batch(8));
  EXPECT_FALSE(at::equal(before, model->head->weight)) << "it trained";
  EXPECT_EQ(optimizer_settings(Optimizer::Sgd, &w).momentum, 0.9) << "SGD's default where the options say nothing";
}

// ---- gradient accumulation ----------------------------------------------------------------------

TEST(Accumulation, MicroBatchGradientsEqualTheFullBatchGradient) {
  for (const char* model : {"mlp", "lenet"}) {
    auto w = tiny(model);
    const Batch batch = w->next_batch(48);
    accumulate_gradients(*w, batch, 1);
    const auto full = copies(w->gradients());
    for (int64_t k : {4, 5, 48}) {  // equal slices, unequal slices (10,10,10,9,9), single samples
      accumulate_gradients(*w, batch, k);
      const auto acc = w->gradients();
      ASSERT_EQ(acc.size(), full.size());
      for (size_t i = 0; i < acc.size(); ++i)
        EXPECT_TRUE(at::allclose(acc[i], full[i], 1e-4, 1e-6))
            << model << " k=" << k << " parameter " << i << " max diff "
            << (acc[i] - full[i]).abs().max().item<float>();
    }
  }
}

TEST(Accumulation, AnAccumulatedStepTrainsLikeTheFullStep) {
  auto a = tiny("mlp"), b = tiny("mlp");
  for (int step = 0; step < 3; ++step) {
    a->train_step(a->next_batch(64));
    train_step_accumulated(*b, b->next_batch(64), 8);
  }
  const auto pa = dynamic_cast<ModuleWorkload&>(*a).module().parameters();
  const auto pb = dynamic_cast<ModuleWorkload&>(*b).module().parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(at::allclose(pa[i], pb[i], 1e-4, 1e-6)) << i;
}

// A trial can train its batch the way an accumulation plan does: same samples per step, the
// activations of one micro-batch at a time.
TEST(Accumulation, TrialsTrainTheBatchInMicroBatches) {
  auto w = tiny("lenet");
  const Trial plain = run_trial(*w, TrialOptions(256).warmup(1).steps(1));
  const Trial accumulated = run_trial(*w, TrialOptions(256).warmup(1).steps(1).accumulation_steps(8));
  ASSERT_EQ(plain.outcome, Outcome::Ok) << plain.message;
  ASSERT_EQ(accumulated.outcome, Outcome::Ok) << accumulated.message;
  EXPECT_EQ(accumulated.accumulation_steps, 8);
  EXPECT_EQ(accumulated.steps_run, 2);
  EXPECT_LT(accumulated.peak_bytes, plain.peak_bytes * 3 / 4) << accumulated.peak_bytes << " vs " << plain.peak_bytes;
}

// The step profile's phases account for the step measured end to end in the same pass.
TEST(StepProfile, PhasesAddUpToTheStep) {
  for (const char* model : {"mlp", "lenet"}) {
    auto w = tiny(model);
    const auto before = copies(dynamic_cast<ModuleWorkload&>(*w).module().parameters());
    const auto p = profile_steps(*w, 128, 1, 3);
    ASSERT_TRUE(p.has_value());
    EXPECT_GT(p->mean.forward_s, 0);
    EXPECT_GT(p->mean.backward_s, 0);
    EXPECT_GT(p->mean.optimizer_s, 0);
    EXPECT_GE(p->coverage, 0.9) << model;
    EXPECT_LE(p->coverage, 1.0 + 1e-9) << model;
    const auto after = dynamic_cast<ModuleWorkload&>(*w).module().parameters();
    for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(at::equal(before[i], after[i]));  // state restored
  }
}

// bf16 on CPU: the step runs under autocast to bfloat16, the model learns, and its memory falls.
TEST(Precision, Bf16TrainsOnCpu) {
  CpuMemoryTracker::install();
  auto options = WorkloadOptions().model("lenet").dataset("synthetic").synthetic_size(2048).lr(0.05).device("cpu");
  auto fp32 = make_workload(options);
  auto bf16 = make_workload(WorkloadOptions(options).precision(Precision::Bf16));
  EXPECT_EQ(bf16->info().precision, "bf16");
  const Trial a = run_trial(*fp32, TrialOptions(256).warmup(1).steps(2));
  const Trial b = run_trial(*bf16, TrialOptions(256).warmup(1).steps(2));
  ASSERT_EQ(b.outcome, Outcome::Ok) << b.message;
  EXPECT_LT(b.peak_bytes, a.peak_bytes) << "bf16 activations take half the bytes";
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    const double loss = bf16->train_step(bf16->next_batch(64)).item<double>();
    if (i == 0) first = loss;
    last = loss;
  }
  EXPECT_LT(last, first);
  EXPECT_THROW(parse_precision("fp8"), ConfigError);
}

// fp16 on CPU (PyTorch's GradScaler("cpu")): the loss is scaled; a step whose scaled gradients
// overflow is skipped and halves the scale, and the others train.
TEST(Precision, Fp16OnCpuScalesTheLossAndSkipsOverflowingSteps) {
  CpuMemoryTracker::install();
  auto w = make_workload(WorkloadOptions()
                             .model("mlp")
                             .dataset("synthetic")
                             .synthetic_size(512)
                             .lr(0.05)
                             .device("cpu")
                             .precision(Precision::Fp16));
  auto& m = dynamic_cast<ModuleWorkload&>(*w);
  EXPECT_EQ(w->info().precision, "fp16");
  EXPECT_EQ(m.loss_scale(), 65536);
  m.set_loss_scale(std::ldexp(1.0, 40));  // far past half precision's 65504: the first steps overflow
  int skipped = 0, trained = 0;
  for (int i = 0; i < 40; ++i) {
    const auto before = copies(m.module().parameters());
    const double scale = m.loss_scale();
    w->train_step(w->next_batch(16));
    bool same = true;
    for (size_t k = 0; k < before.size(); ++k) same = same && at::equal(before[k], m.module().parameters()[k]);
    if (same) {
      ++skipped;
      EXPECT_EQ(m.loss_scale(), scale / 2) << "step " << i;
    } else {
      ++trained;
      EXPECT_EQ(m.loss_scale(), scale) << "step " << i;
    }
  }
  EXPECT_GE(skipped, 10);  // 2^40 halves past 2^30 before a step fits
  EXPECT_GE(trained, 5);
  EXPECT_THROW(m.set_loss_scale(0), ConfigError);
}

// The fp16 step profile times the real fp16 step: its loss scaled, its gradients unscaled and
// checked before the optimizer steps (once it skipped both, so its phases were another step's). From
// the same state and data order, profiled steps and training steps leave the same weights and the
// same scale, the steps the scaler skipped included. tests/cuda_test.cpp runs the same on a GPU.
TEST(Precision, Fp16ProfiledStepsTrainAsTheRealStep) {
  CpuMemoryTracker::install();
  auto make = [] {
    auto w = make_workload(WorkloadOptions()
                               .model("mlp")
                               .dataset("synthetic")
                               .synthetic_size(512)
                               .device("cpu")
                               .precision(Precision::Fp16));
    auto m = std::unique_ptr<ModuleWorkload>(dynamic_cast<ModuleWorkload*>(w.release()));
    m->set_loss_scale(std::ldexp(1.0, 36));  // the first steps overflow and are skipped
    return m;
  };
  auto trained = make(), profiled = make();
  for (int i = 0; i < 30; ++i) {
    trained->train_step(trained->next_batch(16));
    ASSERT_TRUE(profiled->profiled_step(16).has_value());
  }
  EXPECT_LT(trained->loss_scale(), std::ldexp(1.0, 36));
  EXPECT_EQ(profiled->loss_scale(), trained->loss_scale());
  const auto a = trained->module().parameters(), b = profiled->module().parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::allclose(a[i], b[i], 1e-4, 1e-5)) << "parameter " << i;
}

}  // namespace
}  // namespace batchwise
