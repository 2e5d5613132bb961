// Elementwise ops served without host aliases. Under the host driver musa memory
// is host memory, so a TensorIterator can be built over the musa tensors
// themselves and the CPU's kernel (its DispatchStub) run on it: no alias per
// argument, no mapping of results back. These were most of a small op's cost
// over the CPU device (docs/PERFORMANCE.md, small ops).
//
// Each function serves only the calls whose outcome is the CPU's by
// construction: musa tensors of one device and one dtype (a CPU 0-dim tensor of
// that dtype may come along, or a Python number beside a float32/float64 tensor,
// converted as the CPU's iterator converts it), dense, without conj/neg bits, in a dtype
// the profile has, with no op hook armed. TensorIterator promotes mixed dtypes
// only for CPU iterators, and the CPU's kernels read their operands as the
// common dtype: a mixed-dtype call must not come here. Anything else returns
// "not served" (an undefined tensor, or false) and takes the aliasing path of
// unboxed_kernel.h, which checks, casts and reports as before.
#pragma once

#include <ATen/Tensor.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/tanh_ops.h>

namespace torch_musa::iterator_kernels {

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
bool add_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
bool sub_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
at::Tensor mul(const at::Tensor& self, const at::Tensor& other);
bool mul_(at::Tensor& self, const at::Tensor& other);
at::Tensor div(const at::Tensor& self, const at::Tensor& other);
bool div_(at::Tensor& self, const at::Tensor& other);
at::Tensor relu(const at::Tensor& self);
bool relu_(at::Tensor& self);
// Unary ops: neg (every dtype its meta function takes) and, for floating and complex
// tensors only (the others promote to float), exp, rsqrt, sigmoid, sqrt, tanh.
#define TORCH_MUSA_DIRECT_UNARY(NAME) \
  at::Tensor NAME(const at::Tensor& self); \
  bool NAME##_(at::Tensor& self);
TORCH_MUSA_DIRECT_UNARY(neg)
TORCH_MUSA_DIRECT_UNARY(exp)
TORCH_MUSA_DIRECT_UNARY(rsqrt)
TORCH_MUSA_DIRECT_UNARY(sigmoid)
TORCH_MUSA_DIRECT_UNARY(sqrt)
TORCH_MUSA_DIRECT_UNARY(tanh)
#undef TORCH_MUSA_DIRECT_UNARY

}  // namespace torch_musa::iterator_kernels

namespace torch_musa::unboxed {

// Direct<Op>::kind: 0 none; 1 a functional op (run returns an undefined tensor when
// it does not serve the call); 2 an in-place op (run returns whether it served it).
template <class Op> struct Direct {
  static constexpr int kind = 0;
};

#define TORCH_MUSA_DIRECT(OP, KIND, FN)                                  \
  template <> struct Direct<at::_ops::OP> {                              \
    static constexpr int kind = KIND;                                    \
    template <class... A> static auto run(A&... a) {                     \
      return ::torch_musa::iterator_kernels::FN(a...);                   \
    }                                                                    \
  };
TORCH_MUSA_DIRECT(add_Tensor, 1, add)
TORCH_MUSA_DIRECT(add__Tensor, 2, add_)
TORCH_MUSA_DIRECT(sub_Tensor, 1, sub)
TORCH_MUSA_DIRECT(sub__Tensor, 2, sub_)
TORCH_MUSA_DIRECT(mul_Tensor, 1, mul)
TORCH_MUSA_DIRECT(mul__Tensor, 2, mul_)
TORCH_MUSA_DIRECT(div_Tensor, 1, div)
TORCH_MUSA_DIRECT(div__Tensor, 2, div_)
TORCH_MUSA_DIRECT(relu, 1, relu)
TORCH_MUSA_DIRECT(relu_, 2, relu_)
TORCH_MUSA_DIRECT(neg, 1, neg)
TORCH_MUSA_DIRECT(neg_, 2, neg_)
TORCH_MUSA_DIRECT(exp, 1, exp)
TORCH_MUSA_DIRECT(exp_, 2, exp_)
TORCH_MUSA_DIRECT(rsqrt, 1, rsqrt)
TORCH_MUSA_DIRECT(rsqrt_, 2, rsqrt_)
TORCH_MUSA_DIRECT(sigmoid, 1, sigmoid)
TORCH_MUSA_DIRECT(sigmoid_, 2, sigmoid_)
TORCH_MUSA_DIRECT(sqrt, 1, sqrt)
TORCH_MUSA_DIRECT(sqrt_, 2, sqrt_)
TORCH_MUSA_DIRECT(tanh, 1, tanh)
TORCH_MUSA_DIRECT(tanh_, 2, tanh_)
#undef TORCH_MUSA_DIRECT

}  // namespace torch_musa::unboxed
