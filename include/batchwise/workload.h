#pragma once
/// A workload is what a trial trains: model + dataset + loss + optimizer (+ learning rate), on a
/// device. Workload is the interface (implement it for your own training step); ModuleWorkload
/// implements it for a torch::nn module and a torch::optim optimizer; make_workload builds the
/// built-in ones by name.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "batchwise/choices.h"
#include "batchwise/data.h"
#include "batchwise/memory.h"
#include "batchwise/trial.h"

namespace batchwise {

/// One batch, on the workload's device.
struct Batch {
  at::Tensor input;
  at::Tensor target;
};

/// An opaque copy of a workload's training state (see Workload::save_state).
struct WorkloadState {
  virtual ~WorkloadState() = default;
};

/// What a trial trains. Implementations must make train_step a full training step.
class Workload {
 public:
  virtual ~Workload() = default;
  virtual WorkloadInfo info() const = 0;
  virtual c10::Device device() const = 0;
  /// The next `batch` real samples, on device(). Part of the measured step, as in a user's loop.
  virtual Batch next_batch(int64_t batch) = 0;
  /// One full training step: zero gradients, forward, loss, backward, optimizer step.
  /// Returns the loss (detached; reading it synchronises the device).
  virtual at::Tensor train_step(const Batch& batch) = 0;
  /// A copy of everything training changes: parameters, buffers, gradients, optimizer state,
  /// training mode, the data order and the global RNG. Held in host memory, not counted.
  virtual std::unique_ptr<WorkloadState> save_state() = 0;
  /// Puts a saved state back, bit-identically and in place (parameters keep their storage).
  /// NOTE: bookkeeping of batchwise's own that is not the user's training may carry over instead:
  /// ModuleWorkload's fp16 loss scale (see ModuleWorkload::loss_scale) and skipped_steps().
  virtual void restore_state(const WorkloadState& state) = 0;
  /// The training state's size, counted from its tensors; zeros when a workload cannot tell.
  virtual StateBytes state_bytes() const { return {}; }
  /// Optimizer steps skipped so far because their gradients overflowed (fp16's dynamic loss
  /// scaling): a running count that restore_state leaves alone, so run_trial reports a trial's share
  /// as the difference. 0 for a workload that never skips a step.
  virtual int64_t skipped_steps() const { return 0; }
  /// What a StateGuard could not put back since the last call, a sentence each: the model and
  /// optimizer then hold what the pass trained, and the measures after it started from there. The
  /// report's writer (tune, the CLI, the Python engine) takes them into its warnings.
  std::vector<std::string> take_restore_failures() { return std::exchange(restore_failures_, {}); }
  /// Noted by StateGuard's destructor, which must not throw (see take_restore_failures).
  void note_restore_failure(std::string what) noexcept;

  // Gradient primitives, for gradient accumulation and the noise scale (accumulate_gradients,
  // measure_noise_scale). ModuleWorkload has them; a workload without them still fits, sweeps and
  // tunes, and those two throw ConfigError saying what is missing.
  /// Sets every gradient to zero (or none).
  virtual void zero_grad();
  /// Forward, loss x `weight`, backward: gradients accumulate. Returns the unweighted loss, detached.
  virtual at::Tensor backward(const Batch& batch, double weight);
  /// The optimizer step on the gradients as they are.
  virtual void optimizer_step();
  /// The gradients, one per trainable parameter the optimizer holds, in a fixed order; undefined where
  /// there is none.
  virtual std::vector<at::Tensor> gradients();
  /// One full training step of `batch` samples, timed phase by phase; none for a workload that
  /// cannot split its step (profile_steps then says so).
  virtual std::optional<StepPhases> profiled_step(int64_t batch) { return std::nullopt; }

