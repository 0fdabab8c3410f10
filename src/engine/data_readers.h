#pragma once
// What the dataset readers share (src/engine/data.cpp: idx, CIFAR-10, .npy; data_csv.cpp: CSV): the
// file read whole, its name for messages, and the targets and the finite check every reader applies.
// Private to src/engine/.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "batchwise/data.h"

namespace batchwise {
class ModuleWorkload;
}

namespace batchwise::detail {

/// Class labels run from 0 to at most this - 1: a larger one is a column of other values.
inline constexpr int64_t kMaxClasses = 100000;

/// The whole file at `path`; DataError naming it where it is missing or cannot be read.
std::string read_file(const std::string& path);

/// The file's name without its folder, as messages and a dataset's name give it.
std::string base_name(const std::string& path);

/// `labels` as `d`'s targets, of the kind the loss asks for; DataError naming `path` for a count that
/// differs from the samples', class labels that are not whole numbers from 0, or targets of another shape.
void set_targets(Dataset& d, at::Tensor labels, TargetKind kind, const std::string& path);

/// The samples of `values` ([N, ...]) that hold a value that is not a finite number: how many, and the
/// first `keep` of them in order. In blocks, so its temporaries stay small beside the data.
struct NonFinite {
  int64_t count = 0;
  std::vector<int64_t> rows;
};
NonFinite nonfinite_rows(const at::Tensor& values, int64_t keep);

/// DataError naming `path`, how many samples of `values` ([N, ...]) hold a value that is not a finite
/// number and the first, where any does; `what`: "features" (or "inputs") or "targets". Checked in blocks, so its
/// temporaries stay small beside the data.
void require_finite(const at::Tensor& values, const std::string& path, const char* what);

/// Samples of `d` holding values that are not finite numbers (in the model's type: a value past float16's range is
/// infinite there) which the model and loss do not take: DataError naming `which` and the first sample, with
/// repair(kind) (how to drop them, in the caller's language; kind "inputs" or "targets"). Taken where the loss on
/// (up to 64 of) those samples, in one batch with as many that hold none, is finite: a masked loss over targets where
/// NaN marks a missing label, a model that fills NaN inputs.
void refuse_values_the_loss_cannot_take(ModuleWorkload& w, const Dataset& d, const std::string& which,
                                        std::string (*repair)(const char* kind));

/// refuse_values_the_loss_cannot_take's repair for a C++ caller's Dataset `d`.
std::string cpp_repair(const char* kind);

}  // namespace batchwise::detail
