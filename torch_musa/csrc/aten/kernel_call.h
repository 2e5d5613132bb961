// One op call served by a kernel of the kernel device type (the CPU's under
// the host driver, CUDA's under the cuda driver): the checks, the aliasing of musa
// arguments, the device-side view of the results. Shared by the boxed
// fallback (fallback.cpp) and the unboxed per-op wrappers (unboxed_kernel.h).
#pragma once

#include "core/MUSACachingAllocator.h"
#include "core/MUSAGenerator.h"
#include "aten/kernel_alias.h"
#include "aten/kernel_threads.h"
#include "core/Device.h"
#include "core/MUSAProfiler.h"

#include <ATen/Tensor.h>
#include <ATen/core/Generator.h>
#include <ATen/core/ivalue.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>
#include <c10/util/flat_hash_map.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch_musa {

// Policy set from Python (ops/dtype_policy.py, TORCH_USE_MUSA_DOUBLE_CAST).
void set_dtype_exempt_ops(const std::vector<std::string>& names);
// set_double_cast: 1 on, 0 off, -1 TORCH_USE_MUSA_DOUBLE_CAST as the library
// read it when it loaded (a C++ program's; torch_musa's Python sets its
// configuration's value at import).
void set_double_cast(int mode);
bool double_cast_enabled();

// Sync debug mode (torch.musa.set_sync_debug_mode), process-wide as CUDA's:
// 0 off, 1 warn, 2 error. sync_point() is called where the host waits for the
// device (a blocking host<->device copy, .item(), a stream's synchronize, ops
// whose output size depends on the data); it costs one relaxed load when off.
void set_sync_debug_mode(int mode);
int sync_debug_mode();
void sync_point(const char* what);

// Op debug logging (TORCH_MUSA_OP_DEBUG): a Python callback, called with the
// op name, its arguments and its results. Null when off.
using DebugHook = void (*)(const char* op, const std::vector<c10::IValue>& args,
                           const std::vector<c10::IValue>& results);
namespace detail {
extern std::atomic<DebugHook> g_debug_hook;
}  // namespace detail
inline DebugHook debug_hook() { return detail::g_debug_hook.load(std::memory_order_relaxed); }
void set_debug_hook(DebugHook hook);

// The native kernels that produce values without a KernelCall (_copy_from and
// the two convolutions, native_kernels.cpp) report their results here, as the
// op hook sees a KernelCall's: the NaN/Inf check (utils/nan_check.h) sets it
// while armed. Null otherwise, so that one load is all those kernels pay.
DebugHook value_check_hook();
void set_value_check_hook(DebugHook hook);

// How many of an op's results share each storage (counted before they are
// mapped back): to_musa adopts a fresh storage in place only when one result
// holds it. Shared by the boxed fallback and the unboxed wrappers.
class ResultStorages {
 public:
  void count(const at::Tensor& t) {
    if (!t.defined() || !t.has_storage()) return;
    auto* s = storage_impl(t);
    if (C10_UNLIKELY(many_ != nullptr)) {
      ++(*many_)[s];
      return;
    }
    for (auto& [impl, n] : refs_)
      if (impl == s) { ++n; return; }
    if (C10_LIKELY(refs_.size() < kLinear)) {
      refs_.emplace_back(s, 1);
      return;
    }
    // A long list of results: counted by hash from here on, not by scan.
    many_ = std::make_unique<ska::flat_hash_map<c10::StorageImpl*, int>>(refs_.begin(),
                                                                        refs_.end());
    refs_.clear();
    many_->emplace(s, 1);
  }
  // The number of results over `t`'s storage (1 for one that was not counted).
  int refs_of(const at::Tensor& t) const {
    if (!t.defined() || !t.has_storage()) return 1;
    auto* s = storage_impl(t);
    if (C10_UNLIKELY(many_ != nullptr)) {
      auto it = many_->find(s);
      return it == many_->end() ? 1 : it->second;
    }
    for (const auto& [impl, n] : refs_)
      if (impl == s) return n;
    return 1;
  }

 private:
  static constexpr size_t kLinear = 16;
  c10::SmallVector<std::pair<c10::StorageImpl*, int>, 4> refs_;
  std::unique_ptr<ska::flat_hash_map<c10::StorageImpl*, int>> many_;
};

class KernelCall {
 public:
  // `op` is "aten::add" style (no overload), used for messages and policy.
  explicit KernelCall(const char* op, const char* overload = "");
  ~KernelCall();
  KernelCall(const KernelCall&) = delete;
  KernelCall& operator=(const KernelCall&) = delete;

  // Pass 1: every tensor argument, to find the device and check it. A 0-dim CPU
  // tensor may come along as a scalar input, as TensorIterator allows; one that is
  // `written` (an out= or in-place argument) must be on the device, as on CUDA.
  void see(const at::Tensor& t, const char* arg, bool index_list = false, bool written = false);
  // The op's device, once every argument was seen; an op that reads device data
  // on the host to size its result (nonzero) waits there for the queued work.
  c10::DeviceIndex device();

