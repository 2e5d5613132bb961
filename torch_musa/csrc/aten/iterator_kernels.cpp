// The CPU kernels are reached through their DispatchStubs, which must be
// declared as libtorch_cpu built them: on x86 with its AVX2 and AVX-512 kernels
// (the stub then picks by the CPU's capability, as the CPU device does).
#if defined(__x86_64__) || defined(_M_X64)
#define HAVE_AVX2_CPU_DEFINITION
#define HAVE_AVX512_CPU_DEFINITION
#endif
#include "aten/iterator_kernels.h"

#include "aten/kernel_call.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/TensorCompare.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/add_meta.h>
#include <ATen/ops/clamp_min_meta.h>
#include <ATen/ops/div_meta.h>
#include <ATen/ops/exp_meta.h>
#include <ATen/ops/mul_meta.h>
#include <ATen/ops/neg_meta.h>
#include <ATen/ops/rsqrt_meta.h>
#include <ATen/ops/sigmoid_meta.h>
#include <ATen/ops/sqrt_meta.h>
#include <ATen/ops/sub_meta.h>
#include <ATen/ops/tanh_meta.h>
#include <torch/version.h>

// torch < 2.13 still has named tensors: its set_output_* take the names too.
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
#define TORCH_MUSA_NAMED_TENSORS 1
#define TORCH_MUSA_NAMES_PARAM , at::DimnameList names
#define TORCH_MUSA_NAMES_ARG , names
#else
#define TORCH_MUSA_NAMED_TENSORS 0
#define TORCH_MUSA_NAMES_PARAM
#define TORCH_MUSA_NAMES_ARG
#endif

namespace torch_musa::iterator_kernels {

namespace {

const c10::DispatchKeySet kMusaKeys(c10::DispatchKey::PrivateUse1);

// The keys a tensor may carry here besides its backend's (autograd and
// ADInplaceOrView ones are above this kernel): no conj/neg bits, zero tensor,
// Python or functionalization wrapper.
bool plain_keys(const at::Tensor& t) {
  const c10::DispatchKeySet ks = t.key_set();
  return !ks.has_any(c10::DispatchKeySet({c10::DispatchKey::Conjugate, c10::DispatchKey::Negative,
                                          c10::DispatchKey::ZeroTensor, c10::DispatchKey::Python,
                                          c10::DispatchKey::Functionalize}));
}

bool plain_musa(const at::Tensor& t, c10::ScalarType dtype) {
#if TORCH_MUSA_NAMED_TENSORS
  if (t.has_names()) return false;
#endif
  return t.is_privateuseone() && t.scalar_type() == dtype && t.layout() == at::kStrided &&
         plain_keys(t);
}

// A Python number (a CPU 0-dim "wrapped number", float64 or int64) beside a float32
// or float64 tensor: the CPU's iterator would convert it to the tensor's dtype (a
// number does not promote a tensor of its category), and these kernels read it so
// converted (a 16-bit kernel reads the number's own value instead: not here).
bool convertible_number(const at::Tensor& o, c10::ScalarType dtype) {
  return (dtype == at::kFloat || dtype == at::kDouble) && o.is_cpu() && o.dim() == 0 &&
         o.unsafeGetTensorImpl()->is_wrapped_number() &&
         (o.scalar_type() == at::kDouble || o.scalar_type() == at::kLong);
}

// musa:i when the call suits the direct path (the header says when), else -1.
// `other` may be repointed at `converted`, a Python number in self's dtype.
c10::DeviceIndex direct_device(const at::Tensor& self, const at::Tensor*& other,
                               at::Tensor& converted) {
  static const bool host_kernels = config().kernel_type == c10::DeviceType::CPU;
  if (!host_kernels || debug_hook() != nullptr || value_check_hook() != nullptr ||
      !self.defined())
    return -1;
  const c10::ScalarType dtype = self.scalar_type();
  if (!dtype_supported(dtype) || !plain_musa(self, dtype)) return -1;
  const c10::DeviceIndex device = self.device().index();
  if (other != nullptr) {
    const at::Tensor& o = *other;
    if (!o.defined()) return -1;
    if (o.is_privateuseone()) {
      if (!plain_musa(o, dtype) || o.device().index() != device) return -1;
    } else if (convertible_number(o, dtype)) {
      const at::Scalar value = o.scalar_type() == at::kDouble
                                   ? at::Scalar(*o.const_data_ptr<double>())
                                   : at::Scalar(*o.const_data_ptr<int64_t>());
      converted = at::detail::scalar_tensor_static(value, dtype, at::kCPU);
      other = &converted;
    } else if (!(o.is_cpu() && o.dim() == 0 && o.scalar_type() == dtype &&
                 o.layout() == at::kStrided && plain_keys(o))) {
      return -1;
    }
  }
  return device;
}

c10::DeviceIndex direct_device(const at::Tensor& self) {
  const at::Tensor* none = nullptr;
  at::Tensor unused;
  return direct_device(self, none, unused);
}

// What a kernel call does around its kernel on the host driver: the device
// current, the kernel's thread count, the profiler's kernel span.
struct KernelScope {
  KernelScope(c10::DeviceIndex d, const char* op, const char* overload)
      : device(d), guard(d), span(op, overload, &device) {}
  c10::DeviceIndex device;
  DeviceSwitch guard;
  KernelThreads threads;
  profiler::KernelSpan span;
};

// A structured op's functional variant: its output is new musa memory.
template <class Meta>
struct Functional final : Meta {
  at::Tensor out;
  const at::Tensor& maybe_get_output(int64_t) override { return out; }
  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          at::TensorOptions options TORCH_MUSA_NAMES_PARAM) override {
    set_output_raw_strided(i, sizes, strides, options TORCH_MUSA_NAMES_ARG);
  }
  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              at::TensorOptions options TORCH_MUSA_NAMES_PARAM) override {
    const auto dtype = c10::typeMetaToScalarType(options.dtype());
    out = strides.empty()
              ? at::detail::empty_generic(sizes, &device_allocator(), kMusaKeys, dtype,
                                          options.memory_format_opt())
              : at::detail::empty_strided_generic(sizes, strides, &device_allocator(), kMusaKeys,
                                                  dtype);
    Meta::set_output_raw_strided(i, sizes, strides, options TORCH_MUSA_NAMES_ARG);
  }
};

