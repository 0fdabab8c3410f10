// The built-in workloads: the table of built-in datasets, the optimizers, the losses, the held-out
// split, and make_workload, which builds a ModuleWorkload from WorkloadOptions (the workload's step is
// workload.cpp's; its input pipeline, state and profile have units of their own).
#include "batchwise/workload.h"

#include <torch/nn/functional/loss.h>
#include <torch/optim.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "batchwise/device.h"
#include "batchwise/memory.h"
#include "batchwise/models.h"
#include "batchwise/units.h"
#include "check.h"
#include "compat.h"
#include "engine/held_out_probe.h"
#include "engine/parameter_dtype.h"
#include "engine/table.h"
#include "model_input.h"
#include "torch_error.h"

namespace batchwise {

namespace {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(Optimizer optimizer, double lr,
                                                        std::vector<at::Tensor> params) {
  switch (optimizer) {
    case Optimizer::Sgd:
      return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr).momentum(0.9));
    case Optimizer::Adam:
      return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(lr));
    case Optimizer::AdamW:
      break;
  }
  return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(lr).weight_decay(0.01));
}

}  // namespace

namespace {

std::string require(const std::string& value, const char* flag, const std::string& dataset) {
  BATCHWISE_CHECK(!value.empty(), ConfigError, "--dataset {}: needs {}", dataset, flag);
  return value;
}

// The synthetic task's held-out split: a fifth of the training set's size (at least 1000), the
// same teacher.
int64_t synthetic_held_out(const WorkloadOptions& o) { return std::max<int64_t>(1000, o.synthetic_size() / 5); }

// The synthetic samples are made in memory at once (a byte an image element, 8 bytes a token):
// refused before, naming the flags that size them, where they would take more than half the RAM
// available. --synthetic-size 1000000000 asked torch for 730 GiB and ended in its allocator's error.
void check_synthetic_bytes(const WorkloadOptions& o, bool tokens, const std::vector<int64_t>& shape, int64_t held_out) {
  double per_sample = tokens ? 8.0 * static_cast<double>(o.seq_len()) : 1.0;
  if (!tokens)
    for (int64_t d : shape) per_sample *= static_cast<double>(d);
  const double bytes = per_sample * static_cast<double>(o.synthetic_size() + held_out);
  const int64_t ram = available_ram_bytes();
  if (ram <= 0 || bytes <= 0.5 * static_cast<double>(ram)) return;
  const std::string size =
      tokens ? fmt::format("--seq-len {}", o.seq_len()) : fmt::format("--input-shape {}", fmt::join(shape, "x"));
  BATCHWISE_CHECK(false, ConfigError,
                  "--synthetic-size {} at {}: its samples take {}, more than half the {} of RAM available; give a "
                  "smaller --synthetic-size or {}",
                  o.synthetic_size(), size,
                  bytes < 9e18 ? format_bytes(static_cast<int64_t>(bytes)) : fmt::format("{:.3g} bytes", bytes),
                  format_bytes(ram), tokens ? "--seq-len" : "--input-shape");
}

Dataset synthetic(const WorkloadOptions& o, TargetKind kind, int64_t held_out) {
  const int64_t classes = o.num_classes() > 0 ? o.num_classes() : 10;
  const BuiltinModel* model = find_builtin_model(o.model());
  const std::vector<int64_t> shape = o.input_shape().empty() ? std::vector<int64_t>{1, 28, 28} : o.input_shape();
  check_synthetic_bytes(o, model && model->sequences, shape, held_out);
  Dataset d = model && model->sequences ? make_synthetic_tokens(o.seq_len(), /*vocab_size=*/256, classes,
                                                                o.synthetic_size(), o.seed(), held_out)
                                        : make_synthetic_images(shape, classes, o.synthetic_size(), o.seed(), held_out);
  // --loss mse: the classes as one-hot values, sequences' too (the transformer's had stayed labels, judged by an
  // accuracy at chance that --target-accuracy was refused for)
  if (kind == TargetKind::Values) d.targets = at::one_hot(d.targets, classes).to(at::kFloat), d.num_classes = 0;
  return d;
}

// The transformer (a model that reads sequences) takes a Fashion-MNIST image as its 28 rows.
void check_rows(const WorkloadOptions& o) {
  const BuiltinModel* model = find_builtin_model(o.model());
  BATCHWISE_CHECK(!model || !model->sequences || o.seq_len() == 64 || o.seq_len() == 28, ConfigError,
                  "--seq-len {}: the {} reads a Fashion-MNIST image as its 28 rows; drop --seq-len or "
                  "use --dataset synthetic",
                  o.seq_len(), o.model());
}

std::string fashion_mnist_dir(const WorkloadOptions& o) {
  return o.data_dir().empty() ? kFashionMnistDir : o.data_dir();
}

// Where the training data was read from, as given: a folder or a file; empty for synthetic data.
std::string data_path_read(const WorkloadOptions& o) {
  if (o.dataset() == "synthetic") return "";
  if (o.dataset() == "fashion-mnist") return fashion_mnist_dir(o);
  return o.data_file().empty() ? o.data_dir() : o.data_file();
}

// `path` made absolute for a report (it is read from elsewhere); empty stays empty.
std::string absolute_path(const std::string& path) {
  if (path.empty()) return path;
  std::error_code error;
  const std::filesystem::path p = std::filesystem::absolute(path, error);
  return error ? path : p.lexically_normal().string();
}

const char* const kCifarDir = "--data-dir DIR (the cifar-10-batches-bin folder)";

// A test split of classes, its targets one-hot values where the loss asks for values (--loss mse), as
// wide as the model's output: --num-classes where it is more than the split's classes.
Dataset as_kind(Dataset d, TargetKind kind, int64_t num_classes) {
  const int64_t width = std::max(d.num_classes, num_classes);
  if (kind == TargetKind::Values) d.targets = at::one_hot(d.targets, width).to(at::kFloat), d.num_classes = 0;
  return d;
}

// The targets the loss asks for: values for --loss mse, else classes.
TargetKind target_kind(const WorkloadOptions& o) {
  return o.loss() == Loss::Mse ? TargetKind::Values : TargetKind::Classes;
}

}  // namespace

