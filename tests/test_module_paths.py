"""The real torch_musa's module paths import here and mean this project's objects."""
import importlib

import pytest
import torch

import torch_musa


def test_core_utils_get_musa_device_index():
    from torch_musa.core._utils import _get_musa_device_index

    current = torch.musa.current_device()
    assert _get_musa_device_index(None) == current
    assert _get_musa_device_index("musa") == current
    assert _get_musa_device_index("musa:0") == 0
    assert _get_musa_device_index(torch.device("musa", 0)) == 0
    assert _get_musa_device_index(torch.musa.device(0)) == 0
    assert _get_musa_device_index("cpu", allow_cpu=True) == -1
    # upstream's own test (tests/unittest/core/test_device.py)
    with pytest.raises(RuntimeError, match="Invalid device string: 'musa0'"):
        _get_musa_device_index("musa0", optional=True)
    with pytest.raises(ValueError, match="Expected a musa device, but got: cpu"):
        _get_musa_device_index(torch.device("cpu"), optional=True)


def test_core_amp_grad_scaler_is_torch_musa_amp():
    from torch.amp.grad_scaler import OptState as TorchOptState

    from torch_musa.core.amp.grad_scaler import GradScaler, OptState

    assert OptState is TorchOptState
    assert GradScaler is torch.musa.amp.GradScaler
    assert GradScaler is torch_musa.amp.GradScaler
    scaler = GradScaler(init_scale=4.0)
    p = torch.nn.Parameter(torch.ones(3, device="musa"))
    opt = torch.optim.SGD([p], lr=1.0)
    scaler.scale(p.sum()).backward()
    scaler.step(opt)
    scaler.update()
    torch.testing.assert_close(p.detach().cpu(), torch.zeros(3))


def test_musac_is_the_binding_module():
    from torch_musa import _C

    assert torch.musa._MUSAC is _C
    assert torch_musa._MUSAC is _C
    assert importlib.import_module("torch_musa._MUSAC") is _C


def test_dynamo_device_interface():
    from torch._dynamo.device_interface import get_interface_for_device

    import torch_musa._dynamo as musa_dynamo
    from torch_musa._inductor.device_interface import MusaInterface

    assert musa_dynamo.MusaInterface is MusaInterface
    assert get_interface_for_device("musa") is MusaInterface
    assert dict(musa_dynamo.get_registered_device_interfaces())["musa"] is MusaInterface


def test_aoti_loaders_refuse_musa_and_delegate_cpu(monkeypatch, tmp_path):
    import torch._export
    import torch._inductor.package

    from torch_musa._export import aot_load
    from torch_musa._inductor.aoti import UNSUPPORTED
    from torch_musa._inductor.package import load_package

    for device in ("musa", "musa:0"):
        with pytest.raises(RuntimeError) as err:
            load_package(str(tmp_path / "m.pt2"), device)
        assert str(err.value) == UNSUPPORTED
        with pytest.raises(RuntimeError) as err:
            aot_load(str(tmp_path / "m.so"), device)
        assert str(err.value) == UNSUPPORTED
    with pytest.raises(RuntimeError, match="Unsupported device xpu"):
        load_package(str(tmp_path / "m.pt2"), "xpu")
    with pytest.raises(RuntimeError, match="Unable to load .so"):
        load_package(str(tmp_path / "m.so"), "cpu")
    calls = []
    monkeypatch.setattr(torch._inductor.package, "load_package", lambda p: calls.append(("pkg", p)) or "runner")
    monkeypatch.setattr(torch._export, "aot_load", lambda p, d: calls.append(("so", p, d)) or "runner")
    assert load_package("m.pt2", "cpu") == "runner"
    assert aot_load("m.so", "cpu") == "runner"
    assert calls == [("pkg", "m.pt2"), ("so", "m.so", "cpu")]


