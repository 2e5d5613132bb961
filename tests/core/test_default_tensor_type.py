"""torch.set_default_tensor_type(torch.musa.FloatTensor) as torch.cuda.FloatTensor's does on
CUDA: the default dtype, torch.Storage, and the backend of the legacy constructor
torch.Tensor(...), torch.tensor and the factories without a device (and so nn.Module
parameters); torch.FloatTensor restores the CPU. What llama3's Llama.build and fairscale's
layers rely on."""
import math
import re
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torch_musa.config import CONFIG
from torch_musa.core import tensor_types

_FLOATING = {
    "FloatTensor": torch.float32, "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16, "DoubleTensor": torch.float64,
}
_NOT_FLOATING = ["LongTensor", "IntTensor", "ShortTensor", "CharTensor", "ByteTensor",
                 "BoolTensor"]


def _supported(dtype):
    return dtype not in CONFIG.profile.unsupported_dtypes()


@pytest.fixture(autouse=True)
def _restore_default_type():
    """Every test leaves the CPU float32 default it found (and no deprecation noise)."""
    dtype = torch.get_default_dtype()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.set_default_tensor_type\(\) is deprecated")
        yield
        torch.set_default_tensor_type(torch.FloatTensor)
        torch.set_default_dtype(dtype)
    assert torch._C._get_default_device() == "cpu" and torch.Storage is torch.FloatStorage


def _cpu_default():
    t = torch.Tensor(1)
    return (t.device.type, t.dtype, torch.randn(1).device.type, torch.get_default_dtype(),
            torch.Storage)


@pytest.mark.parametrize("name", list(_FLOATING))
def test_musa_type_is_the_default(name):
    dtype = _FLOATING[name]
    if not _supported(dtype):
        pytest.skip(f"{dtype} is not on profile {CONFIG.profile.key}")
    musa_type = getattr(torch.musa, name)
    torch.set_default_tensor_type(musa_type)
    assert torch.get_default_dtype() == dtype
    assert torch.Storage is getattr(torch.musa, name.replace("Tensor", "Storage"))
    assert torch._C._get_default_device() == "musa"
    made = {
        "Tensor(2, 3)": torch.Tensor(2, 3), "Tensor([1, 2])": torch.Tensor([1, 2]),
        "Tensor()": torch.Tensor(), "tensor([1.])": torch.tensor([1.0]),
        "as_tensor([1.])": torch.as_tensor([1.0]), "empty(2)": torch.empty(2),
        "randn(2)": torch.randn(2), "zeros(2)": torch.zeros(2), "arange(3.)": torch.arange(3.0),
        "full": torch.full((2,), 1.0), "Linear.weight": nn.Linear(4, 4).weight,
        "Linear.bias": nn.Linear(4, 4).bias, "Embedding.weight": nn.Embedding(5, 4).weight,
    }
    for what, t in made.items():
        assert (t.device, t.dtype) == (torch.device("musa", 0), dtype), what
        assert t.type() == f"torch.musa.{name}" and isinstance(t, musa_type), what
    # integer data and explicit dtypes/devices keep theirs, on the default backend
    assert (torch.tensor([1]).device.type, torch.tensor([1]).dtype) == ("musa", torch.int64)
    assert torch.arange(3).dtype == torch.int64 and torch.arange(3).device.type == "musa"
    assert torch.zeros(2, device="cpu").device.type == "cpu"
    assert torch.zeros(2, dtype=torch.int32).type() == "torch.musa.IntTensor"
    # torch's own (CPU) types keep constructing CPU tensors, as they do under CUDA's
    assert torch.FloatTensor(2).device.type == "cpu"
    twin = getattr(torch, name)
    assert twin(2).device.type == "cpu" and not twin.is_cuda
    assert isinstance(torch.ones(1, dtype=dtype, device="cpu"), twin)
    assert not isinstance(torch.ones(1, dtype=dtype), twin)


@pytest.mark.requires_devices(2)
def test_current_device_is_the_one_used():
    torch.set_default_tensor_type(torch.musa.FloatTensor)
    with torch.musa.device(1):
        assert torch.Tensor(2).device == torch.device("musa", 1)
        assert torch.randn(2).device == torch.device("musa", 1)
    assert torch.tensor([1.0]).device == torch.device("musa", 0)


