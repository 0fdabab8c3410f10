// Fits the largest batch of a training step that batchwise does not know: a user's own Workload.
// Here it is a linear regression trained with hand-written SGD on data generated on the fly; any
// training step fits the same interface (see include/batchwise/workload.h).
#include <batchwise/batchwise.h>  // the whole API; batchwise/fit.h alone would do here

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <iostream>

namespace {

class LinearRegression : public batchwise::Workload {
 public:
  explicit LinearRegression(int64_t features)
      : features_(features), generator_(at::make_generator<at::CPUGeneratorImpl>(7)) {
    weight_ = at::zeros({features, 1}).requires_grad_(true);
    teacher_ = at::randn({features, 1}, generator_);
  }

  batchwise::WorkloadInfo info() const override {
    batchwise::WorkloadInfo info;
    info.model = "linear-regression";
    info.dataset = "generated";
    info.loss = "mse";
    info.optimizer = "sgd";
    info.lr = lr_;
    info.input_shape = {features_};
    info.parameter_count = weight_.numel();
    info.parameter_bytes = static_cast<int64_t>(weight_.nbytes());
    return info;
  }
  c10::Device device() const override { return c10::Device(c10::DeviceType::CPU); }

  batchwise::Batch next_batch(int64_t batch) override {
    at::Tensor x = at::randn({batch, features_}, generator_);
    return {x, x.mm(teacher_)};
  }

  at::Tensor train_step(const batchwise::Batch& batch) override {
    if (weight_.grad().defined()) weight_.mutable_grad().zero_();
    at::Tensor loss = (batch.input.mm(weight_) - batch.target).pow(2).mean();
    loss.backward();
    {
      at::NoGradGuard no_grad;
      weight_.sub_(weight_.grad() * lr_);
    }
    return loss.detach();
  }

  struct State : batchwise::WorkloadState {
    at::Tensor weight, grad, rng;
  };
  std::unique_ptr<batchwise::WorkloadState> save_state() override {
    batchwise::UntrackedScope untracked;  // the snapshot is batchwise's memory, not the training's
    auto s = std::make_unique<State>();
    s->weight = weight_.detach().clone();
    if (weight_.grad().defined()) s->grad = weight_.grad().clone();
    s->rng = generator_.get_state();
    return s;
  }
  void restore_state(const batchwise::WorkloadState& saved) override {
    const auto& s = dynamic_cast<const State&>(saved);
    at::NoGradGuard no_grad;
    weight_.copy_(s.weight);
    weight_.mutable_grad() = s.grad.defined() ? s.grad.clone() : at::Tensor();
    generator_.set_state(s.rng);
  }

 private:
  int64_t features_;
  double lr_ = 0.01;
  at::Generator generator_;
  at::Tensor weight_, teacher_;
};

}  // namespace

int main() {
  try {
    batchwise::CpuMemoryTracker::install();  // counts every CPU tensor against the budget
    LinearRegression workload(1024);
    const batchwise::FitResult r =
        batchwise::fit(workload, batchwise::FitOptions().budget_bytes(int64_t{64} << 20).max(1 << 20));
    if (!r.batch) {
      std::cerr << "consumer: no batch fits: " << r.message << "\n";
      return 1;
    }
    std::cout << "consumer: batch " << *r.batch << " fits in " << batchwise::format_bytes(r.budget_bytes) << " ("
              << r.trials.size() << " trials, peak " << batchwise::format_bytes(r.trials.back().peak_bytes) << ")\n";
    // What `batchwise tune` does, on the same workload: fit, sweep, and the recommendation (no noise
    // scale or race here: this workload has neither the gradient primitives nor a held-out set).
    const batchwise::Report report = batchwise::tune(
        batchwise::TuneSubject(workload), batchwise::TuneOptions()
                                              .fit(batchwise::FitOptions().budget_bytes(int64_t{64} << 20).max(4096))
                                              .sweep(batchwise::SweepOptions().warmup(1).steps(2).repetitions(1)));
    if (!report.recommendation) {
      std::cerr << "consumer: tune recommended nothing\n";
      return 1;
    }
    std::cout << "consumer: tune recommends batch " << report.recommendation->batch << ": "
              << report.recommendation->reason << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
}
