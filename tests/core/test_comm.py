"""torch.musa.comm (torch.cuda.comm's collectives) across musa:0 / musa:1, each
against the same computation on the CPU, and the torch._C primitives that
torch.nn.parallel.comm calls."""
from __future__ import annotations

import pytest
import torch
import torch.nn.parallel.comm as nn_comm

import torch_musa  # noqa: F401
from torch_musa.core import comm

M0, M1, CPU = torch.device("musa:0"), torch.device("musa:1"), torch.device("cpu")
pytestmark = pytest.mark.requires_devices(2)


def _mixed(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(3, 4, generator=g), torch.randint(-9, 9, (5,), generator=g),
            torch.randn(7, generator=g).half(), torch.randn(2, 2, 2, generator=g),
            torch.randint(0, 9, (4,), generator=g)]


def test_musa_comm_is_torch_musa_comm():
    assert torch.musa.comm is comm
    for name in ("broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced", "scatter", "gather"):
        assert callable(getattr(torch.musa.comm, name))


def test_torch_c_primitives_are_installed():
    for name in ("_broadcast", "_broadcast_out", "_broadcast_coalesced", "_scatter", "_scatter_out",
                 "_gather", "_gather_out"):
        assert getattr(torch._C, name) is comm._PRIMITIVES[name]
    # torch.nn.parallel.comm itself now works on musa, integers meaning musa indices.
    x = torch.arange(12.).view(6, 2)
    parts = nn_comm.scatter(x, [0, 1])
    assert [p.device for p in parts] == [M0, M1]
    assert torch.equal(nn_comm.gather(parts, 0, "cpu"), x)


# ---- broadcast ----

def test_broadcast_from_cpu():
    x = torch.randn(3, 5)
    out = comm.broadcast(x, [0, 1])
    assert [t.device for t in out] == [M0, M1]
    for t in out:
        assert t.dtype == x.dtype and torch.equal(t.cpu(), x)


def test_broadcast_returns_the_source_where_it_is():
    x = torch.randn(4, device=M1)
    out = comm.broadcast(x, ["musa:0", torch.device("musa:1")])
    assert out[1] is x
    assert out[0].device == M0 and torch.equal(out[0].cpu(), x.cpu())
    out[0].add_(1)  # a copy, not a view
    assert not torch.equal(out[0].cpu(), x.cpu())


def test_broadcast_out():
    x = torch.randn(2, 3)
    outs = [torch.empty(2, 3, device=M0), torch.empty(2, 3, device=M1)]
    res = comm.broadcast(x, out=outs)
    assert all(r is o for r, o in zip(res, outs))
    assert all(torch.equal(o.cpu(), x) for o in outs)


def test_broadcast_errors():
    x = torch.randn(2, 3)
    with pytest.raises(RuntimeError, match="Exactly one of 'devices' and 'out'"):
        comm.broadcast(x)
    with pytest.raises(RuntimeError, match="Exactly one of 'devices' and 'out'"):
        comm.broadcast(x, [0], out=[torch.empty(2, 3, device=M0)])
    with pytest.raises(RuntimeError, match="musa tensors, but output tensor at index 1 has device 'cpu'"):
        comm.broadcast(x, out=[torch.empty(2, 3, device=M0), torch.empty(2, 3)])
    with pytest.raises(RuntimeError, match=r"same shape as the source tensor \[2, 3\], but output tensor at index 0"):
        comm.broadcast(x, out=[torch.empty(3, 2, device=M0)])
    with pytest.raises(RuntimeError, match="non-negative device index"):
        torch._C._broadcast(x, [0, -1])
    with pytest.raises(Exception, match="musa"):
        comm.broadcast(x, [0, 7])  # no such device


# ---- broadcast_coalesced ----

@pytest.mark.parametrize("buffer_size", [10485760, 40])  # one buffer per dtype / many small ones
def test_broadcast_coalesced(buffer_size):
    src = [t.to(M0) for t in _mixed(0)]
    out = comm.broadcast_coalesced(src, [0, 1], buffer_size=buffer_size)
    assert len(out) == 2
    assert all(a is b for a, b in zip(out[0], src))  # devices[0] gets the tensors themselves
    assert len(out[1]) == len(src)
    for a, b in zip(out[1], src):
        assert a.device == M1 and a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.cpu(), b.cpu())
    # Each copy has its own version counter (the flat buffer's would be shared).
    before = [t._version for t in out[1]]
    out[1][0].add_(1)
    assert [t._version for t in out[1]][1:] == before[1:]


