#pragma once
// What the model sees of a dataset's rows, shared by the workload's step (workload.cpp) and the
// TorchScript probe of the factories (workload_factory.cpp).
#include <ATen/ATen.h>

#include "batchwise/data.h"

namespace batchwise::detail {

/// `rows` on `device`: pixels scaled to [0, 1] and normalised by the dataset's mean and std; tokens
/// and features as they are.
inline at::Tensor model_input(const Dataset& data, const at::Tensor& rows, c10::Device device) {
  at::Tensor input = rows.to(device);
  if (input.scalar_type() == at::kByte) input = input.to(at::kFloat).div_(255.0).sub_(data.mean).div_(data.std);
  return input;
}

}  // namespace batchwise::detail
