// The host driver's device memory: a caching allocator over the driver (the
// other allocators and what they share: AllocatorInternals.h).
//
// It follows CUDA's caching allocator so that sizes and statistics read the
// same: requests round up to 512 bytes (or to a power-of-two division with
// roundup_power2_divisions); requests up to 1 MiB come from 2 MiB segments of
// the small pool, larger ones from the large pool (segments of 20 MiB for
// requests under 10 MiB, else the request rounded up to 2 MiB); a free block
// larger than the request is split and the rest stays cached; freed blocks
// merge with free neighbours; empty_cache returns whole free segments to the
// driver. Blocks of max_split_size or more are never split. Private pools
// (MemPool, graph capture) hold their own segments. Statistics follow
// PyTorch's DeviceStats so torch.musa.memory_* and torch.accelerator.memory_*
// read them unchanged; with history on, blocks and a trace carry stacks.
#include "core/MUSACachingAllocator.h"

#include "core/AllocatorInternals.h"
#include "core/Device.h"
#include "core/MUSAStream.h"

#include <c10/util/Exception.h>
#include <c10/util/flat_hash_map.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>

namespace torch_musa {

using namespace detail;

namespace {

constexpr size_t kMinBlockSize = 512;          // every size rounds to a multiple
constexpr size_t kSmallBuffer = 2 * kSmallSize; // small-pool segment
constexpr size_t kMinLargeAlloc = 10 * kSmallSize;  // below: a 20 MiB segment
constexpr size_t kLargeBuffer = 20 * kSmallSize;
constexpr size_t kRoundLarge = 2 * kSmallSize;  // large segments round to 2 MiB

struct BlockPool;
struct PrivatePool;

struct Block {
  c10::DeviceIndex device;
  int64_t stream;     // current stream id when allocated
  size_t size;        // rounded
  size_t requested = 0;
  BlockPool* pool;
  void* ptr;
  bool allocated = false;
  bool unified = false;   // a CPU tensor's memory (unified memory)
  bool uncached = false;  // taken with caching off: its own segment, returned on free
  Block* prev = nullptr;  // neighbours in the segment
  Block* next = nullptr;
  uint64_t last_used = 0;  // for garbage collection: least recently freed first
  std::shared_ptr<c10::GatheredContext> context;
  bool is_split() const { return prev || next; }
};

struct BySize {
  bool operator()(const Block* a, const Block* b) const {
    if (a->size != b->size) return a->size < b->size;
    return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
  }
};

struct BlockPool {
  BlockPool(bool small, PrivatePool* owner) : is_small(small), owner(owner) {}
  std::set<Block*, BySize> blocks;  // free blocks
  const bool is_small;
  PrivatePool* const owner;  // nullptr: the device's default pool
};

struct PrivatePool {
  explicit PrivatePool(c10::MempoolId_t id) : id(id) {}
  c10::MempoolId_t id;
  int use_count = 1;
  int segments = 0;
  BlockPool large{false, this};
  BlockPool small{true, this};
  std::shared_ptr<RawAllocatorFns> fns;  // null: the driver's memory
  bool use_on_oom = false;
  bool no_split = false;
};

struct Segment {
  c10::DeviceIndex device;
  size_t size;
  BlockPool* pool;
  int64_t stream;
  std::shared_ptr<c10::GatheredContext> context;
};

struct Route {
  c10::MempoolId_t id;
  PoolFilter filter;
};

struct PerDevice {
  DeviceStats stats;
  BlockPool large{false, nullptr};
  BlockPool small{true, nullptr};
  double fraction = 1.0;
  std::map<c10::MempoolId_t, std::unique_ptr<PrivatePool>> pools;
  std::vector<Route> routes;  // newest last
  std::vector<TraceEntry> trace;  // a ring of at most max_entries
  size_t trace_next = 0;
};

std::mutex g_mu;
// Every block, free or not, by address. A hash map, not a tree: a small
// request splits a block and its free merges it back, so each malloc/free
// pair inserts, finds and erases here (a std::map cost ~300 instructions and
// a node allocation per pair).
// Never destroyed: tensors freed during interpreter exit still look it up.
ska::flat_hash_map<uintptr_t, Block*>& g_blocks = *new ska::flat_hash_map<uintptr_t, Block*>();
std::map<uintptr_t, Segment> g_segments;  // by base address
PerDevice g_dev[kMaxDevices];
AllocatorSettings g_settings;
HistorySettings g_history;
std::atomic<int> g_context_level{0};  // RecordContext, read without the lock
std::atomic<bool> g_context_cpp{false};
uint64_t g_tick = 0;
bool g_used = false;
// caching_allocator_enable(False): new default-pool allocations get a segment of
// their own that goes back to the driver when freed (read without the lock).
std::atomic<bool> g_caching{true};

// Recycled Block objects and free-list nodes (under g_mu): splitting a block
// and merging it back on free would otherwise cost two heap allocations and
// two frees per malloc/free pair.
std::vector<Block*>& g_spare_blocks = *new std::vector<Block*>();
std::vector<std::set<Block*, BySize>::node_type>& g_spare_nodes =
    *new std::vector<std::set<Block*, BySize>::node_type>();
constexpr size_t kMaxSpare = 1024;

Block* make_block(c10::DeviceIndex d, int64_t stream, size_t size, BlockPool* pool, void* ptr) {
  if (g_spare_blocks.empty()) return new Block{d, stream, size, 0, pool, ptr};
  Block* b = g_spare_blocks.back();
  g_spare_blocks.pop_back();
  *b = Block{d, stream, size, 0, pool, ptr};
  return b;
}

void drop_block(Block* b) {
  if (g_spare_blocks.size() >= kMaxSpare) { delete b; return; }
  b->context.reset();
  g_spare_blocks.push_back(b);
}

// ---- sizes ------------------------------------------------------------------

size_t roundup_divisions(size_t size) {
  const size_t log_size = 63 - __builtin_clzll(size);
  const size_t start = 20;  // intervals from 1 MiB, 16 of them
  size_t index = log_size > start ? log_size - start : 0;
  index = std::min<size_t>(index, g_settings.roundup_power2_divisions.size() - 1);
  return g_settings.roundup_power2_divisions[index];
}

size_t round_size(size_t size) {
  if (size < kMinBlockSize) return kMinBlockSize;
  const size_t divisions = roundup_divisions(size);
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    // The next of `divisions` equal steps between two powers of two.
    if ((size & (size - 1)) == 0) return size;
    const size_t floor2 = size_t(1) << (63 - __builtin_clzll(size));
    const size_t step = floor2 / divisions;
    if (step == 0) return floor2 << 1;
    const size_t down = size & ~(step - 1);
    return down == size ? size : down + step;
  }
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

size_t segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

// ---- statistics ---------------------------------------------------------------

int64_t reserved(c10::DeviceIndex d) {
  return g_dev[d].stats.reserved_bytes[0].current;
}

int64_t total_reserved() {
  int64_t sum = 0;
  for (int d = 0; d < device_count(); ++d) sum += reserved(d);
  return sum;
}

int64_t device_limit(c10::DeviceIndex d) {
  return static_cast<int64_t>(config().capacity_bytes * g_dev[d].fraction);
}

// ---- history ------------------------------------------------------------------

// Outside the lock (gathering Python frames takes the GIL).
std::shared_ptr<c10::GatheredContext> gather_stacks() {
  return torch::CapturedTraceback::gather(true, true, g_context_cpp.load());
}
inline __attribute__((always_inline)) std::shared_ptr<c10::GatheredContext> gather_context(
    RecordContext at_least) {
  if (C10_LIKELY(g_context_level.load(std::memory_order_relaxed) < int(at_least))) return nullptr;
  return gather_stacks();
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// Caller holds g_mu.
void record_trace_entry(TraceEntry::Action action, c10::DeviceIndex d, uintptr_t addr,
                        size_t size, int64_t stream, c10::MempoolId_t pool,
                        std::shared_ptr<c10::GatheredContext> ctx) {
  for (auto a : g_history.skip) if (a == action) return;
  TraceEntry te(action, d, addr, size, reinterpret_cast<void*>(stream), pool, 0,
                std::move(ctx));
  te.time_.t_ = now_us();
  PerDevice& pd = g_dev[d];
  if (pd.trace.size() < g_history.max_entries) {
    pd.trace.emplace_back(std::move(te));
  } else if (g_history.max_entries > 0) {
    pd.trace[pd.trace_next] = std::move(te);
    pd.trace_next = (pd.trace_next + 1) % g_history.max_entries;
  }
}

// Caller holds g_mu. Inline: with the trace off (the usual case) a malloc/free
// pays one load per event instead of a call.
inline __attribute__((always_inline)) void record_trace(TraceEntry::Action action, c10::DeviceIndex d,
                                    uintptr_t addr, size_t size, int64_t stream,
                                    c10::MempoolId_t pool,
                                    std::shared_ptr<c10::GatheredContext> ctx) {
  if (C10_LIKELY(!g_history.trace)) return;
  record_trace_entry(action, d, addr, size, stream, pool, std::move(ctx));
}

// torch.profiler(profile_memory=True)'s [memory] events, as CUDA's allocator reports them.
void report_to_profiler(const Block* b, int64_t delta) {
  if (C10_LIKELY(!c10::memoryProfilingEnabled())) return;
  const DeviceStats& s = g_dev[b->device].stats;
  c10::reportMemoryUsageToProfiler(b->ptr, delta, size_t(s.allocated_bytes[0].current),
                                   size_t(s.reserved_bytes[0].current),
                                   c10::Device(c10::DeviceType::PrivateUse1, b->device));
}

c10::MempoolId_t pool_id(const BlockPool* p) {
  return p->owner ? p->owner->id : c10::MempoolId_t{0, 0};
}

// ---- pools ---------------------------------------------------------------------

// Caller holds g_mu. A free piece of a split segment counts as inactive_split. A split
// or a merge changes the count by its net amount, once, as CUDA's allocator does (its
// accumulated allocated/freed figures count net changes, not each block in and out).
void change_inactive(const Block* b, int64_t blocks, int64_t bytes) {
  PerDevice& pd = g_dev[b->device];
  if (blocks) update_stat(pd.stats.inactive_split, b->pool->is_small, blocks);
  if (bytes) update_stat(pd.stats.inactive_split_bytes, b->pool->is_small, bytes);
}

// A free block enters or leaves its pool.
void count_inactive(Block* b, int sign) {
  if (b->is_split()) change_inactive(b, sign, sign * int64_t(b->size));
}

void insert_free(Block* b, bool count = true) {
  auto& blocks = b->pool->blocks;
  if (g_spare_nodes.empty()) {
    blocks.insert(b);
  } else {
    auto node = std::move(g_spare_nodes.back());
    g_spare_nodes.pop_back();
    node.value() = b;
    blocks.insert(std::move(node));
  }
  if (count) count_inactive(b, 1);
}

void erase_free(Block* b, bool count = true) {
  auto node = b->pool->blocks.extract(b);
  if (node && g_spare_nodes.size() < kMaxSpare) g_spare_nodes.push_back(std::move(node));
  if (count) count_inactive(b, -1);
}

// Caller holds g_mu; `old` is free in its pool at `it` and leaves it, `neu`
// (same pool, not in it, its size and address final) enters. A split or a
// merge mostly keeps the free list's order (the remainder of a split is just
// smaller, a merged block just larger than its neighbours in the list), and
// then the node is re-pointed in place instead of two tree operations.
void replace_free(std::set<Block*, BySize>::iterator it, Block* neu) {
  auto& blocks = neu->pool->blocks;
  const BySize less;
  const bool in_order = (it == blocks.begin() || less(*std::prev(it), neu)) &&
                        (std::next(it) == blocks.end() || less(neu, *std::next(it)));
  if (in_order) {
    const_cast<Block*&>(*it) = neu;
  } else {
    auto node = blocks.extract(it);
    node.value() = neu;
    blocks.insert(std::move(node));
  }
}

// Caller holds g_mu. The best-fitting free block, honouring max_split_size:
// requests below it never take an oversize block, and oversize requests take
// one only within kLargeBuffer of their size.
Block* find_free(BlockPool& pool, size_t size,
                 std::set<Block*, BySize>::iterator* at = nullptr) {
  Block key{0, 0, size, 0, &pool, nullptr};
  auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end()) return nullptr;
  Block* b = *it;
  const size_t max_split = g_settings.max_split_size;
  if (size < max_split && b->size >= max_split) return nullptr;
  if (size >= max_split && b->size >= size + kLargeBuffer) return nullptr;
  if (at) *at = it;
  return b;
}

bool should_split(const Block* b, size_t size) {
  if (b->pool->owner && b->pool->owner->no_split) return false;
  const size_t rest = b->size - size;
  if (b->pool->is_small) return rest >= kMinBlockSize;
  return size < g_settings.max_split_size && rest > kSmallSize;
}

void free_segment_memory(const BlockPool* pool, c10::DeviceIndex d, void* p, size_t size,
                         int64_t stream) {
  if (pool->owner && pool->owner->fns)
    pool->owner->fns->free(p, ssize_t(size), d, reinterpret_cast<void*>(stream));
  else
    driver().free(d, p, size);
}

// Caller holds g_mu. Returns a whole free segment to the driver.
void release_segment(Block* b) {
  TORCH_INTERNAL_ASSERT(!b->allocated && !b->is_split());
  PerDevice& pd = g_dev[b->device];
  const bool small = b->pool->is_small;
  erase_free(b);
  update_stat(pd.stats.reserved_bytes, small, -int64_t(b->size));
  update_stat(pd.stats.segment, small, -1);
  if (b->size >= g_settings.max_split_size) pd.stats.oversize_segments.decrease(1);
  pd.stats.num_device_free++;
  if (PrivatePool* owner = b->pool->owner) {
    owner->segments--;
#if MUSA_PER_POOL_RESERVED_STATS
    update_stat(pd.stats.reserved_bytes_by_private_pools[owner->id], small, -int64_t(b->size));
#endif
  }
  record_trace(TraceEntry::SEGMENT_FREE, b->device, reinterpret_cast<uintptr_t>(b->ptr),
               b->size, b->stream, pool_id(b->pool), nullptr);
  g_blocks.erase(reinterpret_cast<uintptr_t>(b->ptr));
  g_segments.erase(reinterpret_cast<uintptr_t>(b->ptr));
  free_segment_memory(b->pool, b->device, b->ptr, b->size, b->stream);
  drop_block(b);
}

// Caller holds g_mu. Releases the pool's whole free segments.
void release_pool_blocks(BlockPool& pool) {
  for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
    Block* b = *it++;
    if (!b->is_split()) release_segment(b);
  }
}

// Caller holds g_mu. The default pools and the private pools nobody uses.
void release_cached(c10::DeviceIndex d) {
  PerDevice& pd = g_dev[d];
  release_pool_blocks(pd.large);
  release_pool_blocks(pd.small);
  for (auto it = pd.pools.begin(); it != pd.pools.end();) {
    PrivatePool& p = *it->second;
    if (p.use_count == 0) {
      release_pool_blocks(p.large);
      release_pool_blocks(p.small);
    }
    it = (p.use_count == 0 && p.segments == 0) ? pd.pools.erase(it) : std::next(it);
  }
}

// Caller holds g_mu. Frees cached oversize blocks of the pool (smallest that
// is enough, else the largest ones) so that `size` more bytes fit.
bool release_oversize(BlockPool& pool, size_t size) {
  if (g_settings.max_split_size == SIZE_MAX) return false;
  std::vector<Block*> big;
  for (Block* b : pool.blocks)
    if (b->size >= g_settings.max_split_size && !b->is_split()) big.push_back(b);
  if (big.empty()) return false;
  for (Block* b : big)
    if (b->size >= size) { release_segment(b); return true; }
  size_t freed = 0;
  for (auto it = big.rbegin(); it != big.rend() && freed < size; ++it) {
    freed += (*it)->size;
    release_segment(*it);
  }
  return true;
}

// Caller holds g_mu. Above the threshold, frees whole free segments of the
// default pools, least recently used first, until reserved memory is under it.
void garbage_collect(c10::DeviceIndex d) {
  const double gc = g_settings.garbage_collection_threshold;
  if (gc <= 0) return;
  const int64_t threshold = int64_t(gc * device_limit(d));
  if (reserved(d) <= threshold) return;
  PerDevice& pd = g_dev[d];
  std::vector<Block*> free;
  for (BlockPool* p : {&pd.large, &pd.small})
    for (Block* b : p->blocks) if (!b->is_split()) free.push_back(b);
  std::sort(free.begin(), free.end(),
            [](const Block* a, const Block* b) { return a->last_used < b->last_used; });
  for (Block* b : free) {
    if (reserved(d) <= threshold) break;
    release_segment(b);
  }
}

enum class Shortage { kNone, kDevice, kHost, kDriver };

// Caller holds g_mu. A new segment, placed free in `pool`; nullptr and why not.
Block* new_segment(c10::DeviceIndex d, BlockPool& pool, size_t size, int64_t stream,
                   const std::shared_ptr<c10::GatheredContext>& ctx, Shortage* why) {
  PerDevice& pd = g_dev[d];
  if (reserved(d) + int64_t(size) > device_limit(d)) { *why = Shortage::kDevice; return nullptr; }
  const int64_t host = config().host_limit_bytes;
  if (host > 0 && total_reserved() + int64_t(size) > host) { *why = Shortage::kHost; return nullptr; }
  void* p = pool.owner && pool.owner->fns
                ? pool.owner->fns->alloc(ssize_t(size), d, reinterpret_cast<void*>(stream))
                : driver().malloc(d, size);
  if (!p) { *why = Shortage::kDriver; return nullptr; }
  g_used = true;
  Block* b = make_block(d, stream, size, &pool, p);
  g_blocks.emplace(reinterpret_cast<uintptr_t>(p), b);
  g_segments.emplace(reinterpret_cast<uintptr_t>(p), Segment{d, size, &pool, stream, ctx});
  update_stat(pd.stats.reserved_bytes, pool.is_small, int64_t(size));
  update_stat(pd.stats.segment, pool.is_small, 1);
  if (size >= g_settings.max_split_size) pd.stats.oversize_segments.increase(1);
  pd.stats.num_device_alloc++;
  if (pool.owner) {
    pool.owner->segments++;
#if MUSA_PER_POOL_RESERVED_STATS
    update_stat(pd.stats.reserved_bytes_by_private_pools[pool.owner->id], pool.is_small, int64_t(size));
#endif
  }
  record_trace(TraceEntry::SEGMENT_ALLOC, d, reinterpret_cast<uintptr_t>(p), size, stream,
               pool_id(&pool), ctx);
  insert_free(b);
  return b;
}

// Caller holds g_mu. The pool an allocation on `d` from `stream` goes to.
BlockPool& choose_pool(c10::DeviceIndex d, c10::Stream stream, size_t size) {
  PerDevice& pd = g_dev[d];
  const bool small = size <= kSmallSize;
  for (auto it = pd.routes.rbegin(); it != pd.routes.rend(); ++it) {
    if (it->filter(stream)) {
      PrivatePool& p = *pd.pools.at(it->id);
      return small ? p.small : p.large;
    }
  }
  return small ? pd.small : pd.large;
}

[[noreturn]] void raise_oom(c10::DeviceIndex d, size_t size, Shortage why, int64_t stream,
                            const BlockPool& pool) {
  PerDevice& pd = g_dev[d];
  pd.stats.num_ooms++;
  const int64_t limit = device_limit(d);
  const int64_t alloc = pd.stats.allocated_bytes[0].current;
  const int64_t res = reserved(d);
  const size_t device_free = size_t(std::max<int64_t>(0, config().capacity_bytes - res));
  record_trace(TraceEntry::OOM, d, device_free, size, stream, pool_id(&pool), nullptr);
  std::ostringstream os;
  os << "MUSA out of memory. Tried to allocate " << format_size(size)
     << ". musa:" << int(d) << " has a total capacity of "
     << format_size(config().capacity_bytes) << " (hardware profile "
     << config().profile << ") of which " << format_size(device_free)
     << " is free. Of the allocated memory " << format_size(alloc)
     << " is allocated by PyTorch, and " << format_size(res - alloc)
     << " is reserved by PyTorch but unallocated.";
  if (pd.fraction < 1.0)
    os << " This process is limited to " << format_size(limit)
       << " by set_per_process_memory_fraction(" << pd.fraction << ").";
  if (why == Shortage::kHost)
    os << " The host driver keeps device memory in host RAM and this would exceed "
          "the share of host memory it may use (TORCH_MUSA_HOST_MEMORY_LIMIT).";
  if (why == Shortage::kDriver) os << " The driver could not provide the memory.";
  if (res - alloc > int64_t(size) && g_settings.max_split_size == SIZE_MAX)
    os << " If reserved but unallocated memory is large, try "
          "PYTORCH_MUSA_ALLOC_CONF=max_split_size_mb:N to avoid fragmentation.";
  os << " Free tensors (del, then torch.musa.empty_cache()) or use smaller "
        "batches; the device stays usable.";
  TORCH_CHECK_WITH(OutOfMemoryError, false, os.str());
}

// Caller holds g_mu.
Block* malloc_block(c10::DeviceIndex d, size_t nbytes,
                    std::shared_ptr<c10::GatheredContext> ctx) {
  PerDevice& pd = g_dev[d];
  const c10::Stream stream = current_stream(d);
  const int64_t sid = stream.id();
  const size_t size = round_size(nbytes);
  BlockPool& pool = choose_pool(d, stream, size);
  // Caching off: no cached block, a segment of exactly the rounded size. A private
  // pool (MemPool, graph capture) keeps its blocks: a graph refers to them.
  const bool uncached = !pool.owner && !g_caching.load(std::memory_order_relaxed);
  const size_t seg = uncached ? size : segment_size(size);
  std::set<Block*, BySize>::iterator at;
  Block* b = uncached ? nullptr : find_free(pool, size, &at);
  if (!b) {
    garbage_collect(d);
    Shortage why = Shortage::kNone;
    b = new_segment(d, pool, seg, sid, ctx, &why);
    if (!b && release_oversize(pool, size)) b = new_segment(d, pool, seg, sid, ctx, &why);
    if (!b) {
      pd.stats.num_alloc_retries++;
      for (int o = 0; o < device_count(); ++o) release_cached(o);
      b = new_segment(d, pool, seg, sid, ctx, &why);
    }
    if (!b) {  // pools that offered themselves for out-of-memory
      for (auto& [id, p] : pd.pools) {
        if (!p->use_on_oom || p.get() == pool.owner) continue;
        b = find_free(size <= kSmallSize ? p->small : p->large, size);
        if (b) break;
      }
    }
    if (!b) raise_oom(d, size, why, sid, pool);
    at = b->pool->blocks.find(b);
  }
  if (should_split(b, size)) {
    // The remainder takes b's place in the free list (erase_free(b) and
    // insert_free(rest), without the tree operations when the order allows): an
    // inactive piece shrinks by `size`, or an unsplit block leaves one behind.
    const bool was_split = b->is_split();
    Block* rest = make_block(d, b->stream, b->size - size, b->pool,
                             static_cast<char*>(b->ptr) + size);
    replace_free(at, rest);
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    g_blocks.emplace(reinterpret_cast<uintptr_t>(rest->ptr), rest);
    if (was_split) change_inactive(rest, 0, -int64_t(size));
    else change_inactive(rest, 1, int64_t(rest->size));
  } else {
    erase_free(b);
  }
  const bool small = b->pool->is_small;
  b->allocated = true;
  b->uncached = uncached && b->pool == &pool && !b->is_split();
  b->requested = nbytes;
  b->stream = sid;
  if (g_context_level.load() >= int(RecordContext::STATE)) b->context = ctx;
  update_stat(pd.stats.allocation, small, 1);
  update_stat(pd.stats.active, small, 1);
  update_stat(pd.stats.allocated_bytes, small, int64_t(b->size));
  update_stat(pd.stats.active_bytes, small, int64_t(b->size));
  update_stat(pd.stats.requested_bytes, small, int64_t(nbytes));
  if (b->size >= g_settings.max_split_size) pd.stats.oversize_allocations.increase(1);
  record_trace(TraceEntry::ALLOC, d, reinterpret_cast<uintptr_t>(b->ptr), b->size, sid,
               pool_id(b->pool),
               g_context_level.load() >= int(RecordContext::ALLOC) ? ctx : nullptr);
  report_to_profiler(b, int64_t(b->size));
  return b;
}

// Caller holds g_mu. Merges `b` with its free neighbours and caches it.
void free_block(Block* b, std::shared_ptr<c10::GatheredContext> ctx) {
  PerDevice& pd = g_dev[b->device];
  const bool small = b->pool->is_small;
  const auto id = pool_id(b->pool);
  record_trace(TraceEntry::FREE_REQUESTED, b->device, reinterpret_cast<uintptr_t>(b->ptr),
               b->size, b->stream, id, ctx);
  update_stat(pd.stats.allocation, small, -1);
  update_stat(pd.stats.active, small, -1);
  update_stat(pd.stats.allocated_bytes, small, -int64_t(b->size));
  update_stat(pd.stats.active_bytes, small, -int64_t(b->size));
  update_stat(pd.stats.requested_bytes, small, -int64_t(b->requested));
  if (b->size >= g_settings.max_split_size) pd.stats.oversize_allocations.decrease(1);
  // Kernels run eagerly on the host: the block is free now, not after a stream.
  record_trace(TraceEntry::FREE_COMPLETED, b->device, reinterpret_cast<uintptr_t>(b->ptr),
               b->size, b->stream, id, ctx);
  report_to_profiler(b, -int64_t(b->size));
  b->allocated = false;
  b->unified = false;
  b->requested = 0;
  b->context.reset();
  auto merge = [b](Block* n) {
    if (n == b->prev) {
      g_blocks.erase(reinterpret_cast<uintptr_t>(b->ptr));
      b->ptr = n->ptr;
      b->prev = n->prev;
      if (b->prev) b->prev->next = b;
      g_blocks[reinterpret_cast<uintptr_t>(b->ptr)] = b;
    } else {
      b->next = n->next;
      if (b->next) b->next->prev = b;
      g_blocks.erase(reinterpret_cast<uintptr_t>(n->ptr));
    }
    b->size += n->size;
  };
  Block* const lo = b->prev && !b->prev->allocated ? b->prev : nullptr;
  Block* const hi = b->next && !b->next->allocated ? b->next : nullptr;
  // inactive_split's net change: the free pieces merged away leave it, and b enters
  // it if it is still a piece of its segment.
  int64_t blocks = 0, bytes = 0;
  for (Block* n : {lo, hi}) {
    if (!n) continue;
    blocks -= 1;
    bytes -= int64_t(n->size);
  }
  if ((lo == nullptr) != (hi == nullptr)) {
    // One free neighbour (a small block freed back into its segment's
    // remainder): the merged block takes the neighbour's place in the free list.
    Block* n = lo ? lo : hi;
    auto it = n->pool->blocks.find(n);
    merge(n);
    b->last_used = ++g_tick;
    replace_free(it, b);
    drop_block(n);
  } else {
    for (Block* n : {lo, hi}) {
      if (!n) continue;
      erase_free(n, /*count=*/false);
      merge(n);
      drop_block(n);
    }
    b->last_used = ++g_tick;
    insert_free(b, /*count=*/false);
  }
  if (b->is_split()) {
    blocks += 1;
    bytes += int64_t(b->size);
  }
  change_inactive(b, blocks, bytes);
  if (b->uncached) {  // taken with caching off: back to the driver now
    b->uncached = false;
    if (!b->is_split()) release_segment(b);
    return;
  }
  // A private pool nobody uses any more goes once its last block is back.
  if (PrivatePool* owner = b->pool->owner) {
    if (owner->use_count == 0 && !b->is_split()) {
      release_pool_blocks(owner->large);
      release_pool_blocks(owner->small);
      if (owner->segments == 0) pd.pools.erase(owner->id);
    }
  }
}

void raw_free(void* ptr) {
  if (!ptr) return;
  auto ctx = gather_context(RecordContext::ALL);
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_blocks.find(reinterpret_cast<uintptr_t>(ptr));
  TORCH_INTERNAL_ASSERT(it != g_blocks.end() && it->second->allocated,
                        "musa: freeing unknown pointer");
  free_block(it->second, std::move(ctx));
}

PrivatePool& pool_at(c10::DeviceIndex d, c10::MempoolId_t id) {
  auto it = g_dev[d].pools.find(id);
  TORCH_CHECK(it != g_dev[d].pools.end(), "musa:", int(d), " has no memory pool (",
              id.first, ", ", id.second, "); create it with torch.musa.MemPool()");
  return *it->second;
}

}  // namespace

