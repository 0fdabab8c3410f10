#pragma once
// The floating type a model's parameters are held in, as a report names it ("float32", "bfloat16"):
// a model built in bf16 or fp64 trains in it whatever the workload's autocast precision says.
#include <torch/nn/module.h>

#include <string>

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

}  // namespace batchwise::detail