const std::vector<BuiltinDataset>& builtin_datasets() {
  static const std::vector<BuiltinDataset> kDatasets = {
      {"fashion-mnist", "", "t10k", false,
       [](const WorkloadOptions& o, TargetKind) {
         check_rows(o);
         return load_fashion_mnist(fashion_mnist_dir(o), /*train=*/true);
       },
       [](const WorkloadOptions& o, TargetKind kind) {
         return as_kind(load_fashion_mnist(fashion_mnist_dir(o), /*train=*/false), kind, o.num_classes());
       }},
      {"cifar10", "--data-dir", "test_batch.bin", false,
       [](const WorkloadOptions& o, TargetKind) { return load_cifar10(require(o.data_dir(), kCifarDir, "cifar10")); },
       [](const WorkloadOptions& o, TargetKind kind) {
         return as_kind(load_cifar10(require(o.data_dir(), kCifarDir, "cifar10"), /*train=*/false), kind,
                        o.num_classes());
       }},
      {"idx", "--data-file, --labels-file", "", false,
       [](const WorkloadOptions& o, TargetKind) {
         return load_idx_pair(require(o.data_file(), "--data-file IMAGES (an idx3-ubyte file)", "idx"),
                              require(o.labels_file(), "--labels-file LABELS (an idx1-ubyte file)", "idx"));
       },
       nullptr},
      {"npy", "--data-file, --labels-file", "", false,
       [](const WorkloadOptions& o, TargetKind kind) {
         return load_npy(require(o.data_file(), "--data-file FEATURES.npy", "npy"),
                         require(o.labels_file(), "--labels-file LABELS.npy", "npy"), kind);
       },
       nullptr},
      {"csv", "--data-file, --label-column", "", false,
       [](const WorkloadOptions& o, TargetKind kind) {
         return load_csv(require(o.data_file(), "--data-file FILE.csv", "csv"), o.label_column(), kind);
       },
       nullptr},
      {"synthetic", "", "further samples of the same task", true,
       [](const WorkloadOptions& o, TargetKind kind) { return synthetic(o, kind, /*held_out=*/0); },
       [](const WorkloadOptions& o, TargetKind kind) { return synthetic(o, kind, synthetic_held_out(o)); }},
  };
  return kDatasets;
}

