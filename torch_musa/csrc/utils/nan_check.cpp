// NanInfTracker's native path (see nan_check.h).
#include "utils/nan_check.h"

#include "aten/kernel_alias.h"
#include "aten/kernel_call.h"
#include "core/Device.h"

#include <ATen/Parallel.h>
#include <ATen/ops/view_as_real.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/intrusive_ptr.h>

#include <cmath>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace torch_musa {

std::atomic<bool> g_nan_check_armed{false};

namespace {

enum Status : int { kOk = 0, kInf = 1, kNaN = 2 };
enum Kind : int { kOrigin = 0, kEntered = 1, kDownstream = 2, kExplicit = 3 };
enum Mark : int { kMarkNaN = 0, kMarkInf = 1, kMarkExplicit = 2 };

// ---- the scan ------------------------------------------------------------------
// Fast pass: does any element have its exponent bits all ones (NaN or Inf)? A
// compare-and-or the compiler vectorises with SSE2 already (AVX2 clone where the
// CPU has it). Only when it finds one does a second pass tell NaN (|bits| above
// the Inf pattern) from Inf.
#define NAN_CHECK_CLONES __attribute__((target_clones("avx2", "default"), optimize("O3")))

NAN_CHECK_CLONES bool any_exp_ones16(const uint16_t* p, int64_t n, uint16_t e) {
  uint16_t hit = 0;
  for (int64_t i = 0; i < n; ++i) hit |= uint16_t(-uint16_t((p[i] & e) == e));
  return hit != 0;
}
NAN_CHECK_CLONES bool any_exp_ones32(const uint32_t* p, int64_t n, uint32_t e) {
  uint32_t hit = 0;
  for (int64_t i = 0; i < n; ++i) hit |= -uint32_t((p[i] & e) == e);
  return hit != 0;
}
NAN_CHECK_CLONES bool any_exp_ones64(const uint64_t* p, int64_t n, uint64_t e) {
  uint64_t hit = 0;
  for (int64_t i = 0; i < n; ++i) hit |= -uint64_t((p[i] & e) == e);
  return hit != 0;
}
inline bool any_exp_ones(const uint16_t* p, int64_t n, uint16_t e) { return any_exp_ones16(p, n, e); }
inline bool any_exp_ones(const uint32_t* p, int64_t n, uint32_t e) { return any_exp_ones32(p, n, e); }
inline bool any_exp_ones(const uint64_t* p, int64_t n, uint64_t e) { return any_exp_ones64(p, n, e); }

template <class U>
int scan_bits(const void* data, int64_t n, U mask, U inf) {
  const U* p = static_cast<const U*>(data);
  bool hit;
  // one thread up to 16M elements: the pass runs at memory speed, and waking the
  // pool costs more than it saves on a host busy with the kernels themselves
  if (n < (int64_t(1) << 24)) {
    hit = any_exp_ones(p, n, inf);
  } else {
    hit = at::parallel_reduce(
        0, n, int64_t(1) << 22, false,
        [&](int64_t b, int64_t e, bool acc) { return acc || any_exp_ones(p + b, e - b, inf); },
        [](bool a, bool b) { return a || b; });
  }
  if (!hit) return kOk;
  for (int64_t i = 0; i < n; ++i)  // rare: NaN or only Inf?
    if ((p[i] & mask) > inf) return kNaN;
  return kInf;
}

int scan_dense(const void* data, int64_t n, c10::ScalarType st) {
  switch (st) {
    case at::kComplexFloat: n *= 2; [[fallthrough]];
    case at::kFloat: return scan_bits<uint32_t>(data, n, 0x7fffffffu, 0x7f800000u);
    case at::kComplexDouble: n *= 2; [[fallthrough]];
    case at::kDouble:
      return scan_bits<uint64_t>(data, n, 0x7fffffffffffffffull, 0x7ff0000000000000ull);
    case at::kComplexHalf: n *= 2; [[fallthrough]];
    case at::kHalf: return scan_bits<uint16_t>(data, n, 0x7fff, 0x7c00);
    case at::kBFloat16: return scan_bits<uint16_t>(data, n, 0x7fff, 0x7f80);
    default: return -1;  // float8 and the like: through float32 below
  }
}

bool checkable(const at::Tensor& t) {
  if (!t.defined() || t.layout() != at::kStrided) return false;
  if (!(t.is_floating_point() || t.is_complex())) return false;
  const auto type = t.device().type();
  if (type != c10::DeviceType::CPU && type != c10::DeviceType::PrivateUse1) return false;
  return t.numel() > 0 && t.has_storage() && !t._is_zerotensor() &&
         t.storage().data() != nullptr;
}

int scan(const at::Tensor& t) {
  if (!checkable(t)) return kOk;
  // Device memory the host cannot read (cuda driver): scan a host copy.
  if (t.is_privateuseone() && config().kernel_type != c10::DeviceType::CPU)
    return scan(t.to(at::kCPU));
  if (t.is_non_overlapping_and_dense()) {
    const char* p = static_cast<const char*>(t.storage().data()) +
                    t.storage_offset() * int64_t(t.dtype().itemsize());
    const int r = scan_dense(p, t.numel(), t.scalar_type());
    if (r >= 0) return r;
  }
  at::Tensor h = t.is_privateuseone() ? kernel_alias(t, /*materialize=*/false) : t;
  h = h.contiguous();
  if (h.is_complex()) h = at::view_as_real(h);
  if (scan_dense(h.data_ptr(), h.numel(), h.scalar_type()) < 0) h = h.to(at::kFloat);
  return scan_dense(h.data_ptr(), h.numel(), h.scalar_type());
}

bool non_finite_scalar(const c10::IValue& v) {
  if (v.isDouble()) return !std::isfinite(v.toDouble());
  if (v.isComplexDouble()) {
    const auto c = v.toComplexDouble();
    return !std::isfinite(c.real()) || !std::isfinite(c.imag());
  }
  if (v.isTensor()) {  // a Python number wrapped as a 0-dim tensor
    const at::Tensor& t = v.toTensor();
    return t.defined() && t.unsafeGetTensorImpl()->is_wrapped_number() && scan(t) != kOk;
  }
  return false;
}

template <class F> void each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) f(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) each_tensor(e, f);
  } else if (v.isTuple()) {
    for (const c10::IValue& e : v.toTupleRef().elements()) each_tensor(e, f);
  }
}

