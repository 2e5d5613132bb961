#include "aten/kernel_alias.h"

#include "core/MUSACachingAllocator.h"
#include "core/Device.h"
#include "core/MUSAStream.h"

#include <c10/core/TensorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <vector>

namespace torch_musa {

namespace {

void release_storage(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

// A TensorImpl's device and keys, written directly. Retagging a result is most of what
// mapping it back costs, once per op: set_storage_keep_dtype would copy the storage onto
// itself to update the device (two atomic reference counts), and
// _change_backend_component_keys works the new keys out anew each time. Both fields are
// TensorImpl's protected members, reached through member pointers formed in a subclass.
struct TensorFields : c10::TensorImpl {
  static constexpr auto device = &TensorFields::device_opt_;
  static constexpr auto keys = &TensorFields::key_set_;
};

const c10::DispatchKeySet kMusaKeys(c10::DispatchKey::PrivateUse1);

// The allocator of the kernels' device type (fixed by the driver), for the storage of an
// alias the pool could not give.
c10::Allocator* kernel_allocator() {
  static c10::Allocator* const allocator = driver().kernel_allocator();
  return allocator;
}

// A kernel-device alias of a musa tensor. It takes the musa tensor's geometry as
// ATen last computed it (sizes, strides, offset, element count and the layout flags)
// instead of recomputing it: set_sizes_and_strides counts the elements and works out
// contiguity and channels-last again, a third of an alias's cost, paid for every
// argument of every op in a model, where consecutive ops' arguments differ in shape.
// The conjugate and negative bits, which are dispatch keys, are copied as keys.
struct AliasImpl final : c10::TensorImpl {
  AliasImpl(c10::Storage storage, c10::DispatchKeySet keys, caffe2::TypeMeta dtype)
      : c10::TensorImpl(std::move(storage), keys, dtype) {}
  void take_metadata(c10::TensorImpl* t) {
    constexpr c10::DispatchKeySet kBits({c10::DispatchKey::Conjugate, c10::DispatchKey::Negative});
    key_set_ = (key_set_ - kBits) | (t->key_set() & kBits);
    // Real memory has concrete sizes (fake and meta tensors are not musa's).
    TORCH_INTERNAL_ASSERT(!t->has_symbolic_sizes_strides(), "a musa tensor with symbolic sizes");
    sizes_and_strides_ = t->sizes_and_strides();
    storage_offset_ = t->storage_offset();
    numel_ = t->numel();
    is_contiguous_ = t->is_contiguous_default(at::MemoryFormat::Contiguous);
    is_channels_last_contiguous_ = t->is_contiguous_default(at::MemoryFormat::ChannelsLast);
    is_channels_last_3d_contiguous_ = t->is_contiguous_default(at::MemoryFormat::ChannelsLast3d);
    is_channels_last_ = t->is_strides_like_default(at::MemoryFormat::ChannelsLast);
    is_channels_last_3d_ = t->is_strides_like_default(at::MemoryFormat::ChannelsLast3d);
    is_non_overlapping_and_dense_ = t->is_non_overlapping_and_dense_default();
  }
};

void set_bits_like(c10::TensorImpl* impl, const at::Tensor& like) {
  if (impl->is_conj() != like.is_conj()) impl->_set_conj(like.is_conj());
  if (impl->is_neg() != like.is_neg()) impl->_set_neg(like.is_neg());
}

// Zero tensors (autograd's efficient zeros) have no bytes: kernels must see them as
// such on both sides.
c10::DispatchKeySet keys_like(c10::DispatchKeySet keys, const at::Tensor& like) {
  return like._is_zerotensor() ? keys.add(c10::DispatchKey::ZeroTensor) : keys;
}

// A new alias of `like` (a musa tensor) over `storage`.
at::Tensor alias_like(c10::Storage storage, c10::DispatchKeySet keys, const at::Tensor& like) {
  auto impl = c10::make_intrusive<AliasImpl>(std::move(storage), keys_like(keys, like),
                                             like.dtype());
  impl->take_metadata(like.unsafeGetTensorImpl());
  return at::Tensor(std::move(impl));
}

// A musa tensor over `storage` with `like`'s geometry (a kernel's result mapped back).
at::Tensor musa_like(c10::Storage storage, const at::Tensor& like) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), keys_like(kMusaKeys, like),
                                                   like.dtype());
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  set_bits_like(impl.get(), like);
  return at::Tensor(std::move(impl));
}

}  // namespace

