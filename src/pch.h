// Precompiled for the library, the tool and the tests: the heavy LibTorch headers, parsed once.
#pragma once
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/serialize.h>
