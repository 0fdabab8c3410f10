#include "batchwise/data.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <zlib.h>

#include <algorithm>
#include <clocale>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "batchwise/error.h"
#include "batchwise/memory.h"
#include "batchwise/workload.h"

namespace batchwise {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  std::string out;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

void write_raw(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// A scratch copy of Fashion-MNIST's training files, to damage one way per test.
class FashionMnistCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    CpuMemoryTracker::install();
    dir_ = fs::temp_directory_path() / ("batchwise-data-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"})
      fs::copy_file(fs::path(kFashionMnistDir) / name, dir_ / name, fs::copy_options::overwrite_existing);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  std::string load_error() {
    try {
      load_fashion_mnist(dir_.string(), true);
    } catch (const DataError& e) {
      return e.what();
    }
    return "no error";
  }
  fs::path dir_;
};

TEST(FashionMnist, TrainAndTestSplits) {
  CpuMemoryTracker::install();
  const Dataset train = load_fashion_mnist(kFashionMnistDir, true);
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(train.inputs.sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(train.inputs.scalar_type(), at::kByte);
  EXPECT_EQ(train.targets.min().item<int64_t>(), 0);
  EXPECT_EQ(train.targets.max().item<int64_t>(), 9);
  EXPECT_EQ(train.num_classes, 10);
  // Fashion-MNIST is balanced: 6000 of each class in training.
  EXPECT_TRUE(at::equal(at::bincount(train.targets), at::full({10}, 6000, at::kLong)));

  const Dataset test = load_fashion_mnist(kFashionMnistDir, false);
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(test.inputs.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_EQ(test.targets.max().item<int64_t>(), 9);
}

TEST(FashionMnist, DatasetIsNotCountedAgainstTheDevice) {
  auto& tracker = CpuMemoryTracker::install();
  const int64_t before = tracker.current_bytes();
  const Dataset train = load_fashion_mnist(kFashionMnistDir, true);
  EXPECT_EQ(tracker.current_bytes(), before);
}

TEST_F(FashionMnistCopy, TruncatedGzip) {
  const std::string bytes = read_all(path("train-images-idx3-ubyte.gz"));
  write_raw(path("train-images-idx3-ubyte.gz"), bytes.substr(0, bytes.size() / 2));
  const std::string error = load_error();
  EXPECT_NE(error.find("train-images-idx3-ubyte.gz: truncated: its header promises 47040000 bytes of data"),
            std::string::npos)
      << error;
}

// A header that promises more than the file can hold is refused before anything is allocated (a
// 40-byte file once made batchwise allocate the 8 GiB its header claimed; found by fuzz/targets.cpp).
TEST_F(FashionMnistCopy, AHeaderThatPromisesMoreThanTheFileCanHoldAllocatesNothing) {
  const std::string header = be32(2051) + be32(60000) + be32(28) + be32(28);
  write_raw(path("train-images-idx3-ubyte.gz"), header + std::string(24, '\0'));  // not gzip: read as it is
  std::string error = load_error();
  EXPECT_NE(error.find("train-images-idx3-ubyte.gz: truncated: its header promises 47040000 bytes of data, more than "
                       "a 40-byte file can hold"),
            std::string::npos)
      << error;
  write_gz(path("train-images-idx3-ubyte.gz"), be32(2051) + be32(10000) + be32(1000) + be32(800));
  error = load_error();
  EXPECT_NE(error.find("its header promises 8000000000 bytes of data, more than a"), std::string::npos) << error;
  EXPECT_NE(error.find("-byte gzip file can hold"), std::string::npos) << error;
}

TEST_F(FashionMnistCopy, TruncatedInsideTheHeader) {
  write_gz(path("train-labels-idx1-ubyte.gz"), be32(2049) + std::string("\0\0", 2));
  const std::string error = load_error();
  EXPECT_NE(error.find("train-labels-idx1-ubyte.gz: truncated: the file ends inside its header"), std::string::npos)
      << error;
}

TEST_F(FashionMnistCopy, WrongMagicNumber) {
  // A labels file where the images should be.
  fs::copy_file(path("train-labels-idx1-ubyte.gz"), path("train-images-idx3-ubyte.gz"),
                fs::copy_options::overwrite_existing);
  const std::string error = load_error();
  EXPECT_NE(error.find("train-images-idx3-ubyte.gz: expected magic 2051 (unsigned bytes, 3 dimensions), found 2049"),
            std::string::npos)
      << error;
}

TEST_F(FashionMnistCopy, CountMismatch) {
  const std::string labels = gunzip(path("train-labels-idx1-ubyte.gz"));
  ASSERT_EQ(labels.size(), 8u + 60000u);
  write_gz(path("train-labels-idx1-ubyte.gz"), be32(2049) + be32(59999) + labels.substr(8, 59999));
  const std::string error = load_error();
  EXPECT_NE(error.find("count mismatch"), std::string::npos) << error;
  EXPECT_NE(error.find("holds 60000 images but"), std::string::npos) << error;
  EXPECT_NE(error.find("holds 59999 labels"), std::string::npos) << error;
}

TEST_F(FashionMnistCopy, CorruptGzipStream) {
  std::string bytes = read_all(path("train-labels-idx1-ubyte.gz"));
  for (size_t i = 40; i < 400; ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
  write_raw(path("train-labels-idx1-ubyte.gz"), bytes);
  const std::string error = load_error();
  EXPECT_NE(error.find("train-labels-idx1-ubyte.gz: "), std::string::npos) << error;
  EXPECT_TRUE(error.find("corrupt gzip data") != std::string::npos || error.find("truncated") != std::string::npos)
      << error;
}

TEST_F(FashionMnistCopy, MissingFileNamesThePackage) {
  fs::remove(path("train-labels-idx1-ubyte.gz"));
  const std::string error = load_error();
  EXPECT_NE(error.find("train-labels-idx1-ubyte.gz is missing"), std::string::npos) << error;
  EXPECT_NE(error.find("apt-get install dataset-fashion-mnist"), std::string::npos) << error;
}

TEST_F(FashionMnistCopy, TrailingBytes) {
  std::string labels = gunzip(path("train-labels-idx1-ubyte.gz"));
  write_gz(path("train-labels-idx1-ubyte.gz"), labels + "extra");
  const std::string error = load_error();
  EXPECT_NE(error.find("holds more bytes than its header describes"), std::string::npos) << error;
}

TEST_F(FashionMnistCopy, PlainIdxFilesAreReadToo) {
  write_raw(path("train-labels-idx1-ubyte"), gunzip(path("train-labels-idx1-ubyte.gz")));
  fs::remove(path("train-labels-idx1-ubyte.gz"));
  EXPECT_EQ(load_fashion_mnist(dir_.string(), true).size(), 60000);
}

TEST(Synthetic, SeededAndLearnable) {
  CpuMemoryTracker::install();
  const Dataset a = make_synthetic_images({1, 28, 28}, 10, 512, 7);
  const Dataset b = make_synthetic_images({1, 28, 28}, 10, 512, 7);
  const Dataset c = make_synthetic_images({1, 28, 28}, 10, 512, 8);
  EXPECT_TRUE(at::equal(a.inputs, b.inputs));
  EXPECT_TRUE(at::equal(a.targets, b.targets));
  EXPECT_FALSE(at::equal(a.inputs, c.inputs));
  EXPECT_EQ(a.inputs.sizes(), (std::vector<int64_t>{512, 1, 28, 28}));
  // A teacher's labels use more than one class.
  EXPECT_GT(at::bincount(a.targets).gt(0).sum().item<int64_t>(), 3);

  const Dataset t = make_synthetic_tokens(32, 256, 10, 100, 1);
  EXPECT_EQ(t.inputs.sizes(), (std::vector<int64_t>{100, 32}));
  EXPECT_TRUE(t.is_tokens());
  EXPECT_LT(t.inputs.max().item<int64_t>(), 256);
}

// Files of the other formats, written byte by byte, so each test knows exactly what is in them.
class FileDatasets : public ::testing::Test {
 protected:
  void SetUp() override {
    CpuMemoryTracker::install();
    dir_ = fs::temp_directory_path() / ("batchwise-files-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A .npy file (format 1.0) of `descr` with `shape` and raw little-endian `data`.
  std::string npy(const std::string& name, const std::string& descr, const std::string& shape,
                  const std::string& data) const {
    std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::string bytes = "\x93NUMPY";
    bytes += '\x01';
    bytes += '\x00';
    bytes += static_cast<char>(header.size() & 0xff);
    bytes += static_cast<char>(header.size() >> 8);
    bytes += header + data;
    write_raw(path(name), bytes);
    return path(name);
  }
  template <typename T>
  static std::string raw(const std::vector<T>& values) {
    return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)};
  }
  fs::path dir_;
};

TEST_F(FileDatasets, NpyFeaturesAndLabelsLoadExactly) {
  const auto x = npy("x.npy", "<f4", "3, 2", raw(std::vector<float>{1, 2, 3, 4, 5, 6}));
  const auto y = npy("y.npy", "<i8", "3,", raw(std::vector<int64_t>{0, 2, 1}));
  const Dataset d = load_npy(x, y, TargetKind::Classes);
  EXPECT_EQ(d.size(), 3);
  EXPECT_EQ(d.sample_shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(d.inputs.scalar_type(), at::kFloat);
  EXPECT_FLOAT_EQ(d.inputs[2][1].item<float>(), 6.0f);
  EXPECT_EQ(d.targets[1].item<int64_t>(), 2);
  EXPECT_EQ(d.num_classes, 3);
}

// The report says which data trained: the file or folder read, made absolute (a report is read from
// elsewhere), with a labels file beside it; synthetic data read none.
TEST_F(FileDatasets, TheWorkloadNamesTheFilesItReadAsAbsolutePaths) {
  npy("x.npy", "<f4", "4, 2", raw(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  npy("y.npy", "<i8", "4,", raw(std::vector<int64_t>{0, 1, 1, 0}));
  write_raw(path("rows.csv"), "a,b,label\n1,2,0\n3,4,1\n");
  const fs::path was = fs::current_path();
  fs::current_path(dir_);  // relative names, as a user types them
  const auto info = [](const WorkloadOptions& o) {
    return make_workload(WorkloadOptions(o).model("mlp").device("cpu"))->info();
  };
  const WorkloadInfo npy_info = info(WorkloadOptions().dataset("npy").data_file("x.npy").labels_file("./y.npy"));
  const WorkloadInfo csv_info = info(WorkloadOptions().dataset("csv").data_file("rows.csv"));
  fs::current_path(was);
  EXPECT_EQ(npy_info.data_path, path("x.npy"));
  EXPECT_EQ(npy_info.labels_path, path("y.npy"));
  EXPECT_EQ(csv_info.data_path, path("rows.csv"));
  EXPECT_EQ(csv_info.labels_path, "");
  EXPECT_EQ(csv_info.parameter_dtype, "float32");  // the type its parameters are held in
  const WorkloadInfo synthetic = info(WorkloadOptions().dataset("synthetic").synthetic_size(64));
  EXPECT_EQ(synthetic.data_path, "");
  EXPECT_EQ(synthetic.labels_path, "");
}

// Features or targets that are not finite numbers would make every loss NaN: refused where read,
// naming the file, how many samples and the first, and how to drop them.
TEST_F(FileDatasets, NpyValuesThatAreNotFiniteAreRefused) {
  const float nan = std::nanf(""), inf = INFINITY;
  const auto all_nan = npy("nan.npy", "<f4", "3, 2", raw(std::vector<float>{nan, nan, nan, nan, nan, nan}));
  const auto y = npy("y.npy", "<i8", "3,", raw(std::vector<int64_t>{0, 2, 1}));
  try {
    load_npy(all_nan, y, TargetKind::Classes);
    FAIL() << "NaN features accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("nan.npy: 3 of its 3 samples hold features that are not finite numbers (NaN "
                                         "or infinity), the first sample 0"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("np.isfinite"), std::string::npos) << e.what();
  }
  const auto one_inf = npy("inf.npy", "<f8", "3, 2", raw(std::vector<double>{1, 2, 3, 4, 5, inf}));
  try {
    load_npy(one_inf, y, TargetKind::Classes);
    FAIL() << "an infinite feature accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("inf.npy: 1 of its 3 samples hold features that are not finite numbers (NaN "
                                         "or infinity), the first sample 2"),
              std::string::npos)
        << e.what();
  }
  const auto x = npy("x.npy", "<f4", "3, 2", raw(std::vector<float>{1, 2, 3, 4, 5, 6}));
  const auto nan_targets = npy("yn.npy", "<f4", "3,", raw(std::vector<float>{0.5f, nan, 1}));
  try {
    load_npy(x, nan_targets, TargetKind::Values);
    FAIL() << "a NaN target accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("yn.npy: 1 of its 3 samples hold targets that are not finite"),
              std::string::npos)
        << e.what();
  }
  // Checked in blocks of about a million values (whole, the check's temporaries were 2.5x the file):
  // the count and the first sample hold across them. 300,000 samples of 4, in blocks of 262,144: both
  // bad ones in the second block.
  std::vector<float> many(1200000, 1.0f);
  many[290000 * 4 + 3] = nan;
  many[299999 * 4] = inf;
  const auto big = npy("big.npy", "<f4", "300000, 4", raw(many));
  std::vector<int64_t> labels(300000, 0);
  labels[1] = 1;
  try {
    load_npy(big, npy("ybig.npy", "<i8", "300000,", raw(labels)), TargetKind::Classes);
    FAIL() << "a NaN past the first block accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("big.npy: 2 of its 300000 samples hold features that are not finite "
                                         "numbers (NaN or infinity), the first sample 290000"),
              std::string::npos)
        << e.what();
  }
  many[100 * 4 + 1] = inf;  // and one in the first block: counted with the others, and the first
  try {
    load_npy(npy("big2.npy", "<f4", "300000, 4", raw(many)), path("ybig.npy"), TargetKind::Classes);
    FAIL() << "NaN and infinity in two blocks accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("3 of its 300000 samples hold features that are not finite numbers (NaN or "
                                         "infinity), the first sample 100"),
              std::string::npos)
        << e.what();
  }
}

// Images with one pixel in all (or no spread) normalise to finite inputs, without torch's warning
// about a standard deviation of one value (found by fuzzing the .npy reader).
TEST_F(FileDatasets, ImagesWithoutSpreadNormaliseToFiniteValues) {
  const auto one = npy("one.npy", "|u1", "1, 1, 1, 1", std::string(1, '\x07'));
  const auto y = npy("y1.npy", "<i8", "1,", raw(std::vector<int64_t>{0}));
  const Dataset d = load_npy(one, y, TargetKind::Classes);
  EXPECT_TRUE(std::isfinite(d.std)) << d.std;
  EXPECT_GT(d.std, 0);
  EXPECT_NEAR(d.mean, 7 / 255.0, 1e-6);
}

TEST_F(FileDatasets, NpyWrongDtypesEachSayWhatToDo) {
  const auto x = npy("x.npy", "<f4", "2, 2", raw(std::vector<float>{1, 2, 3, 4}));
  const auto float_labels = npy("yf.npy", "<f4", "2,", raw(std::vector<float>{0.5f, 1}));
  try {
    load_npy(x, float_labels, TargetKind::Classes);
    FAIL() << "float labels accepted as classes";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("yf.npy: labels have dtype Float, but class labels must be integers"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--loss mse"), std::string::npos) << e.what();
  }
  EXPECT_EQ(load_npy(x, float_labels, TargetKind::Values).targets.scalar_type(), at::kFloat);  // regression: fine
  const auto strings = npy("s.npy", "<U3", "2,", std::string(24, 'a'));
  try {
    load_npy(strings, float_labels, TargetKind::Values);
    FAIL() << "a string array accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("s.npy: dtype '<U3' is not supported"), std::string::npos) << e.what();
  }
  const auto big_endian = npy("b.npy", ">f4", "2, 2", std::string(16, '\0'));
  EXPECT_THROW(read_npy(big_endian), DataError);
}

// The process's resident memory from /proc/self/status ("VmRSS", "VmHWM"), in bytes; -1 unknown.
int64_t status_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, std::strlen(key), key) == 0 && line[std::strlen(key)] == ':')
      return std::atoll(line.c_str() + std::strlen(key) + 1) * 1024;
  return -1;
}

