// The training step split into its phases (data, copy, forward, backward, optimizer), timed in a
// separate pass from the throughput's steps: on the host with a synchronisation after each phase, or
// on CUDA between events on the stream.
#include "batchwise/workload.h"

#include <torch/cuda.h>

#include <chrono>

#include "check.h"
#include "compat.h"
#include "engine/input_pipeline.h"
#include "model_input.h"

namespace batchwise {

using detail::model_input;

std::optional<StepPhases> ModuleWorkload::profiled_step(int64_t batch) {
  using clock = std::chrono::steady_clock;
#ifdef BATCHWISE_HAVE_DEVICE_EVENTS
  if (device_.is_cuda() && !loader_) return profiled_step_events(batch);
#endif
  auto sync = [&] {
    if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
  };
  auto seconds = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  if (!model_.ptr()->is_training()) model_.ptr()->train();
  StepPhases p;
  sync();
  const auto t0 = clock::now();
  at::Tensor input, target;
  auto t1 = t0;
  if (loader_) {  // the configured pipeline hands out batches already on the device: all "data"
    const Batch b = next_batch(batch);
    input = b.input, target = b.target;
    sync();
    t1 = clock::now();
  } else {
    const at::Tensor index = sampler_->next(batch);
    const at::Tensor rows = data_.inputs.index_select(0, index);
    const at::Tensor target_rows = data_.targets.index_select(0, index);
    t1 = clock::now();
    input = model_input(data_, rows, device_);
    target = target_rows.to(device_);
    sync();
  }
  const auto t2 = clock::now();
  const at::Tensor loss = forward_loss(input, target);
  sync();
  const auto t3 = clock::now();
  optimizer_->zero_grad();
  step_backward(loss);  // train_step's own backward and optimizer step (fp16: scaled, unscaled)
  sync();
  const auto t4 = clock::now();
  step_optimizer();
  (void)loss.item<double>();  // as train_step's caller does
  sync();
  const auto t5 = clock::now();
  p.data_s = seconds(t0, t1);
  p.h2d_s = seconds(t1, t2);
  p.forward_s = seconds(t2, t3);
  p.backward_s = seconds(t3, t4);
  p.optimizer_s = seconds(t4, t5);
  p.total_s = seconds(t0, t5);
  return p;
}

#ifdef BATCHWISE_HAVE_DEVICE_EVENTS
// On CUDA: the device phases between events recorded on the stream, one synchronisation at the
// end (as the training loop's loss.item()), so the profile does not stall the stream after every
// phase. The data phase is host work, timed on the host. Untested on a GPU so far: see the notes.
std::optional<StepPhases> ModuleWorkload::profiled_step_events(int64_t batch) {
  using clock = std::chrono::steady_clock;
  if (!model_.ptr()->is_training()) model_.ptr()->train();
  torch::cuda::synchronize(device_.index());
  compat::StreamMarks marks(device_);
  const auto t0 = clock::now();
  const at::Tensor index = sampler_->next(batch);
  const at::Tensor rows = data_.inputs.index_select(0, index);
  const at::Tensor target_rows = data_.targets.index_select(0, index);
  const auto t1 = clock::now();
  marks.mark();  // 0: the batch is assembled on the host
  const at::Tensor input = model_input(data_, rows, device_);
  const at::Tensor target = target_rows.to(device_);
  marks.mark();  // 1: on the device
  const at::Tensor loss = forward_loss(input, target);
  marks.mark();  // 2: forward and loss
  optimizer_->zero_grad();
  step_backward(loss);
  marks.mark();  // 3: backward
  step_optimizer();
  marks.mark();  // 4: optimizer step
  (void)loss.item<double>();
  torch::cuda::synchronize(device_.index());
  const auto t5 = clock::now();
  StepPhases p;
  p.data_s = std::chrono::duration<double>(t1 - t0).count();
  p.h2d_s = marks.seconds(0, 1);
  p.forward_s = marks.seconds(1, 2);
  p.backward_s = marks.seconds(2, 3);
  p.optimizer_s = marks.seconds(3, 4);
  p.total_s = std::chrono::duration<double>(t5 - t0).count();
  return p;
}
#endif

std::optional<StepProfile> profile_steps(Workload& workload, int64_t batch, int warmup, int steps) {
  BATCHWISE_CHECK(steps >= 1 && warmup >= 0, ConfigError, "profile: {} steps after {} warm-up: need at least one",
                  steps, warmup);
  const StateGuard restore(workload);
  StepProfile profile;
  profile.batch = batch;
  profile.steps = steps;
  for (int i = 0; i < warmup + steps; ++i) {
    const std::optional<StepPhases> p = workload.profiled_step(batch);
    if (!p) return std::nullopt;
    if (i < warmup) continue;
    profile.mean.data_s += p->data_s / steps;
    profile.mean.h2d_s += p->h2d_s / steps;
    profile.mean.forward_s += p->forward_s / steps;
    profile.mean.backward_s += p->backward_s / steps;
    profile.mean.optimizer_s += p->optimizer_s / steps;
    profile.mean.total_s += p->total_s / steps;
  }
  const StepPhases& m = profile.mean;
  profile.coverage = m.total_s > 0 ? (m.data_s + m.h2d_s + m.forward_s + m.backward_s + m.optimizer_s) / m.total_s : 0;
  return profile;
}

}  // namespace batchwise
