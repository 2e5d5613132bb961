#include "aten/layout_tensors.h"

#include "aten/kernel_alias.h"
#include "core/Device.h"

#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/quantized/QTensorImpl.h>
#include <c10/core/TensorImpl.h>
#include <torch/library.h>

namespace torch_musa {

namespace {

at::SparseTensorImpl* coo(const at::Tensor& t) {
  return static_cast<at::SparseTensorImpl*>(t.unsafeGetTensorImpl());
}
at::SparseCsrTensorImpl* csr_impl(const at::Tensor& t) {
  return static_cast<at::SparseCsrTensorImpl*>(t.unsafeGetTensorImpl());
}

bool kernel_is_cuda() { return config().kernel_type == c10::DeviceType::CUDA; }

c10::DispatchKeySet sparse_keys(bool musa) {
  return c10::DispatchKeySet(musa ? c10::DispatchKey::SparsePrivateUse1
                             : kernel_is_cuda() ? c10::DispatchKey::SparseCUDA
                                                : c10::DispatchKey::SparseCPU);
}
c10::DispatchKeySet csr_keys(bool musa) {
  return c10::DispatchKeySet(musa ? c10::DispatchKey::SparseCsrPrivateUse1
                             : kernel_is_cuda() ? c10::DispatchKey::SparseCsrCUDA
                                                : c10::DispatchKey::SparseCsrCPU);
}
c10::DispatchKeySet quantized_keys(bool musa) {
  return c10::DispatchKeySet(musa ? c10::DispatchKey::QuantizedPrivateUse1
                             : kernel_is_cuda() ? c10::DispatchKey::QuantizedCUDA
                                                : c10::DispatchKey::QuantizedCPU);
}

// A COO tensor on `keys`' device over `indices` and `values` (which are there).
at::Tensor make_coo(c10::DispatchKeySet keys, const at::Tensor& like,
                    const at::Tensor& indices, const at::Tensor& values) {
  at::Tensor t = at::detail::make_tensor<at::SparseTensorImpl>(keys, like.dtype());
  auto* impl = coo(t);
  const auto* from = coo(like);
  impl->raw_resize_(from->sparse_dim(), from->dense_dim(), like.sizes());
  impl->set_indices_and_values_unsafe(indices, values);
  impl->set_coalesced(from->coalesced());
  return t;
}

at::Tensor make_compressed(c10::DispatchKeySet keys, c10::Device device, const at::Tensor& like,
                           const at::Tensor& compressed, const at::Tensor& plain,
                           const at::Tensor& values) {
  at::Tensor t = at::detail::make_tensor<at::SparseCsrTensorImpl>(keys, device, like.layout(),
                                                                  like.dtype());
  csr_impl(t)->set_member_tensors(compressed, plain, values,
                                                             like.sizes());
  return t;
}

// A quantized tensor with `keys` over `storage`, with `like`'s geometry and quantizer.
at::Tensor make_quantized(c10::DispatchKeySet keys, c10::Storage storage, const at::Tensor& like) {
  auto* q = static_cast<at::QTensorImpl*>(like.unsafeGetTensorImpl());
  at::Tensor t = at::detail::make_tensor<at::QTensorImpl>(std::move(storage), keys, like.dtype(),
                                                          q->quantizer());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                  like.storage_offset());
  return t;
}

// A plain tensor over a quantized tensor's bytes (on its device).
at::Tensor bytes_of(const at::Tensor& q, c10::DispatchKeySet keys) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(q.storage()), keys, q.dtype());
  impl->set_sizes_and_strides(q.sizes(), q.strides(), q.storage_offset());
  return at::Tensor(std::move(impl));
}

}  // namespace

