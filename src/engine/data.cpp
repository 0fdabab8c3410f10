#include "batchwise/data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "batchwise/memory.h"
#include "check.h"
#include "engine/data_readers.h"
#include "parse_number.h"

namespace batchwise {
namespace {

// A data file or folder that must be there: a folder and a file told apart, each named as what it is.
void check_file(const std::string& path, const std::string& fix) {
  std::error_code error;
  BATCHWISE_CHECK(std::filesystem::exists(path, error), DataError, "{}: no such file; {}", path, fix);
  BATCHWISE_CHECK(std::filesystem::is_regular_file(path, error), DataError, "{}: {}", path,  // a pipe: read once
                  std::filesystem::is_directory(path, error)
                      ? "is a folder, not a file; give the path of the file itself"
                      : "not a regular file (a pipe, a socket or a device), which batchwise cannot read again for "
                        "each trial; save what it gives to a file and give that file's path");
}

void check_folder(const std::string& dir, const char* dataset, const std::string& fix) {
  std::error_code error;
  BATCHWISE_CHECK(!std::filesystem::exists(dir, error) || std::filesystem::is_directory(dir, error), DataError,
                  "{}: --data-dir {} is a file, not a folder; give the folder that holds its files", dataset, dir);
  BATCHWISE_CHECK(std::filesystem::is_directory(dir, error), DataError, "{}: data directory {} does not exist; {}",
                  dataset, dir, fix);
}

const char* kInstallHint =
    "install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or point --data-dir at a "
    "folder holding the four IDX files";

const char* kIdxHint =
    "IDX files hold unsigned bytes after a big-endian header (MNIST's format); re-download or re-export the file";

constexpr int64_t kMaxIdxBytes = int64_t{16} << 30;
// Deflate expands at most about 1032 times (zlib's technical details): a gzip file of N bytes holds
// at most this many times N bytes of data.
constexpr int64_t kMaxDeflateRatio = 1032;

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
int64_t read_bytes(gzFile f, void* out, int64_t n, const std::string& path, const std::string& fix) {
  int64_t done = 0;
  auto* p = static_cast<char*>(out);
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - done, 1 << 30));
    const int got = gzread(f, p + done, chunk);
    if (got < 0) {
      BATCHWISE_CHECK(false, DataError, "{}: corrupt gzip data ({}); the file is damaged: {}", path, gz_error(f), fix);
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
  check_folder(dir, "fashion-mnist", kInstallHint);
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

Dataset head(const Dataset& data, int64_t samples) {
  if (samples <= 0 || samples >= data.size()) return data;
  Dataset d = data;
  d.inputs = data.inputs.narrow(0, 0, samples);
  d.targets = data.targets.narrow(0, 0, samples);
  return d;
}

namespace {

// A fixed random order of n samples: a constant of its own, not --seed's, so a split is the same for
// every run and not the data order's either.
at::Tensor fixed_order(int64_t n) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(0x5eed5917);
  return at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
}

}  // namespace

Dataset samples_at(const Dataset& data, const at::Tensor& index, std::string name) {
  Dataset d = data;
  d.inputs = data.inputs.index_select(0, index);
  d.targets = data.targets.index_select(0, index);
  d.name = std::move(name);
  return d;
}

Dataset split_part(const Dataset& data, double fraction, bool held_out) {
  const int64_t n = data.size(), k = std::llround(fraction * static_cast<double>(n));
  BATCHWISE_CHECK(fraction > 0 && fraction < 1 && k >= 1 && k < n, ConfigError,
                  "--held-out-split {:g}: holds out {} of {}'s {} samples, leaving {} to train on; give a fraction "
                  "that leaves samples on both sides (0.1 or 0.2 is usual)",
                  fraction, k, data.name, n, n - k);
  UntrackedScope untracked;
  const at::Tensor order = fixed_order(n);
  // The share held out as it came to be: 0.1 of 5 samples holds out 1, 20 %.
  const double percent = 100.0 * static_cast<double>(k) / static_cast<double>(n);
  if (held_out)
    return samples_at(data, order.narrow(0, 0, k), fmt::format("{} held out ({:.3g} %)", data.name, percent));
  return samples_at(data, std::get<0>(order.narrow(0, k, n - k).sort()),
                    fmt::format("{} less {:.3g} % held out", data.name, percent));
}

void check_held_out(const Dataset& held_out, const Dataset& training, bool same_shape) {
  const std::string fix = "give a test split of the training data's kind";
  // Features are read by position: a test file whose header names them in another order would be judged on
  // columns its model never learned, and no shape would say so
  BATCHWISE_CHECK(held_out.feature_names.size() != training.feature_names.size() ||  // other widths: said below
                      held_out.feature_names == training.feature_names,
                  DataError,
                  "{}: its feature columns are {}, and {}'s are {}: features are read by position, so a test file "
                  "holds the training file's columns in the same order",
                  held_out.name, fmt::join(held_out.feature_names, ", "), training.name,
                  fmt::join(training.feature_names, ", "));
  BATCHWISE_CHECK(!same_shape || held_out.sample_shape() == training.sample_shape(), DataError,
                  "{}: its samples are {}, and the model trains on {}'s {}; {}", held_out.name,
                  fmt::join(held_out.sample_shape(), "x"), training.name, fmt::join(training.sample_shape(), "x"), fix);
  BATCHWISE_CHECK(held_out.inputs.scalar_type() == training.inputs.scalar_type(), DataError,
                  "{}: its samples are {}, and {}'s are {} (bytes are pixels, scaled; other types are used as they "
                  "are); {}",
                  held_out.name, c10::toString(held_out.inputs.scalar_type()), training.name,
                  c10::toString(training.inputs.scalar_type()), fix);
  const bool test_classes = held_out.targets.scalar_type() == at::kLong,
             train_classes = training.targets.scalar_type() == at::kLong;
  const auto width = [](const at::Tensor& t) { return t.dim() == 1 ? int64_t{1} : t.size(1); };
  if (test_classes && train_classes) {
    const int64_t top = held_out.size() > 0 ? held_out.targets.max().item<int64_t>() : 0;
    BATCHWISE_CHECK(training.num_classes == 0 || top < training.num_classes, DataError,
                    "{}: label {} is beyond the {} classes the model predicts ({}'s labels, or --num-classes); give "
                    "--num-classes {} or a test split of the same classes",
                    held_out.name, top, training.num_classes, training.name, top + 1);
    return;
  }
  const bool one_hot = train_classes && !test_classes && width(held_out.targets) == training.num_classes;
  BATCHWISE_CHECK(one_hot || (!test_classes && !train_classes && width(held_out.targets) == width(training.targets)),
                  DataError, "{}: its targets are {}, and {}'s are {}; {}", held_out.name,
                  test_classes ? "class labels" : fmt::format("{} value(s) a sample", width(held_out.targets)),
                  training.name,
                  train_classes ? "class labels" : fmt::format("{} value(s) a sample", width(training.targets)), fix);
}

Dataset in_fixed_order(const Dataset& data) {
  UntrackedScope untracked;
  return samples_at(data, fixed_order(data.size()), data.name);
}

at::Tensor read_idx(const std::string& path, int expected_dims, const std::string& hint) {
  const std::string fix = hint.empty() ? std::string(kIdxHint) : hint;
  check_file(path, fix);
  GzFile file(gzopen(path.c_str(), "rb"));
  BATCHWISE_CHECK(file != nullptr, DataError, "{}: cannot be opened for reading; check its permissions", path);
  gzFile f = file.get();

  unsigned char head[4];
  BATCHWISE_CHECK(read_bytes(f, head, 4, path, fix) == 4, DataError,
                  "{}: truncated: the file ends inside its 4-byte IDX header; {}", path, fix);
  const uint32_t magic = big_endian(head);
  const uint32_t expected = 0x800u + static_cast<uint32_t>(expected_dims);
  BATCHWISE_CHECK(magic == expected, DataError,
                  "{}: expected magic {} (unsigned bytes, {} dimension{}), found {}; this is not the IDX {} file "
                  "it should be: {}",
                  path, expected, expected_dims, expected_dims == 1 ? "" : "s", magic,
                  expected_dims == 1 ? "label" : "image", fix);

  std::vector<int64_t> dims(static_cast<size_t>(expected_dims));
  int64_t total = 1;
  for (auto& d : dims) {
    unsigned char b[4];
    BATCHWISE_CHECK(read_bytes(f, b, 4, path, fix) == 4, DataError,
                    "{}: truncated: the file ends inside its header; {}", path, fix);
    d = big_endian(b);
    BATCHWISE_CHECK(d > 0, DataError, "{}: header gives a zero dimension; the file is damaged: {}", path, fix);
    // IDX files of unsigned bytes beyond 16 GiB do not exist in practice; a header claiming more
    // is damage, and must not become an allocation.
    BATCHWISE_CHECK(d <= kMaxIdxBytes / total, DataError,
                    "{}: header claims more than {} of data; the file is damaged: {}", path, "16 GiB", fix);
    total *= d;
  }

  // What the file can hold bounds what its header may claim, before anything is allocated (fuzzing
  // found a 40-byte file that made batchwise allocate the 8 GiB its header promised).
  // (check_file has refused anything but a regular file: a pipe has no size to check.)
  std::error_code no_size;
  const auto size = std::filesystem::is_regular_file(path, no_size) ? std::filesystem::file_size(path, no_size) : 0;
  const int64_t on_disk = no_size ? 0 : static_cast<int64_t>(size);
  const int64_t can_hold = gzdirect(f) ? on_disk - 4 * (1 + expected_dims) : on_disk * kMaxDeflateRatio;
  BATCHWISE_CHECK(on_disk == 0 || total <= can_hold, DataError,
                  "{}: truncated: its header promises {} bytes of data, more than a {}-byte{} file can hold; {}", path,
                  total, on_disk, gzdirect(f) ? "" : " gzip", fix);
  UntrackedScope untracked;  // the dataset lives in host memory, not on the training device
  at::Tensor data = at::empty(dims, at::kByte);
  const int64_t got = read_bytes(f, data.data_ptr(), total, path, fix);
  const std::string why = gz_error(f);
  BATCHWISE_CHECK(got == total, DataError,
                  "{}: truncated: its header promises {} bytes of data, the file holds {}{}; {}", path, total, got,
                  why.empty() ? "" : " (" + why + ")", fix);
  unsigned char extra[64];
  const int64_t trailing = read_bytes(f, extra, sizeof extra, path, fix);
  BATCHWISE_CHECK(trailing == 0, DataError,
                  "{}: holds more bytes than its header describes (a {} array of bytes); the file is damaged: {}", path,
                  fmt::join(dims, "x"), fix);
  return data;
}

Dataset load_fashion_mnist(const std::string& dir, bool train) {
  const std::string split = train ? "train" : "t10k";
  const std::string images_path = existing(dir, split + "-images-idx3-ubyte");
  const std::string labels_path = existing(dir, split + "-labels-idx1-ubyte");
  at::Tensor images = read_idx(images_path, 3, kInstallHint);
  at::Tensor labels = read_idx(labels_path, 1, kInstallHint);
  BATCHWISE_CHECK(images.size(1) == 28 && images.size(2) == 28, DataError,
                  "{}: expected 28x28 images, found {}x{}; Fashion-MNIST images are 28x28", images_path, images.size(1),
                  images.size(2));
  BATCHWISE_CHECK(images.size(0) == labels.size(0), DataError,
                  "fashion-mnist: count mismatch: {} holds {} images but {} holds {} labels; both files must come "
                  "from the same release: {}",
                  images_path, images.size(0), labels_path, labels.size(0), kInstallHint);
  const int64_t max_label = labels.max().item<int64_t>();
  BATCHWISE_CHECK(max_label < 10, DataError, "{}: label {} is out of range; Fashion-MNIST labels are 0-9: {}",
                  labels_path, max_label, kInstallHint);

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

namespace {

int64_t file_size(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  BATCHWISE_CHECK(!ec, DataError, "{}: cannot be read ({}); check the path", path, ec.message());
  return static_cast<int64_t>(n);
}

}  // namespace

using detail::kMaxClasses;

namespace detail {

std::string read_file(const std::string& path) {
  check_file(path, "check the path");
  std::ifstream in(path, std::ios::binary);
  BATCHWISE_CHECK(in.good(), DataError, "{}: cannot be opened for reading; check its permissions", path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string base_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

}  // namespace detail

namespace {

// Mean and standard deviation of pixel / 255 over (up to) the first 10000 samples, for normalising.
void set_pixel_stats(Dataset& d) {
  const at::Tensor sample = d.inputs.narrow(0, 0, std::min<int64_t>(d.size(), 10000)).to(at::kFloat).div_(255.0);
  d.mean = sample.numel() > 0 ? sample.mean().item<double>() : 0.0;
  // The population's spread (no correction): one pixel in all has spread 0, not NaN (a NaN here would
  // make every input NaN, and torch warned on the console; found by fuzz/targets.cpp).
  const double spread = sample.numel() > 0 ? sample.std(/*unbiased=*/false).item<double>() : 0.0;
  d.std = std::isfinite(spread) ? std::max(spread, 1e-6) : 1.0;
}

// Class labels: integers in [0, C); C is the largest label + 1.
void set_class_targets(Dataset& d, at::Tensor labels, const std::string& path) {
  BATCHWISE_CHECK(!at::isFloatingType(labels.scalar_type()) && labels.scalar_type() != at::kBool, DataError,
                  "{}: labels have dtype {}, but class labels must be integers (int64, int32, uint8); convert them "
                  "(labels.astype('int64')), or pass --loss mse for regression targets",
                  path, c10::toString(labels.scalar_type()));
  if (labels.dim() == 2 && labels.size(1) == 1) labels = labels.squeeze(1);
  BATCHWISE_CHECK(labels.dim() == 1, DataError,
                  "{}: class labels must be one integer per sample ([N]), found shape [{}]; for one-hot labels pass "
                  "their argmax",
                  path, fmt::join(labels.sizes(), ", "));
  d.targets = labels.to(at::kLong);
  const int64_t lo = d.targets.min().item<int64_t>();
  BATCHWISE_CHECK(lo >= 0, DataError, "{}: label {} is negative; class labels run from 0 to classes - 1", path, lo);
  const int64_t hi = d.targets.max().item<int64_t>();
  BATCHWISE_CHECK(hi < kMaxClasses, DataError,
                  "{}: label {} would mean {} classes; is this the label column (--label-column), or are these "
                  "regression targets (--loss mse)?",
                  path, hi, static_cast<double>(hi) + 1);
  d.num_classes = std::max<int64_t>(hi + 1, 2);
}

}  // namespace

namespace detail {

void set_targets(Dataset& d, at::Tensor labels, TargetKind kind, const std::string& path) {
  BATCHWISE_CHECK(labels.size(0) == d.size(), DataError,
                  "{}: count mismatch: {} labels for {} samples; features and labels must hold the same samples in "
                  "the same order",
                  path, labels.size(0), d.size());
  if (kind == TargetKind::Classes) return set_class_targets(d, std::move(labels), path);
  BATCHWISE_CHECK(labels.dim() <= 2, DataError, "{}: regression targets must be [N] or [N, K], found [{}]", path,
                  fmt::join(labels.sizes(), ", "));
  d.targets = labels.to(at::kFloat);
  d.num_classes = 0;
}

// A value that is not a finite number makes every loss it meets NaN: refused where it is read, with
// the first sample that holds one (cheap beside reading the file).
NonFinite nonfinite_rows(const at::Tensor& values, int64_t keep) {
  NonFinite out;
  if (values.numel() == 0) return out;
  // In blocks of about a million values: isfinite of a whole file made temporaries 2.5 times its size
  // (a 1.2 GB .npy of images peaked at 3.6 GB while read, where the file is held once).
  const at::Tensor rows = values.reshape({values.size(0), -1});
  const int64_t block = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, rows.size(1)));
  for (int64_t start = 0; start < rows.size(0); start += block) {
    const at::Tensor bad =
        at::logical_not(at::isfinite(rows.narrow(0, start, std::min(block, rows.size(0) - start)))).any(1);
    const int64_t here = bad.sum().item<int64_t>();
    if (here == 0) continue;
    const at::Tensor at = bad.nonzero().select(1, 0);
    for (int64_t i = 0; i < here && static_cast<int64_t>(out.rows.size()) < keep; ++i)
      out.rows.push_back(start + at[i].item<int64_t>());
    out.count += here;
  }
  return out;
}

void require_finite(const at::Tensor& values, const std::string& path, const char* what) {
  const NonFinite bad = nonfinite_rows(values, 1);
  if (bad.count == 0) return;
  throw DataError(
      fmt::format("{}: {} of its {} samples hold {} that are not finite numbers (NaN or infinity), the "
                  "first sample {}; every loss they meet would be NaN: drop or repair those samples (numpy: "
                  "keep = np.isfinite({}).reshape(len(x), -1).all(1); x, y = x[keep], y[keep])",
                  path, bad.count, values.size(0), what, bad.rows[0], std::string(what) == "targets" ? "y" : "x"));
}
}  // namespace detail

using detail::base_name;
using detail::read_file;
using detail::require_finite;
using detail::set_targets;

Dataset load_idx_pair(const std::string& images_path, const std::string& labels_path) {
  at::Tensor images = read_idx(images_path, 3);
  at::Tensor labels = read_idx(labels_path, 1);
  UntrackedScope untracked;
  Dataset d;
  d.name = base_name(images_path);
  d.inputs = images.unsqueeze(1);
  set_targets(d, labels, TargetKind::Classes, labels_path);
  set_pixel_stats(d);
  return d;
}

std::vector<std::string> dataset_folder_files(const std::string& dataset, const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  if (dir.empty()) return out;
  if (dataset == "fashion-mnist")
    for (const char* split : {"train", "t10k"})
      for (const char* part : {"-images-idx3-ubyte", "-labels-idx1-ubyte"})
        for (const char* zipped : {".gz", ""})
          out.push_back((fs::path(dir) / (std::string(split) + part + zipped)).string());
  if (dataset == "cifar10")
    for (const fs::path& folder : {fs::path(dir), fs::path(dir) / "cifar-10-batches-bin"}) {
      for (int k = 1; k <= 5; ++k) out.push_back((folder / fmt::format("data_batch_{}.bin", k)).string());
      out.push_back((folder / "test_batch.bin").string());
    }
  return out;
}

Dataset load_cifar10(const std::string& dir, bool train) {
  namespace fs = std::filesystem;
  const char* fix =
      "download the binary version (cifar-10-binary.tar.gz) and point --data-dir at its "
      "cifar-10-batches-bin folder";
  check_folder(dir, "cifar10", fix);
  fs::path root(dir);
  if (fs::is_directory(root / "cifar-10-batches-bin")) root /= "cifar-10-batches-bin";
  // The binary version's five training batches by name (a copy named "data_batch_1 (1).bin" is no sixth).
  constexpr int kTrainBatches = 5;
  const auto name_of = [&](int k) {
    return train ? fmt::format("data_batch_{}.bin", k) : std::string("test_batch.bin");
  };
  std::vector<std::string> files, missing;
  for (int k = 1; k <= (train ? kTrainBatches : 1); ++k)
    if (fs::is_regular_file(root / name_of(k)))
      files.push_back((root / name_of(k)).string());
    else
      missing.push_back(name_of(k));
  BATCHWISE_CHECK(!files.empty(), DataError, "cifar10: {} holds {}; {}", root.string(),
                  train ? "none of data_batch_1.bin to data_batch_5.bin" : "no test_batch.bin", fix);
  constexpr int64_t kRecord = 1 + 3 * 32 * 32;
  int64_t records = 0;
  for (const auto& f : files) {
    const int64_t bytes = file_size(f);
    BATCHWISE_CHECK(bytes > 0, DataError, "{}: the file is empty; {}", f, fix);
    BATCHWISE_CHECK(bytes % kRecord == 0, DataError,
                    "{}: {} bytes is not a whole number of {}-byte records (1 label byte + 3x32x32 pixels); the file "
                    "is truncated or not CIFAR-10's binary version: {}",
                    f, bytes, kRecord, fix);
    records += bytes / kRecord;
  }
  // Checked after each file's size, so a file cut short is named as such. Trained on four of five, a
  // run's samples, its epochs' steps and the answer would all be another dataset's.
  BATCHWISE_CHECK(missing.empty(), DataError,
                  "cifar10: {} has {} of CIFAR-10's {} training batches, not {} (a download or an extraction cut "
                  "short?); {}",
                  root.string(), files.size(), kTrainBatches, fmt::join(missing, ", "), fix);
  UntrackedScope untracked;
  at::Tensor raw = at::empty({records, kRecord}, at::kByte);
  int64_t at_record = 0;
  for (const auto& f : files) {
    const std::string bytes = read_file(f);
    BATCHWISE_CHECK(
        static_cast<int64_t>(bytes.size()) <= (records - at_record) * kRecord && bytes.size() % kRecord == 0, DataError,
        "{}: changed size while it was read; read it again when nothing writes to it", f);
    std::memcpy(raw[at_record].data_ptr(), bytes.data(), bytes.size());
    at_record += static_cast<int64_t>(bytes.size()) / kRecord;
  }
  Dataset d;
  d.name = "cifar10";
  d.inputs = raw.narrow(1, 1, kRecord - 1).reshape({records, 3, 32, 32}).contiguous();
  at::Tensor labels = raw.select(1, 0).to(at::kLong);
  const int64_t max_label = labels.max().item<int64_t>();
  BATCHWISE_CHECK(max_label < 10, DataError,
                  "cifar10: label {} is out of range (CIFAR-10 labels are 0-9); {} is not CIFAR-10's binary "
                  "version (CIFAR-100's has two label bytes): {}",
                  max_label, root.string(), fix);
  d.targets = labels;
  d.num_classes = 10;
  set_pixel_stats(d);
  return d;
}

at::Tensor read_npy(const std::string& path) {
  // Read in place: the header first, then the data straight into the tensor, so loading takes the
  // file's size in memory once (a whole-file buffer first, then a copy, took 2-3 times that).
  check_file(path, "check the path");
  const int64_t size = file_size(path);
  std::ifstream in(path, std::ios::binary);
  BATCHWISE_CHECK(in.good(), DataError, "{}: cannot be opened for reading; check its permissions", path);
  const char* fix = "save it with numpy.save(path, array) from a numeric array";
  // The preamble: magic (6 bytes), version (2), header length (2 bytes in version 1, else 4).
  char preamble[12] = {};
  in.read(preamble, std::min<int64_t>(size, 10));
  BATCHWISE_CHECK(size >= 10 && in.gcount() == 10 && std::memcmp(preamble, "\x93NUMPY", 6) == 0, DataError,
                  "{}: not a NumPy .npy file (no \\x93NUMPY magic); {}", path, fix);
  const int major = static_cast<unsigned char>(preamble[6]);
  BATCHWISE_CHECK(major >= 1 && major <= 3, DataError, "{}: .npy format version {} is not supported (1-3); {}", path,
                  major, fix);
  const size_t len_bytes = major == 1 ? 2 : 4;
  BATCHWISE_CHECK(size >= static_cast<int64_t>(8 + len_bytes), DataError, "{}: truncated inside its header; {}", path,
                  fix);
  if (len_bytes == 4) in.read(preamble + 10, 2);
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) header_len |= size_t{static_cast<unsigned char>(preamble[8 + i])} << (8 * i);
  // NumPy itself refuses headers above 10000 bytes (max_header_size); a longer one is damage, and
  // must not reach the regular expressions below.
  BATCHWISE_CHECK(header_len <= 10000, DataError,
                  "{}: its header claims {} bytes (NumPy writes at most 10000); the "
                  "file is damaged: {}",
                  path, header_len, fix);
  const int64_t data_start = static_cast<int64_t>(8 + len_bytes + header_len);
  BATCHWISE_CHECK(size >= data_start, DataError, "{}: truncated inside its header; {}", path, fix);
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  BATCHWISE_CHECK(in.gcount() == static_cast<std::streamsize>(header_len), DataError,
                  "{}: changed size while it was read; read it again when nothing writes to it", path);

  std::smatch m;
  BATCHWISE_CHECK(std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')")), DataError,
                  "{}: header has no 'descr' (dtype); {}", path, fix);
  const std::string descr = m[1];
  BATCHWISE_CHECK(!std::regex_search(header, std::regex(R"('fortran_order'\s*:\s*True)")), DataError,
                  "{}: stored in Fortran order; save a C-ordered copy (numpy.ascontiguousarray(array))", path);
  BATCHWISE_CHECK(std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")), DataError,
                  "{}: header has no 'shape'; {}", path, fix);
  std::vector<int64_t> shape;
  {
    std::stringstream dims(m[1].str());
    std::string item;
    while (std::getline(dims, item, ',')) {
      item.erase(std::remove_if(item.begin(), item.end(), [](unsigned char c) { return std::isspace(c); }), item.end());
      if (item.empty()) continue;
      int64_t dim = 0;
      const bool digits =
          item.size() <= 15 && std::all_of(item.begin(), item.end(), [](unsigned char c) { return std::isdigit(c); });
      BATCHWISE_CHECK(digits && detail::parse_int64(item, dim), DataError, "{}: malformed shape ({}); {}", path,
                      m[1].str(), fix);
      shape.push_back(dim);
    }
  }
  static const struct {
    const char* descr;
    at::ScalarType type;
  } kTypes[] = {
      {"|b1", at::kBool}, {"|u1", at::kByte}, {"|i1", at::kChar},  {"<i2", at::kShort},  {"<i4", at::kInt},
      {"<i8", at::kLong}, {"<f2", at::kHalf}, {"<f4", at::kFloat}, {"<f8", at::kDouble},
  };
  const auto* type =
      std::find_if(std::begin(kTypes), std::end(kTypes), [&](const auto& t) { return descr == t.descr; });
  BATCHWISE_CHECK(type != std::end(kTypes), DataError,
                  "{}: dtype '{}' is not supported; batchwise reads bool, int8/16/32/64, uint8 and float16/32/64 in "
                  "little-endian order (convert with array.astype('float32') or 'int64')",
                  path, descr);
  BATCHWISE_CHECK(!shape.empty(), DataError, "{}: holds a scalar, not an array of samples; {}", path, fix);
  // A shape whose byte count overflows cannot match any file: it saturates and fails the check.
  const int64_t held = size - data_start;
  int64_t expected = static_cast<int64_t>(c10::elementSize(type->type));
  for (auto dim : shape)
    if (__builtin_mul_overflow(expected, dim, &expected)) expected = std::numeric_limits<int64_t>::max();
  BATCHWISE_CHECK(held == expected, DataError,
                  "{}: its header promises shape ({}) of {} = {} bytes of data, the file holds {}; the file is "
                  "truncated or damaged",
                  path, fmt::join(shape, ", "), descr, expected, held);
  UntrackedScope untracked;
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(type->type));
  if (expected > 0) {
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(expected));
    BATCHWISE_CHECK(in.gcount() == static_cast<std::streamsize>(expected), DataError,
                    "{}: changed size while it was read; read it again when nothing writes to it", path);
  }
  return t;
}

Dataset load_npy(const std::string& features_path, const std::string& labels_path, TargetKind kind) {
  at::Tensor features = read_npy(features_path);
  at::Tensor labels = read_npy(labels_path);
  BATCHWISE_CHECK(features.size(0) > 0, DataError,
                  "{}: holds no samples; give an array of at least one row (a sample each)", features_path);
  BATCHWISE_CHECK(features.scalar_type() != at::kBool, DataError,
                  "{}: features have dtype bool; convert them to numbers (array.astype('float32'))", features_path);
  UntrackedScope untracked;
  Dataset d;
  d.name = base_name(features_path);
  if (features.scalar_type() == at::kByte) {
    d.inputs = features;  // pixels: normalised per batch like every image dataset
    set_pixel_stats(d);
  } else {
    d.inputs = features.to(at::kFloat);
    require_finite(d.inputs, features_path, "features");
  }
  if (labels.is_floating_point()) require_finite(labels, labels_path, "targets");
  set_targets(d, labels, kind, labels_path);
  return d;
}

}  // namespace batchwise
