"""Rule tests for musa_converter: Python rewriter, C/C++ porter, idempotence."""
import os
import textwrap

import pytest
import torch

from torch_musa.utils.musa_converter import convert_source, load_table, port_source
from torch_musa.utils.musa_converter import python_rewriter as pr


def conv(src, **kw):
    return convert_source(textwrap.dedent(src), **kw)


def out(src, **kw):
    return conv(src, **kw).source


@pytest.mark.parametrize("src,want", [
    ("torch.cuda.synchronize()\n", "torch.musa.synchronize()\n"),
    ("n = torch.cuda.device_count()\n", "n = torch.musa.device_count()\n"),
    ("import torch.cuda\n", "import torch.musa\n"),
    ("import torch.cuda as tc\n", "import torch.musa as tc\n"),
    ("from torch.cuda import Stream\n", "from torch.musa import Stream\n"),
    ("from torch import cuda\n", "from torch import musa as cuda\n"),
    ("x = x.cuda()\n", "x = x.musa()\n"),
    ("m = Net().cuda(non_blocking=True)\n", "m = Net().musa(non_blocking=True)\n"),
    ("if t.is_cuda: pass\n", "if t.is_musa: pass\n"),
    ('d = torch.device("cuda")\n', 'd = torch.device("musa")\n'),
    ("d = 'cuda:1'\n", "d = 'musa:1'\n"),
    ('d = "cuda:%d" % r\n', 'd = "musa:%d" % r\n'),
    ('d = "cuda:{}".format(r)\n', 'd = "musa:{}".format(r)\n'),
    ('d = f"cuda:{rank}"\n', 'd = f"musa:{rank}"\n'),
    ('d = rf"cuda:{rank}"\n', 'd = rf"musa:{rank}"\n'),
    ('dist.init_process_group(backend="nccl")\n', 'dist.init_process_group(backend="mccl")\n'),
    ('b = "cpu:gloo,cuda:nccl"\n', 'b = "cpu:gloo,musa:mccl"\n'),
    ('os.environ["CUDA_VISIBLE_DEVICES"] = "0"\n', 'os.environ["MUSA_VISIBLE_DEVICES"] = "0"\n'),
    ('a = {"nvcc": ["-O3"]}\n', 'a = {"mcc": ["-O3"]}\n'),
    ('s = ["a.cpp", "kernels/k.cu", "k.cuh"]\n', 's = ["a.cpp", "kernels/k.mu", "k.muh"]\n'),
    ("s = torch.cuda.amp.GradScaler(enabled=True)\n", 's = torch.amp.GradScaler("musa", enabled=True)\n'),
    ("with torch.cuda.amp.autocast():\n    pass\n", 'with torch.autocast("musa"):\n    pass\n'),
    ("with torch.cuda.amp.autocast(True, torch.bfloat16):\n    pass\n",
     'with torch.autocast("musa", enabled=True, dtype=torch.bfloat16):\n    pass\n'),
    ("# call torch.cuda.empty_cache() here\n", "# call torch.musa.empty_cache() here\n"),
    ("@torch.cuda.amp.custom_fwd\ndef f(ctx, x): pass\n",
     '@torch.amp.custom_fwd(device_type="musa")\ndef f(ctx, x): pass\n'),
    ("@torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)\ndef f(ctx, x): pass\n",
     '@torch.amp.custom_fwd(cast_inputs=torch.float32, device_type="musa")\ndef f(ctx, x): pass\n'),
    ("@torch.cuda.amp.custom_bwd\ndef b(ctx, g): pass\n",
     '@torch.amp.custom_bwd(device_type="musa")\ndef b(ctx, g): pass\n'),
    ("x = 1  # then x.cuda()\n", "x = 1  # then x.musa()\n"),
    ("a = torch.profiler.ProfilerActivity.CUDA\n", "a = torch.profiler.ProfilerActivity.MUSA\n"),
    # a longer rule over a prefix that has its own (torch.cuda): the longer one wins
    ("g = torch.cuda.CUDAGraph()\n", "g = torch.musa.MUSAGraph()\n"),
    ("ok = torch.cuda.cudaStatus.SUCCESS\n", "ok = torch.musa.musaStatus.SUCCESS\n"),
    ("g = torch.cuda.CUDAGraph(keep_graph=True)\nwith torch.cuda.graph(g): pass\n",
     "g = torch.musa.MUSAGraph(keep_graph=True)\nwith torch.musa.graph(g): pass\n"),
])
def test_python_rules(src, want):
    assert out(src) == want