def test_broadcast_coalesced_needs_tensors_on_first_device():
    with pytest.raises(RuntimeError, match=r"All tensors must be on devices\[0\]: 0"):
        comm.broadcast_coalesced([torch.randn(2, device=M1)], [0, 1])
    with pytest.raises(RuntimeError, match=r"All tensors must be on devices\[0\]"):
        comm.broadcast_coalesced([torch.randn(2)], [0, 1])


# ---- reduce_add ----

def test_reduce_add():
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    ins = [a.to(M0), b.to(M1)]
    for destination, device in [(None, M0), (1, M1), ("musa:0", M0)]:
        r = comm.reduce_add(ins, destination)
        assert r.device == device
        torch.testing.assert_close(r.cpu(), a + b, rtol=0, atol=0)
    with torch.musa.device(1):
        assert comm.reduce_add(ins).device == M1  # default: the current device
    assert comm.reduce_add([ins[0]]) is ins[0]


def test_reduce_add_errors():
    a = torch.randn(3, device=M0)
    with pytest.raises(RuntimeError, match="all inputs to be on musa devices, but input 1 is on cpu"):
        comm.reduce_add([a, torch.randn(3)])
    with pytest.raises(ValueError, match="input 1 has invalid size: got 4, but expected 3"):
        comm.reduce_add([a, torch.randn(4, device=M1)])
    with pytest.raises(RuntimeError, match=r"destination \(musa:1\) to be the device of one of the inputs"):
        comm.reduce_add([a, torch.randn(3, device=M0)], 1)


@pytest.mark.parametrize("buffer_size", [10485760, 40])
def test_reduce_add_coalesced(buffer_size):
    a, b = _mixed(1), _mixed(2)
    res = comm.reduce_add_coalesced([[t.to(M0) for t in a], [t.to(M1) for t in b]], 1, buffer_size)
    assert len(res) == len(a)
    for r, x, y in zip(res, a, b):
        assert r.device == M1 and r.dtype == x.dtype and r.shape == x.shape
        torch.testing.assert_close(r.cpu(), x + y, rtol=0, atol=0)


# ---- scatter ----

def test_scatter_from_cpu():
    x = torch.randn(10, 3)
    parts = comm.scatter(x, [0, 1])
    assert [p.device for p in parts] == [M0, M1]
    for p, want in zip(parts, x.chunk(2)):
        assert torch.equal(p.cpu(), want)


def test_scatter_chunks_and_dims():
    x = torch.randn(5, 6)
    parts = comm.scatter(x, [0, 1], chunk_sizes=[1, 4])
    assert [tuple(p.shape) for p in parts] == [(1, 6), (4, 6)]
    assert torch.equal(torch.cat([p.cpu() for p in parts]), x)
    parts = comm.scatter(x, [1, 0], dim=-1)
    assert [p.device for p in parts] == [M1, M0]
    assert torch.equal(torch.cat([p.cpu() for p in parts], 1), x)
    # As on CUDA, tensor.chunk sizes: 5 rows over 4 devices give 3 chunks (2, 2, 1).
    parts = comm.scatter(x, [0, 1, 0, 1])
    assert [p.shape[0] for p in parts] == [2, 2, 1]


def test_scatter_keeps_a_view_where_the_source_is():
    x = torch.randn(4, 2, device=M0)
    parts = comm.scatter(x, [0, 1])
    assert parts[0].data_ptr() == x.data_ptr()
    assert parts[1].device == M1 and torch.equal(parts[1].cpu(), x[2:].cpu())


def test_scatter_on_streams():
    x = torch.randn(6, 2)
    streams = [torch.musa.Stream(device=0), torch.musa.Stream(device=1)]
    parts = comm.scatter(x, [0, 1], streams=streams)
    for s in streams:
        s.synchronize()
    assert torch.equal(torch.cat([p.cpu() for p in parts]), x)
    with pytest.raises(RuntimeError, match="stream at index 0 \\(was 1\\) to match the device supplied at that "
                                           "index \\(expected 0\\)"):
        comm.scatter(x, [0, 1], streams=streams[::-1])


