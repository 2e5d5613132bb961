// Memory: the device allocators, the pinned host allocator, the redirect that
// makes host kernels running for musa allocate device memory, storage resizing.
#pragma once

#include "core/Device.h"

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace torch_musa {

using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::SegmentInfo;  // CUDA's shapes, so snapshots read alike
using c10::CachingDeviceAllocator::TraceEntry;

// PYTORCH_MUSA_ALLOC_CONF, parsed and checked by torch_musa/config/variables.py.
struct AllocatorSettings {
  size_t max_split_size = SIZE_MAX;           // blocks at or above it are not split
  double garbage_collection_threshold = 0.0;  // 0 = off
  // Per power-of-two interval from 1 MiB (16 intervals): round sizes up to
  // one of this many divisions of the interval (0 or 1 = 512-byte steps).
  std::vector<size_t> roundup_power2_divisions = std::vector<size_t>(16, 0);
};

// torch.musa.memory._record_memory_history's settings.
struct HistorySettings {
  bool enabled = false;       // keep contexts of live blocks
  bool trace = false;         // also keep the alloc/free history
  RecordContext context = RecordContext::NEVER;
  bool cpp = false;           // C++ frames too
  size_t max_entries = SIZE_MAX;
  bool clear = false;
  std::vector<TraceEntry::Action> skip;
};

struct MemorySnapshot {
  std::vector<SegmentInfo> segments;
  std::vector<std::vector<TraceEntry>> device_traces;  // one list per device
};

// A user's malloc/free (MUSAPluggableAllocator), CUDA's signatures.
struct RawAllocatorFns {
  void* (*alloc)(ssize_t size, int device, void* stream) = nullptr;
  void (*free)(void* ptr, ssize_t size, int device, void* stream) = nullptr;
};

// Selects which allocations go to a private pool (graph capture, use_mem_pool).
using PoolFilter = std::function<bool(c10::Stream)>;

// Musa device memory as PyTorch sees it (DeviceStats, empty_cache, ...), with
// what the runtime adds: allocation on a given device, fractions, snapshots,
// memory pools. Implementations, chosen by the driver or the user: the host
// driver's caching allocator over Driver::malloc (MUSACachingAllocator.cpp), a
// driver's own caching allocator (DriverAllocator.cpp: CUDA's), and a user's
// malloc/free (PluggableAllocator.cpp); the shared base and the choice among
// them: DeviceAllocator.cpp. What an implementation lacks raises.
class DeviceAllocator : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) final;  // on the current device
  // Checks the device and the fork guard, marks the runtime initialised; on out of
  // memory tells the observers (attach_out_of_memory_observer) before raising.
  c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes, c10::Device tag);
  void copy_data(void* dst, const void* src, std::size_t count) const final;
  bool initialized() override { return true; }
  // Whether `ptr` is memory of this allocator (and so may be adopted).
  bool owns(const c10::DataPtr& ptr) const { return ptr.get_deleter() == raw_deleter(); }

  virtual void set_memory_fraction(double fraction, c10::DeviceIndex device) = 0;
  virtual double memory_fraction(c10::DeviceIndex device) { return 1.0; }
  virtual void set_settings(const AllocatorSettings& s) = 0;
  // Device of a pointer inside any live block; -1 when not musa memory.
  virtual int device_of(const void* ptr) = 0;
  // Whether `ptr` is the start of a live allocation of this allocator.
  virtual bool is_live(const void* ptr) { return false; }
  virtual std::string backend() const = 0;
  // Segments (of every pool, or of `pool` when it is not {0, 0}) and history.
  virtual MemorySnapshot snapshot(c10::MempoolId_t pool = {0, 0});
  virtual void record_history(const HistorySettings& s);
  // Memory pools: a private pool per id; while a route is open, allocations
  // on `device` that `filter` accepts come from it. Ids: {0, n} user pools
  // (MemPool), {n, 0} graph pools (new_pool_id(false)).
  virtual void create_pool(c10::DeviceIndex device, c10::MempoolId_t id,
                           std::shared_ptr<RawAllocatorFns> fns, bool use_on_oom,
                           bool no_split);
  virtual void begin_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t id,
                                      PoolFilter filter);
  virtual void end_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t id);
  // Drops one use of the pool; its memory goes back once unused and empty.
  virtual void release_pool(c10::DeviceIndex device, c10::MempoolId_t id);
  virtual int pool_use_count(c10::DeviceIndex device, c10::MempoolId_t id);

 protected:
  virtual c10::DataPtr allocate_bytes(c10::DeviceIndex device, size_t nbytes,
                                      c10::Device tag) = 0;  // nbytes > 0

 private:
  void notify_out_of_memory(c10::DeviceIndex device, size_t nbytes);
};

class CachingAllocator final : public DeviceAllocator {
 public:
  c10::DeleterFnPtr raw_deleter() const override;
  void emptyCache(c10::MempoolId_t = {0, 0}) override;
  void recordStream(const c10::DataPtr&, c10::Stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;
  void set_memory_fraction(double fraction, c10::DeviceIndex device) override;
  double memory_fraction(c10::DeviceIndex device) override;
  void set_settings(const AllocatorSettings& s) override;
  int device_of(const void* ptr) override;
  bool is_live(const void* ptr) override;
  std::string backend() const override { return "native"; }
  MemorySnapshot snapshot(c10::MempoolId_t pool = {0, 0}) override;
  void record_history(const HistorySettings& s) override;
  void create_pool(c10::DeviceIndex device, c10::MempoolId_t id,
                   std::shared_ptr<RawAllocatorFns> fns, bool use_on_oom,
                   bool no_split) override;
  void begin_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t id,
                              PoolFilter filter) override;
  void end_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t id) override;
  void release_pool(c10::DeviceIndex device, c10::MempoolId_t id) override;
  int pool_use_count(c10::DeviceIndex device, c10::MempoolId_t id) override;
  // Whether any device memory was ever taken (the allocator can no longer be swapped).
  bool used() const;

 protected:
  c10::DataPtr allocate_bytes(c10::DeviceIndex device, size_t nbytes, c10::Device tag) override;
};