c10::DataPtr CachingAllocator::allocate_bytes(c10::DeviceIndex d, size_t nbytes,
                                             c10::Device tag) {
  auto ctx = gather_context(RecordContext::STATE);
  std::lock_guard<std::mutex> g(g_mu);
  Block* b = malloc_block(d, nbytes, std::move(ctx));
  return c10::DataPtr(b->ptr, b->ptr, &raw_free, tag);
}

c10::DeleterFnPtr CachingAllocator::raw_deleter() const {
  return &raw_free;
}

// Kernels run eagerly on the host: a block is free when its tensor is.
void CachingAllocator::recordStream(const c10::DataPtr&, c10::Stream) {}

void set_caching_enabled(bool on) { g_caching.store(on); }
bool caching_enabled() { return g_caching.load(); }

void CachingAllocator::emptyCache(c10::MempoolId_t id) {
  std::lock_guard<std::mutex> g(g_mu);
  for (int d = 0; d < device_count(); ++d) {
    if (id == c10::MempoolId_t{0, 0}) {
      release_cached(d);
      continue;
    }
    auto it = g_dev[d].pools.find(id);
    if (it == g_dev[d].pools.end()) continue;
    release_pool_blocks(it->second->large);
    release_pool_blocks(it->second->small);
    if (it->second->use_count == 0 && it->second->segments == 0) g_dev[d].pools.erase(it);
  }
}

