"""Smaller cases found by running public training code (nanoGPT, minGPT,
minGPT-DDP, PyTorch's word_language_model, Hugging Face transformers and
accelerate) on musa against the CPU: each is the minimal form of what differed.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from ._common import assert_same


def _forwards_inside_one_autocast_region(device):
    """A loop kept inside one autocast region: forward, in-place weight update, forward."""
    torch.manual_seed(0)
    layer = nn.Linear(8, 8).to(device)
    x = torch.randn(4, 8).to(device)
    outs = []
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
        for _ in range(2):
            outs.append(layer(x).float().cpu())
            with torch.no_grad():
                layer.weight.add_(1.0)
    return outs


def test_autocast_weight_cache_behaves_as_on_cuda_and_the_cpu():
    cpu = _forwards_inside_one_autocast_region("cpu")
    assert torch.equal(cpu[0], cpu[1]), "the CPU's cache should give the first cast again"
    musa = _forwards_inside_one_autocast_region("musa")
    assert_same(musa[0], cpu[0], "first forward")
    assert_same(musa[1], cpu[1], "second forward, inside the same autocast region")


@pytest.mark.parametrize("make", [
    pytest.param(lambda d: torch.empty(5, device=d), id="empty"),
    pytest.param(lambda d: torch.empty_strided((5,), (1,), device=d), id="empty_strided"),
    pytest.param(lambda d: torch.ones(5, device=d).new_empty(5), id="new_empty"),
    pytest.param(lambda d: torch.empty_like(torch.ones(5, device=d)), id="empty_like"),
    pytest.param(lambda d: torch.ones(2, device=d).resize_(5)[2:], id="resize_grown_part"),
])
def test_deterministic_mode_fills_uninitialized_memory_with_nan(make):
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert make("cpu").isnan().all(), "the CPU should fill with NaN: the case tests nothing"
        got = make("musa").cpu()
    finally:
        torch.use_deterministic_algorithms(was)
    assert got.isnan().all(), f"musa left uninitialized values {got.tolist()}"


COMPAT_AUTOCAST_QUERIES = r'''
import torch, torch_musa
assert torch_musa.cuda_compat.is_enabled()
with torch.autocast("cuda", dtype=torch.bfloat16):
    print(torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype())
with torch.cuda.amp.autocast():
    print(torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype())
print(torch.is_autocast_enabled())
torch.set_autocast_gpu_dtype(torch.bfloat16)
print(torch.get_autocast_dtype("cuda"))
'''


@pytest.mark.slow
def test_compat_device_less_autocast_queries_answer_for_musa(subpython):
    """CUDA code asks ``torch.is_autocast_enabled()`` without a device (older
    transformers' attention upcasts, apex, xformers): under the compat layer the
    CUDA of that question is musa."""
    r = subpython(COMPAT_AUTOCAST_QUERIES, env={"TORCH_MUSA_CUDA_COMPAT": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:4] == ["True torch.bfloat16", "True torch.float16", "False",
                                        "torch.bfloat16"], r.stdout


BACKWARD_THREADS = r'''
import torch, torch_musa
torch.set_num_threads(2)
assert torch.get_num_threads() == 2  # this thread is initialised: its count stays 2
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(8, 2)),
                                     batch_size=4, num_workers=1, pin_memory=True)
next(iter(loader))  # its pin-memory thread calls torch.set_num_threads(1)
seen = {}
for device in ("cpu", "musa"):
    x = torch.ones(3, device=device, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g, d=device: seen.__setitem__(d, torch.get_num_threads()))
    y.sum().backward()
print(torch.get_num_threads(), seen["cpu"], seen["musa"])
'''


@pytest.mark.slow
@pytest.mark.requires_host_driver(
    "the thread count is the host kernels' (csrc/aten/kernel_threads.h): the cuda driver's "
    "kernels run on the GPU")
def test_backward_uses_the_callers_intra_op_threads_after_a_pinned_loader(subpython):
    r = subpython(BACKWARD_THREADS)
    assert r.returncode == 0, r.stderr
    main, cpu_backward, musa_backward = map(int, r.stdout.split())
    assert main == cpu_backward == 2, "the CPU backward should use the caller's threads"
    assert musa_backward == cpu_backward


def test_transformer_encoder_inference_with_padding_mask():
    """BERT-style inference: padded batch, key-padding mask, default enable_nested_tensor."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2).eval()
    x = torch.randn(3, 5, 16)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 2 + [True] * 3])
    import torch_musa.ops as musa_ops

    with torch.no_grad():
        cpu = encoder(x, src_key_padding_mask=pad)
        musa_ops.reset_fallback_stats()
        musa = encoder.to("musa")(x.to("musa"), src_key_padding_mask=pad.to("musa"))
    # the fast path's own ops (the padding check, the fused layer) are the registry's
    assert musa_ops.fallback_stats() == {}
    # musa's attention is its own kernel (the CPU's is its flash kernel): float32 rounding
    assert_same(musa, cpu, "encoder output on the padded batch", atol=1e-6, rtol=1e-5)
