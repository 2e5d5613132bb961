// The boxed fallback: every aten op without a musa kernel of its own runs here.
// Musa tensor arguments become zero-copy host aliases, the host kernel runs
// with host allocations drawn from the musa pool, and the results become musa
// tensors again (views of the inputs where the kernel returned views, adopted
// buffers otherwise).
#include "fallback.h"

#include "allocator.h"
#include "generator.h"
#include "host_alias.h"
#include "runtime.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_set>

namespace torch_musa {

namespace {

struct Alias {
  at::Tensor host;         // the alias handed to the host kernel
  at::Tensor musa;         // the argument it stands for
  bool written;            // schema marks the argument as mutated
};

std::mutex g_policy_mu;
std::unordered_set<std::string> g_dtype_exempt;  // ops any dtype may use

bool dtype_exempt(const c10::OperatorHandle& op) {
  std::lock_guard<std::mutex> g(g_policy_mu);
  return g_dtype_exempt.count(op.schema().name()) > 0;
}

std::string device_str(const at::Tensor& t) {
  return t.device().str();
}

class Call {
 public:
  Call(const c10::OperatorHandle& op, torch::jit::Stack* stack)
      : op_(op), stack_(stack) {}

  void run() {
    const auto& schema = op_.schema();
    const size_t nargs = schema.arguments().size();
    const size_t first = stack_->size() - nargs;
    for (size_t i = 0; i < nargs; ++i) find_device((*stack_)[first + i], i);
    if (device_ < 0) device_ = current_device();
    for (size_t i = 0; i < nargs; ++i) to_host((*stack_)[first + i], i);
    {
      HostKernelScope scope(device_);
      op_.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack_);
    }
    sync_written_arguments();
    const size_t nret = schema.returns().size();
    const size_t rfirst = stack_->size() - nret;
    count_storage_refs(rfirst);
    for (size_t i = rfirst; i < stack_->size(); ++i) to_musa((*stack_)[i]);
  }

 private:
  const c10::Argument& arg(size_t i) const { return op_.schema().arguments()[i]; }