class DriverAllocator final : public DeviceAllocator {
 public:
  c10::DeleterFnPtr raw_deleter() const override;
  void emptyCache(c10::MempoolId_t = {0, 0}) override;
  void recordStream(const c10::DataPtr&, c10::Stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;
  void set_memory_fraction(double fraction, c10::DeviceIndex device) override;
  void set_settings(const AllocatorSettings&) override {}  // the driver's own settings
  int device_of(const void* ptr) override;
  std::string backend() const override { return "native"; }
  // Snapshots, history and pools: Python uses torch.cuda's for this allocator.

 protected:
  c10::DataPtr allocate_bytes(c10::DeviceIndex device, size_t nbytes, c10::Device tag) override;
};

// The allocator in use: a user's (change_current_allocator), else the one the
// driver calls for (valid once the driver is chosen).
DeviceAllocator& device_allocator();
// Makes a user's malloc/free serve musa memory; only before any is allocated.
void use_pluggable_allocator(std::shared_ptr<RawAllocatorFns> fns);
// torch.musa.caching_allocator_enable: while off, the host caching allocator
// gives each new allocation outside a private pool a segment of its own and
// returns it to the driver when it is freed (what was cached stays cached).
void set_caching_enabled(bool on);
bool caching_enabled();
// A fresh pool id: {0, n} for user pools, {n, 0} for graph pools.
c10::MempoolId_t new_pool_id(bool user_pool);

// Grows or shrinks a musa storage to `nbytes`, keeping its leading bytes (the
// hooks' storage resize and the native resize_ kernels).
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

// The checks both allocators make before changing a device's fraction.
void check_memory_fraction(double fraction, c10::DeviceIndex device);

// Page-locked host memory for pin_memory() and non_blocking copies, cached: a
// freed block serves the next request of its size class once the copies recorded
// on it (record_pinned_use, on the copy's stream) have completed.
c10::Allocator& pinned_allocator();
void record_pinned_use(const void* ptr, c10::Stream stream);  // no-op if not pinned
void empty_pinned_cache();  // returns the idle cached blocks to the driver
// Pinned memory, or inside a range registered with musaHostRegister.
bool is_pinned(const void* ptr);
// musaHostRegister / musaHostUnregister: false where the range overlaps one already
// registered / `ptr` starts no registered range.
bool register_host_range(const void* ptr, size_t size);
bool unregister_host_range(const void* ptr);

// Out-of-memory observers (torch.cuda's attachOutOfMemoryObserver): called with the
// device, the bytes requested, the bytes allocated on the device and its free bytes,
// after an allocation failed and before the error is raised, outside allocator locks.
using OutOfMemoryObserver = std::function<void(int64_t device, int64_t alloc,
                                               int64_t device_allocated, int64_t device_free)>;
void attach_out_of_memory_observer(OutOfMemoryObserver observer);

namespace detail {
extern TORCH_MUSA_FAST_TLS thread_local int t_redirect;  // the device, or -1
}  // namespace detail
// While alive, CPU allocations on this thread come from musa `device`'s pool
// (tagged as CPU), so that a host kernel's fresh outputs are device memory and
// can be adopted without a copy.
class KernelAllocationScope {
 public:
  // Only CPU kernels allocate through the CPU allocator on musa's behalf.
  explicit KernelAllocationScope(c10::DeviceIndex device) : prev_(detail::t_redirect) {
    if (C10_LIKELY(config().kernel_type == c10::DeviceType::CPU)) detail::t_redirect = device;
  }
  ~KernelAllocationScope() { detail::t_redirect = prev_; }
  KernelAllocationScope(const KernelAllocationScope&) = delete;
  KernelAllocationScope& operator=(const KernelAllocationScope&) = delete;

 private:
  int prev_;
};
void install_kernel_allocation_redirect();

// Unified memory (PYTORCH_MUSA_ALLOC_CONF=cpu:unified, use_unified_cpu_allocator):
// while on, CPU tensors are made from musa `device`'s pool (tagged CPU; they count
// as that device's memory), so moving them to musa need not copy. -1: off.
void set_unified_cpu_allocator(int device);
int unified_cpu_allocator();
// When `src` (CPU) is unified memory that `dst` (musa, same layout, each the whole
// of its storage) can take over, makes dst's storage share src's bytes and
// returns true: the copy is done without copying.
bool share_unified(const at::Tensor& src, const at::Tensor& dst);

}  // namespace torch_musa

// ---- The real torch_musa's C++ allocator API (CUDA's CUDACachingAllocator) ----
namespace c10::musa::MUSACachingAllocator {

// The allocator serving musa memory (torch.musa.memory's).
inline c10::DeviceAllocator* get() { return &torch_musa::device_allocator(); }
// `nbytes` on the current device, freed with raw_delete.
inline void* raw_alloc(size_t nbytes) { return torch_musa::device_allocator().raw_allocate(nbytes); }
inline void raw_delete(void* ptr) { torch_musa::device_allocator().raw_deallocate(ptr); }
// Returns cached, unused memory to the driver (torch.musa.empty_cache).
inline void emptyCache() { torch_musa::device_allocator().emptyCache(); }

}  // namespace c10::musa::MUSACachingAllocator
