// MUSA graphs under the host driver: the replay side, and the Python bindings
// of the driver's capture state (Driver.h).
//
// torch_musa/core/graphs.py records, during capture, each op issued on musa
// (below autograd, with its argument tensors: static memory). A GraphExec holds
// those calls as boxed stacks and replays them in order without Python: each
// step calls the op again on the same tensors, then copies the results that
// were fresh at capture into the tensors captured then, so static outputs
// update in place, as CUDA graph replay does. Under the cuda driver CUDA
// graphs serve the same Python API and none of this runs.
#include "driver/Driver.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

#include <string>
#include <unordered_map>
#include <vector>

namespace torch_musa {

namespace {

struct Step {
  c10::OperatorHandle op;
  torch::jit::Stack args;
  // (index of the return, index in a list return or -1, the captured tensor)
  std::vector<std::tuple<int, int, at::Tensor>> copy_to;
};

class GraphExec {
 public:
  void add(const std::string& name, const std::string& overload, py::tuple args,
           py::dict kwargs, const std::vector<std::tuple<int, int, at::Tensor>>& copy_to) {
    auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
    const c10::FunctionSchema& schema = op.schema();
    TORCH_CHECK(args.size() <= schema.arguments().size(), "too many arguments for ", schema);
    torch::jit::Stack stack;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const c10::Argument& a = schema.arguments()[i];
      py::object v;
      if (i < args.size()) {
        v = args[i];
      } else if (kwargs.contains(a.name().c_str())) {
        v = kwargs[a.name().c_str()];
      } else {
        TORCH_CHECK(a.default_value().has_value(), "missing argument '", a.name(), "' of ",
                    schema);
        stack.push_back(*a.default_value());
        continue;
      }
      // Python dispatch hands a Tensor argument given as a number (x * 2) as the
      // number; the op takes it as a wrapped-number tensor, as the C++ caller made it.
      if (a.type()->kind() == c10::TypeKind::TensorType &&
          (py::isinstance<py::bool_>(v) || py::isinstance<py::int_>(v) ||
           py::isinstance<py::float_>(v) || PyComplex_Check(v.ptr()))) {
        at::Tensor t = at::scalar_to_tensor(torch::jit::toIValue(v, c10::NumberType::get()).toScalar());
        t.unsafeGetTensorImpl()->set_wrapped_number(true);
        stack.emplace_back(std::move(t));
      } else {
        stack.push_back(torch::jit::toIValue(v, a.real_type()));
      }
    }
    for (c10::IValue& v : stack) v = weak(v);
    std::vector<std::tuple<int, int, at::Tensor>> dsts;
    for (const auto& [ret, item, t] : copy_to) dsts.emplace_back(ret, item, weak(t));
    steps_.push_back({op, std::move(stack), std::move(dsts)});
  }

  // Memory allocated during capture (in the graph's pool) is referred to without
  // ownership from here on, as a CUDA graph refers to addresses: a tensor the
  // program drops during capture returns its block to the pool, where later
  // allocations of the capture (or of captures sharing the pool) reuse it, and
  // the pool keeps the memory while a graph uses it.
  void weaken(uintptr_t ptr, size_t nbytes, int device) {
    weak_[reinterpret_cast<void*>(ptr)] = c10::Storage(
        c10::Storage::use_byte_size_t(), nbytes,
        c10::DataPtr(reinterpret_cast<void*>(ptr),
                     c10::Device(c10::DeviceType::PrivateUse1, c10::DeviceIndex(device))),
        /*allocator=*/nullptr, /*resizable=*/false);
  }

  void replay() {
    py::gil_scoped_release no_gil;
    // Autograd and autocast were applied when the ops were captured.
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKeySet(
        {c10::DispatchKey::AutocastPrivateUse1, c10::DispatchKey::AutocastCPU}));
    at::AutoGradMode no_grad(false);
    for (const Step& s : steps_) {
      torch::jit::Stack stack = s.args;
      s.op.callBoxed(stack);
      for (const auto& [ret, item, dst] : s.copy_to) {
        const c10::IValue& v = stack[ret];
        at::Tensor src = item < 0 ? v.toTensor() : v.toTensorList().get(item);
        if (src.unsafeGetTensorImpl() != dst.unsafeGetTensorImpl()) dst.copy_(src);
      }
    }
  }

  size_t size() const { return steps_.size(); }
  void clear() { steps_.clear(); }

 private:
  at::Tensor weak(const at::Tensor& t) const {
    if (weak_.empty() || !t.defined() || !t.has_storage()) return t;
    auto it = weak_.find(t.storage().data());
    if (it == weak_.end() || it->second.nbytes() != t.storage().nbytes()) return t;
    at::Tensor a = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(it->second), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), t.dtype());
    a.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    a._set_conj(t.is_conj());
    a._set_neg(t.is_neg());
    return a;
  }
  c10::IValue weak(const c10::IValue& v) const {
    if (v.isTensor()) return weak(v.toTensor());
    if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorList()) out.push_back(weak(t));
      return out;
    }
    if (v.isList()) {  // Tensor?[] (index)
      auto in = v.toList();
      c10::impl::GenericList out(in.elementType());
      for (const c10::IValue& e : in) out.push_back(weak(e));
      return out;
    }
    return v;
  }

  std::vector<Step> steps_;
  std::unordered_map<const void*, c10::Storage> weak_;  // data pointer -> non-owning storage
};

c10::Stream stream_of(int device, int64_t id) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1, c10::DeviceIndex(device)), id);
}

}  // namespace

void init_graphs(py::module_& m) {
  py::class_<GraphExec>(m, "_GraphExec")
      .def(py::init<>())
      .def("add", &GraphExec::add)
      .def("replay", &GraphExec::replay)
      .def("weaken", &GraphExec::weaken)
      .def("clear", &GraphExec::clear)
      .def("__len__", &GraphExec::size);
  m.def("_capture_begin", [](int device, int64_t stream, int mode) {
    driver().capture_begin(stream_of(device, stream), mode);
  });
  m.def("_capture_end", [](int device, int64_t stream) {
    return driver().capture_end(stream_of(device, stream));
  });
  m.def("_capture_invalidate", [](int device, int64_t stream, const std::string& error) {
    driver().capture_invalidate(stream_of(device, stream), error);
  });
  m.def("_stream_is_capturing", [](int device, int64_t stream) {
    return driver().stream_capturing(stream_of(device, stream));
  });
}

}  // namespace torch_musa
