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

// fp16 on CPU: autocast to float16 and GradScaler's unscale-and-check kernel on CPU tensors
// (torch.amp.GradScaler("cpu")) arrived in 2.3.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define BATCHWISE_HAVE_CPU_FP16 1
#else
#define BATCHWISE_HAVE_CPU_FP16 0
#endif

#define BATCHWISE_TORCH_VERSION_STRING \
  BATCHWISE_STR(TORCH_VERSION_MAJOR) "." BATCHWISE_STR(TORCH_VERSION_MINOR) "." BATCHWISE_STR(TORCH_VERSION_PATCH)
#define BATCHWISE_STR(x) BATCHWISE_STR_(x)
#define BATCHWISE_STR_(x) #x

// Autocast (mixed precision) per device type: one API from 2.4, per-device functions before.
#include <ATen/autocast_mode.h>

namespace batchwise::compat {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
inline bool autocast_enabled(c10::DeviceType t) { return at::autocast::is_autocast_enabled(t); }
inline void set_autocast_enabled(c10::DeviceType t, bool on) { at::autocast::set_autocast_enabled(t, on); }
inline at::ScalarType autocast_dtype(c10::DeviceType t) { return at::autocast::get_autocast_dtype(t); }
inline void set_autocast_dtype(c10::DeviceType t, at::ScalarType d) { at::autocast::set_autocast_dtype(t, d); }
#else
inline bool autocast_enabled(c10::DeviceType t) {
  return t == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
inline void set_autocast_enabled(c10::DeviceType t, bool on) {
  t == c10::DeviceType::CUDA ? at::autocast::set_enabled(on) : at::autocast::set_cpu_enabled(on);
}
inline at::ScalarType autocast_dtype(c10::DeviceType t) {
  return t == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
inline void set_autocast_dtype(c10::DeviceType t, at::ScalarType d) {
  t == c10::DeviceType::CUDA ? at::autocast::set_autocast_gpu_dtype(d) : at::autocast::set_autocast_cpu_dtype(d);
}
#endif

/// Autocast on `device` to `dtype` for a scope (Python's torch.autocast); Undefined: nothing.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, at::ScalarType dtype)
      : device_(device), active_(dtype != at::ScalarType::Undefined) {
    if (!active_) return;
    was_enabled_ = autocast_enabled(device_);
    was_dtype_ = autocast_dtype(device_);
    set_autocast_enabled(device_, true);
    set_autocast_dtype(device_, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!active_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_autocast_enabled(device_, was_enabled_);
    set_autocast_dtype(device_, was_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool active_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::ScalarType::Undefined;
};

}  // namespace batchwise::compat

// Timing events on a device stream (c10::Event with its elapsed time, from 2.5): the step profile
// on CUDA marks its phases with events and synchronises once, instead of after every phase.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define BATCHWISE_HAVE_DEVICE_EVENTS 1
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <memory>
#include <vector>

namespace batchwise::compat {

// Events recorded in order on `device`'s current stream; seconds between consecutive ones once
// the device has finished them.
class StreamMarks {
 public:
  explicit StreamMarks(c10::Device device) : device_(device) {}
  void mark() {
    marks_.push_back(std::make_unique<c10::Event>(device_.type(), c10::EventFlag::BACKEND_DEFAULT));
    marks_.back()->record(c10::impl::VirtualGuardImpl(device_.type()).getStream(device_));
  }
  // REQUIRES: the device has been synchronised after the last mark.
  double seconds(size_t from, size_t to) const { return marks_[from]->elapsedTime(*marks_[to]) / 1000.0; }

 private:
  c10::Device device_;
  std::vector<std::unique_ptr<c10::Event>> marks_;
};

}  // namespace batchwise::compat
#endif