 private:
  std::vector<std::string> restore_failures_;
};

/// `warmup` unprofiled steps, then `steps` profiled ones; the workload's state is restored
/// afterwards. None when the workload cannot split its step.
std::optional<StepProfile> profile_steps(Workload& workload, int64_t batch, int warmup = 1, int steps = 3);

/// The whole batch's gradient by accumulation: zero_grad, then backward on `micro_batches`
/// consecutive slices (as equal as possible), each weighted by its share of the batch. For a loss
/// that averages over samples (both built-in losses) this equals one backward pass over the whole
/// batch up to floating-point rounding, unless the model mixes samples: BatchNorm in training mode
/// normalises each slice by its own statistics. Returns the batch's mean loss.
/// REQUIRES: 1 <= micro_batches <= the batch's samples.
at::Tensor accumulate_gradients(Workload& workload, const Batch& batch, int64_t micro_batches);

/// Whether the model normalises with BatchNorm (a BatchNorm module, or running_mean buffers in a
/// TorchScript model); false for workloads that are not ModuleWorkloads.
bool uses_batchnorm(Workload& workload);

/// accumulate_gradients, then the optimizer step: one training step of the whole batch.
at::Tensor train_step_accumulated(Workload& workload, const Batch& batch, int64_t micro_batches);

/// Saves the workload's state now and restores it when the scope ends, however it ends (a pass
/// that trains, like the noise scale or the step profile, must leave the model as it found it).
class StateGuard {
 public:
  explicit StateGuard(Workload& workload) : workload_(workload), state_(workload.save_state()) {}
  /// A state that cannot be put back (a copy that runs out of memory, a Python module's
  /// load_state_dict that raises) is noted on the workload (take_restore_failures): a destructor must
  /// not throw, and a throw would lose what the pass measured (a validation of hours).
  ~StateGuard();
  StateGuard(const StateGuard&) = delete;
  StateGuard& operator=(const StateGuard&) = delete;
  /// The state saved at construction (to start several passes from it).
  const WorkloadState& state() const { return *state_; }

 private:
  Workload& workload_;
  std::unique_ptr<WorkloadState> state_;
};

/// The memory of the device `workload` trains on.
std::unique_ptr<DeviceMemory> device_memory(const Workload& workload);

/// A loss: (logits, targets) -> scalar.
using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;

namespace detail {
/// The reference group among an optimizer's param groups' rates, whose rate the advice scales: the first whose rate
/// is above 0 and finite (a frozen group ahead of a trained one leaves the trained one's); rates.size() where none is.
size_t reference_group(const std::vector<double>& rates);
}  // namespace detail

/// Workload for a torch::nn module trained by a torch::optim optimizer on an in-memory Dataset.
class ModuleWorkload : public Workload {
 public:
  /// REQUIRES: `optimizer` optimises `model`'s parameters; `data` matches the model's input.
  /// Throws DataError for data without one target per sample, and for samples holding values that are not
  /// finite numbers (NaN, infinity) where the loss on them is not finite (a loss that masks NaN targets is
  /// taken): every step that met them had trained nothing.
  ModuleWorkload(WorkloadInfo info, torch::nn::AnyModule model, std::unique_ptr<torch::optim::Optimizer> optimizer,
                 Dataset data, LossFn loss, c10::Device device, uint64_t seed);
  /// The input pipeline (see WorkloadOptions::workers). REQUIRES: workers >= 0, prefetch >= 1.
  void set_pipeline(int workers, int prefetch, bool augment, int64_t io_latency_us);
  /// The pipeline's settings: workers, prefetch, augment, io_latency_us.
  std::tuple<int, int, bool, int64_t> pipeline() const;
  ~ModuleWorkload() override;

  WorkloadInfo info() const override { return info_; }
  c10::Device device() const override { return device_; }
  Batch next_batch(int64_t batch) override;
  at::Tensor train_step(const Batch& batch) override;
  std::unique_ptr<WorkloadState> save_state() override;
  void restore_state(const WorkloadState& state) override;
  StateBytes state_bytes() const override;
  void zero_grad() override;
  at::Tensor backward(const Batch& batch, double weight) override;
  void optimizer_step() override;
  std::vector<at::Tensor> gradients() override;
  std::optional<StepPhases> profiled_step(int64_t batch) override;

 protected:
  /// As the constructor above, but the values that are not finite numbers are left to the subclass to
  /// check: for a model that cannot run while it is made (the Python API's, whose forward's errors the
  /// call that runs it reports).
  struct ValuesCheckedLater {};
  ModuleWorkload(ValuesCheckedLater, WorkloadInfo info, torch::nn::AnyModule model,
                 std::unique_ptr<torch::optim::Optimizer> optimizer, Dataset data, LossFn loss, c10::Device device,
                 uint64_t seed);