def test_scatter_out():
    x = torch.randn(10, 3)
    outs = [torch.empty(4, 3, device=M0), torch.empty(6, 3, device=M1)]
    res = comm.scatter(x, out=outs)
    assert all(r is o for r, o in zip(res, outs))
    assert torch.equal(outs[0].cpu(), x[:4]) and torch.equal(outs[1].cpu(), x[4:])


def test_scatter_errors():
    x = torch.randn(5, 3)
    with pytest.raises(RuntimeError, match="same length, but got len\\(devices\\) = 2 and len\\(chunk_sizes\\) = 3"):
        comm.scatter(x, [0, 1], chunk_sizes=[1, 2, 2])
    with pytest.raises(RuntimeError, match="split_with_sizes"):
        comm.scatter(x, [0, 1], chunk_sizes=[1, 2])
    with pytest.raises(RuntimeError, match="at least one device"):
        torch._C._scatter(x, [], None, 0, None)
    with pytest.raises(RuntimeError, match="'devices' must not be specified"):
        comm.scatter(x, [0], out=[torch.empty(5, 3, device=M0)])
    with pytest.raises(RuntimeError, match="'chunk_sizes' must not be specified"):
        comm.scatter(x, chunk_sizes=[5], out=[torch.empty(5, 3, device=M0)])
    with pytest.raises(RuntimeError, match="output tensor at index 0 has device 'cpu'"):
        comm.scatter(x, out=[torch.empty(5, 3)])
    with pytest.raises(RuntimeError, match="index 1 has incorrect shape: \\[2, 4\\]"):
        comm.scatter(x, out=[torch.empty(3, 3, device=M0), torch.empty(2, 4, device=M1)])
    with pytest.raises(RuntimeError, match="Expected 5, but got total size 4"):
        comm.scatter(x, out=[torch.empty(2, 3, device=M0), torch.empty(2, 3, device=M1)])


# ---- gather ----

def test_gather_destinations():
    a, b = torch.randn(2, 3), torch.randn(4, 3)
    ins = [a.to(M0), b.to(M1)]
    want = torch.cat([a, b])
    for destination, device in [(None, M0), (1, M1), ("musa:1", M1), ("cpu", CPU), (CPU, CPU)]:
        r = comm.gather(ins, destination=destination)
        assert r.device == device and torch.equal(r.cpu(), want)
    with torch.musa.device(1):
        assert comm.gather(ins).device == M1  # default: the current device
    with pytest.warns(FutureWarning, match="Using -1 to represent CPU tensor is deprecated"):
        assert comm.gather(ins, destination=-1).device == CPU


def test_gather_dim_dtype_and_memory_format():
    a, b = torch.randn(2, 3, 4, 5), torch.randn(2, 1, 4, 5)
    ins = [a.to(M0).half(), b.to(M1).half()]
    r = comm.gather(ins, dim=1)
    assert r.dtype == torch.float16 and torch.equal(r.cpu(), torch.cat([a, b], 1).half())
    cl = [t.to(memory_format=torch.channels_last) for t in (a.to(M0), a.to(M1))]
    r = comm.gather(cl)
    assert r.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(r.cpu(), torch.cat([a, a]))


def test_gather_out():
    a, b = torch.randn(2, 3), torch.randn(1, 3)
    for out in (torch.empty(3, 3), torch.empty(3, 3, device=M1)):
        assert comm.gather([a.to(M0), b.to(M1)], out=out) is out
        assert torch.equal(out.cpu(), torch.cat([a, b]))


def test_gather_errors():
    a = torch.randn(2, 3, device=M0)
    with pytest.raises(RuntimeError, match="at least one tensor"):
        comm.gather([])
    with pytest.raises(RuntimeError, match="input tensors to be musa tensors, but input tensor at index 1"):
        comm.gather([a, torch.randn(2, 3)])
    with pytest.raises(RuntimeError, match=r"index 1 has invalid shape \[2, 4\], but expected \[2, 3\]"):
        comm.gather([a, torch.randn(2, 4, device=M1)])
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        comm.gather([a, torch.randn(2, device=M1)])
    with pytest.raises(RuntimeError, match=r"out tensor to have shape \[4, 3\], but got \[5, 3\]"):
        comm.gather([a, a], out=torch.empty(5, 3))
    with pytest.raises(RuntimeError, match="'destination' must not be specified"):
        comm.gather([a], destination=0, out=torch.empty(2, 3))
