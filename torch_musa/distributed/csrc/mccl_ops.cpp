// mccl hot path in C++: the c10d kernels for musa (PrivateUse1) tensors that
// training leans on (all_reduce, broadcast, all_gather_into_tensor,
// reduce_scatter_tensor). Each aliases the musa tensors as tensors of the
// kernel device (host tensors on the host driver, CUDA tensors on the cuda
// driver: same bytes, no copy), calls the process group's musa backend (Gloo or
// NCCL) and, for async_op, returns a Work whose future yields the musa tensors.
// Errors name the collective. The other collectives are served by
// torch_musa/distributed/mccl/kernels.py.
//
// Built into torch_musa.distributed._C (module.cpp); `torch.ops.mccl.native_ops()`
// lists what it serves so the Python side does not override it.
#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <torch/library.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace torch_musa {
std::string mccl_error_hint(const std::string& msg, bool checks_all);  // py_work.cpp
}  // namespace torch_musa

namespace {

using c10d::Work;

// Where the backend reads musa memory: the host (host driver, Gloo) or a CUDA
// device (cuda driver: NCCL, or Gloo's CUDA paths). Set by mccl.install().
std::atomic<bool> g_cuda_aliases{false};
// Gloo calls run on host copies (see Stage below): under the cuda driver, or forced
// on the host driver (MCCL_STAGE_GLOO=1) so that CI exercises the path.
std::atomic<bool> g_stage_gloo{false};

void set_alias_device(const std::string& type, bool stage_gloo) {
  TORCH_CHECK(type == "cpu" || type == "cuda", "mccl: alias device must be 'cpu' or 'cuda', got '",
              type, "'");
  g_cuda_aliases.store(type == "cuda");
  g_stage_gloo.store(stage_gloo);
}

// Futures of asynchronous works: on a GPU their completion is stream-ordered,
// so they carry the musa device (events on musa streams, which are CUDA streams
// there); on the host driver the data is ready once the Gloo work is.
c10::intrusive_ptr<c10::ivalue::Future> musa_future(const std::vector<at::Tensor>& values) {
  auto type = c10::ListType::create(c10::TensorType::get());
  if (!g_cuda_aliases.load() || values.empty())
    return c10::make_intrusive<c10::ivalue::Future>(type);
  return c10::make_intrusive<c10::ivalue::Future>(type, std::vector<c10::Device>{values[0].device()});
}

// Gloo under the cuda driver (ranks sharing a GPU): Gloo's transports read host
// memory, so the musa tensors of one call are staged through host copies and
// written back once the collective is done (the call completes before it returns).
struct Stage {
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs;  // (musa tensor, host copy)
};
thread_local Stage* tl_stage = nullptr;

at::Tensor staged_copy(const at::Tensor& t) {
  for (const auto& p : tl_stage->pairs)
    if (p.first.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return p.second;
  at::Tensor h = t.to(at::kCPU);
  tl_stage->pairs.emplace_back(t, h);
  return h;
}

// The runtime's alias of a musa tensor as a tensor of the kernel device (the
// same bytes: a host tensor on the host driver, a CUDA tensor on the cuda
// driver), exported by torch_musa._C as a capsule: one alias implementation.
using KernelAliasFn = at::Tensor (*)(const at::Tensor&);
KernelAliasFn g_kernel_alias = nullptr;

at::Tensor host_view(const at::Tensor& t) {
  if (!t.is_privateuseone()) return t;
  if (tl_stage != nullptr) return staged_copy(t);
  return g_kernel_alias(t);
}

std::vector<at::Tensor> aliases(at::TensorList ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(host_view(t));
  return out;
}

std::string describe(at::TensorList ts) {
  std::string s = "[";
  for (size_t i = 0; i < ts.size(); ++i) {
    if (i) s += ", ";
    s += "(";
    for (size_t d = 0; d < ts[i].sizes().size(); ++d) {
      if (d) s += ", ";
      s += std::to_string(ts[i].sizes()[d]);
    }
    if (ts[i].dim() == 1) s += ",";
    s += "):";
    s += std::string(c10::toString(ts[i].scalar_type()));
  }
  return s + "]";
}

// The cause a backend's error message points at (py_work.cpp, shared with the
// Python kernels' errors); the C++ kernels do not suggest MCCL_CHECK_COLLECTIVES.
std::string hint(const std::string& msg) { return torch_musa::mccl_error_hint(msg, true); }

std::string where(const c10::intrusive_ptr<c10d::Backend>& b) {
  return "rank " + std::to_string(b->getRank()) + " of " + std::to_string(b->getSize());
}

[[noreturn]] void rethrow_named(const char* name, const std::string& rank_of, at::TensorList ts,
                                const std::string& msg) {
  TORCH_CHECK(false, "mccl ", name, " failed on ", rank_of, ", local tensors ", describe(ts), hint(msg), ": ",
              msg);
}

[[noreturn]] void rethrow_named(const char* name, const c10::intrusive_ptr<c10d::Backend>& b,
                                at::TensorList ts, const std::string& msg) {
  rethrow_named(name, where(b), ts, msg);
}

// ---------------------------------------------------------------- stalled verified calls
// A call whose signature was verified before (check_signature below) goes straight to
// the engine. Should another rank meanwhile check a *new* signature at this call's
// position (the ranks called different collectives, this rank's a known one), the
// engine would wait here the whole timeout while that rank waits in its check, which
// would then read this rank's next call as the mismatch. So a watched wait asks the
// check (Python: torch_musa.distributed.mccl._stalled) every kStallPoll once the call has
// waited that long: if a peer published a check for this position, it publishes this
// call's signature there (the peer's check names both calls) and answers the error to
// raise, once the call completed when the peers join it with placeholder tensors to keep
// the group usable. Verified calls that complete within kStallPoll cost a future callback.
constexpr std::chrono::milliseconds kStallPoll{1000};

// The engine's sequence number (calls issued on the group), or -1 where the backend keeps none.
int64_t sequence_number(const c10::intrusive_ptr<c10d::Backend>& b) {
  try {
    return static_cast<int64_t>(b->getSequenceNumberForGroup());
  } catch (const std::exception&) {
    return -1;
  }
}

struct Watch {
  std::string group;  // empty: not watched (check off, one rank, NCCL)
  const char* name = "";
  std::string extra;
  std::vector<at::Tensor> tensors;
};

void wait_watched(const c10::intrusive_ptr<Work>& w, const c10::intrusive_ptr<c10d::Backend>& b,
                  const Watch& watch) {
  c10::intrusive_ptr<c10::ivalue::Future> fut;
  if (!watch.group.empty()) {
    try {
      fut = w->getFuture();
    } catch (const std::exception&) {  // Gloo's reduce_scatter has none: a plain wait
    }
  }
  if (!fut) {
    w->wait();
    return;
  }
  struct Flag {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto flag = std::make_shared<Flag>();
  fut->addCallback([flag](c10::ivalue::Future&) {
    {
      std::lock_guard<std::mutex> lock(flag->mu);
      flag->done = true;
    }
    flag->cv.notify_all();
  });
  while (true) {
    {
      std::unique_lock<std::mutex> lock(flag->mu);
      if (flag->cv.wait_for(lock, kStallPoll, [&] { return flag->done; })) break;
    }
    std::string msg;
    bool after_completion = false;
    {
      pybind11::gil_scoped_acquire gil;
      try {
        auto r = pybind11::module_::import("torch_musa.distributed.mccl")
                     .attr("_stalled")(watch.group, watch.name, watch.extra, watch.tensors,
                                       sequence_number(b));
        if (!r.is_none()) {
          auto t = r.cast<pybind11::tuple>();
          msg = t[0].cast<std::string>();
          after_completion = t[1].cast<bool>();
        }
      } catch (pybind11::error_already_set& e) {
        msg = pybind11::str(e.value());
      }
    }
    if (!msg.empty()) {
      if (after_completion) {
        try {
          w->wait();  // the peers join it: the engine completes it, the group stays usable
        } catch (const std::exception&) {
        }
      }
      throw std::runtime_error(msg);
    }
  }
  w->wait();  // errors of the call itself
}

// Stages the aliases of one call when the backend cannot read device memory.
class StageScope {
 public:
  explicit StageScope(const c10::intrusive_ptr<c10d::Backend>& b)
      : on_(g_stage_gloo.load(std::memory_order_relaxed) && b->getBackendName() != "nccl") {
    if (on_) tl_stage = &stage_;
  }
  ~StageScope() {
    if (on_) tl_stage = nullptr;
  }
  // Wait for the collective and copy the host results back into the musa tensors.
  void complete(const c10::intrusive_ptr<Work>& w, const char* name,
                const c10::intrusive_ptr<c10d::Backend>& b, at::TensorList described,
                const Watch& watch) {
    if (!on_) return;
    tl_stage = nullptr;
    try {
      wait_watched(w, b, watch);
    } catch (const std::exception& e) {
      rethrow_named(name, b, described, e.what());
    }
    for (auto& p : stage_.pairs) p.first.copy_(p.second);
  }

 private:
  bool on_;
  Stage stage_;
};

// ---------------------------------------------------------------- cross-rank check
// Gloo aborts a process that receives more bytes than it posted and silently mixes
// dtypes of the same byte size, so a signature (collective, op/root, shapes, dtypes)
// is checked across the ranks the first time it is used on a group. The check itself
// lives in Python (torch_musa.distributed.mccl._first_use_check, through the group's
// store); here a set of verified signatures keeps the steady state at one lookup.
std::mutex g_verified_mu;
std::unordered_set<std::string> g_verified;
std::atomic<bool> g_check_on{true};  // MCCL_CHECK_COLLECTIVES=off clears it (mccl.install)

void set_first_use_check(bool on) { g_check_on.store(on); }

void append_sig(std::string& key, at::TensorList ts) {
  for (const auto& t : ts) {
    key += '[';
    for (auto d : t.sizes()) {
      key += std::to_string(d);
      key += ',';
    }
    key += c10::toString(t.scalar_type());
    key += ']';
  }
}

// Returns what a wait on the call watches for (stalled verified calls, above): Gloo only.
Watch check_signature(const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
                      const c10::intrusive_ptr<c10d::Backend>& b, const char* name,
                      const std::string& extra, at::TensorList first, at::TensorList second = {}) {
  if (!g_check_on.load(std::memory_order_relaxed) || pg->getSize() < 2) return {};
  const std::string& group = pg->getGroupName();
  std::string key;
  key.reserve(96);
  key += group;
  key += '\x1f';
  key += name;
  key += '(';
  key += extra;
  key += ')';
  append_sig(key, first);
  key += '|';
  append_sig(key, second);
  Watch watch;
  if (b->getBackendName() != "nccl") {
    watch.group = group;
    watch.name = name;
    watch.extra = extra;
    watch.tensors.assign(first.begin(), first.end());
    watch.tensors.insert(watch.tensors.end(), second.begin(), second.end());
  }
  {
    std::lock_guard<std::mutex> lock(g_verified_mu);
    if (g_verified.count(key)) return watch;
  }
  {
    pybind11::gil_scoped_acquire gil;
    try {
      std::vector<at::Tensor> ts(first.begin(), first.end());
      ts.insert(ts.end(), second.begin(), second.end());
      // The engine's sequence number places the call (Gloo only: -1 under NCCL).
      int64_t seq = watch.group.empty() ? -1 : sequence_number(b);
      pybind11::module_::import("torch_musa.distributed.mccl")
          .attr("_first_use_check")(group, name, extra, ts, false, seq);
    } catch (pybind11::error_already_set& e) {
      std::string msg = pybind11::str(e.value());
      TORCH_CHECK(false, msg);
    }
  }
  std::lock_guard<std::mutex> lock(g_verified_mu);
  if (g_verified.size() < 65536) g_verified.insert(std::move(key));
  return watch;
}

void forget_group(std::string group) {
  group += '\x1f';
  std::lock_guard<std::mutex> lock(g_verified_mu);
  for (auto it = g_verified.begin(); it != g_verified.end();) {
    if (it->compare(0, group.size(), group) == 0)
      it = g_verified.erase(it);
    else
      ++it;
  }
}

const char* op_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

// torch 2.13 renamed the supplement that carries the PREMUL_SUM factor.
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
using PreMulSum = c10d::NCCLPreMulSumSupplement;
#else
using PreMulSum = c10d::PreMulSumSupplement;
#endif

// PREMUL_SUM (torch.distributed._make_nccl_premul_sum(factor)): Gloo has no such op, so
// the input is scaled by the factor and the ranks SUM (NCCL too: one path). `t` is an alias.
at::Tensor premul(const at::Tensor& t, const c10d::ReduceOp& op, bool in_place) {
  auto* s = dynamic_cast<PreMulSum*>(op.supplement_.get());
  TORCH_CHECK(s != nullptr, "mccl: PREMUL_SUM without a factor");
  if (s->tensor_factor.defined()) {
    auto f = host_view(s->tensor_factor).to(t.scalar_type());
    return in_place ? t.mul_(f) : t.mul(f);
  }
  return in_place ? t.mul_(s->double_factor) : t.mul(s->double_factor);
}

// The factor of a PREMUL_SUM ReduceOp for the Python kernels (the TorchScript ReduceOp
// does not expose it): the 1-element tensor factor, or a 0-dim double tensor.
at::Tensor premul_factor(const c10::intrusive_ptr<c10d::ReduceOp>& op) {
  auto* s = dynamic_cast<PreMulSum*>(op->supplement_.get());
  TORCH_CHECK(op->op_ == c10d::ReduceOp::PREMUL_SUM && s != nullptr, "mccl: not a PREMUL_SUM ReduceOp");
  if (s->tensor_factor.defined()) return s->tensor_factor;
  return at::scalar_tensor(s->double_factor, at::kDouble);
}

c10d::ReduceOp gloo_op(const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::PREMUL_SUM ? c10d::ReduceOp(c10d::ReduceOp::SUM) : op;
}

// Work of an asynchronous collective: waits on the Gloo work (errors named),
// future yields the musa tensors.
class MusaWork : public Work {
 public:
  MusaWork(c10::intrusive_ptr<Work> inner, std::vector<at::Tensor> values, const char* name,
           c10::intrusive_ptr<c10d::Backend> backend, c10d::OpType type, Watch watch)
      : Work(-1, type), inner_(std::move(inner)), name_(name), backend_(std::move(backend)),
        desc_(values), watch_(std::move(watch)) {
    fut_ = musa_future(values);
    auto fut = fut_;
    auto vals = std::move(values);
    // The callback runs (and is destroyed) on the backend's worker thread: it holds the
    // rank's name, not the backend, which would otherwise keep the process group alive
    // past destroy_process_group and could be released last right there, where
    // ProcessGroupGloo's destructor would join the very thread it runs on.
    std::string rank_of = where(backend_);
    const char* nm = name_;
    inner_->getFuture()->addCallback([fut, vals, rank_of, nm](c10::ivalue::Future& f) mutable {
      if (f.hasError()) {
        try {
          rethrow_named(nm, rank_of, vals, f.tryRetrieveErrorMessage());
        } catch (...) {
          fut->setError(std::current_exception());
        }
      } else {
        fut->markCompleted(c10::IValue(c10::List<at::Tensor>(vals)));
      }
    });
  }

  bool isCompleted() override { return inner_->isCompleted(); }
  bool isSuccess() const override { return inner_->isSuccess(); }
  std::exception_ptr exception() const override {
    return fut_->completed() && fut_->hasError() ? fut_->exception_ptr() : inner_->exception();
  }
  std::vector<at::Tensor> result() override { return desc_; }
  bool wait(std::chrono::milliseconds timeout) override {
    try {
      if (timeout == kNoTimeout)
        wait_watched(inner_, backend_, watch_);
      else
        inner_->wait(timeout);
    } catch (const std::exception& e) {
      rethrow_named(name_, backend_, desc_, e.what());
    }
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return fut_; }

 private:
  c10::intrusive_ptr<Work> inner_;
  const char* name_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::vector<at::Tensor> desc_;
  c10::intrusive_ptr<c10::ivalue::Future> fut_;
  Watch watch_;
};

// Work without a future of its own (Gloo's reduce_scatter): complete ours from a
// waiter thread would cost a thread; instead the future is completed on wait()
// or on the first isCompleted() that sees the Gloo work done.
class MusaWorkNoFuture : public Work {
 public:
  MusaWorkNoFuture(c10::intrusive_ptr<Work> inner, std::vector<at::Tensor> values,
                   const char* name, c10::intrusive_ptr<c10d::Backend> backend,
                   c10d::OpType type)
      : Work(-1, type), inner_(std::move(inner)), name_(name), backend_(std::move(backend)),
        vals_(std::move(values)) {
    fut_ = musa_future(vals_);
  }
  bool isCompleted() override {
    if (inner_->isCompleted()) settle();
    return fut_->completed();
  }
  bool wait(std::chrono::milliseconds timeout) override {
    try {
      inner_->wait(timeout);
    } catch (const std::exception& e) {
      try {
        rethrow_named(name_, backend_, vals_, e.what());
      } catch (...) {
        if (!fut_->completed()) fut_->setErrorIfNeeded(std::current_exception());
        throw;
      }
    }
    if (!fut_->completed()) fut_->markCompleted(c10::IValue(c10::List<at::Tensor>(vals_)));
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return fut_; }
  std::vector<at::Tensor> result() override { return vals_; }

 private:
  void settle() {
    if (fut_->completed()) return;
    try {
      wait(kNoTimeout);
    } catch (...) {
    }
  }
  c10::intrusive_ptr<Work> inner_;
  const char* name_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::vector<at::Tensor> vals_;
  c10::intrusive_ptr<c10::ivalue::Future> fut_;
};

c10::intrusive_ptr<Work> finish(const char* name, const c10::intrusive_ptr<c10d::Backend>& b,
                                c10::intrusive_ptr<Work> work, bool async_op,
                                std::vector<at::Tensor> values, at::TensorList described,
                                c10d::OpType type, const Watch& watch, bool has_future = true) {
  // NCCL's blocking calls run on the current stream and may return no Work (as
  // for cuda tensors, the caller then has nothing to wait on).
  if (!work) return work;
  if (!async_op) {
    try {
      wait_watched(work, b, watch);
    } catch (const std::exception& e) {
      rethrow_named(name, b, described, e.what());
    }
    return work;
  }
  if (has_future || b->getBackendName() == "nccl")  // NCCL's works all have futures
    return c10::make_intrusive<MusaWork>(std::move(work), std::move(values), name, b, type, watch);
  return c10::make_intrusive<MusaWorkNoFuture>(std::move(work), std::move(values), name, b, type);
}

c10::intrusive_ptr<c10d::Backend> musa_backend(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  return pg->getBackend(c10::DeviceType::PrivateUse1);
}

std::tuple<std::vector<at::Tensor>, c10::intrusive_ptr<Work>> allreduce_musa(
    at::TensorList tensors, const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
    const c10::intrusive_ptr<c10d::ReduceOp>& op, const std::optional<at::Tensor>& sparse,
    bool async_op, int64_t timeout) {
  TORCH_CHECK(!sparse.has_value(), "mccl all_reduce: sparse musa tensors are not supported");
  auto b = musa_backend(pg);
  auto watch = check_signature(pg, b, "all_reduce", op_name(*op), tensors);
  StageScope stage(b);
  auto a = aliases(tensors);
  if (op->op_ == c10d::ReduceOp::PREMUL_SUM)
    for (auto& t : a) premul(t, *op, /*in_place=*/true);
  c10d::AllreduceOptions o{gloo_op(*op), std::chrono::milliseconds(timeout), async_op};
  c10::intrusive_ptr<Work> w;
  try {
    w = b->allreduce(a, o);
  } catch (const std::exception& e) {
    rethrow_named("all_reduce", b, tensors, e.what());
  }
  stage.complete(w, "all_reduce", b, tensors, watch);
  auto vec = tensors.vec();
  return {vec, finish("all_reduce", b, std::move(w), async_op, vec, tensors, c10d::OpType::ALLREDUCE,
                      watch)};
}

std::tuple<std::vector<at::Tensor>, c10::intrusive_ptr<Work>> broadcast_musa(
    at::TensorList tensors, const c10::intrusive_ptr<c10d::ProcessGroup>& pg, int64_t root_rank,
    int64_t root_tensor, bool async_op, int64_t timeout) {
  auto b = musa_backend(pg);
  auto watch = check_signature(pg, b, "broadcast", "root=" + std::to_string(root_rank), tensors);
  StageScope stage(b);
  auto a = aliases(tensors);
  c10d::BroadcastOptions o{root_rank, root_tensor, std::chrono::milliseconds(timeout), async_op};
  c10::intrusive_ptr<Work> w;
  try {
    w = b->broadcast(a, o);
  } catch (const std::exception& e) {
    rethrow_named("broadcast", b, tensors, e.what());
  }
  stage.complete(w, "broadcast", b, tensors, watch);
  auto vec = tensors.vec();
  return {vec, finish("broadcast", b, std::move(w), async_op, vec, tensors, c10d::OpType::BROADCAST,
                      watch)};
}

at::Tensor gather_shape(const at::Tensor& out, const at::Tensor& inp) {
  // all_gather_into_tensor accepts a stacked output; Gloo wants the concatenated one
  at::Tensor a = host_view(out);
  if (inp.dim() > 0 && out.is_contiguous() && out.sizes().slice(1) != inp.sizes().slice(1) &&
      inp.numel() > 0 && out.numel() % inp.numel() == 0) {
    std::vector<int64_t> shape(inp.sizes().begin(), inp.sizes().end());
    shape[0] *= out.numel() / inp.numel();
    a = a.view(shape);
  }
  return a;
}

std::tuple<at::Tensor, c10::intrusive_ptr<Work>> allgather_base_musa(
    at::Tensor& output, at::Tensor& input, const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
    bool async_op, int64_t timeout) {
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "mccl all_gather_into_tensor: input and output tensors have different dtypes (",
              output.scalar_type(), " vs ", input.scalar_type(), ")");
  auto b = musa_backend(pg);
  auto watch = check_signature(pg, b, "all_gather_into_tensor", "", {input, output});
  StageScope stage(b);
  auto ao = gather_shape(output, input);
  auto ai = host_view(input);
  c10d::AllgatherOptions o{std::chrono::milliseconds(timeout), async_op};
  c10::intrusive_ptr<Work> w;
  try {
    w = b->_allgather_base(ao, ai, o);
  } catch (const std::exception& e) {
    rethrow_named("all_gather_into_tensor", b, {input}, e.what());
  }
  stage.complete(w, "all_gather_into_tensor", b, {input}, watch);
  return {output, finish("all_gather_into_tensor", b, std::move(w), async_op, {output}, {input},
                         c10d::OpType::_ALLGATHER_BASE, watch)};
}

std::tuple<at::Tensor, c10::intrusive_ptr<Work>> reduce_scatter_base_musa(
    at::Tensor& output, at::Tensor& input, const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
    const c10::intrusive_ptr<c10d::ReduceOp>& op, bool async_op, int64_t timeout) {
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "mccl reduce_scatter_tensor: input and output tensors have different dtypes (",
              output.scalar_type(), " vs ", input.scalar_type(), ")");
  auto b = musa_backend(pg);
  auto watch = check_signature(pg, b, "reduce_scatter_tensor", op_name(*op), {output, input});
  StageScope stage(b);
  auto ai = gather_shape(input, output);
  if (op->op_ == c10d::ReduceOp::PREMUL_SUM) ai = premul(ai, *op, /*in_place=*/false);
  auto ao = host_view(output);
  c10d::ReduceScatterOptions o{gloo_op(*op), std::chrono::milliseconds(timeout), async_op};
  c10::intrusive_ptr<Work> w;
  try {
    w = b->_reduce_scatter_base(ao, ai, o);
  } catch (const std::exception& e) {
    rethrow_named("reduce_scatter_tensor", b, {input}, e.what());
  }
  stage.complete(w, "reduce_scatter_tensor", b, {input}, watch);
  return {output, finish("reduce_scatter_tensor", b, std::move(w), async_op, {output}, {input},
                         c10d::OpType::_REDUCE_SCATTER_BASE, watch, /*has_future=*/false)};
}

std::vector<std::string> native_ops() {
  return {"allreduce_", "broadcast_", "_allgather_base_", "_reduce_scatter_base_"};
}

}  // namespace

