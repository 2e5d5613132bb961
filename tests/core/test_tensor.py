"""Tensors on musa: views, in-place and out=, data-dependent shapes, printing,
scalars, serialization, and the package's registration (DLPack: test_dlpack.py)."""
import io

import pytest
import torch


def test_views_alias_device_memory():
    x = torch.zeros(4, 4, device="musa")
    v = x[1:3, ::2]
    v.fill_(7)
    t = x.t()
    t[0, 3] = 5
    assert x.cpu()[1].tolist() == [7, 0, 7, 0] and x[3, 0].item() == 5
    u = x.view(16)
    assert u.data_ptr() == x.data_ptr() and u.device == x.device
    d = torch.diagonal(x)  # a view made inside a host kernel path
    d.add_(1)
    assert x[0, 0].item() == 1
    assert x.unfold(0, 2, 2).data_ptr() == x.data_ptr()


def test_in_place_and_out_write_through():
    a = torch.ones(3, device="musa")
    r = a.mul_(3)
    assert r is a and a.cpu().tolist() == [3, 3, 3]
    out = torch.empty(0, device="musa")  # resized on the device side
    res = torch.add(a, 1, out=out)
    assert res is out and out.shape == (3,) and out.cpu().tolist() == [4, 4, 4]
    big = torch.empty(10, device="musa")
    torch.mul(a, 2, out=big[:3])
    assert big[:3].cpu().tolist() == [6, 6, 6]
    vals, idx = torch.empty(0, device="musa"), torch.empty(0, dtype=torch.long, device="musa")
    torch.max(torch.tensor([[1.0, 5.0], [7.0, 2.0]], device="musa"), 1, out=(vals, idx))
    assert vals.cpu().tolist() == [5, 7] and idx.cpu().tolist() == [1, 0]


def test_data_dependent_shapes():
    x = torch.tensor([0, 3, 0, 5, 3], device="musa")
    assert torch.nonzero(x).cpu().flatten().tolist() == [1, 3, 4]
    assert torch.masked_select(x, x > 2).cpu().tolist() == [3, 5, 3]
    u, counts = torch.unique(x, return_counts=True)
    assert u.device.type == "musa" and u.cpu().tolist() == [0, 3, 5] and counts.cpu().tolist() == [2, 2, 1]


@pytest.mark.requires_devices(2)
def test_print_tolist_item():
    x = torch.tensor([[1.5, 2.0]], device="musa")
    assert repr(x) == "tensor([[1.5000, 2.0000]], device='musa:0')"
    assert x.tolist() == [[1.5, 2.0]]
    assert x[0, 0].item() == 1.5
    assert "device='musa:1'" in str(torch.ones(2, device="musa:1", dtype=torch.bfloat16))
    assert "grad_fn" in repr(torch.ones(2, device="musa", requires_grad=True) * 2)


@pytest.mark.parametrize("where", ["musa:0", "musa:1"])
@pytest.mark.requires_devices(2)
def test_save_load_round_trips(where):
    a = torch.randn(5, device=where)
    model = torch.nn.Linear(3, 2).to(where)
    buf = io.BytesIO()
    torch.save({"t": a, "storage": torch.ones(3, device=where).untyped_storage(), "sd": model.state_dict()}, buf)

    def load(**kw):
        buf.seek(0)
        return torch.load(buf, **kw)

    same = load()
    assert same["t"].device == torch.device(where) and torch.equal(same["t"].cpu(), a.cpu())
    assert same["storage"].device == torch.device(where)
    assert load(map_location="cpu")["t"].device.type == "cpu"
    assert load(map_location="musa:1")["sd"]["weight"].device == torch.device("musa", 1)
    assert load(map_location={where: "musa:0"})["t"].device == torch.device("musa", 0)
    moved = load(map_location=lambda storage, loc: storage.musa(1))["t"]
    assert moved.device == torch.device("musa", 1) and torch.equal(moved.cpu(), a.cpu())
    fresh = torch.nn.Linear(3, 2).musa()
    fresh.load_state_dict(same["sd"])
    assert torch.equal(fresh.weight.cpu(), model.weight.cpu())


def test_cpu_checkpoint_loads_onto_musa():
    buf = io.BytesIO()
    torch.save(torch.arange(4.0), buf)
    buf.seek(0)
    assert torch.load(buf, map_location="musa").device == torch.device("musa", 0)


def test_storage_and_type_helpers():
    x = torch.ones(3, device="musa")
    assert x.untyped_storage().device == torch.device("musa", 0)
    assert torch.ones(3).untyped_storage().musa().device.type == "musa"
    assert isinstance(x, torch.musa.FloatTensor) and not isinstance(x, torch.musa.HalfTensor)
    assert torch.musa.LongTensor(2, 3).shape == (2, 3)
    assert x.type() == "torch.musa.FloatTensor"
    assert hasattr(torch.profiler.ProfilerActivity, "MUSA")


@pytest.mark.slow
def test_autoload_registers_musa_on_import_torch(subpython):
    r = subpython("import torch; print(torch.ones(1, device='musa').device)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "musa:0"
    off = subpython("import torch; import sys; print('torch_musa' in sys.modules)",
                    {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert off.stdout.strip() == "False"


def test_zero_tensor_gradients_survive():
    # sgn's backward makes an "efficient zero" tensor (no bytes behind it).
    x = torch.randn(5, device="musa", requires_grad=True)
    torch.sgn(x).sum().backward()
    assert torch.equal(x.grad.cpu(), torch.zeros(5))
    assert torch.equal(x.grad.clone().cpu(), torch.zeros(5))