DeviceStats CachingAllocator::getDeviceStats(c10::DeviceIndex d) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  DeviceStats s = g_dev[d].stats;
  s.max_split_size = g_settings.max_split_size == SIZE_MAX
                         ? 0 : int64_t(g_settings.max_split_size);
  return s;
}

void CachingAllocator::resetAccumulatedStats(c10::DeviceIndex d) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  DeviceStats& s = g_dev[d].stats;
  for_each_stat(s, [](Stat& st) { st.reset_accumulated(); });
  s.num_alloc_retries = s.num_ooms = 0;
  s.num_device_alloc = s.num_device_free = 0;
}

void CachingAllocator::resetPeakStats(c10::DeviceIndex d) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  for_each_stat(g_dev[d].stats, [](Stat& st) { st.reset_peak(); });
}

std::pair<size_t, size_t> CachingAllocator::getMemoryInfo(c10::DeviceIndex d) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  const int64_t total = config().capacity_bytes;
  return {size_t(std::max<int64_t>(0, total - reserved(d))), size_t(total)};
}

void CachingAllocator::set_memory_fraction(double fraction, c10::DeviceIndex d) {
  check_memory_fraction(fraction, d);
  std::lock_guard<std::mutex> g(g_mu);
  g_dev[d].fraction = fraction;
}

