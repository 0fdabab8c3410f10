#include "batchwise/data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>
#include <zlib.h>

#include <filesystem>
#include <memory>

#include "batchwise/memory.h"
#include "check.h"

namespace batchwise {
namespace {

const char* kInstallHint =
    "install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or point --data-dir at a "
    "folder holding the four IDX files";

constexpr int64_t kMaxIdxBytes = int64_t{16} << 30;

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

std::string gz_error(gzFile f) {
  int code = Z_OK;
  const char* text = gzerror(f, &code);
  return code == Z_OK ? std::string() : std::string(text ? text : "unknown zlib error");
}

// Reads up to `n` bytes; returns how many arrived. Throws on a zlib error other than a short file.
int64_t read_bytes(gzFile f, void* out, int64_t n, const std::string& path) {
  int64_t done = 0;
  auto* p = static_cast<char*>(out);
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - done, 1 << 30));
    const int got = gzread(f, p + done, chunk);
    if (got < 0) {
      BATCHWISE_CHECK(false, DataError, "{}: corrupt gzip data ({}); the file is damaged: {}", path, gz_error(f),
                      kInstallHint);
    }
    if (got == 0) break;
    done += got;
  }
  return done;
}

uint32_t big_endian(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

std::string existing(const std::string& dir, const std::string& stem) {
  namespace fs = std::filesystem;
  const fs::path gz = fs::path(dir) / (stem + ".gz");
  if (fs::exists(gz)) return gz.string();
  const fs::path plain = fs::path(dir) / stem;
  if (fs::exists(plain)) return plain.string();
  BATCHWISE_CHECK(fs::is_directory(dir), DataError, "fashion-mnist: data directory {} does not exist; {}", dir,
                  kInstallHint);
  BATCHWISE_CHECK(false, DataError, "fashion-mnist: {} is missing; {}", gz.string(), kInstallHint);
  return {};
}

}  // namespace

bool Dataset::is_tokens() const { return inputs.defined() && inputs.scalar_type() == at::kLong; }

std::vector<int64_t> Dataset::sample_shape() const {
  auto sizes = inputs.sizes().vec();
  sizes.erase(sizes.begin());
  return sizes;
}

at::Tensor read_idx(const std::string& path, int expected_dims) {
  BATCHWISE_CHECK(std::filesystem::exists(path), DataError, "{}: no such file; {}", path, kInstallHint);
  GzFile file(gzopen(path.c_str(), "rb"));
  BATCHWISE_CHECK(file != nullptr, DataError, "{}: cannot be opened for reading; check its permissions", path);
  gzFile f = file.get();

  unsigned char head[4];
  BATCHWISE_CHECK(read_bytes(f, head, 4, path) == 4, DataError,
                  "{}: truncated: the file ends inside its 4-byte IDX header; {}", path, kInstallHint);
  const uint32_t magic = big_endian(head);
  const uint32_t expected = 0x800u + static_cast<uint32_t>(expected_dims);
  BATCHWISE_CHECK(magic == expected, DataError,
                  "{}: expected magic {} (unsigned bytes, {} dimension{}), found {}; this is not the IDX {} file "
                  "it should be: {}",
                  path, expected, expected_dims, expected_dims == 1 ? "" : "s", magic,
                  expected_dims == 1 ? "label" : "image", kInstallHint);

  std::vector<int64_t> dims(static_cast<size_t>(expected_dims));
  int64_t total = 1;
  for (auto& d : dims) {
    unsigned char b[4];
    BATCHWISE_CHECK(read_bytes(f, b, 4, path) == 4, DataError, "{}: truncated: the file ends inside its header; {}",
                    path, kInstallHint);
    d = big_endian(b);
    BATCHWISE_CHECK(d > 0, DataError, "{}: header gives a zero dimension; the file is damaged: {}", path,
                    kInstallHint);
    // IDX files of unsigned bytes beyond 16 GiB do not exist in practice; a header claiming more
    // is damage, and must not become an allocation.
    BATCHWISE_CHECK(d <= kMaxIdxBytes / total, DataError,
                    "{}: header claims more than {} of data; the file is damaged: {}", path, "16 GiB", kInstallHint);
    total *= d;
  }

  UntrackedScope untracked;  // the dataset lives in host memory, not on the training device
  at::Tensor data = at::empty(dims, at::kByte);
  const int64_t got = read_bytes(f, data.data_ptr(), total, path);
  const std::string why = gz_error(f);
  BATCHWISE_CHECK(got == total, DataError,
                  "{}: truncated: its header promises {} bytes of data, the file holds {}{}; {}", path, total, got,
                  why.empty() ? "" : " (" + why + ")", kInstallHint);
  unsigned char extra[64];
  const int64_t trailing = read_bytes(f, extra, sizeof extra, path);
  BATCHWISE_CHECK(trailing == 0, DataError,
                  "{}: holds more bytes than its header describes ({} dimensions {}); the file is damaged: {}", path,
                  dims.size(), fmt::join(dims, "x"), kInstallHint);
  return data;
}

