#pragma once
// What several test files share: small synthetic workloads on the CPU budget, and the test's own
// copies of what training may change (taken by the test, not by the code under test).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "batchwise/memory.h"
#include "batchwise/trial.h"
#include "batchwise/workload.h"

namespace batchwise::test {

/// 1024 synthetic samples (sequences of 16 for the transformer) at the default rate, on the CPU
/// budget: the trials, fits and sweeps train on this.
inline std::unique_ptr<Workload> small(const std::string& model = "mlp", const std::string& optimizer = "sgd") {
  CpuMemoryTracker::install();
  return make_workload(WorkloadOptions()
                           .model(model)
                           .dataset("synthetic")
                           .synthetic_size(1024)
                           .seq_len(16)
                           .optimizer(parse_optimizer(optimizer))
                           .device("cpu"));
}

/// 512 synthetic samples at rate 0.05, on the CPU budget: the training-step tests (accumulation,
/// step profile, utilisation, noise scale) train on this.
inline std::unique_ptr<Workload> tiny(const std::string& model) {
  CpuMemoryTracker::install();
  return make_workload(WorkloadOptions().model(model).dataset("synthetic").synthetic_size(512).lr(0.05).device("cpu"));
}

inline ModuleWorkload& as_module(Workload& w) { return dynamic_cast<ModuleWorkload&>(w); }

/// Deep copies of `ts`.
inline std::vector<at::Tensor> copies(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.clone());
  return out;
}

// Everything training may change, copied by the test itself (not by the code under test).
struct Copy {
  std::vector<at::Tensor> params, param_storage, grads, buffers, adam;
  std::vector<bool> training;
};

inline Copy copy_of(ModuleWorkload& w) {
  UntrackedScope untracked;
  Copy c;
  for (const auto& p : w.module().parameters()) {
    c.params.push_back(p.detach().clone());
    c.param_storage.push_back(p);
    c.grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  }
  for (const auto& b : w.module().buffers()) c.buffers.push_back(b.detach().clone());
  for (const auto& m : w.module().modules()) c.training.push_back(m->is_training());
  for (const auto& p : w.module().parameters()) {
    auto it = w.optimizer().state().find(p.unsafeGetTensorImpl());
    if (it == w.optimizer().state().end()) continue;
    const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(it->second.get());
    if (s == nullptr) continue;  // other optimizers: compared through their serialized bytes
    c.adam.push_back(s->exp_avg().clone());
    c.adam.push_back(s->exp_avg_sq().clone());
    c.adam.push_back(at::scalar_tensor(static_cast<double>(s->step()), at::kDouble));
  }
  return c;
}

inline void expect_identical(const Copy& a, const Copy& b) {
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_TRUE(at::equal(a.params[i], b.params[i])) << "parameter " << i;
    EXPECT_EQ(a.param_storage[i].data_ptr(), b.param_storage[i].data_ptr()) << "parameter " << i << " moved";
    ASSERT_EQ(a.grads[i].defined(), b.grads[i].defined()) << "gradient " << i;
    if (a.grads[i].defined()) EXPECT_TRUE(at::equal(a.grads[i], b.grads[i])) << "gradient " << i;
  }
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) EXPECT_TRUE(at::equal(a.buffers[i], b.buffers[i])) << "buffer " << i;
  EXPECT_EQ(a.training, b.training);
  ASSERT_EQ(a.adam.size(), b.adam.size());
  for (size_t i = 0; i < a.adam.size(); ++i) EXPECT_TRUE(at::equal(a.adam[i], b.adam[i])) << "adam state " << i;
}

/// How many of `trials` ended with `outcome`.
inline int count(const std::vector<Trial>& trials, Outcome outcome) {
  return static_cast<int>(
      std::count_if(trials.begin(), trials.end(), [&](const Trial& t) { return t.outcome == outcome; }));
}

// A workload whose state cannot be put back (a copy that runs out of memory, a Python module's load_state_dict that
// raises); it trains as `inner` does.
class Unrestorable final : public Workload {
 public:
  explicit Unrestorable(std::unique_ptr<Workload> inner) : inner_(std::move(inner)) {}
  WorkloadInfo info() const override { return inner_->info(); }
  c10::Device device() const override { return inner_->device(); }
  Batch next_batch(int64_t b) override { return inner_->next_batch(b); }
  at::Tensor train_step(const Batch& b) override { return inner_->train_step(b); }
  std::unique_ptr<WorkloadState> save_state() override { return inner_->save_state(); }
  void restore_state(const WorkloadState&) override {
    throw std::runtime_error("out of memory copying the weights\nC++ frames");
  }

 private:
  std::unique_ptr<Workload> inner_;
};

}  // namespace batchwise::test