// ---- state --------------------------------------------------------------------
struct OpEntry {
  bool skip = false;
  bool written_known = false;
  std::vector<bool> written;  // per schema argument: written in place (for ops returning nothing)
};

struct BadStorage {
  c10::weak_intrusive_ptr<c10::StorageImpl> ref;  // keeps the address from being reused
  int mark;
};

struct Counts {
  int64_t checked = 0, origin = 0, entered = 0, downstream = 0, explicit_ = 0;
};

std::mutex g_mu;
std::atomic<int64_t> g_seen{0};  // ops that reached the hook, watched or not
// The tracker the binding layer installed (the Python NanInfTracker behind it).
std::atomic<NanCheckTracker*> g_tracker{nullptr};
std::unordered_map<std::string, OpEntry> g_ops;
std::unordered_map<const c10::StorageImpl*, BadStorage> g_bad;
Counts g_counts;
int64_t g_every = 1024, g_since_read = 0, g_seq = 0, g_budget = 0, g_step = 0;
struct First {
  std::string op;
  int64_t seq = -1, step = -1;
  int kind = -1;
} g_first;

thread_local bool t_in_tracker = false;  // ops run by the tracker's own code are not checked

struct InTracker {
  InTracker() { t_in_tracker = true; }
  ~InTracker() { t_in_tracker = false; }
};

std::string python_name(const char* op) {
  // "aten::add.Tensor" -> "aten.add.Tensor"; "aten::log" -> "aten.log.default"
  std::string s = op;
  const auto colons = s.find("::");
  if (colons != std::string::npos) s.replace(colons, 2, ".");
  if (s.find('.', colons == std::string::npos ? 0 : colons + 1) == std::string::npos)
    s += ".default";
  return s;
}

const std::vector<bool>& written_args(OpEntry& e, const char* op) {
  if (!e.written_known) {
    e.written_known = true;
    std::string s = op, name = s, overload;
    const auto colons = s.find("::");
    const auto dot = s.find('.', colons == std::string::npos ? 0 : colons + 2);
    if (dot != std::string::npos) {
      name = s.substr(0, dot);
      overload = s.substr(dot + 1);
    }
    auto h = c10::Dispatcher::singleton().findSchema({name, overload});
    if (h) {
      for (const auto& a : h->schema().arguments())
        e.written.push_back(a.alias_info() && a.alias_info()->isWrite());
    }
  }
  return e.written;
}