def test_float_tensor_restores_the_cpu():
    before = _cpu_default()
    torch.set_default_tensor_type(torch.musa.HalfTensor)
    assert torch.Tensor(1).type() == "torch.musa.HalfTensor"
    torch.set_default_tensor_type(torch.FloatTensor)
    assert _cpu_default() == before == ("cpu", torch.float32, "cpu", torch.float32,
                                        torch.FloatStorage)
    torch.set_default_tensor_type(torch.musa.FloatTensor)
    torch.set_default_tensor_type(torch.DoubleTensor)      # a CPU type: the CPU, float64
    assert torch.Tensor(1).type() == "torch.DoubleTensor" and torch.randn(1).device.type == "cpu"


def test_by_name():
    torch.set_default_tensor_type("torch.musa.HalfTensor")
    assert torch.Tensor(1).type() == "torch.musa.HalfTensor"
    torch.set_default_tensor_type("torch.FloatTensor")
    assert torch.Tensor(1).type() == "torch.FloatTensor"


def test_set_default_dtype_keeps_the_musa_backend():
    """As on CUDA: set_default_dtype changes only the dtype of the default type."""
    torch.set_default_tensor_type(torch.musa.FloatTensor)
    torch.set_default_dtype(torch.float16)
    assert torch.Tensor(1).type() == "torch.musa.HalfTensor"
    assert torch.Storage is torch.musa.HalfStorage      # from the default backend, as on CUDA
    assert torch.randn(1).device.type == "musa"


@pytest.mark.parametrize("name", _NOT_FLOATING)
def test_integer_types_raise_as_the_cpu(name):
    torch.set_default_tensor_type(torch.musa.HalfTensor)
    with pytest.raises(TypeError) as cpu:
        torch.set_default_tensor_type(getattr(torch, name))
    with pytest.raises(TypeError) as musa:
        torch.set_default_tensor_type(getattr(torch.musa, name))
    assert str(musa.value) == str(cpu.value) == \
        "only floating-point types are supported as the default type"
    # nothing changed, neither the default nor the CPU twin
    assert torch.Tensor(1).type() == "torch.musa.HalfTensor"
    assert getattr(torch, name)(2).device.type == "cpu"
    with pytest.raises(TypeError, match="invalid type object"):
        torch.set_default_tensor_type(torch.musa.sparse.FloatTensor)
    with pytest.raises(TypeError, match="invalid type object"):
        torch.set_default_tensor_type([1])


@pytest.mark.slow
def test_deprecation_warning_as_torch_gives(subpython):
    """TORCH_WARN_ONCE: the same warning, once per process, from either kind of type."""
    code = """
        import warnings, torch, torch_musa
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            torch.set_default_tensor_type({first})
            torch.set_default_tensor_type({second})
        print(len(w), w[0].category.__name__, w[0].message)
    """
    outs = []
    for first, second in [("torch.musa.FloatTensor", "torch.FloatTensor"),
                          ("torch.DoubleTensor", "torch.musa.FloatTensor")]:
        r = subpython(code.format(first=first, second=second))
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout.strip())
    assert outs[0] == outs[1]
    assert re.fullmatch(r"1 UserWarning torch\.set_default_tensor_type\(\) is deprecated as of "
                        r"PyTorch 2\.1, please use torch\.set_default_dtype\(\) and "
                        r"torch\.set_default_device\(\) as alternatives\..*", outs[0]), outs[0]