// Its in-place variant: the output is `self`, with the checks PyTorch's
// generated in-place wrappers make.
template <class Meta>
struct InPlace final : Meta {
  explicit InPlace(const at::Tensor& self) : self(self) {}
  const at::Tensor& self;
  const at::Tensor& maybe_get_output(int64_t) override { return self; }
  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          at::TensorOptions options TORCH_MUSA_NAMES_PARAM) override {
    set_output_raw_strided(i, sizes, strides, options TORCH_MUSA_NAMES_ARG);
  }
  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              at::TensorOptions options TORCH_MUSA_NAMES_PARAM) override {
    TORCH_CHECK(options.dtype() == self.dtype(), "Bad in-place call: input tensor dtype ",
                self.dtype(), " and output tensor dtype ", options.dtype(), " should match");
    TORCH_CHECK(options.device() == self.device(), "Bad in-place call: input tensor device ",
                self.device(), " and output tensor device ", options.device(), " should match");
    TORCH_CHECK(sizes == self.sizes(), "Bad in-place call: input tensor size ", self.sizes(),
                " and output tensor size ", sizes, " should match");
    Meta::set_output_raw_strided(i, sizes, strides, options TORCH_MUSA_NAMES_ARG);
  }
};

bool floating(const at::Tensor& t) {
  return at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type());
}

}  // namespace

// A binary op on the direct path: `fill(iterator, other)` runs the CPU structured
// kernel's meta and impl functions (`other` may be a converted Python number).
template <class Meta, class Fill>
at::Tensor binary(const char* op, bool accepts, const at::Tensor& self, const at::Tensor& other,
                  Fill fill) {
  const at::Tensor* o = &other;
  at::Tensor converted;
  const auto d = accepts ? direct_device(self, o, converted) : -1;
  if (d < 0) return {};
  KernelScope scope(d, op, "Tensor");
  Functional<Meta> it;
  fill(it, *o);
  return std::move(it.out);
}

template <class Meta, class Fill>
bool binary_(const char* op, bool accepts, at::Tensor& self, const at::Tensor& other, Fill fill) {
  const at::Tensor* o = &other;
  at::Tensor converted;
  const auto d = accepts ? direct_device(self, o, converted) : -1;
  if (d < 0) return false;
  KernelScope scope(d, op, "Tensor");
  InPlace<Meta> it(self);
  fill(it, *o);
  return true;
}

// The CPU's impl functions: add and sub are add_stub (sub with -alpha), mul is
// mul_stub, true division div_true_stub.
#define TORCH_MUSA_DIRECT_BINARY(NAME, META, ACCEPTS, FILL)                                  \
  at::Tensor NAME(const at::Tensor& self, const at::Tensor& other) {                        \
    return binary<META>("aten::" #NAME, ACCEPTS, self, other, FILL);                        \
  }                                                                                          \
  bool NAME##_(at::Tensor& self, const at::Tensor& other) {                                 \
    return binary_<META>("aten::" #NAME "_", ACCEPTS, self, other, FILL);                   \
  }

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  return binary<at::meta::structured_add_Tensor>("aten::add", true, self, other,
                                                 [&](auto& it, const at::Tensor& o) {
    it.meta(self, o, alpha);
    at::native::add_stub(c10::DeviceType::CPU, it, alpha);
  });
}

