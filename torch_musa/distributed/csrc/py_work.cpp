// Lifetime of the Python-written mccl Works (distributed/mccl/works.py: MusaWork).
//
// A Python subclass of c10d::Work lives in its Python object: when C++ (DDP,
// the functional collectives' work registry, a boxed Work in a graph) holds
// only the C++ pointer and the Python object is collected, a later C++ wait()
// reaches the base Work::wait, which never returns. `_hold_work` wraps the
// Python Work in a C++ Work that owns a reference to it, so the Python object
// lives exactly as long as anyone, C++ or Python, holds the Work.
//
// `_set_future_error` completes a torch.futures.Future with a real error:
// Future.set_exception only stores the exception as the value and raises it
// from that one Python wrapper, so a consumer that reaches the future through
// C++ (Work.get_future, DDP hooks) would get the exception object as a result.
// A C++ error raises everywhere (a RuntimeError with the exception's message;
// the Work's own wait() raises the exception itself).
//
// `_chain_future` completes a Python-created future from a backend's future in
// C++: with the collective's value, or with its error named after the
// collective. Gloo (and NCCL) complete their futures on their own worker
// threads, which outlive the interpreter: the process group is only joined when
// its last reference goes, and a Python callback there (or the Python objects it
// holds) made those threads take the GIL during interpreter shutdown, where
// CPython 3.11 ends them with pthread_exit; the unwind through a noexcept frame
// (gil_scoped_release's or a callback holder's destructor) aborted the process
// ("terminate called without an active exception"). A callback holding the
// backend also kept the process group alive past destroy_process_group (the
// group <- its queued work <- future <- callback <- backend cycle), so its
// threads were still running then. The callback here holds no Python object
// and no backend.
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace torch_musa {
namespace {

namespace py = pybind11;

class HeldPyWork : public c10d::Work {
 public:
  explicit HeldPyWork(py::object py_work)
      : inner_(py_work.cast<c10::intrusive_ptr<c10d::Work>>()), py_work_(std::move(py_work)) {}

  ~HeldPyWork() override {
    if (!Py_IsInitialized()) {  // interpreter gone: nothing left to release it to
      py_work_.release();
      return;
    }
    py::gil_scoped_acquire gil;
    py_work_ = py::object();
  }

  // torch's trampoline for Python Works forwards only wait() and get_future();
  // the rest go to the Python methods here, so C++ and Python callers see one Work.
  bool isCompleted() override {
    py::gil_scoped_acquire gil;
    return py_work_.attr("is_completed")().cast<bool>();
  }
  bool isSuccess() const override {
    py::gil_scoped_acquire gil;
    return py_work_.attr("is_success")().cast<bool>();
  }
  std::exception_ptr exception() const override {
    py::gil_scoped_acquire gil;
    py::object exc = py_work_.attr("exception")();
    if (exc.is_none()) return nullptr;
    return std::make_exception_ptr(std::runtime_error(py::str(exc).cast<std::string>()));
  }
  std::vector<at::Tensor> result() override {
    py::gil_scoped_acquire gil;
    return py_work_.attr("result")().cast<std::vector<at::Tensor>>();
  }
  void synchronize() override {
    py::gil_scoped_acquire gil;
    py_work_.attr("synchronize")();
  }
  bool wait(std::chrono::milliseconds timeout) override { return inner_->wait(timeout); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return inner_->getFuture(); }
  int sourceRank() const override { return inner_->sourceRank(); }
  void abort() override { inner_->abort(); }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
  py::object py_work_;
};

void set_future_error(const std::shared_ptr<torch::jit::PythonFutureWrapper>& fut,
                      const py::object& exc) {
  TORCH_CHECK(PyExceptionInstance_Check(exc.ptr()),
              "_mccl_set_future_error expects an exception instance, got ",
              py::str(py::type::of(exc)).cast<std::string>());
  auto error = std::make_exception_ptr(std::runtime_error(py::str(exc).cast<std::string>()));
  py::gil_scoped_release nogil;  // callbacks of the future may take the GIL on other threads
  fut->fut->setError(std::move(error));
}

}  // namespace

std::string mccl_error_hint(const std::string& msg, bool checks_all) {
  std::string low(msg);
  std::transform(low.begin(), low.end(), low.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto has = [&](const char* w) { return low.find(w) != std::string::npos; };
  if (has("timed out") || has("timeout"))
    return " (a peer did not join the collective within the process group timeout: it may "
           "have died, be stuck, or be running a different collective)";
  if (has("connection closed") || has("connection reset") || has("broken pipe"))
    return " (a peer process exited or closed its connection)";
  if (has("preamble") || has("mismatch") || has("nbytes")) {
    bool checked = checks_all || msg.find("Detected mismatch") != std::string::npos;
    return std::string(" (the ranks passed tensors of different shapes or dtypes") +
           (checked ? "" : "; set MCCL_CHECK_COLLECTIVES=all for a cross-rank check before each collective") +
           ")";
  }
  return "";
}

namespace {

// The TorchScript type of a collective's value (tensors, nested in lists and tuples; an
// empty list is a tensor list), for toIValue. torch's own inference is not exported.
c10::TypePtr value_type(py::handle v) {
  if (THPVariable_Check(v.ptr())) return c10::TensorType::get();
  if (v.is_none()) return c10::NoneType::get();
  if (py::isinstance<py::list>(v)) {
    auto l = py::reinterpret_borrow<py::list>(v);
    return c10::ListType::create(l.empty() ? c10::TensorType::get() : value_type(l[0]));
  }
  if (py::isinstance<py::tuple>(v)) {
    std::vector<c10::TypePtr> types;
    for (auto e : py::reinterpret_borrow<py::tuple>(v)) types.push_back(value_type(e));
    return c10::TupleType::create(std::move(types));
  }
  TORCH_CHECK_TYPE(false, "mccl: a collective's value holds tensors in lists and tuples, got ",
                   py::str(py::type::of(v)).cast<std::string>());
}

// `out` completes when `parent` does: with `value` (converted here, under the GIL),
// or with `head` + hint + the backend's message. `each`: parent is collect_all's
// future, and a failed sub-future fails `out`. See the file comment for why no
// Python runs in the callback.
void chain_future(const std::shared_ptr<torch::jit::PythonFutureWrapper>& out,
                  const std::shared_ptr<torch::jit::PythonFutureWrapper>& parent, const py::object& value,
                  std::string head, bool checks_all, bool each) {
  c10::IValue v = torch::jit::toIValue(value, value_type(value));
  auto child = out->fut;
  auto callback = [child, v = std::move(v), head = std::move(head), checks_all,
                   each](c10::ivalue::Future& f) {
    try {
      std::string msg;
      bool failed = f.hasError();
      if (failed) {
        msg = f.tryRetrieveErrorMessage();
      } else if (each) {
        for (const auto& sub : f.constValue().toListRef()) {
          auto sf = sub.toFuture();
          if (sf->hasError()) {
            failed = true;
            msg = sf->tryRetrieveErrorMessage();
            break;
          }
        }
      }
      if (failed)
        child->setErrorIfNeeded(std::make_exception_ptr(
            std::runtime_error(head + mccl_error_hint(msg, checks_all) + ": " + msg)));
      else
        child->markCompleted(v);
    } catch (...) {  // never leave `out` pending (nor throw on the backend's thread)
      child->setErrorIfNeeded(std::current_exception());
    }
  };
  py::gil_scoped_release nogil;  // a completed parent runs the callback (and out's) right here
  parent->fut->addCallback(std::move(callback));
}

}  // namespace

void init_mccl_py_work(py::module_& m) {
  m.def("_hold_work", [](py::object work) -> c10::intrusive_ptr<c10d::Work> {
    return c10::make_intrusive<HeldPyWork>(std::move(work));
  });
  m.def("_set_future_error", &set_future_error);
  m.def("_chain_future", &chain_future, py::arg("out"), py::arg("parent"), py::arg("value"),
        py::arg("head"), py::arg("checks_all"), py::arg("each") = false);
  m.def("_error_hint", &mccl_error_hint, py::arg("msg"), py::arg("checks_all"));
  // How many references the C++ Work has (this call's own included): the exit drain in
  // mccl/works.py drops a backend work only once its Python object is all that is left.
  m.def("_work_refs", [](const c10::intrusive_ptr<c10d::Work>& w) { return w.use_count(); });
}

}  // namespace torch_musa
