// The synthetic datasets (--dataset synthetic): images or token sequences drawn from a seed, each
// labelled by a fixed random teacher, so that a model can learn them and a held-out split is labelled
// by the same rule.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>

#include <algorithm>
#include <vector>

#include "batchwise/data.h"
#include "batchwise/memory.h"
#include "check.h"

namespace batchwise {

Dataset make_synthetic_images(const std::vector<int64_t>& shape, int64_t num_classes, int64_t size, uint64_t seed,
                              int64_t held_out) {
  BATCHWISE_CHECK(size >= 1 && num_classes >= 2, ConfigError,
                  "synthetic: needs at least 1 sample and 2 classes, got {} and {}", size, num_classes);
  BATCHWISE_CHECK(held_out >= 0, ConfigError, "synthetic: a held-out split of {} samples", held_out);
  UntrackedScope untracked;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int64_t> full{size};
  full.insert(full.end(), shape.begin(), shape.end());
  Dataset d;
  d.name = "synthetic";
  d.inputs = at::randint(0, 256, full, gen, at::TensorOptions().dtype(at::kByte));
  const int64_t features = d.inputs[0].numel();
  at::Tensor teacher = at::randn({features, num_classes}, gen);
  if (held_out > 0) {  // new samples from the same generator, after the teacher: labelled by the same rule
    size = held_out;
    full[0] = size;
    d.inputs = at::randint(0, 256, full, gen, at::TensorOptions().dtype(at::kByte));
  }
  // In chunks: a float copy of all samples at once would be 4x the dataset (6 GB for 10000 3x224x224).
  const at::Tensor flat = d.inputs.reshape({size, features});
  std::vector<at::Tensor> labels;
  for (int64_t row = 0; row < size; row += 1024) {
    const int64_t n = std::min<int64_t>(1024, size - row);
    labels.push_back(flat.narrow(0, row, n).to(at::kFloat).div_(255.0).sub_(0.5).mm(teacher).argmax(1));
  }
  d.targets = at::cat(labels);
  d.num_classes = num_classes;
  d.mean = 0.5;
  d.std = 0.2887;  // of uniform [0, 1]
  return d;
}

Dataset make_synthetic_tokens(int64_t seq_len, int64_t vocab_size, int64_t num_classes, int64_t size, uint64_t seed,
                              int64_t held_out) {
  BATCHWISE_CHECK(seq_len >= 1, ConfigError, "--seq-len {}: a sequence needs at least one token", seq_len);
  BATCHWISE_CHECK(size >= 1 && num_classes >= 2 && vocab_size >= 2, ConfigError,
                  "synthetic: needs at least 1 sample, 2 classes and 2 tokens");
  UntrackedScope untracked;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  Dataset d;
  d.name = "synthetic";
  d.inputs = at::randint(0, vocab_size, {size, seq_len}, gen, at::TensorOptions().dtype(at::kLong));
  at::Tensor teacher = at::randn({vocab_size, num_classes}, gen);
  if (held_out > 0) {  // new samples from the same generator, after the teacher: labelled by the same rule
    BATCHWISE_CHECK(held_out >= 1, ConfigError, "synthetic: a held-out split of {} samples", held_out);
    size = held_out;
    d.inputs = at::randint(0, vocab_size, {size, seq_len}, gen, at::TensorOptions().dtype(at::kLong));
  }
  d.targets = teacher.index_select(0, d.inputs.reshape({-1})).reshape({size, seq_len, num_classes}).sum(1).argmax(1);
  d.num_classes = num_classes;
  d.vocab_size = vocab_size;
  return d;
}

}  // namespace batchwise
