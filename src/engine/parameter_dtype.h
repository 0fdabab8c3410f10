#pragma once
// The floating type a model's parameters are held in, as a report names it ("float32", "bfloat16"):
// a model built in bf16 or fp64 trains in it whatever the workload's autocast precision says.
#include <torch/nn/module.h>

#include <string>

#include "batchwise/trial.h"

namespace batchwise::detail {

/// The type of the first floating parameter of `module` ("float32", "float64", "bfloat16", "float16"),
/// or "" where it has none.
inline std::string parameter_dtype(const torch::nn::Module& module) {
  for (const auto& p : module.parameters()) {
    switch (p.scalar_type()) {
      case at::kFloat:
        return "float32";
      case at::kDouble:
        return "float64";
      case at::kBFloat16:
        return "bfloat16";
      case at::kHalf:
        return "float16";
      default:
        continue;
    }
  }
  return "";
}

/// `module`'s parameters counted into `info` (all, and those that train), their bytes and its buffers', and its
/// parameters' type: what the factory, the Python API and a C++ caller's ModuleWorkload say of a model.
inline void count_parameters(WorkloadInfo& info, const torch::nn::Module& module) {
  info.parameter_count = info.parameter_bytes = 0;
  info.trainable_parameter_count = 0;
  for (const auto& p : module.parameters()) {
    info.parameter_count += p.numel();
    if (p.requires_grad()) *info.trainable_parameter_count += p.numel();
    info.parameter_bytes += static_cast<int64_t>(p.nbytes());
  }
  for (const auto& b : module.buffers()) info.parameter_bytes += static_cast<int64_t>(b.nbytes());
  info.parameter_dtype = parameter_dtype(module);
}

}  // namespace batchwise::detail