double CachingAllocator::memory_fraction(c10::DeviceIndex d) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  return g_dev[d].fraction;
}

void CachingAllocator::set_settings(const AllocatorSettings& s) {
  TORCH_CHECK(s.roundup_power2_divisions.size() == 16,
              "roundup_power2_divisions needs 16 intervals, got ",
              s.roundup_power2_divisions.size());
  std::lock_guard<std::mutex> g(g_mu);
  g_settings = s;
}

MemorySnapshot CachingAllocator::snapshot(c10::MempoolId_t only) {
  std::lock_guard<std::mutex> g(g_mu);
  MemorySnapshot out;
  for (const auto& [addr, seg] : g_segments) {
    const auto owner = pool_id(seg.pool);
    if (only != c10::MempoolId_t{0, 0} && owner != only) continue;
    SegmentInfo& si = out.segments.emplace_back();
    si.device = seg.device;
    si.address = addr;
    si.total_size = seg.size;
    si.stream = reinterpret_cast<void*>(seg.stream);
    si.is_large = !seg.pool->is_small;
    si.owner_private_pool_id = owner;
    si.context_when_allocated = seg.context;
    for (Block* b = g_blocks.at(addr); b; b = b->next) {
      c10::CachingDeviceAllocator::BlockInfo& bi = si.blocks.emplace_back();
      bi.size = b->size;
      bi.requested_size = b->requested;
      bi.allocated = bi.active = b->allocated;
      bi.context_when_allocated = b->context;
      if (b->allocated) {
        si.allocated_size += b->size;
        si.active_size += b->size;
        si.requested_size += b->requested;
      }
    }
  }
  for (int d = 0; d < device_count(); ++d) {
    record_trace(TraceEntry::SNAPSHOT, c10::DeviceIndex(d), 0, 0, 0, {0, 0}, nullptr);
    const PerDevice& pd = g_dev[d];
    auto& trace = out.device_traces.emplace_back();
    // Oldest first: the ring's tail, then its head.
    trace.insert(trace.end(), pd.trace.begin() + pd.trace_next, pd.trace.end());
    trace.insert(trace.end(), pd.trace.begin(), pd.trace.begin() + pd.trace_next);
  }
  return out;
}

