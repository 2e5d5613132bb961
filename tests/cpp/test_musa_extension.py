"""torch_musa.utils.musa_extension: a custom op in C++ built just in time against the
runtime's headers and library, with the device guard of the real torch_musa's
documentation, runs on musa:1 with musa:1's current device and stream."""
import os

import pytest
import torch

import torch_musa  # noqa: F401
from torch_musa.config import CONFIG
from torch_musa.utils import musa_extension

GUARDED_OP = r"""
#include <torch/library.h>
#include <torch_musa/csrc/core/Device.h>
#include <torch_musa/csrc/core/MUSACachingAllocator.h>
#include <torch_musa/csrc/core/MUSAEvent.h>
#include <torch_musa/csrc/core/MUSAGuard.h>
#include <torch_musa/csrc/core/MUSAStream.h>
#include <torch_musa/csrc/aten/musa/MUSAContext.h>

#include <vector>

namespace {
std::vector<int64_t> g_seen;  // device, stream device, stream id inside the op

at::Tensor scaled(const at::Tensor& x, double factor) {
  c10::musa::OptionalMUSAGuard guard(x.device());  // the documentation's guard
  const c10::musa::MUSAStream stream = c10::musa::getCurrentMUSAStream();
  TORCH_CHECK(at::musa::getCurrentMUSAStream() == stream);  // MUSAContext.h's name for it
  g_seen = {c10::musa::current_device(), stream.device_index(), stream.id()};
  at::musa::MUSAEvent done;
  at::Tensor y = x * factor;
  done.record(stream);
  done.synchronize();
  return y;
}
}  // namespace

TORCH_LIBRARY(musa_ext_test, m) { m.def("scaled(Tensor x, float factor) -> Tensor"); }
TORCH_LIBRARY_IMPL(musa_ext_test, PrivateUse1, m) { m.impl("scaled", &scaled); }

std::vector<int64_t> seen() { return g_seen; }
int64_t device_count() { return c10::musa::device_count(); }
// raw device memory through the real torch_musa's allocator names
bool raw_roundtrip() {
  void* p = c10::musa::MUSACachingAllocator::raw_alloc(1024);
  const bool ok = p != nullptr;
  c10::musa::MUSACachingAllocator::raw_delete(p);
  return ok;
}
"""


@pytest.fixture(scope="module")
def ext(tmp_path_factory):
    # A build folder of its own: a lock left in torch's shared one by a killed build hung here.
    return musa_extension.load_inline("musa_ext_guard_test", GUARDED_OP,
                                      functions=["seen", "device_count", "raw_roundtrip"],
                                      build_directory=str(tmp_path_factory.mktemp("ext")))


@pytest.mark.slow
@pytest.mark.requires_devices(2)
def test_guarded_custom_op_runs_on_musa1_with_its_device_and_stream(ext):
    assert ext.device_count() == torch.musa.device_count()
    torch.musa.set_device(0)
    before0 = torch.musa.current_stream(0)
    side = torch.musa.Stream(device=1)
    x = torch.arange(6.0, device="musa:1")
    with torch.musa.stream(side):  # musa:1's current stream is `side` ...
        torch.musa.set_device(0)  # ... while musa:0 is the current device
        assert torch.musa.current_stream(1) == side
        y = torch.ops.musa_ext_test.scaled(x, 2.5)
        assert ext.seen() == [1, 1, side.stream_id]
        assert torch.musa.current_device() == 0  # the guard put musa:0 back
    assert y.device == torch.device("musa", 1)
    torch.testing.assert_close(y.cpu(), torch.arange(6.0) * 2.5)
    y0 = torch.ops.musa_ext_test.scaled(torch.ones(2, device="musa:0"), 1.0)
    assert ext.seen() == [0, 0, before0.stream_id] and y0.device.index == 0
    assert torch.musa.current_stream(0) == before0
    assert torch.musa.current_stream(1) == torch.musa.default_stream(1)
    assert ext.raw_roundtrip()


