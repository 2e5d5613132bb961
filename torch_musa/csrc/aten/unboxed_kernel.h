// Unboxed per-op wrappers: `UnboxedKernel<at::_ops::add_Tensor>::call` has the
// op's own C++ signature, turns musa arguments into host aliases, calls the
// host (CPU) kernel through `Op::redispatch`, and maps the results back. The
// code generator (ops/codegen.py) registers one for each op that
// musa_functions.yaml declares; ops outside it take the boxed fallback.
#pragma once

#include "aten/iterator_kernels.h"
#include "aten/kernel_call.h"

#include <ATen/core/IListRef.h>
#include <ATen/core/List.h>

#include <tuple>
#include <type_traits>
#include <vector>

namespace torch_musa::unboxed {

// ---- pass 1: see every tensor ----------------------------------------------
template <class T> inline void see(KernelCall&, const T&) {}
inline void see(KernelCall& c, const at::Tensor& t) { c.see(t, "input"); }
// A mutable reference is an out= or in-place argument: the op writes it.
inline void see(KernelCall& c, at::Tensor& t) {
  c.see(t, "out", /*index_list=*/false, /*written=*/true);
}
inline void see(KernelCall& c, const std::optional<at::Tensor>& t) {
  if (t) c.see(*t, "input");
}
inline void see(KernelCall& c, at::TensorList ts) {
  for (const auto& t : ts) c.see(t, "input");
}
inline void see(KernelCall& c, const at::ITensorListRef& ts) {
  for (const auto& t : ts) c.see(t, "input");
}
inline void see(KernelCall& c, const c10::List<std::optional<at::Tensor>>& ts) {
  for (const std::optional<at::Tensor> t : ts)
    if (t) c.see(*t, "indices", /*index_list=*/true);
}

// ---- pass 2: host versions of arguments --------------------------------------
template <class T> struct Arg {  // anything that is not device data
  T v;
  Arg(KernelCall&, T x) : v(static_cast<T>(x)) {}
  T get() { return static_cast<T>(v); }
};
// A tensor argument is the call's own alias (a slot of the KernelCall), read once
// every argument has one: the list of aliases may grow until then. A mutable
// reference is an out= or in-place argument, which the op writes.
template <class T> struct TensorArg {
  KernelCall& c;
  T& x;
  int slot;
  TensorArg(KernelCall& c, T& x)
      : c(c), x(x), slot(c.to_kernel_slot(x, !std::is_const_v<T>, /*borrow=*/true)) {}
  T& get() { return slot < 0 ? x : c.kernel_at(slot); }
};
template <> struct Arg<const at::Tensor&> : TensorArg<const at::Tensor> {
  using TensorArg::TensorArg;
};
template <> struct Arg<at::Tensor&> : TensorArg<at::Tensor> {
  using TensorArg::TensorArg;
};
template <> struct Arg<const std::optional<at::Tensor>&> {
  std::optional<at::Tensor> v;
  Arg(KernelCall& c, const std::optional<at::Tensor>& x) {
    if (x) v = c.to_kernel(*x, false, /*borrow=*/true);
  }
  const std::optional<at::Tensor>& get() { return v; }
};
template <> struct Arg<at::TensorList> {
  std::vector<at::Tensor> v;
  Arg(KernelCall& c, at::TensorList xs) {
    v.reserve(xs.size());
    c.reserve(xs.size());
    for (const auto& x : xs) v.push_back(c.to_kernel(x, false, /*borrow=*/true));
  }
  at::TensorList get() { return v; }
};
template <> struct Arg<const at::ITensorListRef&> {
  std::vector<at::Tensor> v;
  at::ITensorListRef ref;
  Arg(KernelCall& c, const at::ITensorListRef& xs) {
    v.reserve(xs.size());
    c.reserve(xs.size());
    for (const auto& x : xs) v.push_back(c.to_kernel(x, false));
    ref = at::ITensorListRef(v);
  }
  const at::ITensorListRef& get() { return ref; }
};
template <> struct Arg<const c10::List<std::optional<at::Tensor>>&> {
  c10::List<std::optional<at::Tensor>> v;
  Arg(KernelCall& c, const c10::List<std::optional<at::Tensor>>& xs) {
    v.reserve(xs.size());
    for (const std::optional<at::Tensor> x : xs)
      v.push_back(x ? std::optional<at::Tensor>(c.to_kernel(*x, false)) : std::nullopt);
  }
  const c10::List<std::optional<at::Tensor>>& get() { return v; }
};
template <> struct Arg<std::optional<at::Generator>> {
  std::optional<at::Generator> v;
  Arg(KernelCall& c, std::optional<at::Generator> g) : v(c.kernel_generator_for(g)) {}
  std::optional<at::Generator> get() { return v; }
};
template <> struct Arg<std::optional<at::Device>> {
  std::optional<at::Device> v;
  Arg(KernelCall&, std::optional<at::Device> d)
      : v(d && d->is_privateuseone() ? std::optional<at::Device>(kernel_device(d->index())) : d) {}
  std::optional<at::Device> get() { return v; }
};

// ---- results ----------------------------------------------------------------
struct Results {
  KernelCall& call;
  c10::SmallVector<const at::Tensor*, 6> args;  // the caller's tensor arguments
  std::optional<ResultStorages> refs;  // made once results are counted (lists, tuples)
  void count(const at::Tensor& t) {
    if (!refs) refs.emplace();
    refs->count(t);
  }
  // How many results share `t`'s storage (1 for uncounted results).
  int refs_of(const at::Tensor& t) const { return refs ? refs->refs_of(t) : 1; }
  // The caller's argument behind a host alias (in-place and out= results).
  const at::Tensor& argument(const at::Tensor& host) {
    const at::Tensor* orig = call.original_of(host);
    TORCH_INTERNAL_ASSERT(orig, call.op_name(), ": result is not an argument");
    for (const at::Tensor* a : args)
      if (a->unsafeGetTensorImpl() == orig->unsafeGetTensorImpl()) return *a;
    TORCH_INTERNAL_ASSERT(false, call.op_name(), ": result argument not found");
  }

