// Python bindings of the runtime core (torch_musa._C). Kept thin: the
// torch.musa API is written in Python on top of these.
#include "core/MUSACachingAllocator.h"
#include "aten/autocast_kernels.h"
#include "aten/fallback.h"
#include "core/MUSAGenerator.h"
#include "aten/kernel_alias.h"
#include "aten/kernel_call.h"
#include "aten/rnn_layers.h"
#include "utils/nan_check.h"
#include "core/Device.h"
#include "core/MUSAStream.h"
#include "core/MUSAProfiler.h"

#include <c10/util/flat_hash_map.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/device_lazy_init.h>

#include <torch/extension.h>

#include <map>
#include <optional>

namespace torch_musa {
void register_device();
void init_nan_check(pybind11::module_& m);
// core/PinnedAllocator.cpp: torch.musa.host_memory_stats' counters.
std::map<std::string, double> host_memory_stats();
void reset_host_memory_stats(bool peak);
void init_memory(pybind11::module_& m);
void init_graphs(pybind11::module_& m);
void init_gpu_attention(pybind11::module_& m);
}

namespace {

using namespace torch_musa;

// _C._KernelSpan: profiler::KernelSpan entered and left from Python.
class KernelSpanScope {
 public:
  KernelSpanScope(std::string name, int device)
      : name_(std::move(name)), device_(c10::DeviceIndex(device)) {}
  void enter() {
    TORCH_CHECK(!span_, "_KernelSpan ", name_, " is already entered");
    span_.emplace(name_.c_str(), "", &device_);
    internals_.emplace();
  }
  void exit() {
    internals_.reset();
    span_.reset();
  }

 private:
  std::string name_;
  c10::DeviceIndex device_;
  std::optional<profiler::KernelSpan> span_;
  std::optional<profiler::UnrecordedInternals> internals_;
};

void configure(int device_count, const std::string& profile,
               int64_t capacity_bytes, int64_t host_limit_bytes,
               double clock_hz, const std::vector<int>& unsupported_dtypes) {
  TORCH_CHECK(!is_initialized(), "musa runtime is already initialized");
  TORCH_CHECK(device_count >= 0 && device_count <= kMaxDevices,
              "musa supports at most ", kMaxDevices, " devices, asked for ",
              device_count);
  RuntimeConfig& c = config();
  c.device_count = device_count;
  c.profile = profile;
  c.capacity_bytes = capacity_bytes;
  c.host_limit_bytes = host_limit_bytes;
  c.clock_hz = clock_hz;
  c.unsupported_dtypes = 0;
  for (int t : unsupported_dtypes) c.unsupported_dtypes |= uint64_t(1) << t;
}

void sleep_cycles(int64_t cycles) {
  const auto d = current_device();
  driver().stream_sleep(current_stream(d), cycles, config().clock_hz);
}

// Never destroyed: a static py::object would drop its reference after Python
// has finalised (the process then aborts at exit).
py::object& g_debug_callback = *new py::object();

py::object to_python(const c10::IValue& v) {
  if (v.isTensor()) return py::reinterpret_steal<py::object>(THPVariable_Wrap(v.toTensor()));
  if (v.isTensorList() || v.isList() || v.isTuple()) {
    py::list out;
    if (v.isTuple()) {
      for (const auto& e : v.toTupleRef().elements()) out.append(to_python(e));
    } else {
      for (const auto& e : v.toListRef()) out.append(to_python(e));
    }
    return std::move(out);
  }
  return py::none();
}

void call_debug_callback(const char* op, const std::vector<c10::IValue>& args,
                         const std::vector<c10::IValue>& results) {
  py::gil_scoped_acquire gil;
  if (!g_debug_callback) return;
  py::list a, r;
  for (const auto& v : args) a.append(to_python(v));
  for (const auto& v : results) r.append(to_python(v));
  g_debug_callback(op, a, r);
}

std::atomic<bool> g_debug_on{false};

// Both hooks on: the NaN check first (it reads the outputs as the kernel left them).
void nan_check_then_debug(const char* op, const std::vector<c10::IValue>& args,
                          const std::vector<c10::IValue>& results) {
  nan_check_op(op, args, results);
  if (g_debug_on.load(std::memory_order_relaxed)) call_debug_callback(op, args, results);
}

void set_debug_callback(py::object fn) {
  if (fn.is_none()) {
    g_debug_on = false;
    update_op_hook();
    g_debug_callback = py::object();
  } else {
    g_debug_callback = std::move(fn);
    g_debug_on = true;
    update_op_hook();
  }
}

}  // namespace

