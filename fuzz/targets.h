#pragma once
// The fuzz targets: every reader of outside input (the dataset files, the JSON report, the `--cmd`
// step-line protocol), each a function of raw bytes. libFuzzer drives them through entry.cpp (built
// with -DBATCHWISE_BUILD_FUZZ=ON and Clang); replay.cpp runs their corpora and every input that
// once crashed or hung in the normal test suite. docs/reliability.md says how long each ran and
// what it found. To add a target: a function here, a row in kTargets, a corpus folder.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace batchwise::fuzz {

/// A target takes one input and returns 0. Errors batchwise expects of bad input (batchwise::Error
/// and its kinds: a DataError naming the file) are caught inside; anything else (another exception,
/// a crash, a broken invariant, which aborts) is a finding.
using Target = int (*)(const uint8_t* data, size_t size);

struct NamedTarget {
  const char* name;
  Target run;
};

int idx(const uint8_t* data, size_t size);       ///< IDX images or labels (Fashion-MNIST), plain or gzip
int cifar10(const uint8_t* data, size_t size);   ///< a CIFAR-10 binary batch file
int npy(const uint8_t* data, size_t size);       ///< a NumPy .npy file, as features and as targets
int csv(const uint8_t* data, size_t size);       ///< a CSV dataset
int report(const uint8_t* data, size_t size);    ///< a JSON report, then its table and its HTML page
int protocol(const uint8_t* data, size_t size);  ///< a command's output lines, then the trial's verdict

extern const NamedTarget kTargets[6];

/// The target called `name`, or nullptr.
const NamedTarget* find_target(std::string_view name);

}  // namespace batchwise::fuzz
