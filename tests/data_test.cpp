#include "batchwise/data.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "batchwise/error.h"
#include "batchwise/memory.h"

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

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

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

}  // namespace
}  // namespace batchwise