bool add_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  return binary_<at::meta::structured_add_Tensor>("aten::add_", true, self, other,
                                                  [&](auto& it, const at::Tensor& o) {
    it.meta(self, o, alpha);
    at::native::add_stub(c10::DeviceType::CPU, it, alpha);
  });
}

at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  return binary<at::meta::structured_sub_Tensor>("aten::sub", true, self, other,
                                                 [&](auto& it, const at::Tensor& o) {
    it.meta(self, o, alpha);
    at::native::add_stub(c10::DeviceType::CPU, it, -alpha);
  });
}

bool sub_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  return binary_<at::meta::structured_sub_Tensor>("aten::sub_", true, self, other,
                                                  [&](auto& it, const at::Tensor& o) {
    it.meta(self, o, alpha);
    at::native::add_stub(c10::DeviceType::CPU, it, -alpha);
  });
}

TORCH_MUSA_DIRECT_BINARY(mul, at::meta::structured_mul_Tensor, true,
                         [&](auto& it, const at::Tensor& o) {
                           it.meta(self, o);
                           at::native::mul_stub(c10::DeviceType::CPU, it);
                         })
// Division promotes integers to float: only floating operands keep one dtype.
TORCH_MUSA_DIRECT_BINARY(div, at::meta::structured_div_Tensor, self.defined() && floating(self),
                         [&](auto& it, const at::Tensor& o) {
                           it.meta(self, o);
                           at::native::div_true_stub(c10::DeviceType::CPU, it);
                         })
#undef TORCH_MUSA_DIRECT_BINARY

// The CPU's relu is clamp_min(self, 0), refusing bool first (that message comes
// from the aliasing path); clamp_min widens integers only for a float bound.
at::Tensor relu(const at::Tensor& self) {
  const auto d = self.defined() && self.scalar_type() != at::kBool && !at::isComplexType(self.scalar_type())
                     ? direct_device(self) : -1;
  if (d < 0) return {};
  KernelScope scope(d, "aten::relu", "");
  Functional<at::meta::structured_clamp_min> op;
  const at::Scalar zero(0);
  op.meta(self, zero);
  at::native::clamp_min_scalar_stub(c10::DeviceType::CPU, op, zero);
  return std::move(op.out);
}

bool relu_(at::Tensor& self) {
  const auto d = self.defined() && self.scalar_type() != at::kBool && !at::isComplexType(self.scalar_type())
                     ? direct_device(self) : -1;
  if (d < 0) return false;
  KernelScope scope(d, "aten::relu_", "");
  InPlace<at::meta::structured_clamp_min> op(self);
  const at::Scalar zero(0);
  op.meta(self, zero);
  at::native::clamp_min_scalar_stub(c10::DeviceType::CPU, op, zero);
  return true;
}

// The unary ops' CPU impl functions are their stub alone. The float ops' meta
// functions promote integers to float: only floating and complex tensors come.
#define TORCH_MUSA_DIRECT_UNARY(NAME, ACCEPTS)                                   \
  at::Tensor NAME(const at::Tensor& self) {                                     \
    const auto d = self.defined() && ACCEPTS(self) ? direct_device(self) : -1;   \
    if (d < 0) return {};                                                        \
    KernelScope scope(d, "aten::" #NAME, "");                                    \
    Functional<at::meta::structured_##NAME> op;                                  \
    op.meta(self);                                                               \
    at::native::NAME##_stub(c10::DeviceType::CPU, op);                           \
    return std::move(op.out);                                                    \
  }                                                                              \
  bool NAME##_(at::Tensor& self) {                                              \
    const auto d = self.defined() && ACCEPTS(self) ? direct_device(self) : -1;   \
    if (d < 0) return false;                                                     \
    KernelScope scope(d, "aten::" #NAME "_", "");                                \
    InPlace<at::meta::structured_##NAME> op(self);                               \
    op.meta(self);                                                               \
    at::native::NAME##_stub(c10::DeviceType::CPU, op);                           \
    return true;                                                                 \
  }

namespace {
bool any_dtype(const at::Tensor&) { return true; }
}  // namespace

TORCH_MUSA_DIRECT_UNARY(neg, any_dtype)
TORCH_MUSA_DIRECT_UNARY(exp, floating)
TORCH_MUSA_DIRECT_UNARY(rsqrt, floating)
TORCH_MUSA_DIRECT_UNARY(sigmoid, floating)
TORCH_MUSA_DIRECT_UNARY(sqrt, floating)
TORCH_MUSA_DIRECT_UNARY(tanh, floating)
#undef TORCH_MUSA_DIRECT_UNARY

}  // namespace torch_musa::iterator_kernels
