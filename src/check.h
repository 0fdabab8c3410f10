#pragma once
// BATCHWISE_CHECK validates user input and stays on in Release builds; BATCHWISE_ASSERT guards
// internal invariants.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "batchwise/error.h"

#define BATCHWISE_CHECK(cond, ErrorType, ...)                         \
  do {                                                                \
    if (!(cond)) throw ::batchwise::ErrorType(fmt::format(__VA_ARGS__)); \
  } while (0)

#define BATCHWISE_ASSERT(cond)                                                                   \
  do {                                                                                           \
    if (!(cond))                                                                                 \
      throw ::batchwise::Error(fmt::format("internal error: {} failed at {}:{}; please report it", \
                                           #cond, __FILE__, __LINE__));                          \
  } while (0)
