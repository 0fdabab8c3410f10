// The fuzz targets (targets.h). The dataset readers take paths, so each input is written to a file
// in a folder of this process's own first; each target keeps to the reader's public entry points,
// as the CLI calls them.
#include "targets.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "batchwise/command.h"
#include "batchwise/data.h"
#include "batchwise/error.h"
#include "batchwise/html.h"
#include "batchwise/report.h"
#include "external/protocol.h"

namespace batchwise::fuzz {

namespace {

namespace fs = std::filesystem;

// A folder of this process's own, made once and removed at exit.
const fs::path& scratch() {
  static const struct Scratch {
    fs::path path;
    Scratch() {
      std::string pattern = (fs::temp_directory_path() / "batchwise-fuzz-XXXXXX").string();
      if (!mkdtemp(pattern.data())) std::abort();
      path = pattern;
    }
    ~Scratch() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } s;
  return s.path;
}

std::string write(const fs::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path.string();
}

// A broken invariant is a finding: said on stderr, then abort() (libFuzzer keeps the input).
[[noreturn]] void broken(const char* target, const std::string& what) {
  std::fprintf(stderr, "fuzz %s: %s\n", target, what.c_str());
  std::abort();
}

// batchwise's answer to bad bytes is an Error, except an internal one (BATCHWISE_ASSERT's): that is
// a finding, as a crash would be.
void expected(const char* target, const Error& e) {
  if (std::string(e.what()).rfind("internal error", 0) == 0) broken(target, e.what());
}

}  // namespace

// The first byte picks the reader: label file (1 dimension), image file (3), or both as a pair,
// split where the next two bytes say.
int idx(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 3;
  ++data, --size;
  try {
    if (mode < 2) {
      read_idx(write(scratch() / "data.idx", data, size), mode == 0 ? 1 : 3);
    } else {
      const size_t split = size < 2 ? 0 : std::min<size_t>(size - 2, (data[0] << 8 | data[1]));
      const std::string images = write(scratch() / "images.idx", data + 2, split);
      const std::string labels = write(scratch() / "labels.idx", data + 2 + split, size < 2 ? 0 : size - 2 - split);
      load_idx_pair(images, labels);
    }
  } catch (const Error& e) {
    expected("idx", e);
  }
  return 0;
}

int cifar10(const uint8_t* data, size_t size) {
  const fs::path dir = scratch() / "cifar";
  fs::create_directories(dir);
  write(dir / "test_batch.bin", data, size);
  try {
    load_cifar10(dir.string(), false);
  } catch (const Error& e) {
    expected("cifar10", e);
  }
  return 0;
}

// The same file as an array, as features with itself as the targets, classes or values.
int npy(const uint8_t* data, size_t size) {
  const std::string path = write(scratch() / "data.npy", data, size);
  try {
    read_npy(path);
  } catch (const Error& e) {
    expected("npy", e);
  }
  try {
    load_npy(path, path, size % 2 ? TargetKind::Classes : TargetKind::Values);
  } catch (const Error& e) {
    expected("npy", e);
  }
  return 0;
}

// The first byte picks the label column: the last (none given), "label", the first by number, or
// a number out of range.
int csv(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const char* kColumns[] = {"", "label", "0", "7"};
  const char* column = kColumns[data[0] % 4];
  const TargetKind kind = data[0] & 4 ? TargetKind::Values : TargetKind::Classes;
  const std::string path = write(scratch() / "data.csv", data + 1, size - 1);
  try {
    load_csv(path, column, kind);
  } catch (const Error& e) {
    expected("csv", e);
  }
  return 0;
}

// Whatever reads as a report is written back and read again to the same JSON, and renders as a
// table and as a page.
int report(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Report r;
  try {
    r = report_from_json(text, "fuzz");
  } catch (const Error& e) {
    expected("report", e);
    return 0;
  }
  const std::string json = to_json(r);
  try {
    const std::string again = to_json(report_from_json(json, "fuzz, written back"));
    if (again != json) broken("report", "a report written back does not read back to itself:\n" + json + "\n" + again);
  } catch (const Error& e) {
    broken("report", std::string("a report written back does not read back: ") + e.what());
  }
  to_table(r);
  try {
    to_html(json, "fuzz");
  } catch (const Error& e) {
    expected("report", e);
  }
  return 0;
}

// Lines a command printed, read one millisecond apart, then judged as a trial; the first byte sets
// how the command ended (exit status, signal, time-out, wall time). The verdict's figures must be
// finite and not negative.
int protocol(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t how = data[0];
  CommandResult r;
  r.batch = 32;
  r.warmup = how & 1;
  r.steps = 3;
  const auto start = detail::ProtocolParser::Clock::time_point{};
  detail::ProtocolParser parser(r, start);
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  size_t begin = 0;
  for (int i = 1; begin <= text.size(); ++i) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    parser.line(text.substr(begin, end - begin), start + std::chrono::milliseconds(i));
    begin = end + 1;
  }
  r.exit_status = how & 2 ? 0 : (how & 4 ? 1 : -1);
  r.signal = r.exit_status == -1 ? 9 : 0;
  r.timed_out = how & 8;
  r.stopped_after_steps = how & 16;
  r.wall_s = (how >> 5) * 0.5;
  r.output_tail = text.substr(0, 2000);
  const CommandVerdict v = classify(r);
  if (!std::isfinite(v.samples_per_s) || v.samples_per_s < 0)
    broken("protocol", "samples/s " + std::to_string(v.samples_per_s) + ": " + v.message);
  for (const double s : v.step_times_s)
    if (!std::isfinite(s) || s < 0) broken("protocol", "a step time of " + std::to_string(s) + ": " + v.message);
  return 0;
}

const NamedTarget kTargets[6] = {{"idx", idx}, {"cifar10", cifar10}, {"npy", npy},
                                 {"csv", csv}, {"report", report},   {"protocol", protocol}};

const NamedTarget* find_target(std::string_view name) {
  for (const auto& t : kTargets)
    if (name == t.name) return &t;
  return nullptr;
}

}  // namespace batchwise::fuzz
