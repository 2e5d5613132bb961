// What the files of the device allocator share; not part of the C++ API
// (MUSACachingAllocator.h is). The allocators are MUSACachingAllocator.cpp (the
// host driver's caching pools), DriverAllocator.cpp (a driver's own) and
// PluggableAllocator.cpp (a user's malloc/free); DeviceAllocator.cpp holds their
// shared base and the choice among them, KernelAllocation.cpp the redirect of host
// kernels' allocations and unified memory, Storage.cpp what musa storages do with
// that memory (sharing a unified CPU tensor's bytes, resizing).
#pragma once

#include "core/MUSACachingAllocator.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <torch/version.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace torch_musa::detail {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kSmallSize = size_t(1) << 20;  // largest small-pool request

// "1.50 MiB", as CUDA's out-of-memory messages write sizes.
std::string format_size(size_t bytes);

// ---- statistics ---------------------------------------------------------------

// The aggregate and the pool's entry. Every malloc/free updates five arrays,
// so this stays inline: the loop over an initializer list it replaced cost
// ~35 instructions a call (700 per alloc+free).
inline __attribute__((always_inline)) void update_stat(StatArray& arr, bool small, int64_t amount) {
  Stat& all = arr[static_cast<size_t>(StatType::AGGREGATE)];
  Stat& pool = arr[static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)];
  if (amount >= 0) {
    all.increase(size_t(amount));
    pool.increase(size_t(amount));
  } else {
    all.decrease(size_t(-amount));
    pool.decrease(size_t(-amount));
  }
}

// DeviceStats counts reserved bytes per private pool from torch 2.13 on; older
// builds (the GPU machine's 2.11) have no such field.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
#define MUSA_PER_POOL_RESERVED_STATS 1
#else
#define MUSA_PER_POOL_RESERVED_STATS 0
#endif

// Every per-pool statistic of a device, for the resets.
template <typename Fn>
void for_each_stat(DeviceStats& s, Fn fn) {
  for (StatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split,
                       &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                       &s.inactive_split_bytes, &s.requested_bytes})
    for (Stat& st : *a) fn(st);
#if MUSA_PER_POOL_RESERVED_STATS
  for (auto& [id, arr] : s.reserved_bytes_by_private_pools)
    for (Stat& st : arr) fn(st);
#endif
  fn(s.oversize_allocations);
  fn(s.oversize_segments);
}

// ---- between the files ------------------------------------------------------------

// The host driver's caching allocator (MUSACachingAllocator.cpp).
CachingAllocator& caching_allocator();
// Unified memory in the caching pools: marks the live block starting at `p` as a
// CPU tensor's memory; the device of such a block starting at `p`, or -1.
void caching_mark_unified(const void* p);
int caching_unified_device_of(const void* p);

// A MUSAPluggableAllocator over `fns` (PluggableAllocator.cpp); never freed.
DeviceAllocator* make_pluggable_allocator(std::shared_ptr<RawAllocatorFns> fns);

// Unified memory (KernelAllocation.cpp): whether any was ever handed out, and the
// musa device whose unified memory starts at `p` (-1: none).
bool unified_memory_used();
int unified_device_of(const void* p);

}  // namespace torch_musa::detail
