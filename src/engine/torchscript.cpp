// TorchScript models (torch.jit.script / torch.jit.trace, saved with torch.jit.save), wrapped as a
// torch::nn module so that they train through exactly the same ModuleWorkload as the built-in ones:
// the wrapper registers the script module's own parameter and buffer tensors, so the optimizer,
// state snapshots and memory accounting see the very tensors the script module computes with.
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <filesystem>
#include <unordered_set>

#include "batchwise/models.h"
#include "check.h"
#include "torch_error.h"

namespace batchwise {
namespace {

class ScriptedModuleImpl : public torch::nn::Module {
 public:
  explicit ScriptedModuleImpl(torch::jit::Module module) : script_(std::move(module)) {
    // register_* names may not contain dots; the script module's names (layer1.0.conv1.weight) do.
    auto flat = [](std::string name) {
      std::string out;
      for (char c : name) out += c == '.' ? std::string("__") : std::string(1, c);  // a.b and a_b stay apart
      return out;
    };
    // A tensor shared by two submodules (tied weights) is listed once per owner; registered twice,
    // the optimizer would step it twice.
    std::unordered_set<const void*> seen;
    for (const auto& p : script_.named_parameters(/*recurse=*/true))
      if (seen.insert(p.value.unsafeGetTensorImpl()).second)
        register_parameter(flat(p.name), p.value, p.value.requires_grad());
    for (const auto& b : script_.named_buffers(/*recurse=*/true))
      if (seen.insert(b.value.unsafeGetTensorImpl()).second) register_buffer(flat(b.name), b.value);
    torch::nn::Module::train(script_.is_training());
  }
  at::Tensor forward(const at::Tensor& input) {
    c10::IValue out = script_.forward({input});
    if (out.isTuple()) out = out.toTupleRef().elements().at(0);  // (logits, aux...): train on the first
    BATCHWISE_CHECK(out.isTensor(), ModelError,
                    "the TorchScript model's forward returns {}, not a tensor; return the logits (or a tuple whose "
                    "first element is the logits)",
                    out.tagKind());
    return out.toTensor();
  }
  void train(bool on) override {
    script_.train(on);
    torch::nn::Module::train(on);
  }

 private:
  torch::jit::Module script_;
};
TORCH_MODULE(ScriptedModule);

}  // namespace

bool is_model_path(const std::string& name) {
  const auto ext = std::filesystem::path(name).extension().string();
  if (name.find('/') != std::string::npos || ext == ".pt" || ext == ".pth" || ext == ".ts") return true;
  // A file (or folder) of any other name that is not a built-in model's (mnv3_torchscript): a path is
  // what was given.
  const auto& builtin = model_names();
  std::error_code error;
  return std::find(builtin.begin(), builtin.end(), name) == builtin.end() && std::filesystem::exists(name, error);
}

torch::nn::AnyModule load_torchscript(const std::string& path) {
  const char* fix = "export it from Python with torch.jit.save(torch.jit.script(model), path) (or torch.jit.trace)";
  std::error_code error;
  BATCHWISE_CHECK(!std::filesystem::is_directory(path, error), ModelError,
                  "--model {}: is a folder; give the TorchScript file itself: {}", path, fix);
  BATCHWISE_CHECK(std::filesystem::exists(path, error), ModelError, "--model {}: no such file; {}", path, fix);
  BATCHWISE_CHECK(std::filesystem::is_regular_file(path, error), ModelError,
                  "--model {}: not a regular file (a pipe, a socket or a device); save the model to a file: {}", path,
                  fix);
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, c10::Device(c10::DeviceType::CPU));
  } catch (const std::exception& e) {  // c10::Error, and the JIT's own exceptions (a scripted raise)
    std::string why = detail::plain_what(e);
    why = why.find("PytorchStreamReader") != std::string::npos ? "torch cannot read it as a TorchScript archive"
                                                               : detail::error_line(why);
    BATCHWISE_CHECK(false, ModelError,
                    "--model {}: not a TorchScript file ({}); a state_dict or a pickled model saved with torch.save "
                    "cannot be trained from C++: {}",
                    path, why, fix);
  }
  int64_t trainable = 0;
  for (const auto& p : module.parameters(/*recurse=*/true)) trainable += p.requires_grad() ? p.numel() : 0;
  BATCHWISE_CHECK(trainable > 0, ModelError,
                  "--model {}: the module has no trainable parameters, so there is nothing to train; script the "
                  "model itself, not a function, and keep requires_grad on its parameters (do not torch.jit.freeze it)",
                  path);
  module.train(true);
  return torch::nn::AnyModule(ScriptedModule(std::move(module)));
}

}  // namespace batchwise