def test_paths_name_the_runtime():
    assert os.path.isfile(os.path.join(musa_extension.library_paths()[-1], "libtorch_musa.so"))
    root = musa_extension.include_paths()[-2]
    assert os.path.isfile(os.path.join(root, "torch_musa", "csrc", "core", "MUSAGuard.h"))
    with pytest.raises(ValueError, match="'musa' or 'cpu'"):
        musa_extension.include_paths("cuda")


def test_setup_py_extension_gets_headers_and_library(tmp_path):
    e = musa_extension.MUSAExtension("demo._ops", [str(tmp_path / "ops.cpp")],
                                     extra_compile_args={"cxx": ["-O2"], "mcc": ["-O3"]})
    assert "torch_musa" in e.libraries and "torch_python" in e.libraries
    assert e.extra_compile_args == {"cxx": ["-O2"]}  # "mcc" is dropped without kernels
    assert musa_extension.include_paths()[-1] in e.include_dirs
    assert musa_extension.BuildExtension is torch.utils.cpp_extension.BuildExtension
    import torch_musa.utils as utils
    assert utils.MUSAExtension is musa_extension.MUSAExtension


@pytest.mark.skipif(CONFIG.driver == "cuda", reason="the cuda driver compiles .mu with nvcc")
def test_musa_c_sources_say_what_is_missing(tmp_path):
    kernel = tmp_path / "kernel.mu"
    kernel.write_text("__global__ void k() {}\n")
    with pytest.raises(RuntimeError, match=r"kernel\.mu.*need a GPU toolkit.*TORCH_MUSA_DRIVER=cuda"):
        musa_extension.MUSAExtension("demo._k", [str(tmp_path / "ops.cpp"), str(kernel)])
    with pytest.raises(RuntimeError, match="need a GPU toolkit"):
        musa_extension.load_inline("never_built", "", musa_sources="__global__ void k() {}")


def test_musa_c_compiles_as_cuda_through_generated_headers(tmp_path):
    """What makes a converted .mu compile with nvcc under the cuda driver, checked where
    it is generated: MUSA C's names as CUDA's, a header for each one the converter names
    that the runtime lacks, and each .mu behind a wrapper that includes the names first."""
    import glob
    import re

    names = musa_extension.musa_as_cuda_names()
    assert names["musaMalloc"] == "cudaMalloc" and names["musaStream_t"] == "cudaStream_t"
    assert names["C10_MUSA_KERNEL_LAUNCH_CHECK"] == "C10_CUDA_KERNEL_LAUNCH_CHECK"
    assert "MUSAStream" not in names and "getCurrentMUSAStream" not in names
    # no macro may rename what the runtime's own headers declare
    here = os.path.dirname(musa_extension.__file__)
    for h in glob.glob(os.path.join(here, "..", "csrc", "**", "*.h"), recursive=True):
        code = re.sub(r"//[^\n]*", "", open(h).read())
        assert not set(re.findall(r"[A-Za-z_]\w*", code)) & set(names), h
    shim = musa_extension._shim_headers(str(tmp_path))
    assert "#include <cuda_runtime.h>" in open(os.path.join(shim, "musa_runtime.h")).read()
    assert "#define musaMemcpyAsync cudaMemcpyAsync" in open(os.path.join(shim, "musa_as_cuda.h")).read()
    assert os.path.exists(os.path.join(shim, "torch_musa", "csrc", "core", "MUSAException.h"))
    assert not os.path.exists(os.path.join(shim, "torch_musa", "csrc", "core", "MUSAGuard.h"))
    src = tmp_path / "k.mu"
    src.write_text("__global__ void k() {}\n")
    wrapper = open(musa_extension._as_cuda(str(src), str(tmp_path))).read()
    assert wrapper.index('#include "musa_as_cuda.h"') < wrapper.index(str(src))
