// Autocast for musa: CUDA's per-op policy on the AutocastPrivateUse1 key, in C++.
//
// PyTorch ships autocast kernels for CUDA, CPU, XPU, MPS... but none for
// PrivateUse1; it does ship the op lists and ATen's cast wrapper
// (ATen/autocast_mode.h), which take the device type as a parameter. These
// registrations use both, so a musa region casts as a CUDA region does (the same
// lists, the same cast cache, dropped when the outermost region exits). They were
// Python kernels before, at 7-8 us of host time per autocast op on a quiet core
// (benchmarks/bench_device.py --kinds amp: a 64x64 softmax in a bf16 region 2.70x
// the CPU device's, now 1.10x), which a host-bound training step pays on every
// matmul, softmax and norm.
#include "aten/autocast_kernels.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>
#include <torch/library.h>

#include <mutex>
#include <sstream>

namespace torch_musa {
namespace {

#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
using at::DimnameList;  // torch 2.11's lists name it (norm.names_ScalarOpt_dim)
#endif
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

std::vector<std::pair<std::string, std::string>>& registered() {
  static std::vector<std::pair<std::string, std::string>> ops;
  return ops;
}

// "op" or "op, overload" as the lists spell an entry (their macro arguments).
void note(const char* entry, const char* policy) {
  std::string name;
  std::istringstream parts(entry);
  for (std::string part; std::getline(parts, part, ',');) {
    const auto from = part.find_first_not_of(' ');
    const auto to = part.find_last_not_of(' ');
    if (from == std::string::npos) continue;
    name += (name.empty() ? "" : ".") + part.substr(from, to - from + 1);
  }
  if (name.find('.') == std::string::npos) name += ".default";
  registered().emplace_back(std::move(name), policy);
}

Tensor binary_cross_entropy_banned(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                   int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast.\nMany models use a sigmoid layer right before the binary cross "
              "entropy layer.\nIn this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits\nor "
              "torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and "
              "BCEWithLogits are\nsafe to autocast.");
}

void register_all(torch::Library& m) {
#define MUSA_LOWER_PRECISION(...)                              \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)        \
  note(#__VA_ARGS__, "lower_precision");
#define MUSA_FP32(...)                                         \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)                      \
  note(#__VA_ARGS__, "fp32");
#define MUSA_FP32_SET_OPT_DTYPE(...)                           \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)        \
  note(#__VA_ARGS__, "fp32_set_opt_dtype");
#define MUSA_FP32_APPEND_DTYPE(FUNC, NAME, SIGNATURE, REDISPATCH, POLICY)          \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(FUNC, NAME, SIGNATURE,       \
                                                      REDISPATCH, POLICY)          \
  registered().emplace_back(NAME, "fp32_append_dtype");
#define MUSA_PROMOTE(...)                                      \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)                   \
  note(#__VA_ARGS__, "promote");

  AT_FORALL_LOWER_PRECISION_FP(MUSA_LOWER_PRECISION)
  AT_FORALL_FP32(MUSA_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(MUSA_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(MUSA_FP32_APPEND_DTYPE)
  AT_FORALL_PROMOTE(MUSA_PROMOTE)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN((&binary_cross_entropy_banned)));
  registered().emplace_back("binary_cross_entropy.default", "banned");

#undef MUSA_LOWER_PRECISION
#undef MUSA_FP32
#undef MUSA_FP32_SET_OPT_DTYPE
#undef MUSA_FP32_APPEND_DTYPE
#undef MUSA_PROMOTE
}

}  // namespace

std::vector<std::pair<std::string, std::string>> register_autocast_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Kept for the process's life, as a TORCH_LIBRARY_IMPL block's library is.
    static auto* lib = new torch::Library(torch::Library::IMPL, "aten",
                                          c10::DispatchKey::AutocastPrivateUse1,
                                          __FILE__, __LINE__);
    register_all(*lib);
  });
  return registered();
}

}  // namespace torch_musa
