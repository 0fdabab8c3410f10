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
  /// uint8 images [N, C, H, W] (normalised per batch with mean/std below), or int64 token ids [N, L].
  at::Tensor inputs;
  at::Tensor targets;  ///< int64 [N], in [0, num_classes)
  int64_t num_classes = 0;
  int64_t vocab_size = 0;  ///< token datasets only
  double mean = 0.0;       ///< of pixel/255, for normalisation
  double std = 1.0;
  int64_t size() const { return inputs.defined() ? inputs.size(0) : 0; }
  bool is_tokens() const;
  /// One sample's shape: [C, H, W] or [L].
  std::vector<int64_t> sample_shape() const;
};

/// Reads one IDX file, gzip-compressed or plain, as a uint8 tensor of the shape its header gives.
/// Checks the magic number (0x0000080N: unsigned bytes, N dimensions) against `expected_dims`, and
/// that the file holds exactly the bytes its header promises. Throws DataError naming the file.
at::Tensor read_idx(const std::string& path, int expected_dims);

/// Fashion-MNIST's training (60000) or test (10000) split from `dir`: 28x28 images, labels 0-9.
/// Throws DataError naming the file and the fix (e.g. `apt-get install dataset-fashion-mnist`).
Dataset load_fashion_mnist(const std::string& dir, bool train = true);

/// `size` seeded random uint8 images of `shape` ([C, H, W]) whose labels come from a fixed random
/// linear teacher, so a model can learn them.
Dataset make_synthetic_images(const std::vector<int64_t>& shape, int64_t num_classes, int64_t size,
                              uint64_t seed);

/// `size` seeded random token sequences of `seq_len` ids in [0, vocab_size), labelled by a fixed
/// random bag-of-tokens teacher.
Dataset make_synthetic_tokens(int64_t seq_len, int64_t vocab_size, int64_t num_classes, int64_t size,
                              uint64_t seed);

}  // namespace batchwise
