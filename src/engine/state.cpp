// A ModuleWorkload's state, saved and put back bit for bit: weights, buffers, gradients, train/eval
// modes, the optimizer's state, the random generators, the sampler's place in its epoch and fp16's
// loss scaler; and what that state weighs (state_bytes).
#include "batchwise/workload.h"

#include <torch/optim.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <sstream>

#include "check.h"
#include "engine/input_pipeline.h"
#include "torch_error.h"

namespace batchwise {

namespace {

struct ModuleState final : WorkloadState {
  std::vector<at::Tensor> parameters, buffers, grads;  // host copies; undefined grad: none was set
  std::vector<bool> training;                          // per module, in modules() order
  std::string optimizer;                               // torch::serialize archive
  at::Tensor rng, device_rng, sampler_rng, sampler_order;
  int64_t sampler_cursor = 0;
  double loss_scale = 0;  // fp16's scaler, put back only when no step since was good
  int good_steps = 0;
  int64_t good_total = 0;
};

at::Tensor host_copy(const at::Tensor& t) {
  return t.defined() ? t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true) : at::Tensor();
}

}  // namespace

using detail::get_rng;
using detail::set_rng;

std::unique_ptr<WorkloadState> ModuleWorkload::save_state() {
  if (loader_) loader_->stop();  // the sampler back where the training consumed it
  UntrackedScope untracked;      // the snapshot is batchwise's, not the training's
  auto state = std::make_unique<ModuleState>();
  for (const auto& p : module().parameters()) {
    state->parameters.push_back(host_copy(p));
    state->grads.push_back(host_copy(p.grad()));
  }
  for (const auto& b : module().buffers()) state->buffers.push_back(host_copy(b));
  for (const auto& m : module().modules()) state->training.push_back(m->is_training());
  torch::serialize::OutputArchive archive;
  optimizer_->save(archive);
  std::ostringstream out;
  archive.save_to(out);
  state->optimizer = out.str();
  state->rng = get_rng(at::detail::getDefaultCPUGenerator());
  if (device_.is_cuda()) state->device_rng = get_rng(at::globalContext().defaultGenerator(device_));
  state->sampler_rng = get_rng(sampler_->generator);
  state->sampler_order = sampler_->order;
  state->sampler_cursor = sampler_->cursor;
  state->loss_scale = loss_scale_;
  state->good_steps = good_steps_;
  state->good_total = good_total_;
  return state;
}

void Workload::note_restore_failure(std::string what) noexcept {
  try {  // once: a workload that cannot be put back fails at every pass's end alike
    if (std::find(restore_failures_.begin(), restore_failures_.end(), what) == restore_failures_.end())
      restore_failures_.push_back(std::move(what));
  } catch (...) {  // no memory for the sentence either: nothing is left to say it with
  }
}

namespace {
// The sentence for a restore that threw `e` (null: not a std::exception), noted on `w`; built inside a
// try, as the destructor calling it must not throw (a copy that ran out of memory may leave none for it).
void note_unrestored(Workload& w, const std::exception* e) noexcept {
  try {
    std::string what =
        "the model and optimizer could not be put back as they were before a pass that trained them, so what was "
        "measured after it started from the pass's training";
    if (e) what += ": " + detail::error_line(detail::plain_what(*e));
    w.note_restore_failure(std::move(what));
  } catch (...) {}
}
}  // namespace

StateGuard::~StateGuard() {
  try {
    workload_.restore_state(*state_);
  } catch (const std::exception& e) {
    note_unrestored(workload_, &e);
  } catch (...) {
    note_unrestored(workload_, nullptr);
  }
}

void ModuleWorkload::restore_state(const WorkloadState& saved) {
  if (loader_) loader_->stop();  // prefetched batches belong to the state being left
  const auto* state = dynamic_cast<const ModuleState*>(&saved);
  BATCHWISE_ASSERT(state != nullptr);
  torch::NoGradGuard no_grad;
  auto parameters = module().parameters();
  auto buffers = module().buffers();
  BATCHWISE_ASSERT(parameters.size() == state->parameters.size() && buffers.size() == state->buffers.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    auto& p = parameters[i];
    p.detach().copy_(state->parameters[i]);
    const at::Tensor& g = state->grads[i];
    if (!g.defined()) {
      p.mutable_grad() = at::Tensor();
    } else if (p.grad().defined()) {
      p.mutable_grad().copy_(g);
    } else {
      p.mutable_grad() = g.to(p.device(), /*non_blocking=*/false, /*copy=*/true);
    }
  }
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].detach().copy_(state->buffers[i]);
  auto modules = module().modules();
  for (size_t i = 0; i < modules.size(); ++i) modules[i]->train(state->training[i]);

  // The optimizer's state is replaced whole: states created since the snapshot must go.
  optimizer_->state().clear();
  std::istringstream in(state->optimizer);
  torch::serialize::InputArchive archive;
  archive.load_from(in, device_);
  optimizer_->load(archive);

  set_rng(at::detail::getDefaultCPUGenerator(), state->rng);
  if (device_.is_cuda()) set_rng(at::globalContext().defaultGenerator(device_), state->device_rng);
  set_rng(sampler_->generator, state->sampler_rng);
  sampler_->order = state->sampler_order;
  sampler_->cursor = state->sampler_cursor;
  // fp16's scaler is batchwise's, not the training's (see loss_scale()): a scale that a good step
  // has settled since the snapshot carries over; after only overflows, the snapshot's comes back.
  if (good_total_ > state->good_total) {
    loss_scale_ = settled_scale_, good_steps_ = settled_good_steps_;
  } else {
    loss_scale_ = state->loss_scale, good_steps_ = state->good_steps;
  }
}

StateBytes ModuleWorkload::state_bytes() const {
  auto bytes = [](const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : int64_t{0}; };
  StateBytes s;
  const auto& module = *model_.ptr();
  for (const auto& p : module.parameters()) {
    s.parameter_bytes += bytes(p);
    s.gradient_bytes += bytes(p.grad());
  }
  for (const auto& b : module.buffers()) s.parameter_bytes += bytes(b);
  if (optimizer_state_bytes_) s.optimizer_state_bytes = optimizer_state_bytes_();
  for (const auto& [key, state] : optimizer_->state()) {
    if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state.get())) {
      s.optimizer_state_bytes += bytes(sgd->momentum_buffer());
    } else if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state.get())) {
      s.optimizer_state_bytes += bytes(adam->exp_avg()) + bytes(adam->exp_avg_sq()) + bytes(adam->max_exp_avg_sq());
    } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state.get())) {
      s.optimizer_state_bytes += bytes(adamw->exp_avg()) + bytes(adamw->exp_avg_sq()) + bytes(adamw->max_exp_avg_sq());
    }
  }
  return s;
}

}  // namespace batchwise