void CachingAllocator::record_history(const HistorySettings& s) {
  std::lock_guard<std::mutex> g(g_mu);
  if (s.clear || !s.trace)
    for (PerDevice& pd : g_dev) { pd.trace.clear(); pd.trace_next = 0; }
  if (s.max_entries < g_history.max_entries)
    for (PerDevice& pd : g_dev) {  // keep the newest
      std::vector<TraceEntry> keep;
      const size_t n = pd.trace.size();
      for (size_t i = n > s.max_entries ? n - s.max_entries : 0; i < n; ++i)
        keep.push_back(pd.trace[(pd.trace_next + i) % n]);
      pd.trace = std::move(keep);
      pd.trace_next = 0;
    }
  g_history = s;
  g_context_cpp = s.cpp;
  g_context_level = s.enabled ? int(s.context) : 0;
}

void CachingAllocator::create_pool(c10::DeviceIndex d, c10::MempoolId_t id,
                                   std::shared_ptr<RawAllocatorFns> fns, bool use_on_oom,
                                   bool no_split) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  auto& slot = g_dev[d].pools[id];
  if (slot) {
    slot->use_count++;
    return;
  }
  slot = std::make_unique<PrivatePool>(id);
  slot->fns = std::move(fns);
  slot->use_on_oom = use_on_oom;
  slot->no_split = no_split;
}