const BuiltinDataset* find_builtin_dataset(const std::string& name) {
  return detail::find_by_name(builtin_datasets(), name);
}

const std::vector<std::string>& dataset_names() {
  static const std::vector<std::string> kNames = detail::names_of(builtin_datasets());
  return kNames;
}

namespace {

// --input-shape on a file dataset: the same samples, viewed in the shape the model takes.
void apply_input_shape(Dataset& data, const std::vector<int64_t>& shape) {
  if (shape.empty() || data.sample_shape() == shape) return;
  int64_t want = 1;
  bool overflowed = false;  // 16x1152921504606847025 had wrapped to 784 and passed as Fashion-MNIST's shape
  for (auto d : shape) overflowed = __builtin_mul_overflow(want, d, &want) || overflowed;
  const int64_t have = data.inputs[0].numel();
  BATCHWISE_CHECK(!overflowed && want == have, ConfigError,
                  "--input-shape {}: {} elements per sample, but {}'s samples are {} ({} elements); give a shape "
                  "with the same number of elements, or drop --input-shape",
                  fmt::join(shape, "x"), overflowed ? std::string("more than 2^63") : std::to_string(want), data.name,
                  fmt::join(data.sample_shape(), "x"), have);
  UntrackedScope untracked;
  std::vector<int64_t> full{data.size()};
  full.insert(full.end(), shape.begin(), shape.end());
  data.inputs = data.inputs.reshape(full);
}

LossFn make_loss(Loss loss) {
  if (loss == Loss::Mse) {
    return [](const at::Tensor& output, const at::Tensor& target) {
      at::Tensor t = target;
      if (t.scalar_type() == at::kLong) t = at::one_hot(t, output.size(-1)).to(output.scalar_type());
      if (t.dim() == 1 && output.dim() == 2 && output.size(1) == 1) t = t.unsqueeze(1);
      if (t.dim() == 2 && t.size(1) == 1 && output.dim() == 1) t = t.squeeze(1);
      // Shapes that still differ: mse_loss had broadcast them ([N] against [N, 1] into [N, N]; [N, 1] against
      // [N, 10]) and trained on that loss, with torch's warning at every step
      BATCHWISE_CHECK(output.sizes() == t.sizes(), ModelError,
                      "the targets are [{}]: mse would broadcast [{}] against them into a loss of neither; give the "
                      "model an output of the targets' shape",
                      fmt::join(t.sizes(), ", "), fmt::join(output.sizes(), ", "));
      return torch::nn::functional::mse_loss(output, t);
    };
  }
  return [](const at::Tensor& output, const at::Tensor& target) {
    return torch::nn::functional::cross_entropy(output, target);
  };
}

// What to do about a TorchScript model's refusal of a batch, by its cause: the input's shape unless the error says
// another (a forward of several inputs, parameters of another type; the wrapper's own, on what forward returns, says
// its fix).
std::string probe_fix(const std::exception& e, const std::string& why, const torch::nn::AnyModule& model) {
  if (dynamic_cast<const Error*>(&e)) return "";
  if (why.find("missing value for argument") != std::string::npos)
    return "; batchwise calls forward with one tensor, the batch: give the model a forward(x) (other arguments with "
           "defaults)";
  if (why.find("dtype") != std::string::npos || why.find("scalar type") != std::string::npos) {
    const std::string type = detail::parameter_dtype(*model.ptr());
    return fmt::format(
        "; the data is float32{}: script the model in float32 (for bf16 or fp16 training pass --precision, which "
        "runs it under autocast)",
        type.empty() ? "" : ", the model's parameters " + type);
  }
  return "; pass the --input-shape the model was scripted or traced for";
}

// A TorchScript model is only known by running it: one forward pass (eval mode, so no statistic changes) on two
// real samples, and the loss on its output, with gradients: an output that needs none (detached, or computed under
// no_grad) would fail every trial at its backward pass.
void probe_scripted_model(const WorkloadOptions& o, torch::nn::AnyModule& model, const Dataset& data,
                          const LossFn& loss, c10::Device device) {
  model.ptr()->eval();
  const int64_t n = std::min<int64_t>(2, data.size());
  const at::Tensor input = detail::model_input(data, data.inputs.narrow(0, 0, n), device);
  at::Tensor output;
  try {
    output = model.forward(input);
  } catch (const std::exception& e) {  // c10::Error, and the JIT's own exceptions (a scripted raise)
    std::string why = detail::plain_what(e);
    BATCHWISE_CHECK(false, ModelError, "--model {}: rejects a batch of shape [{}] (--input-shape {}): {}{}", o.model(),
                    fmt::join(input.sizes(), ", "), fmt::join(data.sample_shape(), "x"), detail::error_line(why),
                    probe_fix(e, why, model));
  }
  BATCHWISE_CHECK(output.requires_grad(), ModelError,
                  "--model {}: its output needs no gradient (it is detached, or computed under no_grad), so no "
                  "training step could go backward through it; return the output of the model's layers as they "
                  "compute it",
                  o.model());
  if (data.num_classes > 0 && o.loss() == Loss::CrossEntropy) {
    BATCHWISE_CHECK(output.dim() == 2 && output.size(1) >= data.num_classes, ModelError,
                    "--model {}: returns shape [{}], but cross-entropy on {} classes needs logits [batch, {}]; check "
                    "the model's head or --num-classes",
                    o.model(), fmt::join(output.sizes(), ", "), data.num_classes, data.num_classes);
  }
  try {
    (void)loss(output, data.targets.narrow(0, 0, n).to(device));
  } catch (const std::exception& e) {  // c10::Error, and the JIT's own exceptions (a scripted raise)
    std::string why = detail::plain_what(e);
    BATCHWISE_CHECK(false, ModelError, "--model {}: its output [{}] does not fit the --loss {} targets: {}", o.model(),
                    fmt::join(output.sizes(), ", "), to_string(o.loss()), detail::error_line(why));
  }
  model.ptr()->train();
}

// The flags that name data, each read by some datasets: one the dataset does not read is refused, not
// ignored (--labels-file beside a csv, --data-file beside synthetic data: the user meant other data).
void check_data_flags(const WorkloadOptions& o, const BuiltinDataset& d) {
  const auto reads = [&](const std::string& flag) {
    return d.needs.find(flag) != std::string::npos || (flag == "--data-dir" && d.name == "fashion-mnist");
  };
  const std::pair<const char*, const std::string*> flags[] = {{"--data-dir", &o.data_dir()},
                                                              {"--data-file", &o.data_file()},
                                                              {"--labels-file", &o.labels_file()},
                                                              {"--label-column", &o.label_column()}};
  for (const auto& [flag, value] : flags) {
    BATCHWISE_CHECK(
        value->empty() || reads(flag), ConfigError, "{} {}: --dataset {} does not read it ({}); {}", flag, *value,
        d.name,
        d.needs.empty() ? (d.name == "fashion-mnist" ? std::string("it reads --data-dir, or the installed "
                                                                   "dataset")
                                                     : std::string("it reads no file"))
                        : "it reads " + d.needs,
        std::string(flag) == "--label-column" || std::string(flag) == "--labels-file"
            ? "drop it, or give the --dataset your files are (idx and npy: --labels-file; csv: "
              "--label-column)"
            : "drop it, or give the --dataset your files are (fashion-mnist, cifar10: --data-dir; idx, npy, "
              "csv: --data-file)");
  }
}

// The flags that give a dataset without a test split one (--held-out-split, --test-data-file,
// --test-labels-file): refused where they cannot hold, and their files where they are missing, before
// anything is read (make_workload and load_test_split both ask, whichever comes first). The flags
// that name the training data first.
void check_test_split_flags(const WorkloadOptions& o, const BuiltinDataset& d) {
  check_data_flags(o, d);
  BATCHWISE_CHECK(o.held_out_split() >= 0 && std::isfinite(o.held_out_split()), ConfigError,
                  "--held-out-split {}: a fraction of the samples, such as 0.1 (or 0: none)", o.held_out_split());
  BATCHWISE_CHECK(o.held_out_split() == 0 || !d.load_test, ConfigError,
                  "--held-out-split {:g}: --dataset {} has a test split of its own ({}), which validation uses; drop "
                  "--held-out-split (it is for idx, npy and csv data)",
                  o.held_out_split(), o.dataset(), d.test_split);
  BATCHWISE_CHECK(o.test_data_file().empty() || !d.load_test, ConfigError,
                  "--test-data-file {}: --dataset {} has a test split of its own ({}), which validation uses; drop "
                  "--test-data-file (it is for idx, npy and csv data)",
                  o.test_data_file(), o.dataset(), d.test_split);
  BATCHWISE_CHECK(o.test_data_file().empty() || o.held_out_split() == 0, ConfigError,
                  "--held-out-split {:g} and --test-data-file {}: give one test split, your file or a part of the "
                  "training data",
                  o.held_out_split(), o.test_data_file());
  const bool labels = d.needs.find("--labels-file") != std::string::npos;  // idx, npy: a labels file of their own
  BATCHWISE_CHECK(o.test_data_file().empty() || !labels || !o.test_labels_file().empty(), ConfigError,
                  "--test-data-file {}: --dataset {} also needs --test-labels-file (the test split's labels)",
                  o.test_data_file(), o.dataset());
  BATCHWISE_CHECK(
      o.test_labels_file().empty() || (!o.test_data_file().empty() && labels), ConfigError, "--test-labels-file {}: {}",
      o.test_labels_file(),
      o.test_data_file().empty()
          ? "goes with --test-data-file (the test split's samples); give both, or neither"
          : fmt::format("--dataset {} reads its labels from --test-data-file's --label-column; drop it", o.dataset()));
  for (const std::string& f : {o.test_data_file(), o.test_labels_file()}) {  // read later: refused now, not then
    std::error_code error;
    BATCHWISE_CHECK(f.empty() || std::filesystem::exists(f, error), DataError,
                    "{}: no such file (--test-data-file, --test-labels-file: your test split's files)", f);
    BATCHWISE_CHECK(f.empty() || std::filesystem::is_regular_file(f, error), DataError,
                    "{}: not a regular file (a pipe, a socket, a device or a folder); give your test split's file "
                    "(--test-data-file, --test-labels-file)",
                    f);
  }
}

}  // namespace

