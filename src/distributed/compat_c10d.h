#pragma once
// c10d (torch.distributed's C++ engine) as batchwise uses it, one spelling for every LibTorch
// release it builds against. Included by distributed/process_group.cpp only: these headers are heavy.
//
// Gloo: LibTorch links Gloo into libtorch_cpu but its wheels ship no Gloo headers, which
// ProcessGroupGloo.hpp includes; Debian's libgloo-dev provides them (only the headers: Gloo's code
// is LibTorch's own copy, so no libgloo is linked). ProcessGroupGloo is only created and called
// through its exported constructor and virtual functions, whose layout does not depend on Gloo's
// version.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef BATCHWISE_WITH_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdlib>
#include <string>

#include "batchwise/error.h"

namespace batchwise::compat {

#ifdef BATCHWISE_WITH_NCCL
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif

inline c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, int port, bool server, int world,
                                                      std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = server;
  options.numWorkers = static_cast<std::size_t>(world);
  options.waitWorkers = true;
  options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

// `hostname` empty: Gloo's default device (this host's name, or GLOO_SOCKET_IFNAME).
inline c10::intrusive_ptr<c10d::Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                   std::chrono::milliseconds timeout, const std::string& hostname) {
  auto options = c10d::ProcessGroupGloo::Options::create_default(timeout);
  if (!hostname.empty()) options->devices = {c10d::ProcessGroupGloo::createDeviceForHostname(hostname)};
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
}

inline c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                   std::chrono::milliseconds timeout) {
#ifdef BATCHWISE_WITH_NCCL
  // A blocking wait: a rank that hangs surfaces as an exception in wait() at the timeout, not as
  // the watchdog's abort of the whole process. (Untested here: no GPU on the development machine.)
  setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, options);
#else
  throw ConfigError("this batchwise was built without NCCL");
#endif
}

}  // namespace batchwise::compat
