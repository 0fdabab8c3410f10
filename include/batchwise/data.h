#pragma once
/// Datasets held in memory as tensors: Fashion-MNIST from its IDX gzip files, and seeded
/// synthetic data with learnable labels.
///
/// To add a dataset: write a loader returning Dataset (validate every header field and the byte
/// count; name the file and the fix in each error), then add its name to make_workload.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace batchwise {

/// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// Samples and labels, in host memory (not counted against the device budget).
struct Dataset {
  std::string name;
  /// uint8 images [N, C, H, W] (normalised per batch with mean/std below), int64 token ids [N, L],
  /// or float32 features [N, ...] (used as they are).
  at::Tensor inputs;
  /// int64 [N] class labels in [0, num_classes), or float32 [N] / [N, K] regression targets
  /// (num_classes 0).
  at::Tensor targets;
  int64_t num_classes = 0;
  int64_t vocab_size = 0;  ///< token datasets only
  double mean = 0.0;       ///< of pixel/255, for normalisation
  double std = 1.0;
  /// A sample of the training data standing in for a test split where there is none: what is
  /// judged on it is how fast a batch fits the data, not how well it generalises.
  bool training_sample = false;
  /// A CSV's header: its feature columns' names in order (the label's left out); empty without one.
  /// A test file's are checked against the training file's (check_held_out): features go by position.
  std::vector<std::string> feature_names;
  int64_t size() const { return inputs.defined() ? inputs.size(0) : 0; }
  bool is_tokens() const;
  /// One sample's shape: [C, H, W] or [L].
  std::vector<int64_t> sample_shape() const;
};

/// `data`'s first `samples` samples (all when fewer), sharing its storage.
Dataset head(const Dataset& data, int64_t samples);

/// The samples of `data` at `index` (a 1-D long tensor of rows), in its order, named `name`.
Dataset samples_at(const Dataset& data, const at::Tensor& index, std::string name);

/// One side of a fixed split of `data`, for a dataset without a test split of its own: `held_out`,
/// the round(`fraction` x N) samples a seeded draw holds out, in the draw's order (so that the first
/// few are a fair sample of them: the batch race evaluates on the first 2,048); else the rest, which
/// training sees, in the file's order. The draw is the same whatever the run's --seed, so runs of
/// every seed are judged on the same samples; each side keeps the statistics (mean, std, classes)
/// and says what it is in its name. Throws ConfigError where a side would be empty.
Dataset split_part(const Dataset& data, double fraction, bool held_out);

/// `data` in a fixed random order (the draw split_part uses), so that its first N samples are a fair
/// sample of it where a test file of the user's is sorted (by class, say): the batch race evaluates
/// on the first 2,048, `--held-out-samples N` on the first N.
Dataset in_fixed_order(const Dataset& data);

/// Throws DataError, naming both, where `held_out` cannot be evaluated beside `training` (a test
/// file of the user's, --test-data-file): another sample shape or input type, class labels beyond
/// training's classes, or other targets (classes against values, values of another width; class
/// labels beside their one-hot values, --loss mse on a dataset of classes, are the same targets).
/// `same_shape`: false leaves the sample shape to the model (check_held_out of workload.h asks it).
void check_held_out(const Dataset& held_out, const Dataset& training, bool same_shape = true);

/// Reads one IDX file, gzip-compressed or plain, as a uint8 tensor of the shape its header gives.
/// Checks the magic number (0x0000080N: unsigned bytes, N dimensions) against `expected_dims`, and
/// that the file holds exactly the bytes its header promises. Throws DataError naming the file.
/// `hint`: the fix named in every error (empty: a generic one).
at::Tensor read_idx(const std::string& path, int expected_dims, const std::string& hint = "");

/// Fashion-MNIST's training (60000) or test (10000) split from `dir`: 28x28 images, labels 0-9.
/// Throws DataError naming the file and the fix (e.g. `apt-get install dataset-fashion-mnist`).
Dataset load_fashion_mnist(const std::string& dir, bool train = true);

/// Any pair of IDX files (MNIST and its relatives): images [N, H, W] (stored as [N, 1, H, W]) and
/// labels [N], gzip-compressed or plain. Throws DataError naming the file on any mismatch.
Dataset load_idx_pair(const std::string& images_path, const std::string& labels_path);

/// CIFAR-10's binary version: `dir` (or its cifar-10-batches-bin sub-folder) holding
/// data_batch_1.bin ... data_batch_5.bin (train) or test_batch.bin, each a whole number of
/// 3073-byte records (1 label byte, then 3x32x32 pixel bytes).
Dataset load_cifar10(const std::string& dir, bool train = true);

/// The files `dataset` reads from its folder `dir` (fashion-mnist: the four IDX files, gzipped or plain;
/// cifar10: the six batches, in `dir` or its cifar-10-batches-bin sub-folder), whether they are there or
/// not; none for a dataset that reads no folder. What a run's outputs must not overwrite.
std::vector<std::string> dataset_folder_files(const std::string& dataset, const std::string& dir);

/// Reads a NumPy .npy file (format 1.0-3.0, little-endian, C order) into a CPU tensor of its dtype
/// and shape: bool, int8/16/32/64, uint8, float16/32/64, straight from the file into the tensor (the
/// file's size in memory, once). Throws DataError naming the file otherwise.
at::Tensor read_npy(const std::string& path);

/// What the targets of a file dataset are: class labels (integers, for cross-entropy) or
/// regression values (any number, for mse).
enum class TargetKind { Classes, Values };

/// Features from one .npy file ([N, ...]; uint8 is kept as images, other dtypes become float32) and
/// targets from another ([N], or [N, K] for values).
Dataset load_npy(const std::string& features_path, const std::string& labels_path, TargetKind kind);

/// A CSV file of numeric columns, with or without a header row; `label_column` is a header name or
/// a 0-based index ("": the last column). Every other column is a float32 feature. Read per RFC 4180
/// (quoted fields with commas, line breaks and "" inside; CRLF or LF), numbers in one format whatever
/// the locale ("1.5"). Throws DataError naming the file, line and column of a malformed field.
Dataset load_csv(const std::string& path, const std::string& label_column, TargetKind kind);

/// `size` seeded random uint8 images of `shape` ([C, H, W]) whose labels come from a fixed random
/// linear teacher, so a model can learn them. `held_out` > 0: instead, that many further samples of
/// the same seed, labelled by the same teacher and drawn after the training samples (the held-out
/// split of the same task).
Dataset make_synthetic_images(const std::vector<int64_t>& shape, int64_t num_classes, int64_t size, uint64_t seed,
                              int64_t held_out = 0);

/// `size` seeded random token sequences of `seq_len` ids in [0, vocab_size), labelled by a fixed
/// random bag-of-tokens teacher. `held_out` > 0: that many further sequences labelled by the same
/// teacher, as make_synthetic_images.
Dataset make_synthetic_tokens(int64_t seq_len, int64_t vocab_size, int64_t num_classes, int64_t size, uint64_t seed,
                              int64_t held_out = 0);

}  // namespace batchwise