@pytest.mark.parametrize("src", [
    "barracuda = 1\n",
    "my_cuda_thing = cudaless + 1\n",
    "x = obj.cuda_stream\n",
    "use = args.cuda\n",                    # an argparse flag, not the method
    "v = torch.version.cuda\n",
    "torch.backends.cudnn.benchmark = True\n",   # kept on purpose (valid no-op)
    's = "the cuda device"\n',
    's = "cudas"\n',
    "b = b'cuda'\n",
    "# cuda is fast\n",
    "def cuda_kernel(cuda_arg): return cuda_arg\n",
    '"""Docstring about torch.cuda and cuda:0 devices."""\n',
])
def test_python_word_boundaries_and_kept(src):
    assert out(src) == src


def test_formatting_and_comments_survive():
    src = '''\
    import torch  # keep   this
    def  f( x ,y = "cuda" ) :   # odd spacing stays
        return (x .cuda ( ) ,
                y)   # trailing
    '''
    assert out(src) == textwrap.dedent('''\
    import torch  # keep   this
    def  f( x ,y = "musa" ) :   # odd spacing stays
        return (x .musa ( ) ,
                y)   # trailing
    ''')


def test_cpp_extension_imports():
    src = '''\
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension
    ext = CUDAExtension("k", ["k.cpp", "k_kernel.cu"])
    cmd = {"build_ext": BuildExtension}
    '''
    assert out(src) == textwrap.dedent('''\
    from torch_musa.utils.musa_extension import BuildExtension, MUSAExtension
    ext = MUSAExtension("k", ["k.cpp", "k_kernel.mu"])
    cmd = {"build_ext": BuildExtension}
    ''')
    # An unknown name keeps the import (and its uses) as they are.
    src2 = "from torch.utils.cpp_extension import CUDAExtension, include_paths\nCUDAExtension\n"
    assert out(src2) == src2


def test_statement_shapes():
    src = '''\
    @decorator("cuda")
    # a comment between
    def f(x, device="cuda") -> int: ...

    class A(Base):  # torch.cuda in a comment
        dev = "cuda"; other = 1
        if x: y = "cuda"
        def g(self):
            if a:
                pass
            elif torch.cuda.is_available():  # cuda word stays
                return "cuda:0"
            else:
                return """
                cuda inside a string stays
                """
    async def h():
        async with lock:
            await q.put(t.cuda())
    match p:
        case "cuda":
            pass
    '''
    want = (textwrap.dedent(src)
            .replace('decorator("cuda")', 'decorator("musa")')
            .replace('device="cuda"', 'device="musa"')
            .replace("# torch.cuda in", "# torch.musa in")
            .replace('dev = "cuda"', 'dev = "musa"')
            .replace('y = "cuda"', 'y = "musa"')
            .replace("elif torch.cuda", "elif torch.musa")
            .replace('return "cuda:0"', 'return "musa:0"')
            .replace("t.cuda()", "t.musa()")
            .replace('case "cuda"', 'case "musa"'))
    assert out(src) == want


def test_line_endings_bom_tabs_and_no_final_newline():
    src = 'import torch\r\nif x:\r\n\ty = torch.cuda.current_device()\r\n\tz = "cuda"'
    assert convert_source(src).source == src.replace("torch.cuda", "torch.musa").replace(
        '"cuda"', '"musa"')


def test_launch_import_placement_and_idempotence():
    src = '''\
    #!/usr/bin/env python
    """Doc."""
    from __future__ import annotations
    import torch
    x = torch.randn(2, device="cuda")
    '''
    r = conv(src, launch=True)
    assert r.source == textwrap.dedent('''\
    #!/usr/bin/env python
    """Doc."""
    from __future__ import annotations
    import torch_musa
    import torch
    x = torch.randn(2, device="musa")
    ''')
    again = convert_source(r.source, launch=True)
    assert again.source == r.source and not again.counts
    # Already imported: nothing is added.
    src2 = "import torch_musa\nimport torch\n"
    assert convert_source(src2, launch=True).source == src2
    # No docstring: first line.
    assert convert_source("import os\n", launch=True).source == "import torch_musa\nimport os\n"


