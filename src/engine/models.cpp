// The built-in models. Parameter names follow torchvision where a counterpart exists
// (conv1, bn1, layer1.0.conv1, fc), so checkpoints and profiles read the same.
#include "batchwise/models.h"

#include <torch/nn.h>

#include "check.h"
#include "engine/table.h"

namespace batchwise {
namespace {

namespace nn = torch::nn;

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return p;
}

// nn::Sequential's forward is a template, which AnyModule cannot hold; this one is not.
struct NetImpl : nn::SequentialImpl {
  using nn::SequentialImpl::SequentialImpl;
  torch::Tensor forward(torch::Tensor x) { return nn::SequentialImpl::forward(std::move(x)); }
};
TORCH_MODULE(Net);

void require_image(const std::string& name, const ModelSpec& spec) {
  BATCHWISE_CHECK(!spec.tokens && spec.input_shape.size() == 3, ModelError,
                  "--model {}: needs image inputs [C, H, W], but the dataset gives {} {}; use --model mlp for "
                  "feature vectors, an --input-shape like 1x28x28 that views them as images, or an image dataset",
                  name, spec.tokens ? "token sequences" : "samples of shape", fmt::join(spec.input_shape, "x"));
}

nn::AnyModule make_mlp(const ModelSpec& spec) {
  BATCHWISE_CHECK(!spec.tokens, ModelError, "--model mlp: needs numeric inputs, not token ids; use transformer");
  Net net(nn::Flatten(), nn::Linear(product(spec.input_shape), 512), nn::ReLU(), nn::Linear(512, 256), nn::ReLU(),
          nn::Linear(256, spec.num_classes));
  return nn::AnyModule(net);
}

nn::AnyModule make_lenet(const ModelSpec& spec) {
  require_image("lenet", spec);
  const int64_t c = spec.input_shape[0], h = spec.input_shape[1], w = spec.input_shape[2];
  const int64_t oh = (h / 2 - 4) / 2, ow = (w / 2 - 4) / 2;  // conv5 pad2, pool2, conv5, pool2
  BATCHWISE_CHECK(oh >= 1 && ow >= 1, ModelError,
                  "--model lenet: inputs of {}x{} are too small; lenet needs at least 12x12", h, w);
  Net net(nn::Conv2d(nn::Conv2dOptions(c, 6, 5).padding(2)), nn::ReLU(), nn::MaxPool2d(2), nn::Conv2d(6, 16, 5),
          nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(16 * oh * ow, 120), nn::ReLU(), nn::Linear(120, 84),
          nn::ReLU(), nn::Linear(84, spec.num_classes));
  return nn::AnyModule(net);
}

// ResNet-18 (He et al. 2016), torchvision's topology with the CIFAR-style stem (3x3 conv, stride 1,
// no max-pool) that small images need: a 7x7/2 conv and a pool would shrink 28x28 to 7x7 at once.
struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(
            register_module("conv1", nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)))),
        bn1(register_module("bn1", nn::BatchNorm2d(out))),
        conv2(register_module("conv2", nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)))),
        bn2(register_module("bn2", nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      downsample = register_module(
          "downsample",
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)), nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    return torch::relu(y + (downsample ? downsample->forward(x) : x));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

struct ResNetImpl : nn::Module {
  ResNetImpl(int64_t channels, int64_t num_classes)
      : conv1(register_module("conv1", nn::Conv2d(nn::Conv2dOptions(channels, 64, 3).padding(1).bias(false)))),
        bn1(register_module("bn1", nn::BatchNorm2d(64))),
        fc(register_module("fc", nn::Linear(512, num_classes))) {
    const int64_t widths[] = {64, 128, 256, 512};
    int64_t in = 64;
    for (int i = 0; i < 4; ++i) {
      nn::Sequential layer(BasicBlock(in, widths[i], i == 0 ? 1 : 2), BasicBlock(widths[i], widths[i], 1));
      layers.push_back(register_module("layer" + std::to_string(i + 1), layer));
      in = widths[i];
    }
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* conv = m->as<nn::Conv2d>()) nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1(conv1(x)));
    for (auto& layer : layers) y = layer->forward(y);
    y = torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1);
    return fc(y);
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Linear fc;
  std::vector<nn::Sequential> layers;
};
TORCH_MODULE(ResNet);

