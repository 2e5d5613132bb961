#include "host_alias.h"

#include "allocator.h"
#include "runtime.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/intrusive_ptr.h>

namespace torch_musa {

namespace {

void release_storage(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

const c10::DispatchKeySet kMusaKeys(c10::DispatchKey::PrivateUse1);
const c10::DispatchKeySet kCpuKeys(c10::DispatchKey::CPU);

at::Tensor make_like(c10::Storage storage, c10::DispatchKeySet keys,
                     const at::Tensor& like) {
  // Zero tensors (autograd's efficient zeros) have no bytes: kernels must
  // see them as such on both sides.
  if (like._is_zerotensor()) keys = keys.add(c10::DispatchKey::ZeroTensor);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), keys,
                                                   like.dtype());
  impl->set_sizes_and_strides(like.sizes(), like.strides(),
                              like.storage_offset());
  if (like.is_conj()) impl->_set_conj(true);
  if (like.is_neg()) impl->_set_neg(true);
  return at::Tensor(std::move(impl));
}

}  // namespace

at::Tensor host_alias(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  c10::raw::intrusive_ptr::incref(s);
  c10::DataPtr dp(s->mutable_data(), s, &release_storage,
                  c10::Device(c10::DeviceType::CPU));
  auto storage = c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), s->nbytes(), std::move(dp),
      c10::GetCPUAllocator(), /*resizable=*/true);
  return make_like(c10::Storage(std::move(storage)), kCpuKeys, t);
}

at::Tensor musa_tensor_over(const c10::Storage& storage, const at::Tensor& like) {
  return make_like(storage, kMusaKeys, like);
}

c10::Storage adopt_storage(const at::Tensor& t, c10::DeviceIndex device,
                           int refs_on_stack) {
  c10::StorageImpl* hs = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = hs->nbytes();
  const c10::Device dev(c10::DeviceType::PrivateUse1, device);
  c10::DataPtr dp;
  if (hs->data() == nullptr) {  // nothing to move (empty or zero tensor)
    dp = c10::DataPtr(nullptr, dev);
  } else if (DeviceAllocator::owns(hs->data_ptr()) &&
      c10::raw::intrusive_ptr::use_count(hs) == size_t(refs_on_stack)) {
    dp = hs->set_data_ptr(c10::DataPtr(nullptr, hs->device()));
    dp.unsafe_set_device(dev);
  } else {
    dp = device_allocator().allocate_on(device, nbytes, dev);
    driver().memcpy(dp.get(), hs->data(), nbytes, current_stream(device));
  }
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes, std::move(dp),
      &device_allocator(), /*resizable=*/true));
}

}  // namespace torch_musa