 public:
  /// Data-parallel sharding: each batch of `b` samples becomes rank `rank`'s slice of a global batch
  /// of world_size x b drawn from the same permutation on every rank (see DataParallelWorkload).
  void set_shard(int rank, int world_size);
  /// Sets the learning rate: the reference group's (the first whose rate was above 0 when the workload
  /// was made) to `lr`, and every other group's to `lr` times the ratio to it it had then: a head at a
  /// tenth of the body's rate stays at a tenth, a group at 0 stays frozen (as the Python API keeps
  /// them). Every group gets `lr` where no group had a rate above 0, where the options do not say their
  /// rate (a custom optimizer's without get_lr), and for a group added after the workload was made.
  void set_lr(double lr);
  /// Each group's rate over the reference group's, as set_lr keeps them; empty where the options do not say their rate.
  const std::vector<double>& lr_ratios() const { return lr_ratios_; }
  /// For an optimizer whose state torch::optim's state() does not hold (a Python optimizer's, see
  /// python/src/adapter.cpp): counts its state's bytes for state_bytes().
  void set_optimizer_state_bytes(std::function<int64_t()> count) { optimizer_state_bytes_ = std::move(count); }
  /// The label the loss skips (cross-entropy's ignore_index): its samples count in no accuracy that
  /// evaluate() reads, as they count in no loss (an accuracy over every row had been capped at the labelled
  /// share). None: every label counts.
  void set_ignored_label(std::optional<int64_t> label) { ignored_label_ = label; }
  /// fp16's dynamic loss scale (GradScaler's get_scale and update(new_scale)): the factor the loss is
  /// multiplied by before backward; halved when a step's gradients overflow (the step is skipped),
  /// doubled after loss_scale_growth_interval() good steps in a row. Starts at 65536.
  /// NOTE: this scaler is batchwise's own, like a GradScaler the tool owns (the user's training
  /// keeps its own), so restore_state does not put it back with the model, optimizer and RNGs: once
  /// a step since the snapshot was good, the scale and its count of good steps stay as the last good
  /// step left them. The next trial then starts from a settled scale instead of overflowing its first
  /// steps again from 65536: a skipped step times fast and, with Adam, creates no optimizer state,
  /// so such a trial understates a trained step's time and peak. When no step since the snapshot was
  /// good (every one overflowed: a trial whose training diverged), the snapshot's scale comes back,
  /// so a collapsed scale is never kept.
  double loss_scale() const { return loss_scale_; }
  /// Sets the scale (and restarts its count of good steps), as GradScaler's update(new_scale).
  /// REQUIRES: positive and finite.
  void set_loss_scale(double scale);
  /// Good steps in a row after which the scale doubles (GradScaler's growth_interval, 2000).
  /// REQUIRES: >= 1.
  int loss_scale_growth_interval() const { return growth_interval_; }
  void set_loss_scale_growth_interval(int steps);
  int64_t skipped_steps() const override { return skipped_total_; }
  /// The model's mean loss on `data` and, for class labels, its accuracy; inputs are normalised like
  /// the training data's. Runs in eval mode without gradients, `batch` samples at a time, and puts
  /// the training mode back. A batch that runs out of memory is halved; one that fails otherwise, above
  /// the largest batch a step of this workload trained, is taken at that batch (a model that fails above
  /// it, as the fit found, is evaluated in batches it takes).
  std::pair<double, std::optional<double>> evaluate(const Dataset& data, int64_t batch = 1024);

