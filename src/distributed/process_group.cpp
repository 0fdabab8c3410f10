// The c10d process group (batchwise/distributed.h's Group): its address from a launcher's environment
// or --nproc, each rank's device, joining over TCPStore with Gloo or NCCL, and the collectives the
// trials use. The only translation unit that sees c10d's headers; their differences between LibTorch
// releases are in compat_c10d.h.
#include "batchwise/distributed.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "batchwise/memory.h"
#include "batchwise/units.h"
#include "check.h"
#include "compat_c10d.h"
#include "distributed/distributed_detail.h"
#include "torch_error.h"

namespace batchwise {

namespace {

// An environment variable as an integer, or nullopt when unset; ConfigError when malformed.
std::optional<int> env_int(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  BATCHWISE_CHECK(end && *end == '\0' && v >= 0 && v <= 1 << 20, ConfigError,
                  "{}={}: must be a non-negative integer (set by torchrun or `batchwise --nproc N`)", name, value);
  return static_cast<int>(v);
}

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

// A collective's error in a sentence: Gloo's messages carry a source location and advice meant for
// PyTorch's own users ("GLHF"); what matters is whether the peer went away or went quiet.
std::string peer_problem(const std::string& what) {
  std::string line = detail::error_line(what);
  if (!line.empty() && line.front() == '[') {  // "[/path/pair.cc:545] Read error ..."
    const size_t close = line.find("] ");
    if (close != std::string::npos) line = line.substr(close + 2);
  }
  const size_t advice = line.find(". This is typically");
  if (advice != std::string::npos) line = line.substr(0, advice);
  return line;
}

}  // namespace

std::optional<GroupAddress> group_address_from_env() {
  const std::optional<int> world = env_int("WORLD_SIZE");
  if (!world) return std::nullopt;
  BATCHWISE_CHECK(*world >= 1, ConfigError, "WORLD_SIZE={}: a group has at least one process", *world);
  const std::optional<int> rank = env_int("RANK");
  BATCHWISE_CHECK(rank.has_value(), ConfigError,
                  "WORLD_SIZE={} is set but RANK is not: set RANK (0 to {}) for each process, or launch with "
                  "`batchwise --nproc N` or torchrun",
                  *world, *world - 1);
  BATCHWISE_CHECK(*rank < *world, ConfigError, "RANK={} with WORLD_SIZE={}: the rank must be below the world size",
                  *rank, *world);
  GroupAddress a;
  a.world_size = *world;
  a.rank = *rank;
  a.local_rank = env_int("LOCAL_RANK").value_or(*rank);
  a.local_world_size = std::max(1, env_int("LOCAL_WORLD_SIZE").value_or(*world));
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr)
    a.master_addr = addr;
  else
    BATCHWISE_CHECK(*world == 1, ConfigError, "WORLD_SIZE={}: MASTER_ADDR is not set; set it to rank 0's host", *world);
  const std::optional<int> port = env_int("MASTER_PORT");
  BATCHWISE_CHECK(port.has_value() || *world == 1, ConfigError,
                  "WORLD_SIZE={}: MASTER_PORT is not set; set it to a free port on rank 0's host", *world);
  if (port) {
    BATCHWISE_CHECK(*port >= 1 && *port <= 65535, ConfigError, "MASTER_PORT={}: not a TCP port", *port);
    a.master_port = *port;
  }
  return a;
}

struct Group::Impl {
  int rank = 0, size = 1;
  Backend backend = Backend::Gloo;
  std::chrono::milliseconds timeout{0};
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;
  c10::Device device = c10::Device(c10::kCPU);  // NCCL's collectives take tensors on it
  mutable bool broken = false;                  // a collective failed: the group is aborted, not shut down

  [[noreturn]] void fail(const std::string& what, const std::exception& e) const {
    broken = true;
    const std::string problem = peer_problem(detail::plain_what(e));
    std::string lower = problem;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    const bool quiet = lower.find("timeout") != std::string::npos || lower.find("timed out") != std::string::npos;
    // EAGAIN: this process could not start a thread (ulimit -u, a container's pids limit); no rank died
    const bool no_threads = lower.find("resource temporarily unavailable") != std::string::npos;
    throw DistributedError(fmt::format(
        "rank {} of {}: {} did not complete: {}; see the other ranks' output (c10d: {})", rank, size, what,
        no_threads ? std::string("this rank could not start a thread, or a socket wait ran out (EAGAIN): where the "
                                 "user's process limit (ulimit -u) or a container's pids limit is reached, raise it or "
                                 "run fewer ranks; else another rank did not answer (--dist-timeout)")
        : quiet    ? fmt::format("another rank did not answer within the {:g} s timeout: it hangs, or is far slower "
                                    "(--dist-timeout)",
                                 timeout.count() / 1000.0)
                : fmt::format("another rank died: its connection broke, or it did not answer within the {:g} s timeout "
                              "(--dist-timeout)",
                              timeout.count() / 1000.0),
        problem));
  }
};

std::string rank_device(const std::string& requested, const GroupAddress& address, int cuda_devices) {
  if (requested == "cpu" || (requested == "auto" && cuda_devices == 0)) return "cpu";
  // None at all is the device's error, as one process's (it had been a usage error whose fix, --nproc 1, failed so)
  BATCHWISE_CHECK(cuda_devices > 0, DeviceError,
                  "--device {}: no CUDA device is visible (no GPU, or no driver); use --device cpu or auto", requested);
  const int ranks = address.local_world_size;
  if (requested != "cuda" && requested != "auto") {  // cuda:N
    BATCHWISE_CHECK(ranks == 1, ConfigError,
                    "--device {} with {} ranks on this host: each rank trains on its own GPU (cuda:LOCAL_RANK); pass "
                    "--device cuda",
                    requested, ranks);
    return requested;
  }
  BATCHWISE_CHECK(ranks <= cuda_devices, ConfigError,
                  "{} ranks on this host, but it has {} CUDA device(s): each data-parallel rank needs a GPU of its own "
                  "(NCCL runs one rank per device); use --nproc {} or fewer, or --device cpu to train the ranks on the "
                  "CPU over Gloo",
                  ranks, cuda_devices, std::max(cuda_devices, 1));
  return fmt::format("cuda:{}", address.local_rank);
}

