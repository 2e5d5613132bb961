// What musa storages do with device memory beyond holding it: take over a
// unified CPU tensor's bytes instead of copying them, and resize.
#include "core/MUSACachingAllocator.h"

#include "core/AllocatorInternals.h"
#include "core/Device.h"
#include "core/MUSAStream.h"

#include <ATen/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>

namespace torch_musa {

using namespace detail;

namespace {
// The musa storage takes a reference on the CPU one and frees through it.
void release_shared_storage(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

bool whole_storage(const at::Tensor& t) {
  return t.storage_offset() == 0 && t.is_contiguous() &&
         size_t(t.numel()) * t.element_size() == t.storage().nbytes();
}
}  // namespace

bool share_unified(const at::Tensor& src, const at::Tensor& dst) {
  if (!unified_memory_used() || !src.device().is_cpu() || !dst.is_privateuseone() || src.dtype() != dst.dtype() ||
      src.sizes() != dst.sizes() || !src.has_storage() || !dst.has_storage() ||
      !whole_storage(src) || !whole_storage(dst) || src.storage().nbytes() == 0 ||
      src.storage().nbytes() != dst.storage().nbytes())
    return false;
  c10::StorageImpl* hs = src.storage().unsafeGetStorageImpl();
  void* p = hs->mutable_data();
  if (unified_device_of(p) != dst.device().index()) return false;
  c10::raw::intrusive_ptr::incref(hs);
  c10::DataPtr shared(p, hs, &release_shared_storage, dst.device());
  // The fresh device block goes back to the cache; nothing is copied.
  dst.storage().unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(shared));
  return true;
}

void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(),
              "Trying to resize storage that is not resizable");
  const auto device = storage->device();
  c10::DataPtr fresh(nullptr, device);  // resized to 0, the storage stays musa's
  if (nbytes)
    fresh = device_allocator().allocate_on(device.index(), nbytes, device);
  const size_t keep = std::min(nbytes, storage->nbytes());
  if (keep)
    driver().memcpy(fresh.get(), storage->data(), keep,
                    current_stream(device.index()));
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

}  // namespace torch_musa