def test_type_conversions_and_names():
    x = torch.arange(4.0)
    assert x.type(torch.musa.HalfTensor).type() == "torch.musa.HalfTensor"
    assert x.type("torch.musa.FloatTensor").device == torch.device("musa", 0)
    assert x.musa().type(torch.FloatTensor).device.type == "cpu"
    assert isinstance(x.musa(), torch.musa.FloatTensor)
    assert not isinstance(x, torch.musa.FloatTensor)
    s = x.to_sparse().type(torch.musa.sparse.HalfTensor)
    assert s.type() == "torch.musa.sparse.HalfTensor" and isinstance(s, torch.musa.sparse.HalfTensor)
    assert repr(torch.musa.FloatTensor) == "<class 'torch.musa.FloatTensor'>"
    assert repr(torch.musa.sparse.FloatTensor) == "<class 'torch.musa.sparse.FloatTensor'>"
    import pickle
    for cls in (torch.musa.BFloat16Tensor, torch.musa.sparse.HalfTensor):
        assert pickle.loads(pickle.dumps(cls)) is cls


def test_layout_is_checked_before_writing():
    """The CPU twin's fields are verified (dtype, layout, name, backend CPU); a type object
    that does not read so is refused, not written."""
    off = tensor_types._backend_offset(torch.FloatTensor)
    assert off == type(torch.FloatTensor).__basicsize__ + 84
    with pytest.raises(TypeError, match="not laid out"):
        tensor_types._backend_offset(torch.cuda.FloatTensor)      # backend CUDA, not CPU


def test_privateuse1_backend_number_is_torchs():
    header = Path(torch.__file__).parent / "include/c10/core/Backend.h"
    if not header.exists():
        pytest.skip("torch's headers are not installed")
    body = re.search(r"enum class Backend \{(.*?)\};", header.read_text(), re.S).group(1)
    names = [n.strip() for n in re.sub(r"//[^\n]*", "", body).split(",") if n.strip()]
    assert names.index("PrivateUse1") == tensor_types._BACKEND_PRIVATEUSE1
    assert names.index("CPU") == tensor_types._BACKEND_CPU


# --- llama3's Llama.build: torch.set_default_tensor_type(torch.cuda.BFloat16Tensor), then
# the model is built (parameters, rotary table, masks land on the device), the checkpoint
# loaded, and run. -----------------------------------------------------------------------

def _precompute_freqs_cis(dim, end, theta=500000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)


