#pragma once
/// The built-in models: mlp, lenet, resnet18 (stem adapted to small inputs) and transformer (a
/// small encoder classifier over token sequences).
///
/// To add a model: write a torch::nn module whose forward takes the batch's input tensor and
/// returns logits [B, num_classes], and add its row to builtin_models() (src/engine/models.cpp); the
/// factory, `--model`'s help, its error messages and the tests read that table.
#include <torch/nn/modules/container/any.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace batchwise {

/// What a model is built for.
struct ModelSpec {
  std::vector<int64_t> input_shape;  ///< one sample: [C, H, W] for images, [L] for tokens
  bool tokens = false;               ///< input is int64 token ids
  int64_t vocab_size = 0;            ///< tokens only
  int64_t num_classes = 10;          ///< outputs: classes, or regression targets per sample (mse)
};

/// Builds a model by name. Throws ModelError for an unknown name or an input it cannot take.
torch::nn::AnyModule make_model(const std::string& name, const ModelSpec& spec);

/// True when `name` names a file rather than a built-in model: it contains a '/', ends in .pt, .pth
/// or .ts, or is no built-in model's name and a file or folder of that name exists.
bool is_model_path(const std::string& name);

/// Loads a TorchScript file (torch.jit.script or torch.jit.trace, saved with torch.jit.save) as a
/// trainable module on the CPU; its forward takes the batch's input tensor. Its parameters and
/// buffers are the file's own tensors, trained in place. Throws ModelError naming the file for a
/// missing file, a file that is not TorchScript, or a module without trainable parameters.
torch::nn::AnyModule load_torchscript(const std::string& path);

/// A built-in model, one row of the table.
struct BuiltinModel {
  std::string name;
  /// It reads sequences: token ids on synthetic data (the factory makes token sequences for it), an
  /// image's rows on image data.
  bool sequences = false;
  std::function<torch::nn::AnyModule(const ModelSpec&)> make;  ///< throws ModelError for an input it cannot take
};

/// The one table of built-in models: mlp, lenet, resnet18, transformer.
const std::vector<BuiltinModel>& builtin_models();

/// The row named `name`, or nullptr.
const BuiltinModel* find_builtin_model(const std::string& name);

/// The table's names, in its order.
const std::vector<std::string>& model_names();

}  // namespace batchwise
