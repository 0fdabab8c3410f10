#pragma once
// The advice on a problem whose answers are known in closed form: linear regression with Gaussian
// inputs trained by plain SGD. One step at rate lr on a batch of B moves delta = w - w* to
//   E|delta'|^2 = a |delta|^2 + c,   a = 1 - 4 lr + 4 lr^2 (1 + (d + 1) / B),   c = 4 lr^2 d sigma^2 / B
// (the gradient of the mean squared error is 2x(x.delta - sigma.eps); its noise adds the 1/B terms).
// So the mean square runs away exactly when lr > B / (B + d + 1), the noise-free limit 2 / lambda = 1
// lowered by the gradient noise at small batches, and the held-out loss is |delta|^2 + sigma^2.
// The learning-rate tests (advice/lr_test.cpp) and the race's (advice/race_test.cpp) train on it.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <cstdint>
#include <memory>

#include "batchwise/data.h"
#include "batchwise/lr.h"
#include "batchwise/workload.h"

namespace batchwise::test {

constexpr int64_t kDim = 16;
constexpr double kSigma = 1.0;

// The largest rate at which the expected squared error does not grow, at batch B.
inline double stability_limit(int64_t batch) { return static_cast<double>(batch) / (batch + kDim + 1.0); }

// n samples y = w* . x + sigma eps, x and eps standard Gaussian.
inline Dataset gaussian_regression(const at::Tensor& w_star, int64_t n, double sigma) {
  Dataset d;
  d.name = "gaussian-regression";
  d.inputs = at::randn({n, kDim});
  d.targets = (d.inputs.matmul(w_star) + sigma * at::randn({n})).unsqueeze(1);
  return d;
}

// `module` trained by plain SGD (or Adam) at `lr` on the mean squared error, on the CPU.
template <class Module>
std::unique_ptr<ModuleWorkload> mse_workload(const char* model, Module module, double lr, const Dataset& train,
                                             bool adam = false) {
  WorkloadInfo info;
  info.model = model;
  info.dataset = train.name;
  info.loss = "mse";
  info.optimizer = adam ? "adam" : "sgd";
  info.lr = lr;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (adam)
    optimizer = std::make_unique<torch::optim::Adam>(module->parameters(), torch::optim::AdamOptions(lr));
  else
    optimizer = std::make_unique<torch::optim::SGD>(module->parameters(), torch::optim::SGDOptions(lr));
  return std::make_unique<ModuleWorkload>(
      info, torch::nn::AnyModule(module), std::move(optimizer), train,
      [](const at::Tensor& out, const at::Tensor& target) { return (out - target).pow(2).mean(); },
      c10::Device(c10::kCPU), 3);
}

// The problem itself: a linear model `delta_norm` from the optimum w*, trained by SGD at `lr` on
// 200,000 samples, with 4096 held out.
struct Regression {
  std::unique_ptr<ModuleWorkload> workload;
  Dataset held_out;
  double delta2 = 0;  ///< |w - w*|^2 at the start

  Regression(double delta_norm, double lr) {
    at::manual_seed(11);
    const at::Tensor w_star = at::randn({kDim});
    const Dataset train = gaussian_regression(w_star, 200000, kSigma);
    held_out = gaussian_regression(w_star, 4096, kSigma);
    at::Tensor delta = at::randn({kDim});
    delta = delta / delta.norm() * delta_norm;
    delta2 = delta.pow(2).sum().item<double>();
    torch::nn::Linear linear(torch::nn::LinearOptions(kDim, 1).bias(false));
    {
      at::NoGradGuard no_grad;
      linear->weight.copy_((w_star + delta).unsqueeze(0));
    }
    workload = mse_workload("linear", linear, lr, train);
  }

  // The expected held-out loss after `steps` steps at `batch` following `advice`, from the start.
  double expected_loss(const LrAdvice& advice, int64_t batch, int64_t steps) const {
    double x = delta2;
    const double b = static_cast<double>(batch);
    for (int64_t k = 0; k < steps; ++k) {
      const double lr = lr_at_step(advice, k);
      x = (1 - 4 * lr + 4 * lr * lr * (1 + (kDim + 1) / b)) * x + 4 * lr * lr * kDim * kSigma * kSigma / b;
    }
    return x + kSigma * kSigma;
  }
};

}  // namespace batchwise::test