Group::Group(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

// NCCL's communicators are shut down (or, after a failed collective, aborted) before the process
// ends, as torch.distributed.destroy_process_group does; otherwise NCCL warns of leaked resources
// and an abort at exit can hang. Gloo's group needs nothing.
Group::~Group() {
  if (!impl_ || !impl_->pg || impl_->backend != Backend::Nccl) return;
  try {
    if (impl_->broken)
      impl_->pg->abort();
    else
      impl_->pg->shutdown();
  } catch (const std::exception&) {  // a destructor: the run's outcome is already decided
  }
}

std::shared_ptr<Group> Group::join(const GroupAddress& address, c10::Device device, std::chrono::milliseconds timeout,
                                   Backend backend) {
  BATCHWISE_CHECK(timeout.count() > 0, ConfigError, "--dist-timeout: must be positive");
  auto impl = std::make_unique<Impl>();
  impl->rank = address.rank;
  impl->size = address.world_size;
  impl->timeout = timeout;
  impl->device = device;
  impl->backend =
      backend == Backend::Auto ? (device.is_cuda() && compat::kHaveNccl ? Backend::Nccl : Backend::Gloo) : backend;
  BATCHWISE_CHECK(impl->backend != Backend::Nccl || compat::kHaveNccl, ConfigError,
                  "--dist-backend nccl: this batchwise was built without NCCL (a CPU-only LibTorch); use gloo");
  BATCHWISE_CHECK(impl->backend != Backend::Nccl || device.is_cuda(), ConfigError,
                  "--dist-backend nccl: NCCL all-reduces CUDA tensors; this run trains on {}, use gloo", device.str());
  // NCCL, and any CUDA work of this rank, use the current device: the rank's own.
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device);
  const std::string where = fmt::format("{}:{}", address.master_addr, address.master_port);
  try {
    impl->store = compat::make_tcp_store(address.master_addr, address.master_port, address.rank == 0,
                                         address.world_size, timeout);
  } catch (const std::exception& e) {
    throw DistributedError(fmt::format(
        "rank {} of {}: the group's store at {} could not be {}: {}; check MASTER_ADDR and MASTER_PORT (a port "
        "already in use, or rank 0 not started within the {} s timeout)",
        address.rank, address.world_size, where, address.rank == 0 ? "opened" : "reached",
        peer_problem(detail::plain_what(e)), timeout.count() / 1000.0));
  }
  try {
    impl->pg = impl->backend == Backend::Nccl
                   ? compat::make_nccl(impl->store, address.rank, address.world_size, timeout)
                   : compat::make_gloo(impl->store, address.rank, address.world_size, timeout,
                                       is_loopback(address.master_addr) ? "127.0.0.1" : "");
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    impl->fail(fmt::format("joining the {} group at {}", to_string(impl->backend), where), e);
  }
  return std::shared_ptr<Group>(new Group(std::move(impl)));
}

int Group::rank() const { return impl_->rank; }
int Group::size() const { return impl_->size; }
Backend Group::backend() const { return impl_->backend; }
std::chrono::milliseconds Group::timeout() const { return impl_->timeout; }

void Group::all_reduce_sum(at::Tensor& tensor, const std::string& what) {
  if (impl_->size == 1) return;
  try {
    std::vector<at::Tensor> tensors{tensor};
    impl_->pg->allreduce(tensors)->wait();
  } catch (const std::exception& e) {
    impl_->fail(what, e);
  }
}

void Group::broadcast(at::Tensor& tensor, int root, const std::string& what) {
  if (impl_->size == 1) return;
  try {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    impl_->pg->broadcast(tensors, options)->wait();
  } catch (const std::exception& e) {
    impl_->fail(what, e);
  }
}

std::vector<std::vector<double>> Group::all_gather(const std::vector<double>& row, const std::string& what) {
  const int64_t k = static_cast<int64_t>(row.size());
  // Each rank fills its own row of zeros; the sum is every row exactly (x + 0 == x).
  UntrackedScope untracked;  // batchwise's bookkeeping, not the training's memory
  at::Tensor table = at::zeros({impl_->size, k}, at::TensorOptions().dtype(at::kDouble));
  if (k > 0) std::memcpy(table[impl_->rank].data_ptr<double>(), row.data(), sizeof(double) * static_cast<size_t>(k));
  if (impl_->backend == Backend::Nccl) {  // NCCL reduces device tensors only
    at::Tensor on_device = table.to(impl_->device);
    all_reduce_sum(on_device, what);
    table = on_device.to(at::kCPU);
  } else {
    all_reduce_sum(table, what);
  }
  std::vector<std::vector<double>> rows(static_cast<size_t>(impl_->size));
  for (int r = 0; r < impl_->size; ++r) {
    const double* p = table[r].data_ptr<double>();
    rows[static_cast<size_t>(r)].assign(p, p + k);
  }
  return rows;
}

void Group::post(const std::string& key, const std::string& text) {
  try {
    impl_->store->set(key, std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const std::exception& e) {
    impl_->fail("posting " + key, e);
  }
}

std::string Group::read(const std::string& key) {
  try {
    const std::vector<uint8_t> v = impl_->store->get(key);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    impl_->fail("reading " + key, e);
  }
}

}  // namespace batchwise