def test_counts_and_review():
    src = '''\
    import pynvml
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if x.device.type == "cuda":
        torch.cuda.synchronize()
    if dist.get_backend() == "nccl":
        pass
    v = torch.version.cuda
    net = nn.DataParallel(net)
    scaler = torch.cuda.amp.GradScaler()
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    '''
    r = conv(src)
    assert r.counts["py.dotted:torch.cuda"] == 2
    assert r.counts["py.string.device"] == 2
    assert r.counts["py.string.backend"] == 1
    ids = {(x["line"], x["id"]) for x in r.review}
    assert ids == {(1, "nvml"), (2, "cpu-fallback-branch"), (3, "device-type-compare"),
                   (5, "nccl-check"), (7, "torch-version-cuda"),
                   (9, "grad-scaler-float64"), (10, "alloc-conf-options")}


def test_syntax_error_raises():
    with pytest.raises(SyntaxError):
        convert_source("x = torch.cuda(\n")


def _torch_file(rel):
    return os.path.join(os.path.dirname(torch.__file__), rel)


@pytest.mark.parametrize("rel", ["cuda/memory.py", "_tensor.py", "utils/checkpoint.py"])
def test_statement_chunks_equal_whole_file_rewrite(rel):
    """The fast path (only statements with hits go through libcst) gives
    exactly what one libcst pass over the whole file gives."""
    src = open(_torch_file(rel), encoding="utf-8").read()
    t = load_table()
    fast = convert_source(src, t)
    counts = __import__("collections").Counter()
    whole = pr._transform(src, t, pr._name_map(t, __import__("ast").parse(src), src), counts)
    assert fast.source == whole
    assert fast.counts == counts
    assert fast.changed
    assert convert_source(fast.source, t).source == fast.source   # idempotent


def test_examples_idempotent():
    root = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "cuda")
    for name in sorted(os.listdir(root)):
        if name.endswith(".py"):
            src = open(os.path.join(root, name), encoding="utf-8").read()
            once = convert_source(src, launch=True)
            assert once.changed, name
            compile(once.source, name, "exec")
            twice = convert_source(once.source, launch=True)
            assert twice.source == once.source and not twice.counts, name


# --------------------------------------------------------------------------
# C / C++
# --------------------------------------------------------------------------

KERNEL = """\
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include "common.cuh"
#include <cub/cub.cuh>
#include <vector>

// barracuda and cudaless stay; cudaMalloc is an API
#define CHECK(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")

__global__ void scale(float* p, int n) {
#if __CUDA_ARCH__ >= 800
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= 2.f;
#endif
}

void run(torch::Tensor t) {
  CHECK(t);
  const at::cuda::OptionalCUDAGuard guard(device_of(t));
  cudaStream_t s = at::cuda::getCurrentCUDAStream();
  float* buf = nullptr;
  cudaMalloc(&buf, 16);
  cudaMemcpyAsync(buf, t.data_ptr<float>(), 16, cudaMemcpyDeviceToDevice, s);
  scale<<<1, 128, 0, s>>>(buf, 4);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  cublasHandle_t h = at::cuda::getCurrentCUDABlasHandle();
  cublasSetStream(h, s);
  curandStatePhilox4_32_10_t st; curand_init(0, 0, 0, &st);
  ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, s);
  cudaFree(buf);
  if (t.device().type() == torch::kCUDA) { barracuda(); my_cudaMalloc_wrapper(); }
  cudaBrandNewCall(buf);
}
"""


