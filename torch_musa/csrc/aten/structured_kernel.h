// LegacyMeta: functional and in-place variants of a structured group served
// by the group's out kernel. PyTorch's meta function (the Meta key) computes
// the result's shape and dtype and checks the arguments; the output is
// allocated on the device; the out kernel (a UnboxedKernel) fills it.
#pragma once

#include "aten/unboxed_kernel.h"

#include <ATen/Functions.h>

namespace torch_musa::unboxed {

template <class T> const T& to_meta(const T& x) { return x; }
inline at::Tensor to_meta(const at::Tensor& t) {
  return t.defined() ? at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta)) : t;
}

inline c10::WarningHandler& silent_warnings() {
  struct Silent : c10::WarningHandler {
    void process(const c10::Warning&) override {}
  };
  static Silent handler;
  return handler;
}

inline c10::DispatchKeySet meta_keys() { return c10::DispatchKeySet(c10::DispatchKey::Meta); }

template <class Functional, class Out, bool Guard, class Sig = typename Functional::schema>
struct MetaThenOut;

template <class Functional, class Out, bool Guard, class... Args>
struct MetaThenOut<Functional, Out, Guard, at::Tensor(Args...)> {
  static at::Tensor call(Args... args) {
    KernelCall c(Functional::name, Functional::overload_name);
    (see(c, args), ...);
    const auto device = c.device();
    at::Tensor meta = Functional::redispatch(meta_keys(), to_meta(args)...);
    at::Tensor out = at::empty_strided(
        meta.sizes(), meta.strides(),
        meta.options().device(c10::Device(c10::DeviceType::PrivateUse1, device)));
    UnboxedKernel<Out, typename Out::schema, Guard, Functional>::call(args..., out);
    return out;
  }
};

template <class InPlace, class Out, bool Guard, class Sig = typename InPlace::schema>
struct InPlaceViaOut;

template <class InPlace, class Out, bool Guard, class Self, class... Rest>
struct InPlaceViaOut<InPlace, Out, Guard, at::Tensor&(Self, Rest...)> {
  static at::Tensor& call(Self self, Rest... rest) {
    at::Tensor meta_self = to_meta(self);
    {
      // Meta kernels may resize an in-place result instead of refusing it.
      c10::WarningUtils::WarningHandlerGuard quiet(&silent_warnings());
      InPlace::redispatch(meta_keys(), meta_self, to_meta(rest)...);
    }
    TORCH_CHECK(meta_self.sizes() == self.sizes(), "output with shape ", self.sizes(),
                " doesn't match the broadcast shape ", meta_self.sizes(), " (",
                InPlace::name, ".", InPlace::overload_name, ")");
    UnboxedKernel<Out, typename Out::schema, Guard, InPlace>::call(self, rest..., self);
    return self;
  }
};

}  // namespace torch_musa::unboxed