namespace {

bool has_test_split(const WorkloadOptions& o, const BuiltinDataset* dataset) {
  return dataset && (dataset->load_test || o.held_out_split() > 0 || !o.test_data_file().empty());
}

}  // namespace

bool has_test_split(const WorkloadOptions& o) { return has_test_split(o, find_builtin_dataset(o.dataset())); }

Dataset load_test_split(const WorkloadOptions& o) {
  const BuiltinDataset* dataset = find_builtin_dataset(o.dataset());
  if (dataset) check_test_split_flags(o, *dataset);
  if (!has_test_split(o, dataset)) {
    std::vector<std::string> with;
    for (const BuiltinDataset& d : builtin_datasets())
      if (d.load_test) with.push_back(fmt::format("{} ({})", d.name, d.test_split));
    BATCHWISE_CHECK(
        false, ConfigError,
        "--dataset {}: validation and tune --epochs need a held-out test split, and only {} {} one; give yours with "
        "--test-data-file{}, or hold out part of your data with --held-out-split 0.1",
        o.dataset(), detail::and_list(with), with.size() == 1 ? "has" : "have",
        dataset && dataset->needs.find("--labels-file") != std::string::npos ? " and --test-labels-file" : "");
  }
  if (!dataset->load_test && !o.test_data_file().empty()) {  // the user's own test split
    Dataset d = dataset->load(WorkloadOptions(o).data_file(o.test_data_file()).labels_file(o.test_labels_file()),
                              target_kind(o));
    if (!dataset->shaped) apply_input_shape(d, o.input_shape());
    if (!o.test_labels_file().empty())  // a label's fault names its file, not the samples'
      d.name = fmt::format("{} (labels {})", d.name, std::filesystem::path(o.test_labels_file()).filename().string());
    return in_fixed_order(d);
  }
  if (!dataset->load_test) {  // --held-out-split: the part of the file training never sees
    Dataset d = dataset->load(o, target_kind(o));
    if (!dataset->shaped) apply_input_shape(d, o.input_shape());
    return split_part(d, o.held_out_split(), /*held_out=*/true);
  }
  Dataset d = dataset->load_test(o, target_kind(o));
  if (!dataset->shaped) apply_input_shape(d, o.input_shape());
  return d;
}

