// Python bindings of musa memory beyond DeviceStats: snapshots and history in
// torch.cuda.memory._snapshot()'s format, memory pools, a user's allocator,
// raw allocations, and synchronize() calls that a Ctrl-C interrupts.
#include "core/MUSACachingAllocator.h"
#include "aten/kernel_call.h"
#include "core/Device.h"
#include "core/MUSAStream.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Export.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/extension.h>
#include <c10/util/thread_name.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <pthread.h>

namespace torch {  // libtorch_python's (its header needs nlohmann/json, not shipped)
TORCH_API std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
TORCH_PYTHON_API void freeDeadCapturedTracebackFrames();
TORCH_PYTHON_API void installCapturedTracebackPython();
}  // namespace torch

namespace torch_musa {
namespace {

using c10::CachingDeviceAllocator::TraceEntry;

const char* action_name(TraceEntry::Action a) {
  switch (a) {
    case TraceEntry::ALLOC: return "alloc";
    case TraceEntry::FREE_REQUESTED: return "free_requested";
    case TraceEntry::FREE_COMPLETED: return "free_completed";
    case TraceEntry::SEGMENT_ALLOC: return "segment_alloc";
    case TraceEntry::SEGMENT_FREE: return "segment_free";
    case TraceEntry::SEGMENT_MAP: return "segment_map";
    case TraceEntry::SEGMENT_UNMAP: return "segment_unmap";
    case TraceEntry::SNAPSHOT: return "snapshot";
    case TraceEntry::OOM: return "oom";
  }
  return "unknown";
}

c10::MempoolId_t to_id(const py::tuple& t) {
  if (t.size() != 2) {
    // (py::str(t) is ambiguous with some pybind11 versions: the GPU machine's)
    const std::string got = py::repr(t).cast<std::string>();
    TORCH_CHECK(false, "a memory pool id is a tuple of two ints, got ", got);
  }
  return {t[0].cast<c10::CaptureId_t>(), t[1].cast<c10::CaptureId_t>()};
}

// Frames of every context, symbolized together (frames shared between
// stacks are looked up once).
struct Frames {
  std::vector<torch::CapturedTraceback*> pending;
  std::vector<py::dict> targets;
  void add(py::dict d, const std::shared_ptr<c10::GatheredContext>& ctx) {
    if (!ctx) {
      d["frames"] = py::list();
      return;
    }
    pending.push_back(torch::getCapturedTracebackFromContext(ctx));
    targets.push_back(std::move(d));
  }
  void resolve() {
    if (pending.empty()) return;
    auto symbolized = torch::py_symbolize(pending);
    for (size_t i = 0; i < targets.size(); ++i) targets[i]["frames"] = symbolized[i];
  }
};

py::dict snapshot(std::optional<py::tuple> pool, bool include_traces) {
  const c10::MempoolId_t id = pool ? to_id(*pool) : c10::MempoolId_t{0, 0};
  MemorySnapshot s = device_allocator().snapshot(id);
  Frames frames;
  py::list segments;
  for (const auto& seg : s.segments) {
    py::dict d;
    d["device"] = int(seg.device);
    d["address"] = seg.address;
    d["total_size"] = seg.total_size;
    d["allocated_size"] = seg.allocated_size;
    d["active_size"] = seg.active_size;
    d["requested_size"] = seg.requested_size;
    d["stream"] = reinterpret_cast<int64_t>(seg.stream);
    d["segment_type"] = seg.is_large ? "large" : "small";
    d["segment_pool_id"] = py::make_tuple(seg.owner_private_pool_id.first,
                                          seg.owner_private_pool_id.second);
    d["is_expandable"] = seg.is_expandable;
    frames.add(d, seg.context_when_allocated);
    py::list blocks;
    size_t addr = seg.address;
    for (const auto& b : seg.blocks) {
      py::dict bd;
      bd["address"] = addr;
      bd["size"] = b.size;
      bd["requested_size"] = b.requested_size;
      bd["state"] = b.allocated ? "active_allocated" : "inactive";
      frames.add(bd, b.context_when_allocated);
      blocks.append(bd);
      addr += b.size;
    }
    d["blocks"] = blocks;
    segments.append(d);
  }
  py::list traces;
  for (const auto& trace : s.device_traces) {
    py::list entries;
    if (include_traces) {
      for (const auto& te : trace) {
        py::dict e;
        e["action"] = action_name(te.action_);
        e[te.action_ == TraceEntry::OOM ? "device_free" : "addr"] = te.addr_;
        e["size"] = te.size_;
        e["stream"] = reinterpret_cast<int64_t>(te.stream_);
        e["time_us"] = int64_t(te.time_.t_);
        e["pool_id"] = py::make_tuple(te.mempool_.first, te.mempool_.second);
        frames.add(e, te.context_);
        entries.append(e);
      }
    }
    traces.append(entries);
  }
  frames.resolve();
  py::dict out;
  out["segments"] = segments;
  out["device_traces"] = traces;
  return out;
}

RecordContext context_level(const std::optional<std::string>& c) {
  if (!c) return RecordContext::NEVER;
  if (*c == "state") return RecordContext::STATE;
  if (*c == "alloc") return RecordContext::ALLOC;
  if (*c == "all") return RecordContext::ALL;
  TORCH_CHECK(false, "_record_memory_history: context must be None, 'state', 'alloc' or 'all', got '", *c, "'");
}

void record_history(const std::optional<std::string>& enabled,
                    const std::optional<std::string>& context, const std::string& stacks,
                    size_t max_entries, bool clear, const std::vector<std::string>& skip) {
  HistorySettings s;
  TORCH_CHECK(!enabled || *enabled == "state" || *enabled == "all",
              "_record_memory_history: enabled must be None, 'state' or 'all', got '", *enabled, "'");
  TORCH_CHECK(stacks == "python" || stacks == "all",
              "_record_memory_history: stacks must be 'python' or 'all', got '", stacks, "'");
  s.enabled = enabled.has_value();
  s.trace = enabled && *enabled == "all";
  s.context = context_level(context);
  s.cpp = stacks == "all";
  s.max_entries = max_entries;
  s.clear = clear;
  for (const auto& a : skip) s.skip.push_back(c10::CachingDeviceAllocator::parseTraceEntryAction(a));
  if (s.enabled && s.context != RecordContext::NEVER) torch::installCapturedTracebackPython();
  device_allocator().record_history(s);
}

// ---- a user's allocator ------------------------------------------------------

struct PyRawAllocator {
  std::shared_ptr<RawAllocatorFns> fns;
};

// ---- raw allocations (caching_allocator_alloc) ------------------------------

std::mutex g_raw_mu;
std::unordered_map<uintptr_t, c10::DataPtr>& raw_live() {
  static auto* m = new std::unordered_map<uintptr_t, c10::DataPtr>();
  return *m;
}

uintptr_t raw_alloc(size_t size, int device, int64_t stream_id) {
  const auto d = c10::DeviceIndex(device);
  c10::DataPtr p;
  {
    // The block belongs to the stream it is made for, as CUDA's raw_alloc.
    const c10::Stream prev = current_stream(d);
    set_current_stream(c10::Stream(c10::Stream::UNSAFE,
                                   c10::Device(c10::DeviceType::PrivateUse1, d), stream_id));
    try {
      p = device_allocator().allocate_on(d, size, c10::Device(c10::DeviceType::PrivateUse1, d));
    } catch (...) {
      set_current_stream(prev);
      throw;
    }
    set_current_stream(prev);
  }
  const auto addr = reinterpret_cast<uintptr_t>(p.get());
  if (addr) {
    std::lock_guard<std::mutex> g(g_raw_mu);
    raw_live().emplace(addr, std::move(p));
  }
  return addr;
}

void raw_delete(uintptr_t addr) {
  c10::DataPtr p;
  {
    std::lock_guard<std::mutex> g(g_raw_mu);
    auto it = raw_live().find(addr);
    TORCH_CHECK(it != raw_live().end(), "caching_allocator_delete: 0x", std::hex, addr,
                " was not allocated by caching_allocator_alloc (or was deleted already)");
    p = std::move(it->second);
    raw_live().erase(it);
  }
}  // freed here, outside the lock

// ---- synchronize that Ctrl-C interrupts --------------------------------------

// Checks for a pending signal (KeyboardInterrupt) with the GIL held.
void check_signals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// Starts a detached helper thread running `body`, named so that a device wait shows up
// under its own name in top, py-spy, /proc (a CUDA wait spins, so the helper's CPU time
// is the wait's, not the caller's).
template <class Body>
void start_wait_thread(Body body) {
  std::thread([body = std::move(body)]() mutable {
    c10::setThreadName("musa_wait");
    body();
  }).detach();
}

// Waits so that a signal handler's exception (Ctrl-C) reaches Python while the
// device is still busy. A driver whose waits call the interrupt check (the host
// driver's) waits on the caller's thread. Otherwise `wait` runs on a helper and
// the caller waits for it in slices; the helper owns only copies (stream ids,
// device indices), so it may outlive an interrupted wait. One helper stays for
// the process (a thread started per wait cost ~30 us, more than synchronising an
// idle device); a wait that finds it busy with another thread's starts its own.
struct WaitState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::function<void()> wait;
  void run() {
    try {
      wait();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> g(mu);
    done = true;
    cv.notify_all();
  }
};

class WaitHelper {
 public:
  WaitHelper() { start_wait_thread([this] { loop(); }); }
  // Hands `st` to the helper; false while it is busy with another thread's wait.
  bool take(const std::shared_ptr<WaitState>& st) {
    std::lock_guard<std::mutex> g(mu_);
    if (busy_) return false;
    busy_ = true;
    job_ = st;
    cv_.notify_one();
    return true;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return job_ != nullptr; });
      std::shared_ptr<WaitState> st = std::move(job_);
      job_.reset();
      lock.unlock();
      st->run();
      st.reset();
      lock.lock();
      busy_ = false;
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<WaitState> job_;
  bool busy_ = false;
};

// The process's helper, made on first use. Never destroyed (its thread may be
// waiting at exit); a forked child, which has none of its parent's threads,
// makes its own.
std::atomic<WaitHelper*> g_wait_helper{nullptr};
WaitHelper& wait_helper() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, [] { g_wait_helper.store(nullptr); });
    return true;
  }();
  (void)registered;
  WaitHelper* h = g_wait_helper.load();
  if (h == nullptr) {
    auto* fresh = new WaitHelper;
    if (g_wait_helper.compare_exchange_strong(h, fresh)) return *fresh;
    // Another thread made one first: this one's thread stays idle (rare, harmless).
  }
  return *h;
}