  template <class R> void count_all(const R&) {}
  void count_all(const at::Tensor& t) { count(t); }
  void count_all(const std::vector<at::Tensor>& ts) { for (const auto& t : ts) count(t); }
  template <class... Ts> void count_all(const std::tuple<Ts...>& t) {
    std::apply([&](const auto&... e) { (count_all(e), ...); }, t);
  }

  template <class R> R map(R r) { return r; }  // scalars and the like
  at::Tensor map(const at::Tensor& t) { return call.to_musa(t, refs_of(t)); }
  at::Tensor map(at::Tensor&& t) {
    const int n = refs_of(t);
    return call.to_musa(std::move(t), n);
  }
  std::vector<at::Tensor> map(const std::vector<at::Tensor>& ts) {
    std::vector<at::Tensor> out;
    out.reserve(ts.size());
    for (const auto& t : ts) out.push_back(call.to_musa(t, refs_of(t)));
    return out;
  }
};

template <class R> struct MapResult {
  static R run(Results& res, R r) { return res.map(std::move(r)); }
};
template <> struct MapResult<at::Tensor&> {
  static at::Tensor& run(Results& res, at::Tensor& r) {
    return const_cast<at::Tensor&>(res.argument(r));
  }
};
template <> struct MapResult<const at::Tensor&> {
  static const at::Tensor& run(Results& res, const at::Tensor& r) {
    return res.argument(r);
  }
};
// Each element is moved out of the kernel's tuple: a copy would hold a second
// reference to the result, and to_musa retags only a result nothing else holds
// (every multi-output op's results took the adopt-and-rewrap path).
template <class... Ts> struct MapResult<std::tuple<Ts...>> {
  static std::tuple<Ts...> run(Results& res, std::tuple<Ts...> r) {
    return std::apply(
        [&](auto&&... e) {
          return std::tuple<Ts...>(MapResult<Ts>::run(res, std::forward<Ts>(e))...);
        },
        std::move(r));
  }
};

template <class T> void collect(Results&, const T&) {}
inline void collect(Results& r, const at::Tensor& t) { r.args.push_back(&t); }
// Whether the op returns arguments (in-place and out= ops): only those need them collected.
template <class R> constexpr bool kReturnsArgument = std::is_reference_v<R>;
template <class... Ts>
constexpr bool kReturnsArgument<std::tuple<Ts...>> = (std::is_reference_v<Ts> || ...);

template <class T> c10::IValue debug_value(const T&) { return c10::IValue(); }
inline c10::IValue debug_value(const at::Tensor& t) { return t; }
inline c10::IValue debug_value(const std::optional<at::Tensor>& t) {
  return t ? c10::IValue(*t) : c10::IValue();
}
inline c10::IValue debug_value(const std::vector<at::Tensor>& ts) { return ts; }
inline c10::IValue debug_value(at::TensorList ts) { return ts.vec(); }
inline c10::IValue debug_value(const at::ITensorListRef& ts) {
  std::vector<at::Tensor> v;
  for (const at::Tensor& t : ts) v.push_back(t);
  return v;
}
inline c10::IValue debug_value(const c10::List<std::optional<at::Tensor>>& ts) { return ts; }
// Scalars, for hooks that tell a deliberate Inf (masked_fill(m, -inf)) from a computed one.
inline c10::IValue debug_value(const at::Scalar& s) { return s; }
inline c10::IValue debug_value(const std::optional<at::Scalar>& s) {
  return s ? c10::IValue(*s) : c10::IValue();
}
inline c10::IValue debug_value(double d) { return d; }
template <class... Ts> c10::IValue debug_value(const std::tuple<Ts...>& t) {
  std::vector<c10::IValue> out;
  std::apply([&](const auto&... e) { (out.push_back(debug_value(e)), ...); }, t);
  return c10::ivalue::Tuple::create(std::move(out));
}

// The name the op hook reports: "aten::log" + "default" style parts of `Named`
// (the op the caller dispatched: a structured functional or in-place variant is
// served by its out kernel `Op`, but hooks see the caller's op).
template <class Named> std::string hook_name() {
  std::string s = Named::name;
  const char* o = Named::overload_name;
  if (o && *o) s += std::string(".") + o;
  return s;
}

template <class Op, class Sig = typename Op::schema, bool Guard = true, class Named = Op>
struct UnboxedKernel;

template <class A, class... Rest> A& first_of(A& a, Rest&...) { return a; }

template <class Op, class Ret, class... Args, bool Guard, class Named>
struct UnboxedKernel<Op, Ret(Args...), Guard, Named> {
  static Ret call(Args... args) {
    if constexpr (Direct<Op>::kind == 1) {  // iterator_kernels.h: no host aliases
      at::Tensor r = Direct<Op>::run(args...);
      if (r.defined()) return r;
    } else if constexpr (Direct<Op>::kind == 2) {
      if (Direct<Op>::run(args...)) return first_of(args...);
    }
    KernelCall c(Op::name, Op::overload_name);
    (see(c, args), ...);
    const auto device = c.device();
    DeviceSwitch guard(device, Guard);
    const DebugHook hook = debug_hook();
    std::optional<std::vector<c10::IValue>> debug_args;  // only made for a hook
    if (C10_UNLIKELY(hook)) {
      debug_args.emplace();
      (debug_args->push_back(debug_value(args)), ...);
    }
    std::tuple<Arg<Args>...> host{Arg<Args>(c, args)...};
    Results res{c};
    if constexpr (kReturnsArgument<Ret>) (collect(res, args), ...);
    if constexpr (std::is_void_v<Ret>) {
      {
        KernelAllocationScope scope(device);
        std::apply([](auto&... a) { Op::redispatch(cpu_keys(), a.get()...); }, host);
      }
      c.sync_written();
      if (C10_UNLIKELY(hook)) hook(hook_name<Named>().c_str(), *debug_args, {});
    } else {
      auto run = [&]() -> Ret {
        KernelAllocationScope scope(device);
        return std::apply([](auto&... a) -> Ret { return Op::redispatch(cpu_keys(), a.get()...); },
                          host);
      };
      Ret r = run();
      c.sync_written();
      // One tensor result holds its storage alone among the results (refs_of
      // answers 1 for a storage not counted): only lists and tuples are counted.
      if constexpr (!std::is_same_v<std::decay_t<Ret>, at::Tensor>) res.count_all(r);
      if constexpr (std::is_reference_v<Ret>) {
        Ret out = MapResult<Ret>::run(res, r);
        if (C10_UNLIKELY(hook)) hook(hook_name<Named>().c_str(), *debug_args, {debug_value(out)});
        return out;
      } else {
        Ret out = MapResult<Ret>::run(res, std::move(r));
        if (C10_UNLIKELY(hook)) hook(hook_name<Named>().c_str(), *debug_args, {debug_value(out)});
        return out;
      }
    }
  }
  static c10::DispatchKeySet cpu_keys() { return kernel_keys(); }
};

}  // namespace torch_musa::unboxed
