#pragma once
// Every module of a model in eval mode for a scope, each one's own mode put back however the scope
// ends: an evaluation, or a forward that only reads the model's output (the Python API's label probe).
#include <torch/nn/module.h>

#include <vector>

namespace batchwise::detail {

class EvalMode {
 public:
  explicit EvalMode(torch::nn::Module& root) : root_(root) {
    for (const auto& m : root_.modules()) modes_.push_back(m->is_training());
    try {
      root_.eval();
    } catch (...) {  // some modules switched before one failed: theirs back too
      restore();
      throw;
    }
  }
  ~EvalMode() { restore(); }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  void restore() noexcept {
    size_t i = 0;
    try {
      for (const auto& m : root_.modules()) m->train(modes_[i++]);
    } catch (...) {  // a destructor must not throw (a Python module's mode may fail to be set)
    }
  }
  torch::nn::Module& root_;
  std::vector<bool> modes_;
};

}  // namespace batchwise::detail