TORCH_LIBRARY(mccl, m) {
  m.def("native_ops() -> str[]", &native_ops);
  m.def("forget_group(str group) -> ()", &forget_group);
  m.def("set_first_use_check(bool on) -> ()", &set_first_use_check);
  m.def("set_alias_device(str type, bool stage_gloo) -> ()", &set_alias_device);
  m.def("premul_factor(__torch__.torch.classes.c10d.ReduceOp op) -> Tensor", &premul_factor);
}

namespace {

// Replacing the stock PrivateUse1 kernels is the point: keep the dispatcher's
// "Overriding a previously registered kernel" warning out of every rank's log.
class SilentHandler : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

struct Registration {
  Registration() {
    static SilentHandler silent;
    c10::WarningUtils::WarningHandlerGuard guard(&silent);
    static torch::Library lib(torch::Library::IMPL, "c10d", c10::DispatchKey::PrivateUse1, __FILE__,
                              __LINE__);
    lib.impl("allreduce_", allreduce_musa);
    lib.impl("broadcast_", broadcast_musa);
    lib.impl("_allgather_base_", allgather_base_musa);
    lib.impl("_reduce_scatter_base_", reduce_scatter_base_musa);
  }
};

const Registration registration;

}  // namespace

namespace torch_musa {
void init_mccl_kernel_alias() {
  auto* fn = PyCapsule_Import("torch_musa._C._kernel_alias_capi", 0);
  if (fn == nullptr) throw pybind11::error_already_set();
  g_kernel_alias = reinterpret_cast<KernelAliasFn>(fn);
}
}  // namespace torch_musa