Dataset held_out_or_training_sample(const WorkloadOptions& o, const Dataset& training, int64_t samples) {
  if (has_test_split(o)) return load_test_split(o);
  UntrackedScope untracked;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed() + 1);
  const at::Tensor index = at::randperm(training.size(), gen, at::TensorOptions().dtype(at::kLong))
                               .narrow(0, 0, std::min(samples, training.size()));
  Dataset d = samples_at(training, index, fmt::format("{} (training samples: it has no test split)", training.name));
  d.training_sample = true;
  return d;
}

void check_held_out(const Dataset& held_out, ModuleWorkload& model) {
  const Dataset& training = model.data();
  check_held_out(held_out, training, /*same_shape=*/false);
  if (held_out.size() == 0 || held_out.sample_shape() == training.sample_shape()) return;
  // Rows of features (a CSV's, a .npy's) of another width: another file's columns, said as such, not as a matmul's
  // (token sequences, whole numbers, may differ in length)
  BATCHWISE_CHECK(held_out.sample_shape().size() != 1 || training.sample_shape().size() != 1 ||
                      !held_out.inputs.is_floating_point() || !training.inputs.is_floating_point(),
                  DataError,
                  "{}: {} {} a sample, where the training data, {}, has {}: a test file holds the training file's "
                  "columns, in the same order",
                  held_out.name, held_out.sample_shape()[0], held_out.sample_shape()[0] == 1 ? "feature" : "features",
                  training.name, training.sample_shape()[0]);
  // (out of memory, and oneDNN's or an allocator's failures, are not the samples' kind: said as such by the caller)
  if (const auto reason = detail::held_out_refusal(model, held_out))
    BATCHWISE_CHECK(false, DataError,
                    "{}: its samples are {}, and the model trains on {}'s {} and does not take them ({}); give a "
                    "test split of the training data's kind",
                    held_out.name, fmt::join(held_out.sample_shape(), "x"), training.name,
                    fmt::join(training.sample_shape(), "x"), *reason);
}

