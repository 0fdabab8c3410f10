#pragma once
// The input pipeline's parts that the workload's units share (input_pipeline.cpp, state.cpp,
// profile.cpp): the sampler, which orders the dataset, and the loader, whose threads assemble batches
// ahead of the training. Private to src/engine/.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "batchwise/memory.h"
#include "batchwise/workload.h"

namespace batchwise {
namespace detail {

inline at::Tensor get_rng(at::Generator g) {
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}

inline void set_rng(at::Generator g, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

}  // namespace detail

// Shuffles the dataset once per epoch with its own seeded generator (like a DataLoader's sampler)
// and hands out index tensors; a batch larger than what is left of the epoch continues into the
// next one, with none of the samples it already holds (those are moved later in the next epoch: a
// batch no larger than the dataset never holds a sample twice, as a DataLoader's never does, and each
// epoch still sees every sample once). Its tensors are host-side loader state, not counted against
// the device.
// Sharded (data-parallel), every rank draws the same global batch of world x batch indices from
// the same permutation and keeps its own slice, rank r the r-th: as DistributedSampler, no sample
// is seen twice in an epoch, and the ranks' batches concatenated are one process's global batch.
struct ModuleWorkload::Sampler {
  Sampler(int64_t n, uint64_t seed) : size(n), generator(at::make_generator<at::CPUGeneratorImpl>(seed)) {}
  at::Tensor next(int64_t batch) {
    if (world == 1) return draw(batch);
    return draw(batch * world).narrow(0, rank * batch, batch);
  }
  at::Tensor draw(int64_t batch) {
    std::vector<at::Tensor> parts;
    while (batch > 0) {
      if (!order.defined() || cursor == size) {
        UntrackedScope untracked;
        order = at::randperm(size, generator, at::TensorOptions().dtype(at::kLong));
        cursor = 0;
        if (!parts.empty()) keep_apart(parts, std::min(batch, size));
      }
      const int64_t take = std::min(batch, size - cursor);
      parts.push_back(order.narrow(0, cursor, take));
      cursor += take;
      batch -= take;
    }
    return parts.size() == 1 ? parts[0] : at::cat(parts);
  }
  // The new epoch's first `need` samples, none of them among `held` (the batch's samples from the epoch
  // before): each one that is swaps with the next later sample that is not. (8 of 30 batches across an
  // epoch's end had held a sample twice, at batch 64 on 200 samples.)
  void keep_apart(const std::vector<at::Tensor>& held, int64_t need) {
    int64_t count = 0;
    for (const at::Tensor& part : held) count += part.numel();
    // Held as many as there are: a whole epoch among them (only the first part can be a tail), so every sample is
    // taken and the batch, larger than the dataset, repeats some. Counting them into a set at every epoch had made a
    // batch far past the data quadratic (2^16 on 7 samples: 9,362 epochs of a set of up to 65,536).
    if (count >= size) return;
    std::unordered_set<int64_t> taken;
    for (const at::Tensor& part : held) {
      const auto ids = part.accessor<int64_t, 1>();
      for (int64_t i = 0; i < ids.size(0); ++i) taken.insert(ids[i]);
    }
    auto ids = order.accessor<int64_t, 1>();
    int64_t later = need;
    for (int64_t i = 0; i < need; ++i) {
      if (taken.count(ids[i]) == 0) continue;
      while (later < size && taken.count(ids[later]) > 0) ++later;
      if (later == size) return;  // a batch larger than the dataset: it repeats some
      std::swap(ids[i], ids[later++]);
    }
  }
  int64_t size;
  at::Generator generator;
  at::Tensor order;
  int64_t cursor = 0;
  int64_t rank = 0, world = 1;
};

// The input pipeline: the training thread draws each batch's indices from the sampler in order;
// `workers` threads assemble and transform them ahead, up to workers x prefetch batches; batches are
// handed out in order. The sampler is snapshot when the pipeline starts and the batches handed out
// are counted, so stopping it (before a state is saved or restored) rewinds the sampler to exactly
// where the training consumed it: prefetching never skips or repeats a sample.
struct ModuleWorkload::Loader {
  Loader(ModuleWorkload& w, int workers, int prefetch, bool augment, int64_t latency_us)
      : w(w), workers(workers), prefetch(prefetch), augment(augment), latency_us(latency_us) {}
  ~Loader() { stop(); }

  ModuleWorkload& w;
  const int workers, prefetch;
  const bool augment;
  const int64_t latency_us;

  std::vector<std::thread> threads;
  std::mutex mutex;
  std::condition_variable work, ready_cv;
  bool stopping = false, running = false;
  int64_t batch = 0, drawn = 0, consumed = 0;
  std::deque<std::pair<int64_t, at::Tensor>> todo;
  std::map<int64_t, Batch> ready;
  std::exception_ptr error;
  at::Tensor snap_rng, snap_order;
  int64_t snap_cursor = 0;
  uint64_t seed_base = 0;

  Batch produce(const at::Tensor& index, int64_t k) {
    if (latency_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(latency_us * index.numel()));
    Batch b = w.host_batch(index, seed_base + static_cast<uint64_t>(k));
    if (w.device_.is_cuda()) b.input = b.input.pin_memory(), b.target = b.target.pin_memory();
    return b;
  }

  void worker() {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      work.wait(lock, [&] { return stopping || !todo.empty(); });
      if (stopping) return;
      auto [k, index] = todo.front();
      todo.pop_front();
      lock.unlock();
      Batch b;
      std::exception_ptr failed;
      try {
        b = produce(index, k);
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (failed && !error) error = failed;
      if (!failed) ready.emplace(k, std::move(b));
      ready_cv.notify_all();
    }
  }

  void start(int64_t size) {
    batch = size;
    drawn = consumed = 0;
    snap_rng = detail::get_rng(w.sampler_->generator);
    snap_order = w.sampler_->order;
    snap_cursor = w.sampler_->cursor;
    seed_base = static_cast<uint64_t>(at::detail::getDefaultCPUGenerator().current_seed()) * 1000003u + 17u;
    stopping = false;
    running = true;
    for (int i = 0; i < workers; ++i) threads.emplace_back([this] { worker(); });
  }

  void stop() {
    if (!running) return;
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    work.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
    todo.clear();
    ready.clear();
    error = nullptr;
    running = false;
    // Back to where the training consumed the sampler.
    detail::set_rng(w.sampler_->generator, snap_rng);
    w.sampler_->order = snap_order;
    w.sampler_->cursor = snap_cursor;
    for (int64_t i = 0; i < consumed; ++i) (void)w.sampler_->next(batch);
  }

  Batch next(int64_t size) {
    if (!running || size != batch) {
      stop();
      start(size);
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      while (drawn - consumed < static_cast<int64_t>(workers) * prefetch)
        todo.emplace_back(drawn++, w.sampler_->next(batch));
    }
    work.notify_all();
    Batch b;
    {
      std::unique_lock<std::mutex> lock(mutex);
      ready_cv.wait(lock, [&] { return error || ready.count(consumed) > 0; });
      if (error) {
        const std::exception_ptr e = error;
        lock.unlock();
        stop();
        std::rethrow_exception(e);
      }
      b = std::move(ready.at(consumed));
      ready.erase(consumed);
      ++consumed;
    }
    const bool async = w.device_.is_cuda();
    return {b.input.to(w.device_, /*non_blocking=*/async), b.target.to(w.device_, /*non_blocking=*/async)};
  }
};

}  // namespace batchwise