// A small encoder classifier: embedding + learned positions, 2 pre-LN-free encoder layers
// (d_model 128, 4 heads, feed-forward 256), mean pooling, linear head. Token ids are embedded;
// an image is read as a sequence of its rows.
struct TransformerClassifierImpl : nn::Module {
  static constexpr int64_t kModel = 128, kHeads = 4, kFeedForward = 256, kLayers = 2;

  explicit TransformerClassifierImpl(const ModelSpec& spec) : tokens(spec.tokens) {
    int64_t length = 0;
    if (tokens) {
      BATCHWISE_CHECK(spec.input_shape.size() == 1 && spec.vocab_size >= 2, ModelError,
                      "--model transformer: token inputs must be [L] ids with a vocabulary");
      length = spec.input_shape[0];
      embed = register_module("embed", nn::Embedding(spec.vocab_size, kModel));
    } else {
      BATCHWISE_CHECK(spec.input_shape.size() == 3, ModelError,
                      "--model transformer: needs token sequences or images [C, H, W], but the dataset gives samples "
                      "of shape {}; use --model mlp for feature vectors, or an --input-shape like 1x28x28 that views "
                      "them as images",
                      fmt::join(spec.input_shape, "x"));
      length = spec.input_shape[1];
      rows = register_module("rows", nn::Linear(spec.input_shape[0] * spec.input_shape[2], kModel));
    }
    pos = register_parameter("pos", torch::randn({length, 1, kModel}) * 0.02);
    encoder = register_module(
        "encoder",
        nn::TransformerEncoder(nn::TransformerEncoderOptions(
            nn::TransformerEncoderLayerOptions(kModel, kHeads).dim_feedforward(kFeedForward).dropout(0.1), kLayers)));
    norm = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({kModel})));
    head = register_module("head", nn::Linear(kModel, spec.num_classes));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h;
    if (tokens) {
      h = embed(x).transpose(0, 1);  // [L, B, d]
    } else {
      h = rows(x.permute({2, 0, 1, 3}).flatten(2));  // [H, B, C*W] -> [H, B, d]
    }
    h = encoder(h + pos);
    return head(norm(h.mean(0)));
  }
  bool tokens;
  nn::Embedding embed{nullptr};
  nn::Linear rows{nullptr};
  torch::Tensor pos;
  nn::TransformerEncoder encoder{nullptr};
  nn::LayerNorm norm{nullptr};
  nn::Linear head{nullptr};
};
TORCH_MODULE(TransformerClassifier);

}  // namespace

const std::vector<BuiltinModel>& builtin_models() {
  static const std::vector<BuiltinModel> kModels = {
      {"mlp", false, make_mlp},
      {"lenet", false, make_lenet},
      {"resnet18", false,
       [](const ModelSpec& spec) {
         require_image("resnet18", spec);
         return nn::AnyModule(ResNet(spec.input_shape[0], spec.num_classes));
       }},
      {"transformer", true, [](const ModelSpec& spec) { return nn::AnyModule(TransformerClassifier(spec)); }},
  };
  return kModels;
}

const BuiltinModel* find_builtin_model(const std::string& name) { return detail::find_by_name(builtin_models(), name); }

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> kNames = detail::names_of(builtin_models());
  return kNames;
}

torch::nn::AnyModule make_model(const std::string& name, const ModelSpec& spec) {
  BATCHWISE_CHECK(spec.num_classes >= 1, ModelError, "--model {}: needs at least one output", name);
  const BuiltinModel* model = find_builtin_model(name);
  BATCHWISE_CHECK(model, ModelError, "--model {}: unknown model; choose one of {}", name,
                  fmt::join(model_names(), ", "));
  return model->make(spec);
}

}  // namespace batchwise