void CachingAllocator::begin_allocate_to_pool(c10::DeviceIndex d, c10::MempoolId_t id,
                                              PoolFilter filter) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  auto& slot = g_dev[d].pools[id];
  if (!slot) slot = std::make_unique<PrivatePool>(id);  // a graph's pool, made on first use
  else slot->use_count++;
  g_dev[d].routes.push_back({id, std::move(filter)});
}

void CachingAllocator::end_allocate_to_pool(c10::DeviceIndex d, c10::MempoolId_t id) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  auto& routes = g_dev[d].routes;
  for (auto it = routes.rbegin(); it != routes.rend(); ++it) {
    if (it->id == id) {
      routes.erase(std::next(it).base());
      return;
    }
  }
  TORCH_CHECK(false, "musa:", int(d), " is not allocating to memory pool (", id.first, ", ",
              id.second, ")");
}

void CachingAllocator::release_pool(c10::DeviceIndex d, c10::MempoolId_t id) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  PrivatePool& p = pool_at(d, id);
  TORCH_CHECK(p.use_count > 0, "memory pool (", id.first, ", ", id.second,
              ") released more often than used");
  if (--p.use_count > 0) return;
  release_pool_blocks(p.large);
  release_pool_blocks(p.small);
  if (p.segments == 0) g_dev[d].pools.erase(id);
}

int CachingAllocator::pool_use_count(c10::DeviceIndex d, c10::MempoolId_t id) {
  check_device(d);
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_dev[d].pools.find(id);
  return it == g_dev[d].pools.end() ? 0 : it->second->use_count;
}

bool CachingAllocator::used() const {
  std::lock_guard<std::mutex> g(g_mu);
  return g_used;
}

int CachingAllocator::device_of(const void* ptr) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_segments.upper_bound(p);
  if (it == g_segments.begin()) return -1;
  --it;
  return p < it->first + it->second.size ? it->second.device : -1;
}

bool CachingAllocator::is_live(const void* ptr) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_blocks.find(reinterpret_cast<uintptr_t>(ptr));
  return it != g_blocks.end() && it->second->allocated;
}

CachingAllocator& detail::caching_allocator() {
  static CachingAllocator caching;
  return caching;
}

void detail::caching_mark_unified(const void* p) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_blocks.find(reinterpret_cast<uintptr_t>(p));
  if (it != g_blocks.end()) it->second->unified = true;
}

int detail::caching_unified_device_of(const void* p) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_blocks.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_blocks.end() || !it->second->allocated || !it->second->unified) return -1;
  return it->second->device;
}

}  // namespace torch_musa