namespace {

// Aliases an op call is done with, kept per thread for the next call: making a
// TensorImpl + StorageImpl per argument was a tenth of a small op's cost. A
// pooled alias holds no memory (its DataPtr is dropped on return). Raw owning
// pointers in initial-exec TLS, read on every op without a TLS call (a thread's
// pooled aliases, a few hundred bytes, are not freed when it exits).
TORCH_MUSA_FAST_TLS thread_local c10::TensorImpl* tl_pool[kSmallAliasPool];
TORCH_MUSA_FAST_TLS thread_local int tl_pool_n = 0;

// The aliases of list ops beyond those (a fused optimizer step takes five lists
// of every parameter: making them anew was most of its cost), in an ordinary
// thread_local that frees them when the thread exits. Only list ops reach it.
// Sized for a fused step over ~1,600 parameters (2048 held 409: a 592-tensor
// step's aliases cost a third more each); a few MB at most, only once used.
constexpr size_t kOverflowSize = 8192;
using ImplVector = std::vector<c10::TensorImpl*>;
ImplVector* const kOverflowGone = reinterpret_cast<ImplVector*>(1);
// The pool through an initial-exec pointer: the thread_local object itself is
// reached through __tls_get_addr on every take and return.
TORCH_MUSA_FAST_TLS thread_local ImplVector* tl_overflow_impls = nullptr;
struct OverflowPool {
  ImplVector impls;
  ~OverflowPool() {
    tl_overflow_impls = kOverflowGone;  // a late alias of this exiting thread is not pooled
    for (c10::TensorImpl* impl : impls) c10::raw::intrusive_ptr::decref(impl);
  }
};
thread_local OverflowPool tl_overflow;

// This thread's overflow pool; null once the thread is exiting.
ImplVector* overflow() {
  ImplVector* impls = tl_overflow_impls;
  if (C10_UNLIKELY(impls == nullptr)) impls = tl_overflow_impls = &tl_overflow.impls;
  return impls == kOverflowGone ? nullptr : impls;
}

c10::TensorImpl* take_pooled() {
  if (C10_LIKELY(tl_pool_n > 0)) return tl_pool[--tl_pool_n];
  ImplVector* impls = overflow();
  if (!impls || impls->empty()) return nullptr;
  c10::TensorImpl* impl = impls->back();
  impls->pop_back();
  return impl;
}

// Re-points a pooled alias (always an AliasImpl: only aliases are pooled) at `t`'s
// memory and metadata.
at::Tensor reuse(c10::TensorImpl* pooled, c10::DataPtr dp, const at::Tensor& t) {
  at::Tensor a(c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim(pooled));
  auto* impl = static_cast<AliasImpl*>(a.unsafeGetTensorImpl());
  c10::StorageImpl* as = storage_impl(a);
  as->set_data_ptr_noswap(std::move(dp));
  as->set_nbytes(storage_impl(t)->nbytes());
  if (impl->dtype() != t.dtype()) impl->set_storage_and_dtype(impl->storage(), t.dtype());
  impl->take_metadata(t.unsafeGetTensorImpl());
  return a;
}

}  // namespace

void recycle_alias(at::Tensor& a, bool overflow_first) {
  c10::TensorImpl* impl = a.unsafeGetTensorImpl();
  if (impl == nullptr || storage_impl(a) == nullptr ||
      c10::raw::intrusive_ptr::use_count(impl) != 1 || impl->autograd_meta() != nullptr ||
      impl->_is_zerotensor() || impl->key_set().has(c10::DispatchKey::Python))
    return;
  c10::StorageImpl* as = storage_impl(a);
  // Still the musa memory (a kernel that resized it replaced the DataPtr), held by no view.
  if (c10::raw::intrusive_ptr::use_count(as) != 1 ||
      as->data_ptr().get_deleter() != &release_storage)
    return;
  ImplVector* impls = nullptr;
  if (C10_UNLIKELY(overflow_first || tl_pool_n >= kSmallAliasPool)) {
    impls = overflow();
    if (impls && impls->size() >= kOverflowSize) impls = nullptr;
    if (!impls && tl_pool_n >= kSmallAliasPool) return;  // both full, or the thread exits
  }
  as->set_data_ptr_noswap(c10::DataPtr(nullptr, as->device()));  // drop the musa storage now
  c10::TensorImpl* pooled = a.unsafeReleaseTensorImpl();
  if (impls) impls->push_back(pooled);
  else tl_pool[tl_pool_n++] = pooled;
}

