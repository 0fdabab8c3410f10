// Runs a fuzz target over files, outside libFuzzer: the corpus and every input that once crashed or
// hung, in the normal test suite (tests/CMakeLists.txt registers one test per target).
//
//   batchwise_fuzz_replay TARGET FILE_OR_FOLDER...
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "targets.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TARGET FILE_OR_FOLDER...\n", argv[0]);
    return 2;
  }
  const auto* target = batchwise::fuzz::find_target(argv[1]);
  if (!target) {
    std::fprintf(stderr, "%s: no fuzz target '%s'\n", argv[0], argv[1]);
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    }  // a folder that does not exist yet (no regression inputs) is nothing to replay
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    try {
      target->run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    } catch (const std::exception& e) {  // libFuzzer would abort here: a finding
      std::fprintf(stderr, "%s: %s: uncaught %s\n", target->name, f.string().c_str(), e.what());
      return 1;
    }
  }
  std::printf("%s: %zu inputs replayed\n", target->name, files.size());
  return files.empty() ? 1 : 0;  // a target with no inputs tests nothing
}