def test_multi_tensor_applier_calls_the_op_in_chunks():
    from torch_musa.multi_tensor_apply import MultiTensorApply, multi_tensor_applier
    from torch_musa.optim import FusedLAMB

    assert multi_tensor_applier.available and multi_tensor_applier.chunk_size == 2048 * 32
    flag = torch.zeros(1, dtype=torch.int, device="musa")
    lists = [[torch.ones(3, device="musa"), torch.ones(2, device="musa")]]

    def scale_(chunk_size, noop, tensor_lists, factor):
        assert chunk_size == 4 and noop is flag
        torch._foreach_mul_(tensor_lists[0], factor)
        return "done"

    assert MultiTensorApply(4)(scale_, flag, lists, 2.0) == "done"
    assert all(bool((t.cpu() == 2).all()) for t in lists[0])
    assert FusedLAMB.__module__.startswith("torch_musa.optim")


def test_core_ao_fused_modules_are_torch_aos():
    """The real torch_musa's SiLU fusions import from its paths and sit beside PyTorch's ReLU ones."""
    import torch_musa.core.ao.nn.intrinsic as nni
    import torch_musa.core.ao.nn.intrinsic.qat as nniqat
    import torch_musa.core.ao.nn.intrinsic.quantized as nniq
    from torch_musa.core.ao.nn.intrinsic.quantized.modules.conv_add import ConvAddSiLU2d
    from torch_musa.core.ao.nn.intrinsic.quantized.modules.conv_silu import ConvSiLU2d
    from torch_musa.core.ao.register_helper import _register_ao_intrinsic_modules

    assert callable(_register_ao_intrinsic_modules)
    for name in ("ConvBnSiLU2d", "ConvSiLU2d", "ConvAddSiLU2d"):
        assert getattr(torch.ao.nn.intrinsic, name) is getattr(nni, name)
    assert torch.ao.nn.intrinsic.qat.ConvSiLU2d is nniqat.ConvSiLU2d
    assert torch.ao.nn.intrinsic.qat.ConvBnSiLU2d is nniqat.ConvBnSiLU2d
    assert torch.ao.nn.intrinsic.quantized.ConvSiLU2d is nniq.ConvSiLU2d is ConvSiLU2d
    assert torch.ao.nn.intrinsic.quantized.ConvAddSiLU2d is nniq.ConvAddSiLU2d is ConvAddSiLU2d
    assert issubclass(ConvSiLU2d, torch.ao.nn.quantized.Conv2d)
    assert ConvSiLU2d(3, 4, 3)._get_name() == "QuantizedConvSiLU2d"


def test_musagraph_trees_and_musagraphs_backend_paths():
    import torch._dynamo

    from torch_musa._dynamo.backend.musagraphs import MusagraphsBackend, musagraphs
    from torch_musa._inductor import musagraph_trees

    for name in ("mark_step_begin", "reset_musagraph_trees", "get_manager", "musagraphify_impl"):
        assert callable(getattr(musagraph_trees, name))
    manager = musagraph_trees.get_manager(0)
    assert musagraph_trees.get_manager(0, create_if_none_exists=False) is manager
    musagraph_trees.reset_musagraph_trees()
    assert musagraph_trees.get_manager(0, create_if_none_exists=False) is None
    assert isinstance(torch._dynamo.lookup_backend("musagraphs"), MusagraphsBackend)
    assert callable(musagraphs)


def test_distributed_loss_path():
    import torch.nn.functional as F

    from torch_musa.distributed.loss import FusedCrossEntropyLossTensorParallel, parallel_fused_cross_entropy

    torch.manual_seed(0)
    logits, target = torch.randn(4, 6), torch.randint(6, (4,))
    loss = parallel_fused_cross_entropy(logits.to("musa"), target.to("musa"), reduction="sum")
    torch.testing.assert_close(loss.cpu().double(), F.cross_entropy(logits.double(), target, reduction="sum"))
    assert issubclass(FusedCrossEntropyLossTensorParallel, torch.autograd.Function)
