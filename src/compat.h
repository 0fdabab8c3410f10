#pragma once
// Every difference between the LibTorch releases batchwise builds against (1.13 through 2.x)
// lives here, so the rest of the code reads as one version.
#include <torch/version.h>

#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 3)
// Before 2.3, c10::Allocator::allocate was const and copy_data did not exist.
#define BATCHWISE_ALLOCATE_CONST const
#else
#define BATCHWISE_ALLOCATE_CONST
#endif

#define BATCHWISE_TORCH_VERSION_STRING                                                     \
  BATCHWISE_STR(TORCH_VERSION_MAJOR) "." BATCHWISE_STR(TORCH_VERSION_MINOR) "." BATCHWISE_STR( \
      TORCH_VERSION_PATCH)
#define BATCHWISE_STR(x) BATCHWISE_STR_(x)
#define BATCHWISE_STR_(x) #x
