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
  explicit Functional(const at::Tensor&) {}
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

bool any_dtype(const at::Tensor&) { return true; }

bool floating(const at::Tensor& t) {
  return at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type());
}

// The CPU's relu refuses bool first (that message comes from the aliasing path), and
// clamp_min refuses complex.
bool relu_dtype(const at::Tensor& t) {
  return t.scalar_type() != at::kBool && !at::isComplexType(t.scalar_type());
}

// The direct path for `self` (an op that takes only those `Accepts`) and `other`
// (null for a unary op): a Functional or InPlace iterator, `fill(iterator, other)`
// running the CPU structured kernel's meta and impl functions; `other` may end up a
// converted Python number. Returns whether the call was served.
template <class It, bool (*Accepts)(const at::Tensor&), class Fill, class Done>
bool run(const char* op, const char* overload, const at::Tensor& self, const at::Tensor* other,
         Fill fill, Done done) {
  at::Tensor converted;
  const auto d = self.defined() && Accepts(self) ? direct_device(self, other, converted) : -1;
  if (d < 0) return false;
  KernelScope scope(d, op, overload);
  It it(self);
  fill(it, other ? *other : self);
  done(it);
  return true;
}

template <class Meta, bool (*Accepts)(const at::Tensor&), class Fill>
at::Tensor functional(const char* op, const char* overload, const at::Tensor& self,
                      const at::Tensor* other, Fill fill) {
  at::Tensor out;
  run<Functional<Meta>, Accepts>(op, overload, self, other, fill,
                                 [&](Functional<Meta>& it) { out = std::move(it.out); });
  return out;
}

template <class Meta, bool (*Accepts)(const at::Tensor&), class Fill>
bool in_place(const char* op, const char* overload, at::Tensor& self, const at::Tensor* other,
              Fill fill) {
  return run<InPlace<Meta>, Accepts>(op, overload, self, other, fill, [](InPlace<Meta>&) {});
}

}  // namespace

// The CPU's impl functions: add and sub are add_stub (sub with -alpha), mul is
// mul_stub, true division div_true_stub, relu clamp_min_scalar_stub with 0, the
// unary ops their own stub. Division and the float unary ops promote integers to
// float: only floating and complex tensors keep one dtype there.
#define TORCH_MUSA_DIRECT(NAME, OVERLOAD, META, ACCEPTS, OTHER, PARAMS, FILL)         \
  at::Tensor NAME(const at::Tensor& self PARAMS) {                                     \
    return functional<META, ACCEPTS>("aten::" #NAME, OVERLOAD, self, OTHER, FILL);     \
  }                                                                                     \
  bool NAME##_(at::Tensor& self PARAMS) {                                              \
    return in_place<META, ACCEPTS>("aten::" #NAME "_", OVERLOAD, self, OTHER, FILL);   \
  }
#define TORCH_MUSA_COMMA ,

TORCH_MUSA_DIRECT(add, "Tensor", at::meta::structured_add_Tensor, any_dtype, &other,
                  TORCH_MUSA_COMMA const at::Tensor& other TORCH_MUSA_COMMA const at::Scalar& alpha,
                  [&](auto& it, const at::Tensor& o) {
                    it.meta(self, o, alpha);
                    at::native::add_stub(c10::DeviceType::CPU, it, alpha);
                  })
TORCH_MUSA_DIRECT(sub, "Tensor", at::meta::structured_sub_Tensor, any_dtype, &other,
                  TORCH_MUSA_COMMA const at::Tensor& other TORCH_MUSA_COMMA const at::Scalar& alpha,
                  [&](auto& it, const at::Tensor& o) {
                    it.meta(self, o, alpha);
                    at::native::add_stub(c10::DeviceType::CPU, it, -alpha);
                  })
TORCH_MUSA_DIRECT(mul, "Tensor", at::meta::structured_mul_Tensor, any_dtype, &other,
                  TORCH_MUSA_COMMA const at::Tensor& other,
                  [&](auto& it, const at::Tensor& o) {
                    it.meta(self, o);
                    at::native::mul_stub(c10::DeviceType::CPU, it);
                  })
TORCH_MUSA_DIRECT(div, "Tensor", at::meta::structured_div_Tensor, floating, &other,
                  TORCH_MUSA_COMMA const at::Tensor& other,
                  [&](auto& it, const at::Tensor& o) {
                    it.meta(self, o);
                    at::native::div_true_stub(c10::DeviceType::CPU, it);
                  })
TORCH_MUSA_DIRECT(relu, "", at::meta::structured_clamp_min, relu_dtype, nullptr, ,
                  [&](auto& it, const at::Tensor&) {
                    const at::Scalar zero(0);
                    it.meta(self, zero);
                    at::native::clamp_min_scalar_stub(c10::DeviceType::CPU, it, zero);
                  })
#define TORCH_MUSA_DIRECT_UNARY(NAME, ACCEPTS)                                          \
  TORCH_MUSA_DIRECT(NAME, "", at::meta::structured_##NAME, ACCEPTS, nullptr, ,          \
                    [&](auto& it, const at::Tensor&) {                                  \
                      it.meta(self);                                                    \
                      at::native::NAME##_stub(c10::DeviceType::CPU, it);                \
                    })
TORCH_MUSA_DIRECT_UNARY(neg, any_dtype)
TORCH_MUSA_DIRECT_UNARY(exp, floating)
TORCH_MUSA_DIRECT_UNARY(rsqrt, floating)
TORCH_MUSA_DIRECT_UNARY(sigmoid, floating)
TORCH_MUSA_DIRECT_UNARY(sqrt, floating)
TORCH_MUSA_DIRECT_UNARY(tanh, floating)
#undef TORCH_MUSA_DIRECT_UNARY
#undef TORCH_MUSA_COMMA
#undef TORCH_MUSA_DIRECT

}  // namespace torch_musa::iterator_kernels
