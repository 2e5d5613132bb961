// torch_musa.distributed._C: the mccl backend's C++ (the c10d kernels of
// mccl_ops.cpp, registered when this module loads, and the Work lifetime
// helpers of py_work.cpp). A module of its own above the runtime: it reaches
// the runtime only through the alias function torch_musa._C exports.
#include <torch/csrc/utils/pybind.h>

namespace torch_musa {
void init_mccl_py_work(pybind11::module_& m);
void init_mccl_kernel_alias();
}  // namespace torch_musa

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_musa mccl backend (C++ part)";
  torch_musa::init_mccl_kernel_alias();
  torch_musa::init_mccl_py_work(m);
}