at::Tensor layout_to_kernel(KernelCall& call, const at::Tensor& t, bool written) {
  const c10::Device kdev = kernel_device(t.device().index());
  if (t.is_sparse()) {
    auto* impl = coo(t);
    return make_coo(sparse_keys(false), t, call.to_kernel(impl->indices(), written),
                    call.to_kernel(impl->values(), written));
  }
  if (is_compressed(t)) {
    auto* impl = csr_impl(t);
    return make_compressed(csr_keys(false), kdev, t,
                           call.to_kernel(impl->compressed_indices(), written),
                           call.to_kernel(impl->plain_indices(), written),
                           call.to_kernel(impl->values(), written));
  }
  TORCH_CHECK(t.is_quantized(), "layout_to_kernel: ", t.layout(), " tensors are not served");
  at::Tensor bytes = call.to_kernel(bytes_of(t, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
                                    written);
  return make_quantized(quantized_keys(false), bytes.storage(), t);
}

void layout_sync_written(KernelCall& call, const at::Tensor& m, const at::Tensor& h) {
  if (m.is_sparse()) {
    auto* hi = coo(h);
    auto* mi = coo(m);
    at::Tensor i = call.to_musa(hi->indices()), v = call.to_musa(hi->values());
    mi->raw_resize_(hi->sparse_dim(), hi->dense_dim(), h.sizes());
    mi->set_indices_and_values_unsafe(i, v);
    mi->set_coalesced(hi->coalesced());
  } else if (is_compressed(m)) {
    auto* hi = csr_impl(h);
    csr_impl(m)->set_member_tensors(
        call.to_musa(hi->compressed_indices()), call.to_musa(hi->plain_indices()),
        call.to_musa(hi->values()), h.sizes());
  } else if (m.is_quantized()) {
    // The bytes were written through the alias; a resize shows in the geometry.
    c10::TensorImpl* mi = m.unsafeGetTensorImpl();
    c10::TensorImpl* hi = h.unsafeGetTensorImpl();
    const c10::Storage& hs = hi->storage();
    if (hs.data() != mi->storage().data() || hs.nbytes() != mi->storage().nbytes()) {
      at::Tensor moved = call.to_musa(bytes_of(h, kernel_keys()), 2);
      mi->set_storage_keep_dtype(moved.storage());
    }
    if (mi->sizes() != hi->sizes() || mi->strides() != hi->strides() ||
        mi->storage_offset() != hi->storage_offset())
      mi->set_sizes_and_strides(hi->sizes(), hi->strides(), hi->storage_offset());
  }
}

at::Tensor layout_to_musa(KernelCall& call, const at::Tensor& t) {
  const c10::DeviceIndex d = call.device();
  DeviceSwitch guard(d);
  if (t.is_sparse()) {
    auto* impl = coo(t);
    return make_coo(sparse_keys(true), t, call.to_musa(impl->indices()),
                    call.to_musa(impl->values()));
  }
  if (is_compressed(t)) {
    auto* impl = csr_impl(t);
    return make_compressed(csr_keys(true), c10::Device(c10::DeviceType::PrivateUse1, d), t,
                           call.to_musa(impl->compressed_indices()),
                           call.to_musa(impl->plain_indices()), call.to_musa(impl->values()));
  }
  TORCH_CHECK(t.is_quantized(), call.op_name(), " produced a ", t.layout(),
              " tensor; musa serves strided, sparse (COO, CSR, CSC, BSR, BSC) and quantized "
              "tensors. Compute it on the CPU device.");
  // Held by `t` and by the byte view: both may go when the bytes move to musa.
  at::Tensor bytes = call.to_musa(bytes_of(t, kernel_keys()), 2);
  return make_quantized(quantized_keys(true), bytes.storage(), t);
}

}  // namespace torch_musa

namespace torch_musa {
namespace {

// Copies between a quantized musa tensor and another device: the dense
// _copy_from would see only the bytes, and the kernel device has no
// _copy_from of its own; the copy runs between the two kernel forms.
at::Tensor quantized_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  KernelCall call("aten::_copy_from");
  auto form = [&](const at::Tensor& t, bool written) {
    if (!t.is_privateuseone()) return t;
    return is_layout_tensor(t) ? layout_to_kernel(call, t, written) : call.to_kernel(t, written);
  };
  if (self.is_privateuseone()) call.see(self, "self");
  if (dst.is_privateuseone()) call.see(dst, "dst");
  at::Tensor s = form(self, false);
  at::Tensor d = form(dst, true);
  {
    KernelAllocationScope scope(call.device());
    d.copy_(s, non_blocking);
  }
  call.sync_written();
  if (dst.is_privateuseone() && is_layout_tensor(dst)) layout_sync_written(call, dst, d);
  return dst;
}

}  // namespace
}  // namespace torch_musa

TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  m.impl("_copy_from", torch_musa::quantized_copy_from);
}