  // Pass 2: the kernels' versions of arguments. `borrow`: `t` outlives the call (the
  // unboxed caller's argument), so it is not copied; a copy of a tensor that
  // Python holds costs a GIL round trip (PyObject preservation).
  at::Tensor to_kernel(const at::Tensor& t, bool written, bool borrow = false) {
    const int slot = to_kernel_slot(t, written, borrow);
    return slot < 0 ? t : aliases_[slot].kernel;
  }
  // The same as a slot, for a caller that reads the alias only once every argument
  // has one (kernel_at): -1 for `t` itself (not a musa tensor), else the alias's
  // index. The unboxed wrappers hand the kernel the alias this call holds, not a
  // copy, which took and dropped a reference to it per argument.
  int to_kernel_slot(const at::Tensor& t, bool written, bool borrow);
  at::Tensor& kernel_at(int slot) { return aliases_[slot].kernel; }
  // Room for `n` more arguments (a tensor list's), before their to_kernel calls; at
  // least for every musa tensor seen, so that a fused step's five lists of every
  // parameter are held without moving the aliases once per list.
  void reserve(size_t n) {
    const size_t need = std::max(aliases_.size() + n, seen_);
    if (need > aliases_.capacity()) aliases_.reserve(need);
    if (indexed()) index_->musa_storage.reserve(need);
  }
  at::Generator kernel_generator_for(const std::optional<at::Generator>& g);

  // After the kernel.
  void sync_written() {
    for (const Alias& a : aliases_)
      if (a.written) sync_alias(a);
  }
  // A kernel's result as musa: an argument, a view of one, or adopted memory;
  // `refs_on_stack`: how many results share its storage (ResultStorages).
  at::Tensor to_musa(const at::Tensor& host, int refs_on_stack = 1);
  // The same for a result the caller hands over: a fresh one is retagged and moved out,
  // without a reference taken and dropped.
  at::Tensor to_musa(at::Tensor&& host, int refs_on_stack = 1);
  // The musa argument that `host` stands for, or nullptr.
  const at::Tensor* original_of(const at::Tensor& host) const;

  std::string op_name() const;

 private:
  struct Alias {
    at::Tensor kernel;
    c10::MaybeOwned<at::Tensor> musa;
    bool written;
    bool cast;  // float64 computed in float32 (double cast), or a contiguous copy
    bool shared;  // made without materializing a copy-on-write storage (read only)
  };
  // A kernel's fresh result that nothing else holds, over memory of the musa allocator:
  // it becomes the musa tensor itself (retag_in_place), no TensorImpl or StorageImpl made.
  bool fresh_result(const at::Tensor& t, int refs) const;
  // sync_written's work for one written argument, out of line: most calls write none,
  // and its inlined body made every call set up a large frame and load the addresses
  // of the stream classes an error message would use (two cold cache lines).
  [[gnu::noinline]] void sync_alias(const Alias& a);
  // Any other result: an argument, a view of one, or memory adopted or copied.
  at::Tensor mapped_back(const at::Tensor& t, int refs);
  bool storage_written(const c10::StorageImpl* s) {
    if (C10_LIKELY(written_storages_.size() < kIndexFrom)) {
      for (const c10::StorageImpl* w : written_storages_)
        if (w == s) return true;
      return false;
    }
    return written_by_hash(s);
  }
  bool written_by_hash(const c10::StorageImpl* s);
  // The first alias (not a cast copy) over musa storage `ms`, or nullptr.
  Alias* first_alias_over(const c10::StorageImpl* ms) {
    if (C10_UNLIKELY(indexed())) return first_alias_by_hash(ms);
    for (Alias& a : aliases_)
      if (!a.cast && storage_impl(*a.musa) == ms) return &a;
    return nullptr;
  }
  Alias* first_alias_by_hash(const c10::StorageImpl* ms);
  void index_last_alias();  // after aliases_ reached kIndexFrom
  [[noreturn]] void mismatch(const at::Tensor& t, const char* arg);
  [[noreturn]] void unsupported(const at::Tensor& t, const char* arg);

  KernelThreads threads_;  // the kernel's intra-op thread count (kernel_threads.h)
  const char* op_;
  const char* overload_;
  c10::DeviceIndex device_ = -1;
  size_t seen_ = 0;  // musa tensors seen (pass 1): what pass 2 will alias at most
  bool host_read_ = false;  // a sync op: device() waits for the queued work
  profiler::KernelSpan span_{op_, overload_, &device_};  // torch.profiler's kernel
  profiler::UnrecordedInternals internals_;  // the host kernel's own op calls
  at::Tensor other_;
  const char* other_arg_ = nullptr;
  bool downcast_ = false;
  c10::SmallVector<Alias, 4> aliases_;
  // Storages of the musa arguments the op writes: only those are materialized
  // when copy-on-write (the others are read through the shared data).
  c10::SmallVector<const c10::StorageImpl*, 2> written_storages_;
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::Storage>, 2> adopted_;
  // Lookups over the lists above, built once an op has kIndexFrom of an entry (a
  // fused optimizer step takes five lists of every parameter, a cat may take
  // hundreds of tensors); scanning the lists made such an op quadratic in its
  // tensors. Small ops scan.
  static constexpr size_t kIndexFrom = 16;
  struct Index {
    bool active = false;  // aliases_ has reached kIndexFrom: musa_storage is kept up to date
    ska::flat_hash_map<const c10::StorageImpl*, size_t> musa_storage;    // first non-cast alias
    // Filled when a result is mapped back (most list ops return nothing).
    size_t kernel_indexed = 0;  // aliases_[0, kernel_indexed) are in the two below
    ska::flat_hash_map<const c10::TensorImpl*, size_t> kernel_impl;      // first alias
    ska::flat_hash_map<const c10::StorageImpl*, size_t> kernel_storage;  // first non-cast alias
    ska::flat_hash_set<const c10::StorageImpl*> written;
    size_t written_count = 0;  // of written_storages_, when `written` was filled
  };
  mutable std::unique_ptr<Index> index_;  // original_of (const) fills its kernel maps
  bool indexed() const { return index_ && index_->active; }
  void index_kernel_sides() const;
};

}  // namespace torch_musa
