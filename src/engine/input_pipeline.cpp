// The input pipeline of a ModuleWorkload: how it is configured, how a batch is assembled on the host
// (with the optional crops and flips), handed out in order and moved to the device, and the shard a
// data-parallel rank draws.
#include "batchwise/workload.h"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <thread>

#include "check.h"
#include "engine/input_pipeline.h"
#include "model_input.h"

namespace batchwise {

using detail::model_input;

ModuleWorkload::~ModuleWorkload() = default;

void ModuleWorkload::set_pipeline(int workers, int prefetch, bool augment, int64_t io_latency_us) {
  BATCHWISE_CHECK(workers >= 0 && prefetch >= 1 && io_latency_us >= 0, ConfigError,
                  "--workers {}, --prefetch {}, --io-latency-us {}: workers and latency must not be negative, prefetch "
                  "at least 1",
                  workers, prefetch, io_latency_us);
  BATCHWISE_CHECK(!augment || (data_.inputs.dim() == 4 && !data_.is_tokens()), ConfigError,
                  "--augment: random crops and flips are for image datasets ([N, C, H, W]); {} is not one", data_.name);
  if (loader_) loader_->stop();
  loader_.reset();
  if (workers > 0 || augment || io_latency_us > 0)
    loader_ = std::make_unique<Loader>(*this, std::max(workers, 0), prefetch, augment, io_latency_us);
}

std::tuple<int, int, bool, int64_t> ModuleWorkload::pipeline() const {
  if (!loader_) return {0, 2, false, 0};
  return {loader_->workers, loader_->prefetch, loader_->augment, loader_->latency_us};
}

Batch ModuleWorkload::host_batch(const at::Tensor& index, uint64_t augment_seed) const {
  at::Tensor input = data_.inputs.index_select(0, index);
  if (input.scalar_type() == at::kByte) input = input.to(at::kFloat).div_(255.0).sub_(data_.mean).div_(data_.std);
  if (loader_ && loader_->augment) {
    // Random crop with 4 pixels of zero padding, and a horizontal flip with probability 1/2.
    const int64_t n = input.size(0), h = input.size(2), wd = input.size(3);
    const at::Tensor padded = at::constant_pad_nd(input, {4, 4, 4, 4});
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(augment_seed);
    const at::Tensor offsets = at::randint(0, 9, {n, 2}, g, at::TensorOptions().dtype(at::kLong));
    const at::Tensor flips = at::randint(0, 2, {n}, g, at::TensorOptions().dtype(at::kLong));
    at::Tensor out = at::empty_like(input);
    const auto o = offsets.accessor<int64_t, 2>();
    const auto f = flips.accessor<int64_t, 1>();
    for (int64_t i = 0; i < n; ++i) {
      at::Tensor crop = padded[i].narrow(1, o[i][0], h).narrow(2, o[i][1], wd);
      out[i].copy_(f[i] ? crop.flip({2}) : crop);
    }
    input = out;
  }
  return {input, data_.targets.index_select(0, index)};
}

Batch ModuleWorkload::next_batch(int64_t batch) {
  BATCHWISE_CHECK(batch >= 1, ConfigError, "batch size {}: must be at least 1", batch);
  if (loader_) {
    if (loader_->workers == 0) {  // transforms in the training thread
      const at::Tensor index = sampler_->next(batch);
      if (loader_->latency_us > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(loader_->latency_us * index.numel()));
      Batch b = host_batch(index, static_cast<uint64_t>(sampler_->cursor) * 7919u);
      return {b.input.to(device_), b.target.to(device_)};
    }
    return loader_->next(batch);
  }
  const at::Tensor index = sampler_->next(batch);
  return {model_input(data_, data_.inputs.index_select(0, index), device_),
          data_.targets.index_select(0, index).to(device_)};
}

void ModuleWorkload::set_shard(int rank, int world_size) {
  BATCHWISE_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, ConfigError,
                  "shard {} of {}: the rank must be in [0, world size)", rank, world_size);
  if (loader_) loader_->stop();
  sampler_->rank = rank;
  sampler_->world = world_size;
}

}  // namespace batchwise