// Loading reads the data straight into the tensor: the process's peak resident memory grows by the
// file's size (plus a little), not by the 2-3 times a whole-file buffer and its copies took.
TEST_F(FileDatasets, NpyLoadsInOneCopy) {
  constexpr int64_t kFloats = int64_t{16} << 20;  // 64 MiB of float32
  {
    std::vector<float> values(static_cast<size_t>(kFloats), 0.5f);
    npy("big.npy", "<f4", std::to_string(kFloats / 1024) + ", 1024", raw(values));
  }
  const auto file_bytes = static_cast<int64_t>(fs::file_size(path("big.npy")));
  // Reset the high-water mark to the current resident memory (Linux 4.0+).
  bool reset = false;
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    reset = std::fputs("5", f) >= 0;
    reset = std::fclose(f) == 0 && reset;
  }
  const int64_t before = status_bytes("VmRSS");
  if (!reset || before < 0 || status_bytes("VmHWM") < 0)
    GTEST_SKIP() << "this kernel cannot reset the peak resident memory (/proc/self/clear_refs)";
  const at::Tensor t = read_npy(path("big.npy"));
  const int64_t grown = status_bytes("VmHWM") - before;
  EXPECT_EQ(t.numel(), kFloats);
  EXPECT_FLOAT_EQ(t[kFloats / 1024 - 1][1023].item<float>(), 0.5f);
  EXPECT_LE(grown, file_bytes * 13 / 10) << "reading a " << file_bytes << "-byte .npy grew the peak by " << grown;
}