void wait_on_helper(std::function<void()> wait) {
  auto st = std::make_shared<WaitState>();
  st->wait = std::move(wait);
  if (!wait_helper().take(st)) start_wait_thread([st] { st->run(); });
  py::gil_scoped_release nogil;
  std::unique_lock<std::mutex> lock(st->mu);
  while (!st->cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return st->done; })) {
    lock.unlock();
    check_signals();
    lock.lock();
  }
  if (st->error) std::rethrow_exception(st->error);
}

void interruptible(std::function<void()> wait) {
  if (!driver().waits_check_interrupts()) return wait_on_helper(std::move(wait));
  py::gil_scoped_release nogil;
  wait();
}

// The driver's wait interrupt check (driver/Driver.h): waits reached without
// these bindings (torch.accelerator.synchronize, torch.Stream/torch.Event's
// synchronize through the guard, a blocking copy, .item()) call it every 20 ms.
// Only Python's main thread runs signal handlers, so only there is the GIL taken
// (briefly: the waiting caller has released it) to run them; a handler that
// raises (KeyboardInterrupt) ends the wait with that error, which torch's
// bindings hand back to Python. Other threads wait on undisturbed.
unsigned long g_main_thread = 0;

void raise_pending_signal() {
  if (PyThread_get_thread_ident() != g_main_thread || !Py_IsInitialized()) return;
#if PY_VERSION_HEX >= 0x030D0000
  if (Py_IsFinalizing()) return;
#else
  if (_Py_IsFinalizing()) return;
#endif
  const PyGILState_STATE gil = PyGILState_Ensure();
  if (PyErr_CheckSignals() == 0) {
    PyGILState_Release(gil);
    return;
  }
  py::error_already_set error;  // takes the pending exception, with the GIL
  PyGILState_Release(gil);
  throw error;
}