Dataset load_fashion_mnist(const std::string& dir, bool train) {
  const std::string split = train ? "train" : "t10k";
  const std::string images_path = existing(dir, split + "-images-idx3-ubyte");
  const std::string labels_path = existing(dir, split + "-labels-idx1-ubyte");
  at::Tensor images = read_idx(images_path, 3);
  at::Tensor labels = read_idx(labels_path, 1);
  BATCHWISE_CHECK(images.size(1) == 28 && images.size(2) == 28, DataError,
                  "{}: expected 28x28 images, found {}x{}; Fashion-MNIST images are 28x28", images_path,
                  images.size(1), images.size(2));
  BATCHWISE_CHECK(images.size(0) == labels.size(0), DataError,
                  "fashion-mnist: count mismatch: {} holds {} images but {} holds {} labels; both files must come "
                  "from the same release: {}",
                  images_path, images.size(0), labels_path, labels.size(0), kInstallHint);
  const int64_t max_label = labels.max().item<int64_t>();
  BATCHWISE_CHECK(max_label < 10, DataError, "{}: label {} is out of range; Fashion-MNIST labels are 0-9",
                  labels_path, max_label);

  UntrackedScope untracked;
  Dataset d;
  d.name = "fashion-mnist";
  d.inputs = images.unsqueeze(1);  // [N, 1, 28, 28]
  d.targets = labels.to(at::kLong);
  d.num_classes = 10;
  d.mean = 0.2860;  // of the training images, pixel / 255
  d.std = 0.3530;
  return d;
}

Dataset make_synthetic_images(const std::vector<int64_t>& shape, int64_t num_classes, int64_t size,
                              uint64_t seed) {
  BATCHWISE_CHECK(size >= 1 && num_classes >= 2, ConfigError,
                  "synthetic: needs at least 1 sample and 2 classes, got {} and {}", size, num_classes);
  UntrackedScope untracked;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int64_t> full{size};
  full.insert(full.end(), shape.begin(), shape.end());
  Dataset d;
  d.name = "synthetic";
  d.inputs = at::randint(0, 256, full, gen, at::TensorOptions().dtype(at::kByte));
  const int64_t features = d.inputs[0].numel();
  at::Tensor teacher = at::randn({features, num_classes}, gen);
  d.targets = d.inputs.reshape({size, features}).to(at::kFloat).div_(255.0).sub_(0.5).mm(teacher).argmax(1);
  d.num_classes = num_classes;
  d.mean = 0.5;
  d.std = 0.2887;  // of uniform [0, 1]
  return d;
}

Dataset make_synthetic_tokens(int64_t seq_len, int64_t vocab_size, int64_t num_classes, int64_t size,
                              uint64_t seed) {
  BATCHWISE_CHECK(seq_len >= 1, ConfigError, "--seq-len {}: a sequence needs at least one token", seq_len);
  BATCHWISE_CHECK(size >= 1 && num_classes >= 2 && vocab_size >= 2, ConfigError,
                  "synthetic: needs at least 1 sample, 2 classes and 2 tokens");
  UntrackedScope untracked;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  Dataset d;
  d.name = "synthetic";
  d.inputs = at::randint(0, vocab_size, {size, seq_len}, gen, at::TensorOptions().dtype(at::kLong));
  at::Tensor teacher = at::randn({vocab_size, num_classes}, gen);
  d.targets = teacher.index_select(0, d.inputs.reshape({-1})).reshape({size, seq_len, num_classes}).sum(1).argmax(1);
  d.num_classes = num_classes;
  d.vocab_size = vocab_size;
  return d;
}

}  // namespace batchwise
