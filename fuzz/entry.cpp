// libFuzzer's entry point for one target, chosen at build time (fuzz/CMakeLists.txt compiles this
// file once per target with BATCHWISE_FUZZ_TARGET set to its function).
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return BATCHWISE_FUZZ_TARGET(data, size); }