namespace torch_musa {
void update_op_hook() {
  const bool nan = nan_check_armed(), dbg = g_debug_on.load();
  set_debug_hook(nan && dbg ? &nan_check_then_debug
                 : nan      ? &nan_check_op
                 : dbg      ? &call_debug_callback
                            : nullptr);
}
}  // namespace torch_musa

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_musa runtime core";
  m.def("_configure", &configure);
  m.def("_register_device", &register_device);
  m.def("_driver_name", [] { return driver().name(); });
  m.def("_use_driver", &use_driver);
  m.def("_stream_handle", [](int device, int64_t id) {
    return reinterpret_cast<intptr_t>(driver().stream_handle(c10::Stream(
        c10::Stream::UNSAFE,
        c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)),
        id)));
  });
  m.def("_cuda_driver_built", &cuda_driver_built);
  m.def("_is_initialized", &is_initialized);
  // Python's lazy init done: torch's own flag too, which torch.accelerator.synchronize
  // and the tensor factories read (else synchronize returns at once in a process
  // whose first musa work was a stream's, not a tensor's).
  m.def("_mark_initialized", [] {
    mark_initialized();
    torch::utils::set_requires_device_init(c10::DeviceType::PrivateUse1, false);
  });
  m.def("_get_device", [] { return int(current_device()); });
  m.def("_set_device", [](int d) { set_current_device(c10::DeviceIndex(d)); });
  m.def("_check_device", [](int d) { check_device(c10::DeviceIndex(d)); });
  m.def("_sleep", &sleep_cycles);
  m.def("_default_generator", [](int d) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(c10::DeviceIndex(d))));
  });
  m.def("_set_dtype_exempt_ops", &set_dtype_exempt_ops);
  m.def("_set_double_cast", [](std::optional<bool> on) {  // None: the environment at load
    set_double_cast(on ? int(*on) : -1);
  });
  m.def("_get_memory_fraction", [](int d) {
    check_device(c10::DeviceIndex(d));
    return device_allocator().memory_fraction(c10::DeviceIndex(d));
  });
  m.def("_host_memory_stats", &host_memory_stats);
  m.def("_reset_host_memory_stats", &reset_host_memory_stats);
  m.def("_set_rnn_cpu_layers", &set_rnn_cpu_layers);
  m.def("_set_sync_debug_mode", &set_sync_debug_mode);
  m.def("_get_sync_debug_mode", &sync_debug_mode);
  m.def("_set_fallback_mode", [](int mode) {
    TORCH_CHECK(mode >= 0 && mode <= 2, "fallback mode must be 0 (silent), 1 (warn) or 2 (error)");
    set_fallback_mode(FallbackMode(mode));
  });
  m.def("_fallback_counts", &fallback_counts);
  m.def("_reset_fallback_counts", &reset_fallback_counts);
  m.def("_set_op_debug_callback", &set_debug_callback);
  // A CPU tensor over a musa tensor's bytes (zero copy; keeps the storage
  // alive). For host-side engines such as Gloo under the mccl backend.
  m.def("_kernel_alias", [](const at::Tensor& t) {
    TORCH_CHECK(t.is_privateuseone(), "_kernel_alias expects a musa tensor, got ", t.device());
    return kernel_alias(t);
  });
  // The same function for C++ above the runtime (torch_musa.distributed._C).
  m.attr("_kernel_alias_capi") = py::capsule(
      reinterpret_cast<void*>(+[](const at::Tensor& t) { return kernel_alias(t); }),
      "torch_musa._C._kernel_alias_capi");
  // Compiled code of the kernel device called with musa tensors
  // (torch_musa/_inductor/kernel_device.py), per call and in one C++ call each
  // way: a Python loop over a compiled graph's hundreds of arguments was a
  // visible part of a compiled step's host time.
  // _to_kernel_args: the list with each musa tensor replaced by its kernel alias.
  m.def("_to_kernel_args", [](const py::list& args) {
    py::list out(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      PyObject* o = args[i].ptr();
      if (THPVariable_Check(o)) {
        const at::Tensor& t = THPVariable_Unpack(o);
        if (t.defined() && t.is_privateuseone()) {
          out[i] = py::reinterpret_steal<py::object>(THPVariable_Wrap(kernel_alias(t)));
          continue;
        }
      }
      out[i] = args[i];
    }
    return out;
  });
  // _from_kernel_outputs: the way back. Tensors of the kernel device type become
  // musa tensors on `device` where they carry no index (host results; -1: the
  // current device). A result that nothing else holds, over memory of the musa
  // allocator (a compiled graph's fresh buffers under the cuda driver), becomes
  // musa in place, the same Python object; other device memory is shared (cuda),
  // host results are copied; tensors that shared a storage share one. The
  // sequence itself comes back when every item stayed the same object.
  // `strict`: every item must be a kernel-device tensor (callers that made them:
  // jiterator, IPC).
  m.def("_from_kernel_outputs", [](const py::sequence& outs, int device, bool strict) -> py::object {
    const c10::Device kd = kernel_device(c10::DeviceIndex(device));
    const size_t n = outs.size();
    struct Item {
      size_t index;
      py::object obj;
      const at::Tensor* tensor;
      c10::DeviceIndex device;
    };
    std::vector<Item> items;
    // Per storage: the results over it, whether each may change in place, and the
    // musa storage they share when they cannot.
    struct Holders {
      size_t tensors = 0;
      bool in_place = true;
      bool retagged = false;
      c10::Storage adopted;
    };
    ska::flat_hash_map<const c10::StorageImpl*, Holders> holders;
    for (size_t i = 0; i < n; ++i) {
      py::object o = outs[i];
      const at::Tensor* item = THPVariable_Check(o.ptr()) ? &THPVariable_Unpack(o.ptr()) : nullptr;
      const bool kernel_side = item && item->defined() && item->device().type() == kd.type();
      TORCH_CHECK(kernel_side || !strict, "_from_kernel_outputs expects ", kd.type(),
                  " tensors, got ",
                  !item ? std::string(py::str(o.get_type()))
                        : item->defined() ? item->device().str() : std::string("an undefined tensor"));
      if (!kernel_side) continue;
      const at::Tensor& t = *item;
      const c10::DeviceIndex d = t.device().has_index() ? t.device().index()
                                 : device >= 0 ? c10::DeviceIndex(device) : current_device();
      Holders& h = holders[storage_impl(t)];
      ++h.tensors;
      // Only this sequence holds the object (and `o`), only the object holds the
      // tensor, and the tensor is a plain dense one of this graph's making.
      c10::TensorImpl* impl = t.unsafeGetTensorImpl();
      h.in_place = h.in_place && Py_REFCNT(o.ptr()) <= 2 && THPVariable_CheckExact(o.ptr()) &&
                   c10::raw::intrusive_ptr::use_count(impl) == 1 &&
                   impl->autograd_meta() == nullptr && t.layout() == at::kStrided &&
                   !t._is_zerotensor() && !impl->is_python_dispatch() &&
                   !impl->key_set().has(c10::DispatchKey::Functionalize) &&
                   impl->allow_tensor_metadata_change();
      items.push_back({i, std::move(o), item, d});
    }
    std::optional<py::list> out;
    for (Item& it : items) {
      const at::Tensor& t = *it.tensor;
      c10::StorageImpl* s = storage_impl(t);
      Holders& h = holders[s];
      // Nothing outside these results holds the storage: they all become musa.
      if (h.in_place && c10::raw::intrusive_ptr::use_count(s) == h.tensors &&
          (h.retagged || retaggable_memory(s))) {
        retag_in_place(t, it.device, /*storage_too=*/!h.retagged);
        h.retagged = true;
        continue;
      }
      if (!out) {
        out.emplace(n);
        for (size_t j = 0; j < n; ++j) (*out)[j] = outs[j];
      }
      if (!h.adopted) h.adopted = adopt_storage(t, it.device, /*refs_on_stack=*/0);
      (*out)[it.index] = py::reinterpret_steal<py::object>(
          THPVariable_Wrap(musa_tensor_over(h.adopted, t)));
    }
    if (!out) return py::reinterpret_borrow<py::object>(outs);
    return *out;
  }, py::arg("outs"), py::arg("device"), py::arg("strict") = false);
  // A device kernel run outside the op path (Inductor's compiled kernels, Python
  // kernels over aliases): `with _C._KernelSpan(name):` records its span for
  // torch.profiler as KernelCall records an op's ("musa_kernel:<name>" on the
  // current stream). One relaxed load while no profile runs.
  py::class_<KernelSpanScope>(m, "_KernelSpan")
      .def(py::init<std::string, int>(), py::arg("name"), py::arg("device") = -1)
      .def("__enter__", [](KernelSpanScope& s) -> KernelSpanScope& { s.enter(); return s; },
           py::return_value_policy::reference)
      .def("__exit__", [](KernelSpanScope& s, py::args) { s.exit(); return false; });
  m.def("_profiler_recorded_kernels", &profiler::recorded_kernel_count);
  m.def("_register_fallback_ops", &register_fallback_for, py::arg("ops"), py::arg("chosen") = false);
  m.def("_register_autocast_kernels", &register_autocast_kernels);
  init_nan_check(m);
  init_memory(m);  // python/memory.cpp
  init_graphs(m);  // python/graphs.cpp
  init_gpu_attention(m);  // python/gpu_attention.cpp
}