def _apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class _RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class _Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(dim, 2 * dim, bias=False), nn.Linear(dim, 2 * dim, bias=False)
        self.w2 = nn.Linear(2 * dim, dim, bias=False)
        self.attention_norm, self.ffn_norm = _RMSNorm(dim), _RMSNorm(dim)

    def forward(self, x, freqs_cis, mask):
        b, s, _ = x.shape
        h = self.attention_norm(x)
        q, k, v = (w(h).view(b, s, self.heads, self.head_dim) for w in (self.wq, self.wk, self.wv))
        q, k = _apply_rotary_emb(q, k, freqs_cis)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim) + mask
        out = torch.matmul(F.softmax(scores.float(), dim=-1).type_as(q), v)
        x = x + self.wo(out.transpose(1, 2).contiguous().view(b, s, -1))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class _TinyLlama(nn.Module):
    def __init__(self, vocab=64, dim=32, heads=4, layers=2, max_seq=16):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(_Block(dim, heads) for _ in range(layers))
        self.norm = _RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        self.freqs_cis = _precompute_freqs_cis(dim // heads, max_seq * 2)

    def forward(self, tokens):
        s = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        self.freqs_cis = self.freqs_cis.to(h.device)
        mask = torch.triu(torch.full((s, s), float("-inf"), device=tokens.device), diagonal=1)
        for layer in self.layers:
            h = layer(h, self.freqs_cis[:s], mask)
        return self.output(self.norm(h)).float()


def _build_and_run(default_type, checkpoint):
    """llama3's Llama.build + a forward (text_completion's prompt tokens)."""
    torch.set_default_tensor_type(default_type)
    torch.manual_seed(0)
    model = _TinyLlama()
    params = {n: (p.device.type, p.dtype) for n, p in model.named_parameters()}
    initial = {n: p.detach().cpu().clone() for n, p in model.state_dict().items()}
    model.load_state_dict(checkpoint, strict=False)
    tokens = torch.full((2, 8), 0, dtype=torch.long, device=torch.Tensor().device)
    tokens[:, :5] = torch.tensor([[1, 5, 9, 3, 7], [2, 4, 6, 8, 10]])
    with torch.inference_mode():
        logits = model(tokens)
        nxt = torch.argmax(logits[:, -1], dim=-1)
    torch.set_default_tensor_type(torch.FloatTensor)
    return params, initial, model.freqs_cis, logits, nxt


@pytest.mark.requires_host_driver("bit-identity with the CPU's kernels and random streams")
def test_llama3_build_pattern_matches_the_cpu():
    if not _supported(torch.bfloat16):
        pytest.skip(f"bfloat16 is not on profile {CONFIG.profile.key}")
    g = torch.Generator().manual_seed(1)
    checkpoint = {n: torch.randn(p.shape, generator=g).to(torch.bfloat16)
                  for n, p in _TinyLlama().state_dict().items()}
    m_params, m_init, m_freqs, m_logits, m_next = _build_and_run(torch.musa.BFloat16Tensor, checkpoint)
    c_params, c_init, c_freqs, c_logits, c_next = _build_and_run(torch.BFloat16Tensor, checkpoint)
    assert set(m_params.values()) == {("musa", torch.bfloat16)}
    assert set(c_params.values()) == {("cpu", torch.bfloat16)}
    assert m_freqs.device.type == "musa" and m_freqs.dtype == c_freqs.dtype == torch.complex64
    assert m_logits.device.type == "musa" and m_logits.dtype == torch.float32
    # the same random initialisation (musa draws the CPU's numbers) and the same outputs
    for n in c_init:
        assert torch.equal(m_init[n], c_init[n]), n
    assert torch.equal(m_freqs.cpu(), c_freqs)
    assert torch.equal(m_logits.cpu(), c_logits)
    assert torch.equal(m_next.cpu(), c_next)


def test_fairscale_style_layer():
    """fairscale's model-parallel layers: Parameter(torch.Tensor(out, in)) then init."""
    torch.set_default_tensor_type(torch.musa.FloatTensor)

    class ColumnParallelLinear(nn.Module):
        def __init__(self, in_features, out_features):
            super().__init__()
            self.weight = nn.Parameter(torch.Tensor(out_features, in_features))
            self.bias = nn.Parameter(torch.Tensor(out_features))
            nn.init.xavier_normal_(self.weight)
            with torch.no_grad():
                self.bias.zero_()

        def forward(self, x):
            return F.linear(x, self.weight, self.bias)

    layer = ColumnParallelLinear(4, 3)
    assert layer.weight.device.type == layer.bias.device.type == "musa"
    y = layer(torch.randn(2, 4))
    assert y.device.type == "musa" and y.shape == (2, 3)
    y.sum().backward()
    assert layer.weight.grad.device.type == "musa"


@pytest.mark.slow
def test_cuda_names_under_the_compat_layer(subpython):
    name, dtype = ("BFloat16Tensor", "bfloat16") if _supported(torch.bfloat16) else \
        ("HalfTensor", "float16")
    r = subpython("""
        import os, warnings
        warnings.simplefilter("ignore")
        import torch, torch_musa
        import torch_musa.cuda_compat as cc
        cc.enable()
        torch.set_default_tensor_type(torch.cuda.NAME)
        t = torch.Tensor(2, 3)
        assert (t.device.type, t.dtype) == ("musa", torch.DTYPE), t
        assert torch.nn.Linear(2, 2).weight.device.type == "musa"
        assert torch.get_default_dtype() == torch.DTYPE
        assert isinstance(t, torch.cuda.NAME)
        torch.set_default_tensor_type("torch.cuda.HalfTensor")
        assert torch.randn(1).type() == "torch.musa.HalfTensor"
        assert torch.ones(1, device="cpu").type(torch.cuda.FloatTensor).device.type == "musa"
        try:
            torch.set_default_tensor_type(torch.cuda.LongTensor)
        except TypeError as e:
            assert str(e) == "only floating-point types are supported as the default type"
        else:
            raise AssertionError("LongTensor accepted")
        torch.set_default_tensor_type(torch.FloatTensor)
        assert torch.Tensor(1).device.type == "cpu"
        print("ok")
    """.replace("NAME", name).replace("DTYPE", dtype))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
