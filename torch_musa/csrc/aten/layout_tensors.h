// Sparse (COO, CSR, CSC, BSR, BSC) and quantized musa tensors on the host
// kernels. Such a tensor is a wrapper around dense parts (indices and values,
// or quantized bytes and a quantizer); its kernel form is the same wrapper on
// the kernel device over aliases of those parts, made through the KernelCall
// that aliases the dense arguments, so results and written arguments map back
// onto the musa parts as dense ones do.
#pragma once

#include "aten/kernel_call.h"

#include <ATen/Tensor.h>

namespace torch_musa {

// A musa tensor that is sparse or quantized (not a plain strided one).
inline bool is_layout_tensor(const at::Tensor& t) {
  return t.defined() &&
         t.key_set().has_any(c10::DispatchKeySet({c10::DispatchKey::Sparse,
                                                  c10::DispatchKey::SparseCsr,
                                                  c10::DispatchKey::Quantized}));
}
// Compressed: CSR, CSC, BSR or BSC.
inline bool is_compressed(const at::Tensor& t) {
  return t.key_set().has(c10::DispatchKey::SparseCsr);
}

// The kernel-device form of a musa sparse/quantized tensor.
at::Tensor layout_to_kernel(KernelCall& call, const at::Tensor& musa, bool written);

// After the kernel: makes musa tensor `musa` describe what its kernel form
// `kernel` now holds (an in-place or out= op may have replaced its parts).
void layout_sync_written(KernelCall& call, const at::Tensor& musa, const at::Tensor& kernel);

// A kernel's sparse/quantized result as a musa tensor (its parts moved or
// mapped back onto musa memory).
at::Tensor layout_to_musa(KernelCall& call, const at::Tensor& kernel);

}  // namespace torch_musa
