// Python bindings of the NaN/Inf check (utils/nan_check.h): the Python
// NanInfTracker (utils/compare_tool/nan_inf.py) behind the runtime's tracker
// interface, so that the runtime library itself needs no Python.
#include "utils/nan_check.h"

#include <torch/extension.h>

namespace torch_musa {

namespace {

// The Python NanInfTracker (touched under the GIL; never destroyed, so that no
// reference is dropped without the GIL at exit).
py::object& g_tracker = *new py::object();

struct PyTracker final : NanCheckTracker {
  bool skip(const std::string& op) override {
    py::gil_scoped_acquire gil;
    return g_tracker ? g_tracker.attr("_native_skip")(op).cast<bool>() : true;
  }
  void event(const NanCheckEvent& e) override {
    py::gil_scoped_acquire gil;
    if (!g_tracker) return;
    py::list bi;
    for (const auto& [pos, t] : e.bad_inputs)
      bi.append(py::make_tuple(pos, py::reinterpret_steal<py::object>(THPVariable_Wrap(t))));
    g_tracker.attr("_native_event")(e.op, e.kind, e.has_nan, e.bad_outputs, e.n_inputs,
                                    e.wrote_input, bi, e.seq);
  }
  void read() override {
    py::gil_scoped_acquire gil;
    if (g_tracker) g_tracker.attr("_native_read")();
  }
};
PyTracker g_py_tracker;

}  // namespace

void init_nan_check(py::module_& m) {
  m.def("_nan_check_arm", [](py::object tracker, int64_t every, int64_t budget, int64_t step,
                             bool reset) {
    g_tracker = std::move(tracker);
    {
      py::gil_scoped_release nogil;
      nan_check_arm(&g_py_tracker, every, budget, step, reset);
    }
    update_op_hook();
  });
  m.def("_nan_check_disarm", []() {
    {
      py::gil_scoped_release nogil;
      nan_check_disarm();
    }
    update_op_hook();
    g_tracker = py::object();
  });
  m.def("_nan_check_release", []() {
    py::gil_scoped_release nogil;
    nan_check_release();
  });
  m.def("_nan_check_armed", &nan_check_armed);
  // Counts since the last take, then zeroed; the budget of downstream reports and
  // the step for the next window.
  m.def("_nan_check_take", [](int64_t budget, int64_t step) {
    NanCheckCounts c;
    {
      py::gil_scoped_release nogil;
      c = nan_check_take(budget, step);
    }
    py::dict d;
    d["checked"] = c.checked;
    d["origin"] = c.origin;
    d["entered"] = c.entered;
    d["downstream"] = c.downstream;
    d["explicit"] = c.explicit_;
    d["bad_storages"] = c.bad_storages;
    d["seen"] = c.seen;
    return d;
  });
  m.def("_nan_check_first", []() -> py::object {
    std::optional<NanCheckFirst> f;
    {
      py::gil_scoped_release nogil;
      f = nan_check_first();
    }
    if (!f) return py::none();
    py::dict d;
    d["op"] = f->op;
    d["seq"] = f->seq;
    d["step"] = f->step;
    d["kind"] = f->origin ? "origin" : "entered";
    return std::move(d);
  });
  // The scan alone, for tests and benchmarks: 0 finite, 1 Inf, 2 NaN.
  m.def("_nan_check_scan", [](const at::Tensor& t) { return nan_check_scan(t); });
}

}  // namespace torch_musa