at::Tensor kernel_alias(const at::Tensor& t, bool materialize) {
  c10::StorageImpl* s = storage_impl(t);
  c10::raw::intrusive_ptr::incref(s);
  c10::DataPtr dp(materialize ? s->mutable_data() : const_cast<void*>(s->data()), s,
                  &release_storage, kernel_device(t.device().index()));
  if (!t._is_zerotensor())
    if (c10::TensorImpl* pooled = take_pooled()) return reuse(pooled, std::move(dp), t);
  auto storage = c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), s->nbytes(), std::move(dp),
      kernel_allocator(), /*resizable=*/true);
  return alias_like(c10::Storage(std::move(storage)), kernel_keys(), t);
}

void materialize_alias(const c10::Storage& host_storage, c10::StorageImpl* musa_storage,
                       c10::DeviceIndex device) {
  c10::raw::intrusive_ptr::incref(musa_storage);  // the old DataPtr's reference goes below
  host_storage.unsafeGetStorageImpl()->set_data_ptr_noswap(c10::DataPtr(
      musa_storage->mutable_data(), musa_storage, &release_storage, kernel_device(device)));
}

at::Tensor kernel_alias_over(const c10::Storage& host_storage, const at::Tensor& t) {
  return alias_like(host_storage, kernel_keys(), t);
}

at::Tensor musa_tensor_over(const c10::Storage& storage, const at::Tensor& like) {
  return musa_like(storage, like);
}

bool retaggable_memory(const c10::StorageImpl* s) {
  return s->data() != nullptr && device_allocator().owns(s->data_ptr());
}

namespace {

// The last key set a result was retagged from on this thread, and the musa keys it became
// (the same kernel device type's keys nearly every time).
TORCH_MUSA_FAST_TLS thread_local uint64_t tl_retag_from = 0;
TORCH_MUSA_FAST_TLS thread_local uint64_t tl_retag_to = 0;

}  // namespace

void retag_in_place(const at::Tensor& t, c10::DeviceIndex device, bool storage_too) {
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const c10::Device dev(c10::DeviceType::PrivateUse1, device);
  if (storage_too) {
    c10::StorageImpl* s = storage_impl(t);
    s->mutable_data_ptr().unsafe_set_device(dev);
    s->set_allocator(&device_allocator());
  }
  impl->*TensorFields::device = dev;  // as the storage's
  const uint64_t from = impl->key_set().raw_repr();
  if (C10_LIKELY(from == tl_retag_from)) {
    impl->*TensorFields::keys = c10::DispatchKeySet(c10::DispatchKeySet::RAW, tl_retag_to);
    return;
  }
  impl->_change_backend_component_keys(dev);
  tl_retag_from = from;
  tl_retag_to = impl->key_set().raw_repr();
}

c10::Storage adopt_storage(const at::Tensor& t, c10::DeviceIndex device,
                           int refs_on_stack) {
  c10::StorageImpl* hs = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = hs->nbytes();
  const c10::Device dev(c10::DeviceType::PrivateUse1, device);
  c10::DataPtr dp;
  if (hs->data() == nullptr) {  // nothing to move (empty or zero tensor)
    dp = c10::DataPtr(nullptr, dev);
  } else if (device_allocator().owns(hs->data_ptr()) &&
      c10::raw::intrusive_ptr::use_count(hs) == size_t(refs_on_stack)) {
    dp = hs->set_data_ptr(c10::DataPtr(nullptr, hs->device()));
    dp.unsafe_set_device(dev);
  } else if (config().kernel_type != c10::DeviceType::CPU &&
             hs->device_type() == config().kernel_type) {
    // Device memory someone else also holds: share it, as the host cannot.
    c10::raw::intrusive_ptr::incref(hs);
    dp = c10::DataPtr(hs->mutable_data(), hs, &release_storage, dev);
  } else {
    dp = device_allocator().allocate_on(device, nbytes, dev);
    driver().memcpy(dp.get(), hs->data(), nbytes, current_stream(device));
  }
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes, std::move(dp),
      &device_allocator(), /*resizable=*/true));
}

}  // namespace torch_musa
