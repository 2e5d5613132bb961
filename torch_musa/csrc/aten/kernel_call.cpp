#include "aten/kernel_call.h"

#include "core/MUSAStream.h"

#include <c10/core/impl/COW.h>

#include <ATen/Functions.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>

namespace torch_musa {

namespace {
std::mutex g_policy_mu;
std::unordered_set<std::string> g_dtype_exempt;
// TORCH_USE_MUSA_DOUBLE_CAST as the environment had it when the library loaded,
// read once (1 on, 0 off, -2 not a yes/no value; same spellings as
// torch_musa.config's Flag): what a C++ program without torch_musa's Python
// follows. Python hands over its frozen configuration instead (set_double_cast).
const char* read_double_cast_env() {
  const char* v = std::getenv("TORCH_USE_MUSA_DOUBLE_CAST");
  return v ? v : "";
}
const std::string g_double_cast_env = read_double_cast_env();  // a copy: setenv may free it
int parse_double_cast(const std::string& v) {
  std::string s;
  for (char c : v)
    if (!std::isspace(static_cast<unsigned char>(c)))
      s += char(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "on" || s == "yes") return 1;
  if (s.empty() || s == "0" || s == "false" || s == "off" || s == "no") return 0;
  return -2;
}
const int g_double_cast_at_load = parse_double_cast(g_double_cast_env);
// 0/1: set by torch_musa (the configuration, or ops.registry.set_double_cast);
// -1: the value read at load.
std::atomic<int> g_double_cast{-1};
std::atomic<int> g_sync_debug{0};
std::atomic<DebugHook> g_value_check_hook{nullptr};

bool exempt(const char* op) {
  std::lock_guard<std::mutex> g(g_policy_mu);
  return g_dtype_exempt.count(op) > 0;
}

bool is_double(c10::ScalarType t) {
  return t == at::kDouble || t == at::kComplexDouble;
}
}  // namespace

void set_dtype_exempt_ops(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> g(g_policy_mu);
  g_dtype_exempt = {names.begin(), names.end()};
}
void set_double_cast(int mode) { g_double_cast = mode < 0 ? -1 : (mode ? 1 : 0); }

// Only reached for a float64 tensor on a profile without float64.
bool double_cast_enabled() {
  const int set = g_double_cast.load(std::memory_order_relaxed);
  if (set >= 0) return set == 1;
  TORCH_CHECK(g_double_cast_at_load != -2, "TORCH_USE_MUSA_DOUBLE_CAST=", g_double_cast_env,
              " is not a yes/no value; allowed: 1, true, on, yes or 0, false, off, no "
              "(any case)");
  return g_double_cast_at_load == 1;
}

void set_sync_debug_mode(int mode) {
  TORCH_CHECK(mode >= 0 && mode <= 2,
              "invalid value of debug_mode, expected one of `default` (0), `warn` (1), `error` (2)");
  g_sync_debug = mode;
}
int sync_debug_mode() { return g_sync_debug.load(std::memory_order_relaxed); }

void sync_point(const char* what) {
  const int mode = g_sync_debug.load(std::memory_order_relaxed);
  if (C10_LIKELY(mode == 0)) return;
  TORCH_CHECK(mode != 2, "called a synchronizing MUSA operation (", what, ")");
  TORCH_WARN("called a synchronizing MUSA operation (", what, ")");
}

namespace {
// Ops that read device data on the host to size their result, as their CUDA
// kernels do (they synchronise there); checked only while the mode is on.
bool sync_op(const char* op, const char* overload) {
  static const std::unordered_set<std::string> names = {
      "aten::nonzero", "aten::masked_select", "aten::_unique", "aten::_unique2",
      "aten::unique_dim", "aten::unique_consecutive", "aten::unique_dim_consecutive",
      "aten::bincount", "aten::equal", "aten::nonzero_numpy", "aten::argwhere"};
  (void)overload;
  return names.count(op) > 0;
}

// Ops whose CUDA kernels take only contiguous inputs where PyTorch's composites hand
// PrivateUse1 the CPU's memory format (group_norm keeps a channels_last input
// channels_last for the CPU and PrivateUse1, contiguous for CUDA). Under the cuda
// driver their read-only arguments are made contiguous; the host kernels take both.
// Asked for every non-contiguous argument under the cuda driver (a transposed weight
// of each matmul): compared in place, without a string made and hashed per call.
bool contiguous_input_op(const char* op) {
  return std::strcmp(op, "aten::native_group_norm") == 0 ||
         std::strcmp(op, "aten::native_group_norm_backward") == 0;
}
}  // namespace
std::atomic<DebugHook> detail::g_debug_hook{nullptr};
void set_debug_hook(DebugHook hook) { detail::g_debug_hook = hook; }
DebugHook value_check_hook() { return g_value_check_hook.load(std::memory_order_relaxed); }
void set_value_check_hook(DebugHook hook) { g_value_check_hook = hook; }

KernelCall::KernelCall(const char* op, const char* overload) : op_(op), overload_(overload) {
  // A sync op waits for the work queued on its stream (in device(), once the
  // device is known), as its CUDA kernel does when it reads the size.
  const bool debug = sync_debug_mode() != 0;
  if (C10_UNLIKELY(debug || g_host_work_queued.load(std::memory_order_relaxed)) &&
      sync_op(op, overload)) {
    if (debug) sync_point(op);
    host_read_ = true;
  }
}

KernelCall::~KernelCall() {
  // Handed back last argument first, the first eight into the small pool, so
  // that the pools (last in, first out) give the next call of this op each
  // argument's alias again, with its sizes and strides already set (a fused
  // optimizer step's parameters differ in shape one to the next).
  for (size_t i = aliases_.size(); i-- > 0;)
    if (!aliases_[i].cast) recycle_alias(aliases_[i].kernel, i >= kSmallAliasPool);
}

std::string KernelCall::op_name() const {
  std::string s = op_;
  if (overload_ && *overload_) s += std::string(".") + overload_;
  return s;
}

void KernelCall::see(const at::Tensor& t, const char* arg, bool index_list, bool written) {
  if (!t.defined()) return;
  if (t.is_privateuseone()) {
    ++seen_;
    // A boolean mask among indices is turned into positions on the host.
    if (C10_UNLIKELY(index_list && sync_debug_mode() != 0) &&
        (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte))
      sync_point("boolean mask indexing");
    if (written && t.has_storage())
      written_storages_.push_back(storage_impl(t));
    const auto d = t.device().index();
    if (device_ < 0) device_ = d;
    else if (d != device_) mismatch(t, arg);
    if (C10_UNLIKELY(!dtype_supported(t.scalar_type())) && !exempt(op_) &&
        !(is_double(t.scalar_type()) && double_cast_enabled()))
      unsupported(t, arg);
  } else if ((t.dim() > 0 || written) && !index_list && !other_.defined()) {
    other_ = t;
    other_arg_ = arg;
  }
  if (device_ >= 0 && other_.defined()) mismatch(other_, other_arg_);
}

c10::DeviceIndex KernelCall::device() {
  if (device_ < 0) device_ = current_device();
  if (C10_UNLIKELY(host_read_)) {
    host_read_ = false;
    wait_for_host_read(current_stream(device_));
  }
  return device_;
}

void KernelCall::mismatch(const at::Tensor& t, const char* arg) {
  TORCH_CHECK(false,
              "Expected all tensors to be on the same device, but found at "
              "least two devices, musa:", int(device_), " and ", t.device(),
              "! (argument '", arg, "' of ", op_name(), "; move it with .to('musa:",
              int(device_), "'))");
}

void KernelCall::unsupported(const at::Tensor& t, const char* arg) {
  const bool dbl = is_double(t.scalar_type());
  TORCH_CHECK(false, op_name(), ": dtype ", t.scalar_type(), " (argument '", arg,
              "') is not supported by the musa hardware profile ",
              config().profile, ".",
              dbl ? " Set TORCH_USE_MUSA_DOUBLE_CAST=1 to compute float64 in "
                    "float32, or pick a profile with float64 "
                    "(TORCH_MUSA_PROFILE=s4000 or s5000)."
                  : " Use a supported dtype, or a profile that has it "
                    "(TORCH_MUSA_PROFILE).");
}

bool KernelCall::written_by_hash(const c10::StorageImpl* s) {
  if (!index_) index_ = std::make_unique<Index>();
  if (index_->written_count != written_storages_.size()) {
    index_->written.insert(written_storages_.begin() + index_->written_count,
                           written_storages_.end());
    index_->written_count = written_storages_.size();
  }
  return index_->written.count(s) > 0;
}

void KernelCall::index_last_alias() {
  if (!index_) index_ = std::make_unique<Index>();
  const size_t first = index_->active ? aliases_.size() - 1 : 0;
  if (!index_->active) {
    index_->active = true;
    index_->musa_storage.reserve(std::max<size_t>(aliases_.capacity(), 64));
  }
  for (size_t i = first; i < aliases_.size(); ++i)
    if (!aliases_[i].cast)
      index_->musa_storage.emplace(storage_impl(*aliases_[i].musa), i);
}

void KernelCall::index_kernel_sides() const {
  Index& x = *index_;
  if (x.kernel_indexed == 0) {
    x.kernel_impl.reserve(aliases_.size());
    x.kernel_storage.reserve(aliases_.size());
  }
  for (size_t i = x.kernel_indexed; i < aliases_.size(); ++i) {
    const Alias& a = aliases_[i];
    x.kernel_impl.emplace(a.kernel.unsafeGetTensorImpl(), i);
    if (!a.cast && a.kernel.has_storage())
      x.kernel_storage.emplace(storage_impl(a.kernel), i);
  }
  x.kernel_indexed = aliases_.size();
}

KernelCall::Alias* KernelCall::first_alias_by_hash(const c10::StorageImpl* ms) {
  auto it = index_->musa_storage.find(ms);
  return it == index_->musa_storage.end() ? nullptr : &aliases_[it->second];
}

int KernelCall::to_kernel_slot(const at::Tensor& t, bool written, bool borrow) {
  if (!t.defined() || !t.is_privateuseone()) return -1;
  bool cast = false;
  bool shared = false;
  at::Tensor h;
  if (C10_UNLIKELY(is_double(t.scalar_type()) && !dtype_supported(t.scalar_type()) &&
                   double_cast_enabled() && !exempt(op_))) {
    h = kernel_alias(t).to(t.scalar_type() == at::kDouble ? at::kFloat : at::kComplexFloat);
    cast = downcast_ = true;
  } else if (!t._is_zerotensor()) {
    // The host kernel must see musa arguments' sharing as the CPU device sees
    // its own: one tensor passed twice (add_'s self and out) is one host
    // tensor, and tensors over one musa storage share one host storage.
    c10::StorageImpl* ms = storage_impl(t);
    if (Alias* first = first_alias_over(ms)) {
      Alias& a = *first;
      if (C10_UNLIKELY(written && a.shared)) {  // read first, written by a later argument
        materialize_alias(a.kernel.storage(), ms, t.device().index());
        for (Alias& b : aliases_)
          if (b.kernel.storage().unsafeGetStorageImpl() == a.kernel.storage().unsafeGetStorageImpl())
            b.shared = false;
      }
      if (a.musa->unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
        a.written |= written;
        return static_cast<int>(first - aliases_.data());
      }
      h = kernel_alias_over(a.kernel.storage(), t);
      shared = a.shared;
    }
    if (!h.defined()) {
      // Only a storage that the op writes needs its own copy of copy-on-write data
      // (asked last: a list op's written storages are looked up by hash).
      shared = !written && c10::impl::cow::is_cow_data_ptr(std::as_const(*ms).data_ptr()) &&
               !storage_written(ms);
      h = kernel_alias(t, /*materialize=*/!shared);
    }
  }
  if (!h.defined()) h = kernel_alias(t);
  if (C10_UNLIKELY(!written && config().kernel_type == c10::DeviceType::CUDA &&
                   !h.is_contiguous() && contiguous_input_op(op_))) {
    h = h.contiguous();
    cast = true;  // a copy, not an alias: never recycled
  }
  aliases_.push_back({std::move(h), borrow ? c10::MaybeOwned<at::Tensor>::borrowed(t)
                                            : c10::MaybeOwned<at::Tensor>::owned(std::in_place, t),
                      written, cast, shared});
  if (C10_UNLIKELY(aliases_.size() >= kIndexFrom)) index_last_alias();
  return static_cast<int>(aliases_.size() - 1);
}

at::Generator KernelCall::kernel_generator_for(const std::optional<at::Generator>& g) {
  if (!g.has_value() || !g->defined())
    return kernel_generator_of(default_generator(device()));
  TORCH_CHECK(g->device().is_privateuseone(),
              "Expected a 'musa' device type for generator but found '",
              g->device().type(), "' (", op_name(), ")");
  return kernel_generator_of(*g);
}

void KernelCall::sync_alias(const Alias& a) {
  const at::Tensor& musa = *a.musa;
  c10::TensorImpl* m = musa.unsafeGetTensorImpl();
  c10::TensorImpl* h = a.kernel.unsafeGetTensorImpl();
  if (a.cast) {  // computed in float32: write the values back as float64
    if (m->sizes() != h->sizes()) musa.resize_(h->sizes());
    kernel_alias(musa).copy_(a.kernel);
    return;
  }
  const c10::Storage& hs = h->storage();
  const c10::Storage& ms = m->storage();
  if (hs.data() != ms.data() || hs.nbytes() != ms.nbytes()) {
    c10::Storage fresh = adopt_storage(a.kernel, device(), 1);
    ms.unsafeGetStorageImpl()->set_data_ptr_noswap(
        std::move(fresh.unsafeGetStorageImpl()->mutable_data_ptr()));
    ms.unsafeGetStorageImpl()->set_nbytes(fresh.nbytes());
  }
  if (m->sizes() != h->sizes() || m->strides() != h->strides() ||
      m->storage_offset() != h->storage_offset())
    m->set_sizes_and_strides(h->sizes(), h->strides(), h->storage_offset());
}

const at::Tensor* KernelCall::original_of(const at::Tensor& host) const {
  if (indexed()) {
    index_kernel_sides();
    auto it = index_->kernel_impl.find(host.unsafeGetTensorImpl());
    return it == index_->kernel_impl.end() ? nullptr : &*aliases_[it->second].musa;
  }
  for (const Alias& a : aliases_)
    if (a.kernel.unsafeGetTensorImpl() == host.unsafeGetTensorImpl()) return &*a.musa;
  return nullptr;
}

at::Tensor KernelCall::to_musa(at::Tensor&& t, int refs) {
  if (fresh_result(t, refs)) {
    retag_in_place(t, device(), /*storage_too=*/true);
    return std::move(t);
  }
  return mapped_back(t, refs);
}

at::Tensor KernelCall::to_musa(const at::Tensor& t, int refs) {
  if (fresh_result(t, refs)) {
    retag_in_place(t, device(), /*storage_too=*/true);
    return t;
  }
  return mapped_back(t, refs);
}

bool KernelCall::fresh_result(const at::Tensor& t, int refs) const {
  // Neither an argument's alias (this call holds it too) nor a view of one (its storage
  // is the alias's, with release_storage's deleter) can pass; nor a layout tensor, whose
  // TensorImpl does not hold the storage.
  if (refs != 1 || downcast_ || !t.defined() || t.layout() != at::kStrided) return false;
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  c10::StorageImpl* s = storage_impl(t);
  if (s == nullptr || impl->device_type() != config().kernel_type) return false;
  return c10::raw::intrusive_ptr::use_count(impl) == 1 &&
         c10::raw::intrusive_ptr::use_count(s) == 1 && retaggable_memory(s) &&
         impl->allow_tensor_metadata_change();
}

at::Tensor KernelCall::mapped_back(const at::Tensor& t, int refs) {
  if (!t.defined() || t.device().type() != config().kernel_type) return t;
  TORCH_CHECK(t.layout() == at::kStrided, op_name(), " produced a ", t.layout(),
              " tensor; musa supports only strided (dense) tensors. Compute it on "
              "the CPU device, or keep the data dense.");
  if (const at::Tensor* orig = original_of(t)) return *orig;
  if (C10_UNLIKELY(downcast_) && (t.scalar_type() == at::kFloat ||
                                  t.scalar_type() == at::kComplexFloat)) {
    at::Tensor up = t.to(t.scalar_type() == at::kFloat ? at::kDouble : at::kComplexDouble);
    return musa_tensor_over(adopt_storage(up, device(), 1), up);
  }
  if (!t.has_storage()) return t;
  c10::StorageImpl* s = storage_impl(t);
  if (indexed()) {
    index_kernel_sides();
    auto it = index_->kernel_storage.find(s);
    if (it != index_->kernel_storage.end())
      return musa_tensor_over(aliases_[it->second].musa->storage(), t);
  } else {
    for (const Alias& a : aliases_)
      if (!a.cast && storage_impl(a.kernel) == s)
        return musa_tensor_over(a.musa->storage(), t);
  }
  for (auto& [host, musa] : adopted_)  // a few at most: fresh results are retagged
    if (host == s) return musa_tensor_over(musa, t);
  c10::Storage ms = adopt_storage(t, device(), refs);
  adopted_.emplace_back(s, ms);
  return musa_tensor_over(ms, t);
}

}  // namespace torch_musa