std::unique_ptr<Workload> make_workload(const WorkloadOptions& o, Dataset* held_out) {
  const bool scripted = is_model_path(o.model());
  BATCHWISE_CHECK(scripted || find_builtin_model(o.model()), ConfigError,
                  "--model {}: unknown model; choose one of {}, or give the path of a TorchScript file (model.pt)",
                  o.model(), fmt::join(model_names(), ", "));
  const BuiltinDataset* dataset = find_builtin_dataset(o.dataset());
  BATCHWISE_CHECK(dataset, ConfigError, "--dataset {}: unknown dataset; choose one of {}", o.dataset(),
                  fmt::join(dataset_names(), ", "));
  BATCHWISE_CHECK(o.lr() >= 0 && std::isfinite(o.lr()), ConfigError,
                  "--lr {}: must be a positive number (or 0 for the optimizer's default)", o.lr());
  BATCHWISE_CHECK(o.seq_len_min() <= o.seq_len(), ConfigError, "--seq-len {}-{}: the range runs backwards",
                  o.seq_len_min(), o.seq_len());
  BATCHWISE_CHECK(o.num_classes() >= 0 && o.num_classes() != 1, ConfigError,
                  "--num-classes {}: needs at least 2 classes (or 0 to count them from the labels)", o.num_classes());
  for (auto d : o.input_shape())
    BATCHWISE_CHECK(d >= 1, ConfigError, "--input-shape {}: every dimension must be at least 1",
                    fmt::join(o.input_shape(), "x"));
  const DeviceSpec device = resolve_device(o.device());
  // fp16 on CPU: autocast to float16 with the same loss scaling (PyTorch's GradScaler("cpu")); it
  // pays only where the CPU has half-precision units (AMX-FP16, AVX512-FP16), and is what CI tests
  // the fp16 step with.
  BATCHWISE_CHECK(o.precision() != Precision::Fp16 || device.type == "cuda" || BATCHWISE_HAVE_CPU_FP16, ConfigError,
                  "--precision fp16 on CPU needs LibTorch 2.3 or later (this is {}); use --precision bf16",
                  BATCHWISE_TORCH_VERSION_STRING);
  const TargetKind kind = target_kind(o);

  check_test_split_flags(o, *dataset);
  Dataset data = dataset->load(o, kind);
  if (!dataset->shaped) apply_input_shape(data, o.input_shape());
  if (o.held_out_split() > 0) {
    if (held_out) *held_out = split_part(data, o.held_out_split(), /*held_out=*/true);
    data = split_part(data, o.held_out_split(), /*held_out=*/false);
  }
  if (o.num_classes() > 0 && data.num_classes > 0) {
    BATCHWISE_CHECK(o.num_classes() >= data.num_classes, ConfigError,
                    "--num-classes {}: {} has labels up to {}; give at least {} classes", o.num_classes(), data.name,
                    data.num_classes - 1, data.num_classes);
    data.num_classes = o.num_classes();
  }

  torch::manual_seed(o.seed());
  const c10::Device torch_device = device.type == "cuda"
                                       ? c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device.index))
                                       : c10::Device(c10::DeviceType::CPU);
  LossFn loss = make_loss(o.loss());
  torch::nn::AnyModule model;
  if (scripted) {
    model = load_torchscript(o.model());
  } else {
    // Regression targets [N] or [N, K] set the width of the model's output.
    const int64_t outputs =
        data.num_classes > 0 ? data.num_classes : (data.targets.dim() == 1 ? 1 : data.targets.size(1));
    model = make_model(o.model(), ModelSpec{data.sample_shape(), data.is_tokens(), data.vocab_size, outputs});
  }
  model.ptr()->to(torch_device);
  model.ptr()->train();
  if (scripted) probe_scripted_model(o, model, data, loss, torch_device);

  WorkloadInfo info;
  info.model = o.model();
  info.dataset = data.name;
  info.data_path = absolute_path(data_path_read(o));
  info.labels_path = absolute_path(o.labels_file());
  info.loss = to_string(o.loss());
  info.optimizer = to_string(o.optimizer());
  info.precision = to_string(o.precision());
  info.lr = o.lr() > 0 ? o.lr() : (o.optimizer() == Optimizer::Sgd ? 0.01 : 0.001);
  info.input_shape = data.sample_shape();
  if (data.is_tokens() && o.seq_len_min() > 0 && o.seq_len_min() < o.seq_len())
    info.seq_len_range = {o.seq_len_min(), o.seq_len()};
  info.num_classes = data.num_classes;
  info.dataset_size = data.size();
  detail::count_parameters(info, *model.ptr());

  auto optimizer = make_optimizer(o.optimizer(), info.lr, model.ptr()->parameters());
  auto workload = std::make_unique<ModuleWorkload>(std::move(info), std::move(model), std::move(optimizer),
                                                   std::move(data), std::move(loss), torch_device, o.seed());
  workload->set_pipeline(o.workers(), o.prefetch(), o.augment(), o.io_latency_us());
  return workload;
}

}  // namespace batchwise