bool is_bad_storage(const at::Tensor& t, int* mark) {
  if (!t.defined() || !t.has_storage()) return false;
  auto it = g_bad.find(t.storage().unsafeGetStorageImpl());
  if (it == g_bad.end()) return false;
  if (it->second.ref.expired()) {
    g_bad.erase(it);
    return false;
  }
  *mark = it->second.mark;
  return true;
}

void prune_bad() {
  if (g_bad.size() <= 200000) return;
  for (auto it = g_bad.begin(); it != g_bad.end();)
    it = it->second.ref.expired() ? g_bad.erase(it) : std::next(it);
  if (g_bad.size() > 200000) g_bad.clear();
}

void call_read() {
  InTracker guard;
  if (NanCheckTracker* t = g_tracker.load()) t->read();
}

}  // namespace

void nan_check_op(const char* op, const std::vector<c10::IValue>& args,
                  const std::vector<c10::IValue>& results) {
  if (!nan_check_armed() || t_in_tracker) return;
  g_seen.fetch_add(1, std::memory_order_relaxed);
  // 1. is the op watched (the tracker's white and target lists, decided once per op)
  std::vector<bool> written;
  {
    std::unique_lock<std::mutex> lk(g_mu);
    auto it = g_ops.find(op);
    if (it == g_ops.end()) {
      lk.unlock();
      bool skip = true;
      {
        InTracker guard;
        if (NanCheckTracker* t = g_tracker.load()) skip = t->skip(python_name(op));
      }
      lk.lock();
      it = g_ops.emplace(op, OpEntry{}).first;
      it->second.skip = skip;
    }
    if (it->second.skip) return;
    if (results.empty()) written = written_args(it->second, op);
  }
  // 2. its floating outputs: the results, or the arguments it wrote when it returns nothing
  c10::SmallVector<at::Tensor, 4> outs;
  auto add_out = [&](const at::Tensor& t) {
    if (checkable(t)) outs.push_back(t);
  };
  if (!results.empty()) {
    for (const auto& v : results) each_tensor(v, add_out);
  } else {
    for (size_t i = 0; i < args.size() && i < written.size(); ++i)
      if (written[i]) each_tensor(args[i], add_out);
  }
  if (outs.empty()) return;
  c10::SmallVector<int, 4> status;
  bool bad = false, has_nan = false;
  for (const auto& t : outs) {
    const int s = scan(t);
    status.push_back(s);
    bad |= s != kOk;
    has_nan |= s == kNaN;
  }
  auto is_out = [&](const at::Tensor& t) {
    for (const auto& o : outs)
      if (o.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return true;
    return false;
  };
  // 3. bookkeeping; on NaN/Inf, what kind of event it is
  bool read = false, report = false;
  int kind = -1, n_inputs = 0;
  int64_t seq;
  bool wrote_input = false;
  std::vector<int64_t> bad_outs;
  std::vector<std::pair<int64_t, at::Tensor>> bad_ins;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!nan_check_armed()) return;
    seq = ++g_seq;
    ++g_counts.checked;
    if (++g_since_read >= g_every) {
      g_since_read = 0;
      read = true;
    }
    if (!bad) {
      if (!g_bad.empty())  // storages rewritten with finite values are clean again
        for (const auto& t : outs) g_bad.erase(t.storage().unsafeGetStorageImpl());
    } else {
      // inputs that tracked ops already made non-finite (the written tensor included)
      bool in_nan = false, in_any = false, only_explicit = true, explicit_arg = false;
      for (const auto& v : args) {
        explicit_arg |= non_finite_scalar(v);
        each_tensor(v, [&](const at::Tensor& t) {
          int m;
          if (is_bad_storage(t, &m)) {
            in_any = true;
            in_nan |= m == kMarkNaN;
            only_explicit &= m == kMarkExplicit;
          }
        });
      }
      if (in_any) {
        kind = (has_nan && !in_nan) ? kOrigin : kDownstream;
      } else if (explicit_arg && !has_nan) {
        kind = kExplicit;
      } else {
        // re-check the inputs the op did not overwrite
        for (size_t i = 0; i < args.size(); ++i) {
          each_tensor(args[i], [&](const at::Tensor& t) {
            if (!t.defined() || !(t.is_floating_point() || t.is_complex())) return;
            if (t.unsafeGetTensorImpl()->is_wrapped_number()) return;
            if (is_out(t)) {
              wrote_input = true;
              return;
            }
            ++n_inputs;
            if (scan(t) != kOk) bad_ins.emplace_back(int64_t(i), t);
          });
        }
        kind = bad_ins.empty() ? kOrigin : kEntered;
      }
      const int mark = has_nan ? kMarkNaN
                       : (kind == kExplicit || (kind == kDownstream && only_explicit))
                           ? kMarkExplicit
                           : kMarkInf;
      for (size_t i = 0; i < outs.size(); ++i) {
        if (status[i] != kOk) bad_outs.push_back(int64_t(i));
        auto* s = outs[i].storage().unsafeGetStorageImpl();
        g_bad.insert_or_assign(
            s, BadStorage{c10::weak_intrusive_ptr<c10::StorageImpl>(
                              c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(s)),
                          mark});
      }
      prune_bad();
      switch (kind) {
        case kOrigin: ++g_counts.origin; break;
        case kEntered: ++g_counts.entered; break;
        case kDownstream: ++g_counts.downstream; break;
        default: ++g_counts.explicit_; break;
      }
      if (kind == kOrigin || kind == kEntered) {
        report = true;
        if (g_first.seq < 0) g_first = First{python_name(op), seq, g_step, kind};
      } else if (g_budget > 0) {
        --g_budget;
        report = true;
      }
      if (kind == kOrigin && in_any) wrote_input = false, n_inputs = -1;  // "carried Inf only"
    }
  }
  // 4. the tracker (Python): the module, phase and source line of a reported op
  // (rare), periodic reads
  if (report) {
    InTracker guard;
    if (NanCheckTracker* t = g_tracker.load())
      t->event(NanCheckEvent{python_name(op), kind, has_nan, bad_outs, n_inputs, wrote_input,
                             bad_ins, seq});
  }
  if (read) call_read();
}