c10::Stream musa_stream(int device, int64_t id) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1, c10::DeviceIndex(device)), id);
}

void synchronize_device(int device) {
  check_device(c10::DeviceIndex(device));
  mark_initialized();
  interruptible([device] { driver().device_synchronize(c10::DeviceIndex(device)); });
}

void synchronize_stream(int device, int64_t id) {
  sync_point("Stream.synchronize");  // torch.musa.set_sync_debug_mode, as the guard's
  const c10::Stream s = musa_stream(device, id);
  if (driver().stream_query(s)) return;
  interruptible([s] { driver().stream_synchronize(s); });
}

// An event may be destroyed once the caller returns, so where the driver's wait
// would need a helper it is polled here instead: slices grow from 50 us to 2 ms.
void synchronize_event(uintptr_t event) {
  auto* e = reinterpret_cast<DriverEvent*>(event);
  if (!e) return;
  py::gil_scoped_release nogil;
  if (driver().waits_check_interrupts()) return driver().event_synchronize(e);
  auto slice = std::chrono::microseconds(50);
  while (!driver().event_query(e)) {
    std::this_thread::sleep_for(slice);
    slice = std::min<std::chrono::microseconds>(slice * 2, std::chrono::milliseconds(2));
    check_signals();
  }
}

}  // namespace