def test_c_port():
    r = port_source(KERNEL)
    s = r.source
    for want in ["#include <musa_runtime.h>", "#include <musa_fp16.h>",
                 "#include <torch_musa/csrc/aten/musa/MUSAContext.h>",
                 "#include <torch_musa/csrc/core/MUSAGuard.h>", '#include "common.muh"',
                 "#include <cub/cub.cuh>", "#include <vector>",
                 "x.is_privateuseone()", "__MUSA_ARCH__", "at::musa::OptionalMUSAGuard",
                 "musaStream_t s = at::musa::getCurrentMUSAStream();", "musaMalloc(&buf, 16);",
                 "musaMemcpyAsync(", "musaMemcpyDeviceToDevice", "C10_MUSA_KERNEL_LAUNCH_CHECK",
                 "mublasHandle_t h = at::musa::getCurrentMUSABlasHandle();", "mublasSetStream",
                 "murandStatePhilox4_32_10_t", "murand_init", "mcclAllReduce", "mcclFloat",
                 "mcclSum", "musaFree(buf)", "torch::kPrivateUse1", "barracuda();",
                 "my_cudaMalloc_wrapper();", "scale<<<1, 128, 0, s>>>",
                 "// barracuda and cudaless stay; musaMalloc is an API"]:
        assert want in s, want
    assert "cuda" not in s.replace("barracuda", "").replace("cudaless", "").replace(
        "my_cudaMalloc_wrapper", "").replace("cub.cuh", "")
    assert r.counts["c.cuda-runtime:cudaMalloc"] == 2    # code + comment
    assert [x["text"] for x in r.review] == ["cudaBrandNewCall -> musaBrandNewCall (mapped by prefix)"]
    again = port_source(s)
    assert again.source == s and not again.counts


def test_table_is_versioned_and_large():
    t = load_table()
    assert t.version
    assert len(t.c_symbols) > 500
    assert t.c_symbols["cudaMalloc"][0] == "musaMalloc"
    assert t.apply_dotted("torch.cuda.amp.autocast") == "torch.musa.amp.autocast"


# Found converting pytorch/extension-cpp (the tutorial's muladd extension): its setup.py
# finds the kernels with glob(os.path.join(extensions_dir, "cuda"), "*.cu"). The folder
# "cuda" became "musa", so the kernels dropped out of the build without an error; and its
# TORCH_LIBRARY_IMPL(extension_cpp, CUDA, m) kept registering for CUDA while the kernels'
# device checks became PrivateUse1 ones.
SETUP_LIKE = '''
import glob, os, pathlib
d = os.path.join(src, "cuda")
kernels = glob.glob(os.path.join(d, "*.cu"))
more = pathlib.Path(src) / "cuda" / "k.cu"
x = torch.ones(2, device="cuda")
devices = ["cpu", "cuda"]
'''


@pytest.mark.parametrize("fast", [True, False])
def test_path_parts_keep_their_folder_names(monkeypatch, fast):
    monkeypatch.setattr(pr, "_FAST", fast)
    out = convert_source(SETUP_LIKE).source
    assert 'os.path.join(src, "cuda")' in out          # the folder is not renamed
    assert 'os.path.join(d, "*.mu")' in out            # the sources are
    assert 'pathlib.Path(src) / "cuda" / "k.mu"' in out
    assert 'device="musa"' in out and '["cpu", "musa"]' in out  # device strings still are


def test_cuda_kernel_registrations_become_musa_ones():
    src = ("TORCH_LIBRARY_IMPL(ext, CUDA, m) { m.impl(\"f\", &f_cuda); }\n"
           "TORCH_LIBRARY_IMPL(ext, AutogradCUDA, m) {}\n"
           "TORCH_LIBRARY_IMPL(ext, CPU, m) {}\n"
           "auto k = c10::DispatchKey::CUDA; // CUDA the word stays\n")
    r = port_source(src)
    assert "TORCH_LIBRARY_IMPL(ext, PrivateUse1, m)" in r.source
    assert "TORCH_LIBRARY_IMPL(ext, AutogradPrivateUse1, m)" in r.source
    assert "TORCH_LIBRARY_IMPL(ext, CPU, m)" in r.source
    assert "c10::DispatchKey::PrivateUse1;" in r.source and "// CUDA the word stays" in r.source
    assert r.counts["c.dispatch-key:CUDA"] == 1
    assert port_source(r.source).source == r.source
