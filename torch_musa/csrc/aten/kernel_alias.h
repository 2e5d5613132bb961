// Zero-copy views of musa memory as host tensors, and the way back.
//
// The host driver's device memory is host RAM, so a musa tensor can be handed
// to a host kernel as a CPU tensor over the same bytes. The alias owns a
// reference to the musa storage; views a host kernel makes of it alias the
// same bytes, and are mapped back onto the musa storage afterwards.
#pragma once

#include "core/Device.h"

#include <ATen/Tensor.h>

namespace torch_musa {

// The storage of a plain tensor (a musa tensor, a host kernel's result): not
// TensorImpl::storage(), a virtual call that checks for wrapper tensors.
inline c10::StorageImpl* storage_impl(const at::Tensor& t) {
  return t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
}

// `materialize`: take the storage's mutable data. A copy-on-write storage
// (torch._lazy_clone) is then copied first; a kernel that only reads it passes
// false, so reading a COW tensor leaves it shared, as on the CPU device.
at::Tensor kernel_alias(const at::Tensor& musa_tensor, bool materialize = true);

// Points `host_storage`, a read-only alias of `musa_storage` made with
// materialize=false, at the musa storage's own (materialized) data, for an
// argument of the same call that writes it.
void materialize_alias(const c10::Storage& host_storage, c10::StorageImpl* musa_storage,
                       c10::DeviceIndex device);

// A host alias of `musa_tensor` over `host_storage`, the host storage already
// aliasing its musa storage in this op call: arguments that share musa memory
// share host memory too, so the host kernel's overlap and aliasing checks
// (partial overlap, is_set_to, is_alias_of) answer as on the CPU device.
at::Tensor kernel_alias_over(const c10::Storage& host_storage, const at::Tensor& musa_tensor);

// Hands an alias back when its op call is over: kept for reuse by this thread's
// next kernel_alias if nothing else holds it or a view of it (else left alone).
// Aliases go first to a small per-thread pool of kSmallAliasPool, then to a
// larger one that list ops reach; `overflow_first`: to the larger one even while
// the small one has room.
constexpr int kSmallAliasPool = 8;
void recycle_alias(at::Tensor& alias, bool overflow_first = false);

// Where the kernels run: CPU under the host driver, CUDA under the cuda
// driver. `kernel_device(i)` stands for musa:i (-1: the current device).
inline c10::DispatchKeySet kernel_keys() {
  return c10::DispatchKeySet(config().kernel_type == c10::DeviceType::CUDA ? c10::DispatchKey::CUDA
                                                                          : c10::DispatchKey::CPU);
}
inline c10::Device kernel_device(c10::DeviceIndex musa_index) {
  const c10::DeviceType type = config().kernel_type;  // the CPU has no indices
  return type == c10::DeviceType::CPU ? c10::Device(type) : c10::Device(type, musa_index);
}

// A musa tensor with `like`'s sizes, strides, offset and conj/neg bits over
// `storage`.
at::Tensor musa_tensor_over(const c10::Storage& storage, const at::Tensor& like);

// Kernel results that become musa tensors where they lie, only their tags changed (no
// TensorImpl or StorageImpl made): an op's fresh result that nothing else holds
// (KernelCall), a compiled graph's results whose holders the caller has counted.
// `retaggable_memory` says whether `s` came from the musa allocator (the host pool, or
// under the cuda driver CUDA's caching allocator); `retag_in_place` turns `t` into a
// musa tensor on `device`, its storage too when `storage_too` (the first over it).
bool retaggable_memory(const c10::StorageImpl* s);
void retag_in_place(const at::Tensor& t, c10::DeviceIndex device, bool storage_too);

// Moves the bytes behind host tensor `t` to musa `device` (adopting them when
// they came from the musa pool and nothing else holds them, else copying).
c10::Storage adopt_storage(const at::Tensor& t, c10::DeviceIndex device,
                           int refs_on_stack);

}  // namespace torch_musa
