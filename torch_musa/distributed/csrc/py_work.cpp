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
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

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

void init_mccl_py_work(py::module_& m) {
  m.def("_hold_work", [](py::object work) -> c10::intrusive_ptr<c10d::Work> {
    return c10::make_intrusive<HeldPyWork>(std::move(work));
  });
  m.def("_set_future_error", &set_future_error);
}

}  // namespace torch_musa