void init_memory(py::module_& m) {
  g_main_thread = py::module_::import("threading").attr("main_thread")().attr("ident")
                      .cast<unsigned long>();
  set_wait_interrupt_check(&raise_pending_signal);
  m.def("_set_memory_fraction", [](double f, int d) {
    device_allocator().set_memory_fraction(f, c10::DeviceIndex(d));
  });
  m.def("_set_allocator_settings", [](int64_t max_split, double gc,
                                      const std::vector<size_t>& divisions) {
    AllocatorSettings s;
    if (max_split > 0) s.max_split_size = size_t(max_split);
    s.garbage_collection_threshold = gc;
    s.roundup_power2_divisions = divisions;
    device_allocator().set_settings(s);
  });
  m.def("_memory_snapshot", &snapshot, py::arg("pool") = py::none(),
        py::arg("include_traces") = true);
  m.def("_record_memory_history", &record_history);
  m.def("_free_dead_traceback_frames", [] { torch::freeDeadCapturedTracebackFrames(); });
  m.def("_allocator_backend", [] { return device_allocator().backend(); });
  m.def("_caching_allocator_enable", &set_caching_enabled);
  m.def("_caching_allocator_is_enabled", &caching_enabled);

  py::class_<PyRawAllocator>(m, "_MUSAAllocator");
  m.def("_musa_customAllocator", [](uintptr_t alloc, uintptr_t free) {
    auto fns = std::make_shared<RawAllocatorFns>();
    fns->alloc = reinterpret_cast<decltype(fns->alloc)>(alloc);
    fns->free = reinterpret_cast<decltype(fns->free)>(free);
    TORCH_CHECK(fns->alloc && fns->free, "a custom allocator needs non-null alloc and free functions");
    return PyRawAllocator{fns};
  });
  m.def("_musa_changeCurrentAllocator", [](const PyRawAllocator& a) { use_pluggable_allocator(a.fns); });

  m.def("_mempool_new_id", [](bool user) {
    auto id = new_pool_id(user);
    return py::make_tuple(id.first, id.second);
  });
  m.def("_mempool_create", [](int d, py::tuple id, std::optional<PyRawAllocator> a,
                              bool use_on_oom, bool no_split) {
    device_allocator().create_pool(c10::DeviceIndex(d), to_id(id),
                                   a ? a->fns : nullptr, use_on_oom, no_split);
  });
  m.def("_mempool_use_count", [](int d, py::tuple id) {
    return device_allocator().pool_use_count(c10::DeviceIndex(d), to_id(id));
  });
  // CUDA's names (torch._C._cuda_beginAllocateCurrentThreadToPool, ...).
  m.def("_musa_beginAllocateCurrentThreadToPool", [](int d, py::tuple id) {
    const auto me = std::this_thread::get_id();
    device_allocator().begin_allocate_to_pool(
        c10::DeviceIndex(d), to_id(id), [me](c10::Stream) { return std::this_thread::get_id() == me; });
  });
  m.def("_musa_beginAllocateToPool", [](int d, py::tuple id, std::optional<int64_t> stream_id) {
    PoolFilter f = [](c10::Stream) { return true; };
    if (stream_id) f = [sid = *stream_id](c10::Stream s) { return s.id() == sid; };
    device_allocator().begin_allocate_to_pool(c10::DeviceIndex(d), to_id(id), std::move(f));
  }, py::arg("device"), py::arg("id"), py::arg("stream_id") = py::none());
  m.def("_musa_endAllocateToPool", [](int d, py::tuple id) {
    device_allocator().end_allocate_to_pool(c10::DeviceIndex(d), to_id(id));
  });
  m.def("_musa_releasePool", [](int d, py::tuple id) {
    device_allocator().release_pool(c10::DeviceIndex(d), to_id(id));
  });
  m.def("_empty_cache_pool", [](py::tuple id) { device_allocator().emptyCache(to_id(id)); });

  m.def("_host_emptyCache", &empty_pinned_cache);
  m.def("_host_register", [](uintptr_t ptr, size_t size) {
    return register_host_range(reinterpret_cast<const void*>(ptr), size);
  });
  m.def("_host_unregister", [](uintptr_t ptr) {
    return unregister_host_range(reinterpret_cast<const void*>(ptr));
  });
  // torch._C._cuda_attach_out_of_memory_observer's twin. The observer is called on
  // the allocating thread, which may not hold the GIL (a kernel's output).
  m.def("_musa_attach_out_of_memory_observer", [](py::object observer) {
    // Kept for the process's life: released after Python finalised, it would crash.
    auto* held = new py::object(std::move(observer));
    attach_out_of_memory_observer(
        [held](int64_t device, int64_t alloc, int64_t allocated, int64_t free) {
          py::gil_scoped_acquire gil;
          try {
            (*held)(device, alloc, allocated, free);
          } catch (py::error_already_set& e) {
            e.discard_as_unraisable("out-of-memory observer");
          }
        });
  });

  m.def("_set_unified_cpu_allocator", &set_unified_cpu_allocator);
  m.def("_unified_cpu_allocator", &unified_cpu_allocator);

  m.def("_raw_alloc", &raw_alloc);
  m.def("_raw_delete", &raw_delete);

  m.def("_synchronize_device", &synchronize_device);
  // Its sync-debug warning (a C++ TORCH_WARN) reaches Python's warnings.
  m.def("_synchronize_stream", &synchronize_stream, py::call_guard<torch::PyWarningHandler>());
  m.def("_synchronize_event", &synchronize_event);
  // A wait of `seconds` on the helper, as the cuda driver's synchronisations wait:
  // the tests exercise the helper under any driver.
  m.def("_sleep_on_wait_helper", [](double seconds) {
    wait_on_helper([seconds] { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); });
  });
}

}  // namespace torch_musa