  torch::nn::Module& module() { return *model_.ptr(); }
  torch::nn::AnyModule& model() { return model_; }
  const LossFn& loss() const { return loss_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const Dataset& data() const { return data_; }

 private:
  struct Sampler;
  struct Loader;
  friend struct Loader;
  // The batch of `index` assembled and transformed on the host (the pipeline's work).
  Batch host_batch(const at::Tensor& index, uint64_t augment_seed) const;
  // profiled_step on CUDA, phases timed by events on the stream (compat::StreamMarks).
  std::optional<StepPhases> profiled_step_events(int64_t batch);
  // Forward and loss, under autocast when the precision asks for it.
  at::Tensor forward_loss(const at::Tensor& input, const at::Tensor& target, at::Tensor* output = nullptr);
  bool fp16() const { return known_precision(info_.precision) == Precision::Fp16; }
  // The training step's backward and optimizer step, shared by train_step and the profiled step:
  // fp16 scales the loss, then unscales and checks the gradients before stepping.
  void step_backward(const at::Tensor& loss);
  void step_optimizer();
  WorkloadInfo info_;
  // fp16: dynamic loss scaling, as torch.amp.GradScaler: the scale, the good steps since it last
  // changed and the interval at which it grows; the same pair as the last good step left it (what
  // restore_state keeps); and running counts of good and skipped steps.
  double loss_scale_ = 65536.0;
  int good_steps_ = 0;
  int growth_interval_ = 2000;
  double settled_scale_ = 65536.0;
  int settled_good_steps_ = 0;
  int64_t good_total_ = 0, skipped_total_ = 0;
  torch::nn::AnyModule model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<double> lr_ratios_;  // each group's rate over the reference group's, as made (set_lr)
  std::function<int64_t()> optimizer_state_bytes_;
  std::optional<int64_t> ignored_label_;
  int64_t largest_trained_ = 0;  ///< the largest batch a training step finished at (evaluate's fallback)
  Dataset data_;
  LossFn loss_;
  c10::Device device_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<Loader> loader_;  // when the pipeline is not the plain in-thread path
};

/// How to build a built-in workload. Every name is also the CLI flag's name.
/// Example: `make_workload(WorkloadOptions().model("resnet18").optimizer(Optimizer::Adam).device("cpu"))`.
struct WorkloadOptions {
  /// A built-in model (model_names()) or the path of a TorchScript file (see is_model_path).
  TORCH_ARG(std::string, model) = "lenet";
  /// One of dataset_names(): fashion-mnist and cifar10 read data_dir; idx and npy read data_file
  /// and labels_file; csv reads data_file and label_column; synthetic is generated.
  TORCH_ARG(std::string, dataset) = "fashion-mnist";
  /// Where the dataset's files are; empty: its default (/usr/share/datasets/fashion-mnist).
  TORCH_ARG(std::string, data_dir) = "";
  TORCH_ARG(std::string, data_file) = "";
  TORCH_ARG(std::string, labels_file) = "";
  /// csv: the label column's header name or 0-based index; empty: the last column.
  TORCH_ARG(std::string, label_column) = "";
  /// A dataset without a test split (idx, npy, csv): this fraction of its samples, a fixed draw
  /// (split_part), is its held-out test split and is not trained on. 0: none (validation and the run
  /// race then refuse it). A dataset with a test split of its own refuses it.
  TORCH_ARG(double, held_out_split) = 0;
  /// A dataset without a test split (idx, npy, csv): your own test split's files, in the training
  /// files' format (csv: the label column is label_column; idx and npy need both). Not with
  /// held_out_split, nor with a dataset that has a test split of its own.
  TORCH_ARG(std::string, test_data_file) = "";
  TORCH_ARG(std::string, test_labels_file) = "";
  /// Cross-entropy (integer class labels) or mean squared error (regression targets; class labels
  /// become one-hot vectors).
  TORCH_ARG(Loss, loss) = Loss::CrossEntropy;
  /// Classes the model predicts; 0: the largest label + 1 (10 for synthetic data).
  TORCH_ARG(int64_t, num_classes) = 0;
  /// One sample's shape, without the batch dimension: what a TorchScript model takes, and the shape
  /// of synthetic samples. A file dataset's samples are reshaped to it when the element counts agree.
  /// Empty: the dataset's own (synthetic: 1x28x28).
  TORCH_ARG(std::vector<int64_t>, input_shape) = {};
  TORCH_ARG(Optimizer, optimizer) = Optimizer::Sgd;
  /// "fp32"; "bf16" (autocast to bfloat16, CPU or CUDA); "fp16" (autocast to float16 with dynamic
  /// loss scaling; on CPU with LibTorch 2.3 or later, as PyTorch's GradScaler("cpu")).
  TORCH_ARG(Precision, precision) = Precision::Fp32;
  /// Learning rate; 0: the optimizer's default (sgd 0.01, adam/adamw 0.001).
  TORCH_ARG(double, lr) = 0;
  /// "cpu", "cuda", "cuda:N" or "auto".
  TORCH_ARG(std::string, device) = "auto";
  /// Tokens per sample for the transformer on synthetic data.
  TORCH_ARG(int64_t, seq_len) = 64;
  /// When > 0 and below seq_len: sequences vary from seq_len_min to seq_len tokens. Trials run at
  /// seq_len, the longest, which is the worst case for memory.
  TORCH_ARG(int64_t, seq_len_min) = 0;
  /// Input pipeline: worker threads that assemble, transform (and on CUDA pin) batches ahead of
  /// the training step; 0: in the training thread, as before. Datasets are always held in RAM.
  TORCH_ARG(int, workers) = 0;
  /// Batches each worker may have ready ahead of the step (PyTorch's prefetch_factor).
  TORCH_ARG(int, prefetch) = 2;
  /// Image augmentation in the pipeline: random crop with 4 pixels of padding and a horizontal
  /// flip (p = 0.5), after normalisation.
  TORCH_ARG(bool, augment) = false;
  /// A per-sample delay in the pipeline, in microseconds, emulating storage or decoding latency
  /// (it sleeps; it does not use the CPU): to see what a slow input pipeline does to a trial.
  TORCH_ARG(int64_t, io_latency_us) = 0;
  /// Samples in the synthetic dataset.
  TORCH_ARG(int64_t, synthetic_size) = 10000;
  TORCH_ARG(uint64_t, seed) = 0;
};

/// Builds a built-in workload. On CPU, install CpuMemoryTracker first so the model is counted.
/// Throws ConfigError / DataError / ModelError / DeviceError naming the bad input. Where `held_out`
/// is given and `options` hold out part of the data (held_out_split), it receives that part from
/// the same read of the file, as load_test_split would give it, without reading the file again.
std::unique_ptr<Workload> make_workload(const WorkloadOptions& options, Dataset* held_out = nullptr);

/// Whether the dataset `options` names has a held-out test split: a built-in one (fashion-mnist,
/// cifar10, synthetic), or the user's (test_data_file, held_out_split). load_test_split reads it.
bool has_test_split(const WorkloadOptions& options);

/// The held-out test split of the dataset `options` names (fashion-mnist: t10k; cifar10:
/// test_batch.bin; synthetic: max(1000, synthetic_size / 5) further samples labelled by the same
/// teacher; idx, npy and csv: test_data_file, or the held_out_split part of the file, where given),
/// shaped like the training data. Throws ConfigError for a dataset without one.
Dataset load_test_split(const WorkloadOptions& options);

/// The test split when the dataset has one; otherwise `samples` samples of `training` in a seeded
/// order (named so: the model trains on them too, so their loss flatters it slightly).
Dataset held_out_or_training_sample(const WorkloadOptions& options, const Dataset& training, int64_t samples = 2048);

/// check_held_out (data.h) against `model`'s training data, but for the sample shape, which is the
/// model's to take: held-out samples of another shape pass where the model and the loss evaluate
/// the first two (a fully convolutional model, resnet18 among the built-in ones, tested at another
/// size), and are refused with the shape and the model's reason where they do not. Evaluating
/// changes neither the model nor its optimizer.
void check_held_out(const Dataset& held_out, ModuleWorkload& model);

/// A built-in dataset, one row of the table.
struct BuiltinDataset {
  std::string name;
  std::string needs;       ///< the flags it needs, for --help ("--data-dir"); empty: none
  std::string test_split;  ///< its held-out test split, in words ("t10k"); empty: it has none
  /// Its samples are made in --input-shape's shape (synthetic), so they are not reshaped to it.
  bool shaped = false;
  /// The training split; throws ConfigError naming a flag it needs and lacks, DataError for bad data.
  std::function<Dataset(const WorkloadOptions&, TargetKind)> load;
  /// The test split, its targets as `kind` asks (classes, or one-hot values for --loss mse); empty
  /// when test_split is.
  std::function<Dataset(const WorkloadOptions&, TargetKind)> load_test;
};

/// The one table of built-in datasets: fashion-mnist, cifar10, idx, npy, csv, synthetic. The factory,
/// `--dataset`'s help, its error messages and the tests read it. To add a dataset: its loader in
/// data.h and its row in src/engine/workload_factory.cpp.
const std::vector<BuiltinDataset>& builtin_datasets();

/// The row named `name`, or nullptr.
const BuiltinDataset* find_builtin_dataset(const std::string& name);

/// The table's names, in its order.
const std::vector<std::string>& dataset_names();

}  // namespace batchwise