  // Pass 1: the device of the op, the same-device and dtype checks.
  void find_device(const c10::IValue& v, size_t i) {
    if (v.isTensor()) {
      check_tensor(v.toTensor(), i, false);
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) check_tensor(t, i, false);
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef())
        if (e.isTensor()) check_tensor(e.toTensor(), i, /*index_list=*/true);
    }
  }

  void check_tensor(const at::Tensor& t, size_t i, bool index_list) {
    if (!t.defined()) return;
    if (t.is_privateuseone()) {
      const auto d = t.device().index();
      if (device_ < 0) {
        device_ = d;
      } else if (d != device_) {
        mismatch(t, i);
      }
      if (C10_UNLIKELY(!dtype_supported(t.scalar_type())) && !dtype_exempt(op_))
        unsupported_dtype(t, i);
    } else if (t.dim() > 0 && !index_list) {
      other_device_ = i;
      other_ = t;
    }
    if (device_ >= 0 && other_.defined()) mismatch(other_, other_device_);
  }

  [[noreturn]] void mismatch(const at::Tensor& t, size_t i) {
    TORCH_CHECK(false,
                "Expected all tensors to be on the same device, but found at "
                "least two devices, musa:", int(device_), " and ",
                device_str(t), "! (argument '", arg(i).name(), "' of ",
                op_.schema().operator_name(), "; move it with .to('musa:",
                int(device_), "'))");
  }

  [[noreturn]] void unsupported_dtype(const at::Tensor& t, size_t i) {
    const bool dbl = t.scalar_type() == at::kDouble ||
                     t.scalar_type() == at::kComplexDouble;
    TORCH_CHECK(false, op_.schema().operator_name(), ": dtype ",
                     t.scalar_type(), " (argument '", arg(i).name(),
                     "') is not supported by the musa hardware profile ",
                     config().profile, ".",
                     dbl ? " Compute in float32, or pick a profile with float64 "
                           "(TORCH_MUSA_PROFILE=s5000)."
                         : " Use a supported dtype, or a profile that has it "
                           "(TORCH_MUSA_PROFILE).");
  }

  // Pass 2: replace musa values on the stack with host ones.
  void to_host(c10::IValue& v, size_t i) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.defined() && t.is_privateuseone()) v = alias(t, i);
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      bool any = false;
      for (const at::Tensor& t : list) any |= t.defined() && t.is_privateuseone();
      if (!any) return;
      c10::List<at::Tensor> out;
      out.reserve(list.size());
      for (const at::Tensor& t : list)
        out.push_back(t.defined() && t.is_privateuseone() ? alias(t, i) : t);
      v = std::move(out);
    } else if (v.isList()) {  // Tensor?[] (indices)
      bool any = false;
      for (const c10::IValue& e : v.toListRef())
        any |= e.isTensor() && e.toTensor().is_privateuseone();
      if (!any) return;
      c10::List<std::optional<at::Tensor>> out;
      out.reserve(v.toListRef().size());
      for (const c10::IValue& e : v.toListRef()) {
        if (!e.isTensor()) out.push_back(std::nullopt);
        else if (e.toTensor().is_privateuseone()) out.push_back(alias(e.toTensor(), i));
        else out.push_back(e.toTensor());
      }
      v = std::move(out);
    } else if (v.isGenerator() || (v.isNone() && is_generator_arg(i))) {
      v = host_generator(v);
    } else if (v.isDevice() && v.toDevice().is_privateuseone()) {
      v = c10::Device(c10::DeviceType::CPU);
    }
  }

  bool is_generator_arg(size_t i) const {
    const auto& type = arg(i).type();
    if (type->kind() != c10::TypeKind::OptionalType) return false;
    return type->castRaw<c10::OptionalType>()->getElementType()->kind() ==
           c10::TypeKind::GeneratorType;
  }

  c10::IValue host_generator(const c10::IValue& v) {
    if (v.isNone()) return host_generator_of(default_generator(device_));
    const at::Generator& g = v.toGenerator();
    TORCH_CHECK(g.device().is_privateuseone(),
                "Expected a 'musa' device type for generator but found '",
                g.device().type(), "' (", op_.schema().operator_name(), ")");
    return host_generator_of(g);
  }

  at::Tensor alias(const at::Tensor& t, size_t i) {
    at::Tensor h = host_alias(t);
    const auto* info = arg(i).alias_info();
    aliases_.push_back({h, t, info && info->isWrite()});
    return h;
  }

  // A host kernel may resize or restride an output argument: carry the new
  // bytes and metadata back onto the musa tensor.
  void sync_written_arguments() {
    for (const Alias& a : aliases_) {
      if (!a.written) continue;
      c10::TensorImpl* m = a.musa.unsafeGetTensorImpl();
      c10::TensorImpl* h = a.host.unsafeGetTensorImpl();
      const c10::Storage& hs = h->storage();
      const c10::Storage& ms = m->storage();
      if (hs.data() != ms.data() || hs.nbytes() != ms.nbytes()) {
        c10::Storage fresh = adopt_storage(a.host, device_, 1);
        ms.unsafeGetStorageImpl()->set_data_ptr_noswap(
            std::move(fresh.unsafeGetStorageImpl()->mutable_data_ptr()));
        ms.unsafeGetStorageImpl()->set_nbytes(fresh.nbytes());
      }
      if (m->sizes() != h->sizes() || m->strides() != h->strides() ||
          m->storage_offset() != h->storage_offset())
        m->set_sizes_and_strides(h->sizes(), h->strides(), h->storage_offset());
    }
  }

  void count_storage_refs(size_t rfirst) {
    for (size_t i = rfirst; i < stack_->size(); ++i) {
      const c10::IValue& v = (*stack_)[i];
      if (v.isTensor()) count(v.toTensor());
      else if (v.isTensorList())
        for (const at::Tensor& t : v.toTensorList()) count(t);
    }
  }
  void count(const at::Tensor& t) {
    if (!t.defined() || !t.has_storage()) return;
    for (auto& [impl, n] : refs_)
      if (impl == t.storage().unsafeGetStorageImpl()) { ++n; return; }
    refs_.emplace_back(t.storage().unsafeGetStorageImpl(), 1);
  }

  // Results: the argument itself, a view of an argument, or fresh memory.
  void to_musa(c10::IValue& v) {
    if (v.isTensor()) {
      v = result(v.toTensor());
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(list.size());
      for (const at::Tensor& t : list) out.push_back(result(t));
      v = std::move(out);
    }
  }

  at::Tensor result(const at::Tensor& t) {
    if (!t.defined() || !t.device().is_cpu()) return t;
    for (const Alias& a : aliases_)
      if (a.host.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return a.musa;
    if (!t.has_storage()) return t;
    c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    for (const Alias& a : aliases_)
      if (a.host.storage().unsafeGetStorageImpl() == s)
        return musa_tensor_over(a.musa.storage(), t);
    for (auto& [host, musa] : adopted_)
      if (host == s) return musa_tensor_over(musa, t);
    int refs = 0;
    for (auto& [impl, n] : refs_)
      if (impl == s) refs = n;
    c10::Storage ms = adopt_storage(t, device_, refs);
    adopted_.emplace_back(s, ms);
    return musa_tensor_over(ms, t);
  }

  const c10::OperatorHandle& op_;
  torch::jit::Stack* stack_;
  c10::DeviceIndex device_ = -1;
  size_t other_device_ = 0;
  at::Tensor other_;
  c10::SmallVector<Alias, 4> aliases_;
  c10::SmallVector<std::pair<c10::StorageImpl*, int>, 2> refs_;
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::Storage>, 2> adopted_;
};

void musa_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet,
                   torch::jit::Stack* stack) {
  Call(op, stack).run();
}

}  // namespace

void set_dtype_exempt_ops(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> g(g_policy_mu);
  g_dtype_exempt = {names.begin(), names.end()};
}

void register_fallback_for(const std::vector<std::string>& ops) {
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten",
                                        c10::DispatchKey::PrivateUse1,
                                        __FILE__, __LINE__);
  for (const auto& name : ops)
    lib->impl(name.c_str(),
              torch::CppFunction::makeFromBoxedFunction<&musa_fallback>());
}

}  // namespace torch_musa

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_musa::musa_fallback>());
}