TEST_F(FileDatasets, NpyDamageAndMismatchesAreNamed) {
  const auto short_x = npy("short.npy", "<f4", "4, 2", raw(std::vector<float>{1, 2, 3}));
  try {
    read_npy(short_x);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("short.npy: its header promises shape (4, 2) of <f4 = 32 bytes of data, the "
                                         "file holds 12"),
              std::string::npos)
        << e.what();
  }
  write_raw(path("not.npy"), "just some text");
  EXPECT_THROW(read_npy(path("not.npy")), DataError);
  const auto x = npy("x.npy", "<f4", "2, 2", raw(std::vector<float>{1, 2, 3, 4}));
  const auto y = npy("y.npy", "<i8", "3,", raw(std::vector<int64_t>{0, 1, 1}));
  try {
    load_npy(x, y, TargetKind::Classes);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("y.npy: count mismatch: 3 labels for 2 samples"), std::string::npos)
        << e.what();
  }
}

TEST_F(FileDatasets, CifarRecordsBecomeImagesAndLabels) {
  std::string bytes;
  for (int record = 0; record < 2; ++record) {
    bytes += static_cast<char>(record == 0 ? 3 : 9);
    bytes += std::string(3 * 32 * 32, static_cast<char>(record * 100));
  }
  write_raw(path("data_batch_1.bin"), bytes);
  for (int k = 2; k <= 5; ++k) write_raw(path(fmt::format("data_batch_{}.bin", k)), std::string(3073, '\1'));
  write_raw(path("data_batch_1 (1).bin"), bytes);  // a copy beside it is no sixth batch
  const Dataset d = load_cifar10(dir_.string());
  EXPECT_EQ(d.size(), 6);
  EXPECT_EQ(d.sample_shape(), (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(d.targets[0].item<int64_t>(), 3);
  EXPECT_EQ(d.targets[1].item<int64_t>(), 9);
  EXPECT_EQ(d.inputs[1][2][31][31].item<int64_t>(), 100);
  EXPECT_EQ(d.num_classes, 10);
}

// A download or an extraction cut short: four of the five training batches are another dataset, named as such.
TEST_F(FileDatasets, CifarWithoutOneOfItsTrainingBatchesIsRefused) {
  for (int k : {1, 2, 4, 5}) write_raw(path(fmt::format("data_batch_{}.bin", k)), std::string(3073, '\0'));
  try {
    load_cifar10(dir_.string());
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("has 4 of CIFAR-10's 5 training batches, not data_batch_3.bin (a download or "
                                         "an extraction cut short?); download the binary version"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(FileDatasets, CifarFileOfTheWrongSize) {
  write_raw(path("data_batch_1.bin"), std::string(3073 + 100, '\0'));
  try {
    load_cifar10(dir_.string());
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("data_batch_1.bin: 3173 bytes is not a whole number of 3073-byte records"),
              std::string::npos)
        << e.what();
  }
  fs::remove(path("data_batch_1.bin"));
  try {
    load_cifar10(dir_.string());
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("holds none of data_batch_1.bin to data_batch_5.bin"), std::string::npos)
        << e.what();
  }
}

TEST_F(FileDatasets, CsvWithHeaderAndNamedLabelColumn) {
  write_raw(path("iris.csv"), "sepal,label,petal\n1.5,0,2\n2.5,1,3\n\n3.5,2,-4e-1\n");
  const Dataset d = load_csv(path("iris.csv"), "label", TargetKind::Classes);
  EXPECT_EQ(d.size(), 3);
  EXPECT_EQ(d.sample_shape(), (std::vector<int64_t>{2}));
  EXPECT_FLOAT_EQ(d.inputs[2][1].item<float>(), -0.4f);
  EXPECT_EQ(d.targets[2].item<int64_t>(), 2);
  EXPECT_EQ(d.num_classes, 3);
  const Dataset by_index = load_csv(path("iris.csv"), "1", TargetKind::Classes);
  EXPECT_TRUE(by_index.targets.equal(d.targets));
  EXPECT_THROW(load_csv(path("iris.csv"), "species", TargetKind::Classes), ConfigError);
}

// --held-out-split: a file without a test split gets one, which training never sees; the same
// samples whatever the seed, both sides in the file's order; refused where it cannot hold.
TEST_F(FileDatasets, AHeldOutSplitIsAFixedPartTrainingNeverSees) {
  std::string rows = "x,label\n";
  for (int i = 0; i < 40; ++i) rows += std::to_string(i) + "," + std::to_string(i % 2) + "\n";
  write_raw(path("rows.csv"), rows);
  const Dataset all = load_csv(path("rows.csv"), "", TargetKind::Classes);
  const Dataset test = split_part(all, 0.25, /*held_out=*/true), train = split_part(all, 0.25, false);
  ASSERT_EQ(test.size(), 10);
  ASSERT_EQ(train.size(), 30);
  EXPECT_EQ(test.name, "rows.csv held out (25 %)");
  EXPECT_EQ(train.name, "rows.csv less 25 % held out");
  EXPECT_EQ(test.num_classes, 2);
  std::vector<float> seen;
  for (const Dataset* d : {&train, &test}) {
    const at::Tensor x = d->inputs.select(1, 0).contiguous();
    // Training in the file's order; the held-out part in the draw's, so that its head is a fair sample.
    EXPECT_EQ(x.equal(std::get<0>(x.sort())), d == &train) << d->name;
    EXPECT_TRUE(d->targets.equal(x.to(at::kLong) % 2)) << d->name;  // each sample's own label
    for (int64_t i = 0; i < x.size(0); ++i) seen.push_back(x[i].item<float>());
  }
  std::sort(seen.begin(), seen.end());
  for (int i = 0; i < 40; ++i) EXPECT_EQ(seen[i], static_cast<float>(i));  // disjoint, and all of the file
  // The name gives the share held out as it came to be: 0.1 of 5 samples is 1 of them, 20 %.
  Dataset first_five = all;
  first_five.inputs = all.inputs.narrow(0, 0, 5);
  first_five.targets = all.targets.narrow(0, 0, 5);
  const Dataset five = split_part(first_five, 0.1, /*held_out=*/true);
  EXPECT_EQ(five.size(), 1);
  EXPECT_EQ(five.name, "rows.csv held out (20 %)");

  CpuMemoryTracker::install();
  const auto options = [&](uint64_t seed) {
    return WorkloadOptions().model("mlp").dataset("csv").data_file(path("rows.csv")).device("cpu").seed(seed);
  };
  for (const uint64_t seed : {0, 7}) {
    EXPECT_TRUE(load_test_split(options(seed).held_out_split(0.25)).inputs.equal(test.inputs)) << seed;
    Dataset part;  // the same part, from the read that builds the workload
    const auto w = make_workload(options(seed).held_out_split(0.25), &part);
    EXPECT_EQ(w->info().dataset_size, 30) << seed;
    EXPECT_EQ(w->info().dataset, "rows.csv less 25 % held out") << seed;
    EXPECT_TRUE(part.inputs.equal(test.inputs) && part.targets.equal(test.targets)) << seed;
    EXPECT_EQ(part.name, test.name) << seed;
  }
  Dataset none;  // nothing held out: nothing given back
  (void)make_workload(options(0), &none);
  EXPECT_EQ(none.size(), 0);
  // Where training must be told it lacks one, and where it cannot hold.
  const auto refused = [](const WorkloadOptions& o, bool test_split) {
    try {
      if (test_split)
        (void)load_test_split(o);
      else
        (void)make_workload(o);
      return std::string("no error");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_NE(refused(options(0), true).find("or hold out part of your data with --held-out-split 0.1"),
            std::string::npos);
  EXPECT_EQ(refused(options(0).held_out_split(0.01), false),
            "--held-out-split 0.01: holds out 0 of rows.csv's 40 samples, leaving 40 to train on; give a fraction "
            "that leaves samples on both sides (0.1 or 0.2 is usual)");
  EXPECT_EQ(refused(options(0).held_out_split(-0.5), false),
            "--held-out-split -0.5: a fraction of the samples, such as 0.1 (or 0: none)");
  EXPECT_EQ(refused(WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(64).held_out_split(0.2), false),
            "--held-out-split 0.2: --dataset synthetic has a test split of its own (further samples of the same "
            "task), which validation uses; drop --held-out-split (it is for idx, npy and csv data)");
}

// --test-data-file: a file dataset's own test split, read as its training file is, and held to the
// training data's samples and classes where it is evaluated.
TEST_F(FileDatasets, YourOwnTestSplitIsReadAsTheTrainingFileAndHeldToIt) {
  write_raw(path("train.csv"), "a,b,label\n1,2,0\n3,4,1\n5,6,2\n7,8,0\n");
  write_raw(path("test.csv"), "a,b,label\n9,10,1\n11,12,2\n");
  write_raw(path("wide.csv"), "a,b,c,label\n1,2,3,0\n");
  write_raw(path("more.csv"), "a,b,label\n1,2,5\n");
  CpuMemoryTracker::install();
  const WorkloadOptions o =
      WorkloadOptions().model("mlp").dataset("csv").data_file(path("train.csv")).device("cpu").lr(0.01);
  const Dataset test = load_test_split(WorkloadOptions(o).test_data_file(path("test.csv")));
  ASSERT_EQ(test.size(), 2);  // in a fixed order of its own: a file sorted by class has a fair head
  EXPECT_EQ(test.targets.sum().item<int64_t>(), 3);
  EXPECT_TRUE(in_fixed_order(load_csv(path("test.csv"), "", TargetKind::Classes)).inputs.equal(test.inputs));
  EXPECT_EQ(held_out_or_training_sample(WorkloadOptions(o).test_data_file(path("test.csv")), Dataset{}).name,
            test.name);
  auto w = make_workload(WorkloadOptions(o).test_data_file(path("test.csv")));
  const Dataset& train = dynamic_cast<ModuleWorkload&>(*w).data();
  EXPECT_NO_THROW(check_held_out(test, train));
  const auto refused = [&train](const Dataset& d) {
    try {
      check_held_out(d, train);
      return std::string("no error");
    } catch (const DataError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(refused(load_test_split(WorkloadOptions(o).test_data_file(path("wide.csv")))),
            "wide.csv: its samples are 3, and the model trains on train.csv's 2; give a test split of the training "
            "data's kind");
  EXPECT_EQ(refused(load_test_split(WorkloadOptions(o).test_data_file(path("more.csv")))),
            "more.csv: label 5 is beyond the 3 classes the model predicts (train.csv's labels, or --num-classes); "
            "give --num-classes 6 or a test split of the same classes");
  Dataset values = test;
  values.targets = at::ones({2, 2});
  EXPECT_EQ(refused(values),
            "test.csv: its targets are 2 value(s) a sample, and train.csv's are class labels; give a test split of "
            "the training data's kind");
  // --loss mse on a dataset of classes (fashion-mnist's t10k): the test split's one-hot values, the same targets.
  values.targets = at::one_hot(test.targets, 3).to(at::kFloat);
  EXPECT_EQ(refused(values), "no error");
  Dataset bytes = test;
  bytes.inputs = test.inputs.to(at::kByte);
  EXPECT_EQ(refused(bytes),
            "test.csv: its samples are Byte, and train.csv's are Float (bytes are pixels, scaled; other types are "
            "used as they are); give a test split of the training data's kind");

  // idx and npy read their labels from a file of their own; one test split, where there is none.
  write_raw(path("xt.npy"), "");  // there (a missing file is refused first), and never read
  try {
    (void)load_test_split(
        WorkloadOptions().dataset("npy").data_file("x.npy").labels_file("y.npy").test_data_file(path("xt.npy")));
    FAIL() << "no --test-labels-file";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.what(), "--test-data-file " + path("xt.npy") +
                            ": --dataset npy also needs --test-labels-file (the test split's labels)");
  }
  try {
    (void)load_test_split(WorkloadOptions(o).test_data_file(path("none.csv")));
    FAIL() << "no such file";
  } catch (const DataError& e) {
    EXPECT_EQ(e.what(), path("none.csv") +
                            ": no such file (--test-data-file, --test-labels-file: your test split's "
                            "files)");
  }
  const auto config_error = [](const WorkloadOptions& options) {
    try {
      (void)make_workload(options);
      return std::string("no error");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(config_error(WorkloadOptions(o).test_labels_file(path("test.csv"))),
            "--test-labels-file " + path("test.csv") +
                ": goes with --test-data-file (the test split's samples); give both, or neither");
  EXPECT_EQ(config_error(WorkloadOptions(o).test_data_file(path("test.csv")).test_labels_file(path("test.csv"))),
            "--test-labels-file " + path("test.csv") +
                ": --dataset csv reads its labels from --test-data-file's --label-column; drop it");
  EXPECT_NE(config_error(WorkloadOptions(o).test_data_file(path("test.csv")).held_out_split(0.25)), "no error");
  const WorkloadOptions synthetic = WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(64);
  EXPECT_NE(config_error(WorkloadOptions(synthetic).device("cpu").test_data_file(path("test.csv"))), "no error");
  // A flag that names data the dataset does not read is refused, not ignored: the user meant other data.
  EXPECT_EQ(config_error(WorkloadOptions(o).labels_file(path("y.npy"))),
            "--labels-file " + path("y.npy") +
                ": --dataset csv does not read it (it reads --data-file, --label-column); drop it, or give the "
                "--dataset your files are (idx and npy: --labels-file; csv: --label-column)");
  EXPECT_EQ(config_error(WorkloadOptions(synthetic).data_file(path("train.csv"))),
            "--data-file " + path("train.csv") +
                ": --dataset synthetic does not read it (it reads no file); drop it, or give the --dataset your "
                "files are (fashion-mnist, cifar10: --data-dir; idx, npy, csv: --data-file)");
  EXPECT_NE(config_error(WorkloadOptions(o).dataset("npy").labels_file("y.npy").label_column("3")), "no error");

  // An npy test split's label beyond the classes names its labels file, not the samples'.
  const auto x = npy("x.npy", "<f4", "3, 2", raw(std::vector<float>{1, 2, 3, 4, 5, 6}));
  const auto y = npy("y.npy", "<i8", "3,", raw(std::vector<int64_t>{0, 2, 1}));
  const auto xt = npy("xt.npy", "<f4", "1, 2", raw(std::vector<float>{1, 2}));
  const auto yt = npy("yt.npy", "<i8", "1,", raw(std::vector<int64_t>{5}));
  const WorkloadOptions npy_options = WorkloadOptions().dataset("npy").data_file(x).labels_file(y);
  const Dataset npy_test = load_test_split(WorkloadOptions(npy_options).test_data_file(xt).test_labels_file(yt));
  try {
    check_held_out(npy_test, load_npy(x, y, TargetKind::Classes));
    FAIL() << "label 5 of 3 classes";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("xt.npy (labels yt.npy): label 5 is beyond the 3 classes", 0), 0u)
        << e.what();
  }
}

TEST_F(FileDatasets, CsvNonNumericCellNamesLineAndColumn) {
  write_raw(path("bad.csv"), "a,b,label\n1,2,0\n3,oops,1\n");
  try {
    load_csv(path("bad.csv"), "", TargetKind::Classes);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.csv line 3, column 1 ('b'): 'oops' is not a number"), std::string::npos)
        << e.what();
  }
  // Another separator, or another format's file, is named as such.
  const auto message = [&](const std::string& name) {
    try {
      (void)load_csv(path(name), "", TargetKind::Classes);
      return std::string("no error");
    } catch (const DataError& e) {
      return std::string(e.what());
    }
  };
  write_raw(path("semi.csv"), "a;b;label\n0.5;2;0\n");
  EXPECT_EQ(message("semi.csv"), path("semi.csv") +
                                     " line 2, column 0 ('a;b;label'): '0.5;2;0' is not a number; the file looks "
                                     "';'-separated, and batchwise reads comma-separated values: convert it (the "
                                     "decimal separator is '.')");
  write_raw(path("comma.csv"), "a;b;label\n0,5;2;0\n");  // a decimal comma splits the row at it
  EXPECT_NE(message("comma.csv").find("line 2: 2 columns, but the first row has 1; the file looks ';'-separated"),
            std::string::npos)
      << message("comma.csv");
  write_raw(path("x.npy"), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(message("x.npy"), path("x.npy") +
                                  ": a .npy file, not CSV; give --dataset npy with --data-file "
                                  "FEATURES.npy --labels-file LABELS.npy");
  // A label's fault, found once the file is read, still names its line (a blank line and a header counted).
  write_raw(path("frac.csv"), "a,b,label\n1,2,0\n\n3,4,1.5\n5,6,2.25\n");
  EXPECT_EQ(message("frac.csv"), path("frac.csv") +
                                     ": label column label holds fractional values (2 of its rows, the first at line "
                                     "4: 1.5); class labels must be whole numbers (or pass --loss mse for regression)");
  EXPECT_EQ(load_csv(path("frac.csv"), "", TargetKind::Values).targets.scalar_type(), at::kFloat);
  write_raw(path("big-label.csv"), "1,2,0\n3,4,1\n5,6,2000000\n");
  EXPECT_NE(message("big-label.csv").find("label column 2 holds values up to 2e+06 (the first at line 3)"),
            std::string::npos)
      << message("big-label.csv");
  write_raw(path("ragged.csv"), "1,2,0\n3,1\n");
  EXPECT_EQ(message("ragged.csv"), path("ragged.csv") +
                                       " line 2: 2 columns, but the first row has 3; every row needs a value in each "
                                       "of the first row's columns (fill missing values; put a field that holds a "
                                       "comma in double quotes)");
  // A number beyond float32's range would train as infinity: refused where its line and column are known.
  write_raw(path("huge.csv"), "a,label\n1,0\n1e300,1\n");
  EXPECT_EQ(message("huge.csv"), path("huge.csv") +
                                     " line 3, column 0 ('a'): '1e300' is beyond float32's range (about 3.4e38), the "
                                     "precision training reads; rescale the column");
  // A first row of numbers and a name is neither a header nor data: a typo in the first sample had made it the
  // header, and the sample was dropped unsaid.
  write_raw(path("typo.csv"), "0.1,oops,1\n0.3,0.4,0\n0.5,0.6,1\n");
  EXPECT_EQ(message("typo.csv")
                .rfind(path("typo.csv") + " line 1: column 1 ('oops') is not a number and column 0 "
                                          "('0.1') is: a header names every column",
                       0),
            0u)
      << message("typo.csv");
  // A test file whose header orders the features otherwise: they go by position, and would be judged on the wrong
  // columns (the label's own place may differ)
  write_raw(path("train.csv"), "a,b,y\n0.1,0.2,1\n0.3,0.4,0\n");
  write_raw(path("swapped.csv"), "b,a,y\n0.2,0.1,1\n");
  write_raw(path("label-first.csv"), "y,a,b\n1,0.1,0.2\n");
  const Dataset train = load_csv(path("train.csv"), "y", TargetKind::Classes);
  EXPECT_NO_THROW(check_held_out(load_csv(path("label-first.csv"), "y", TargetKind::Classes), train));
  try {
    check_held_out(load_csv(path("swapped.csv"), "y", TargetKind::Classes), train);
    FAIL() << "a test file of swapped columns accepted";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              "swapped.csv: its feature columns are b, a, and train.csv's are a, b: features "
              "are read by position, so a test file holds the training file's columns in the "
              "same order");
  }
  // A label column named twice: which is meant?
  write_raw(path("dup.csv"), "a,a,y\n0.1,0.2,1\n0.3,0.4,0\n");
  try {
    load_csv(path("dup.csv"), "a", TargetKind::Classes);
    FAIL() << "an ambiguous --label-column taken";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "--label-column a: " + path("dup.csv") +
                                         " has 2 columns of that name (the first is column 0); give the label's "
                                         "index (0-2)");
  }
}

TEST_F(FileDatasets, CsvQuotedFieldsFollowRfc4180) {
  // Quoted names with a comma, an escaped quote and a line break; quoted numbers; CRLF line ends.
  write_raw(path("quoted.csv"),
            "\"width, cm\",\"the \"\"label\"\"\",\"note\r\nline\"\r\n"
            "\"1.5\",0,2\r\n"
            " \"2.5\" ,\"1\",3\r\n"
            "3.5,2,\"-4e-1\"");
  const Dataset d = load_csv(path("quoted.csv"), "the \"label\"", TargetKind::Classes);
  EXPECT_EQ(d.size(), 3);
  EXPECT_EQ(d.sample_shape(), (std::vector<int64_t>{2}));
  EXPECT_FLOAT_EQ(d.inputs[0][0].item<float>(), 1.5f);
  EXPECT_FLOAT_EQ(d.inputs[1][0].item<float>(), 2.5f);
  EXPECT_FLOAT_EQ(d.inputs[2][1].item<float>(), -0.4f);
  EXPECT_EQ(d.targets[1].item<int64_t>(), 1);
  EXPECT_EQ(load_csv(path("quoted.csv"), "width, cm", TargetKind::Values).targets[2].item<float>(), 3.5f);
  EXPECT_EQ(load_csv(path("quoted.csv"), "note\r\nline", TargetKind::Values).targets[0].item<float>(), 2.0f);
}

TEST_F(FileDatasets, CsvMalformedQuotesNameLineAndColumn) {
  auto error = [&](const std::string& name, const std::string& text) {
    write_raw(path(name), text);
    try {
      load_csv(path(name), "", TargetKind::Values);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  std::string e = error("open.csv", "a,b\n1,2\n3,\"4\n5,6\n");
  EXPECT_NE(e.find("open.csv line 3, column 1 (character 3): a quoted field opens here and is never closed"),
            std::string::npos)
      << e;
  e = error("after.csv", "a,b\r\n1,\"2\"x\r\n");
  EXPECT_NE(e.find("after.csv line 2, column 1 (character 6): 'x' after the closing quote"), std::string::npos) << e;
  e = error("inside.csv", "a,b,c\n1,2\"3,4\n");
  EXPECT_NE(e.find("inside.csv line 2, column 1 (character 4): a quote inside an unquoted field"), std::string::npos)
      << e;
  // A line break inside quotes: the record after it is on line 4.
  e = error("later.csv", "\"a\nb\",c\n1,2\n3,x\n");
  EXPECT_NE(e.find("later.csv line 4, column 1 ('c'): 'x' is not a number"), std::string::npos) << e;
}

// A comma-decimal locale (de_DE: strtod reads "1,5" and stops at "1.5"'s point) changes nothing:
// numbers are read in one format.
TEST_F(FileDatasets, CsvNumbersIgnoreTheLocale) {
  write_raw(path("dots.csv"), "x,y,label\n1.5,-2.25e1,0\n0.125,3,1\n");
  const char* name = "de_DE.UTF-8";
  const std::string saved = std::setlocale(LC_NUMERIC, nullptr);
  const char* old_locpath = std::getenv("LOCPATH");
  const std::string saved_locpath = old_locpath ? old_locpath : "";
  if (!std::setlocale(LC_NUMERIC, name)) {
    // Not installed: compile it into the test's folder (glibc's localedef, from its own sources).
    const std::string command = "localedef -i de_DE -f UTF-8 " + path(name) + " >/dev/null 2>&1";
    if (std::system(command.c_str()) == 0) {
      setenv("LOCPATH", dir_.c_str(), 1);
      std::setlocale(LC_NUMERIC, name);
    }
  }
  const bool comma_decimal = std::strtod("1.5", nullptr) == 1.0;
  Dataset d;
  std::string failure;
  if (comma_decimal) {
    try {
      d = load_csv(path("dots.csv"), "", TargetKind::Classes);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  std::setlocale(LC_NUMERIC, saved.c_str());
  if (old_locpath)
    setenv("LOCPATH", saved_locpath.c_str(), 1);
  else
    unsetenv("LOCPATH");
  if (!comma_decimal)
    GTEST_SKIP() << "no comma-decimal locale: " << name << " is not installed and localedef could not build it";
  ASSERT_TRUE(failure.empty()) << failure;
  EXPECT_DOUBLE_EQ(d.inputs[0][0].item<float>(), 1.5);
  EXPECT_DOUBLE_EQ(d.inputs[0][1].item<float>(), -22.5);
  EXPECT_DOUBLE_EQ(d.inputs[1][0].item<float>(), 0.125);
}

TEST(IdxPair, ReadsFashionMnistsTestSplitAsAnyIdxPair) {
  CpuMemoryTracker::install();
  const Dataset d = load_idx_pair(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz",
                                  std::string(kFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(d.size(), 10000);
  EXPECT_EQ(d.sample_shape(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(d.num_classes, 10);
  EXPECT_NEAR(d.mean, 0.286, 0.01);
  EXPECT_THROW(load_idx_pair(std::string(kFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz",
                             std::string(kFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz"),
               DataError);
}

}  // namespace
}  // namespace batchwise