NanCheckCounts nan_check_take(int64_t budget, int64_t step) {
  NanCheckCounts out;
  std::lock_guard<std::mutex> lk(g_mu);
  out.checked = g_counts.checked;
  out.origin = g_counts.origin;
  out.entered = g_counts.entered;
  out.downstream = g_counts.downstream;
  out.explicit_ = g_counts.explicit_;
  g_counts = Counts{};
  if (budget >= 0) g_budget = budget;
  if (step >= 0) g_step = step;
  out.bad_storages = int64_t(g_bad.size());
  out.seen = g_seen.exchange(0);
  return out;
}

std::optional<NanCheckFirst> nan_check_first() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_first.seq < 0) return std::nullopt;
  return NanCheckFirst{g_first.op, g_first.seq, g_first.step, g_first.kind == kOrigin};
}

int nan_check_scan(const at::Tensor& t) { return scan(t); }

void nan_check_arm(NanCheckTracker* tracker, int64_t every, int64_t budget, int64_t step,
                   bool reset) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    g_ops.clear();
    if (reset) {
      g_bad.clear();
      g_counts = Counts{};
      g_seq = 0;
      g_first = First{};
      g_seen = 0;
    }
    g_every = every > 0 ? every : 1;
    g_since_read = 0;
    g_budget = budget;
    g_step = step;
  }
  g_tracker.store(tracker);
  g_nan_check_armed = true;
  set_value_check_hook(&nan_check_op);  // the native kernels' results (aten/kernel_call.h)
}

void nan_check_disarm() {
  set_value_check_hook(nullptr);
  g_nan_check_armed = false;
  std::lock_guard<std::mutex> lk(g_mu);
  g_ops.clear();
  g_tracker.store(nullptr);
}

void nan_check_release() {
  std::lock_guard<std::mutex> lk(g_mu);
  g_bad.clear();
  g_counts = Counts{};
  g_seq = 0;
  g_first = First{};
  g_seen = 0;
}

}  // namespace torch_musa
