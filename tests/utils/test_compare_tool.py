"""CompareWithCPU: planted wrong musa kernels are found, with their module path; the rest pass."""
import json
import os

import pytest
import torch

import torch_musa  # noqa: F401
from torch_musa.utils.compare_tool import (CompareError, CompareWithCPU, compare_for_single_op,
                                           compare_tensor, open_module_tracker)

DEV = "musa"


def bad_exp(x):
    """exp computed right on CPU copies, then off by 0.5."""
    return (torch.exp(x.cpu()) + 0.5).to(x.device)


class Attn(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q_proj = torch.nn.Linear(d, d)
        self.k_proj = torch.nn.Linear(d, d)

    def forward(self, x):
        q, k = self.q_proj(x), self.k_proj(x)
        w = torch.exp(q @ k.transpose(-1, -2) * 0.05)       # planted op sits here
        return (w / w.sum(-1, keepdim=True)) @ x


class Layer(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = Attn(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.Tanh(), torch.nn.Linear(2 * d, d))

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)


class Net(torch.nn.Module):
    def __init__(self, d=8, n=2):
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer(d) for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.fixture
def net():
    torch.manual_seed(0)
    m = Net().to(DEV)
    h = open_module_tracker(m)
    yield m
    h.remove()


def _train_steps(m, tool, steps=1):
    x = torch.randn(2, 5, 8, device=DEV)
    for _ in range(steps):
        m.zero_grad()
        m(x).square().mean().backward()
        tool.step()


def _records(tool):
    with open(tool.jsonl_path) as f:
        return [json.loads(line) for line in f]


def test_clean_model_passes(net, tmp_path):
    with CompareWithCPU(output_dir=str(tmp_path)) as c:
        _train_steps(net, c)
    assert c.counts["checked"] > 30
    assert c.counts["failed"] == 0
    assert os.path.exists(tmp_path / "compare_max_error_rank0.png")
    recs = _records(c)
    assert all(r["status"] in ("pass", "no_cpu_kernel") for r in recs)
    assert any(r["phase"] == "backward" for r in recs)


def test_planted_exp_flagged_with_module_path(net, planted, tmp_path, capsys):
    planted("exp", bad_exp)
    with CompareWithCPU(output_dir=str(tmp_path), plot=False) as c:
        _train_steps(net, c)
    fails = [r for r in _records(c) if r["status"] == "fail"]
    assert fails, "the wrong exp kernel was not caught"
    assert {r["op"] for r in fails} == {"aten.exp.default"}      # every other op passes
    first = fails[0]
    assert first["kind"] == "first" and first["phase"] == "forward"
    assert first["module"] == "model.layers.0.attn"
    assert "test_compare_tool.py" in first["src"] and first["max_abs"] == pytest.approx(0.5, abs=1e-3)
    assert c.first_failure["module"] == "model.layers.0.attn"
    out = capsys.readouterr().out
    assert "FIRST DIVERGENCE: aten.exp.default" in out and "torch.exp(q @ k" in out
    assert c.stats["aten.exp.default"].failed == 2                # one per layer
    assert all(s.failed == 0 for op, s in c.stats.items() if op != "aten.exp.default")


def test_backward_op_tagged_backward(net, planted, tmp_path):
    def bad_tanh_backward(grad, y):
        return (torch.ops.aten.tanh_backward(grad.cpu(), y.cpu()) * 1.5).to(grad.device)
    planted("tanh_backward", bad_tanh_backward)
    with CompareWithCPU(output_dir=str(tmp_path), plot=False) as c:
        _train_steps(net, c)
    fails = [r for r in _records(c) if r["status"] == "fail"]
    assert {r["op"] for r in fails} == {"aten.tanh_backward.default"}
    assert fails[0]["phase"] == "backward" and fails[0]["grad_fn"] == "TanhBackward0"
    assert fails[0]["module"] == "model.layers.1.mlp.1"        # backward runs layer 1 first


def test_downstream_marked(planted, tmp_path):
    planted("exp", bad_exp)
    planted("tanh", lambda x: (torch.tanh(x.cpu()) * 0.5).to(x.device))
    x = torch.randn(16, device=DEV)
    with CompareWithCPU(output_dir=str(tmp_path), verbose=False, plot=False) as c:
        y = torch.tanh(torch.exp(x) * 2)        # tanh reads what the wrong exp made
        z = torch.tanh(x)                       # independent: its own first divergence
    kinds = [(r["op"], r["kind"]) for r in _records(c) if r["status"] == "fail"]
    assert kinds == [("aten.exp.default", "first"), ("aten.tanh.default", "downstream"),
                     ("aten.tanh.default", "first")]
    assert c.counts["first"] == 2 and c.counts["downstream"] == 1
    del y, z


def test_white_list_and_target_list(planted, tmp_path):
    planted("exp", bad_exp)
    x = torch.randn(16, device=DEV)
    with CompareWithCPU(white_list=["torch.ops.aten.exp"], output_dir=str(tmp_path), plot=False) as c:
        torch.exp(x).sin()
    assert c.counts["failed"] == 0 and c.counts["whitelisted"] >= 1 and "aten.exp.default" not in c.stats
    with CompareWithCPU(target_list=["aten::exp"], verbose=False) as c:
        torch.exp(x).sin().cos()
    assert set(c.stats) == {"aten.exp.default"} and c.counts["failed"] == 1
    assert c.counts["not_target"] == 2


def test_step_window(planted, net):
    planted("exp", bad_exp)
    with CompareWithCPU(start_step=1, end_step=3, verbose=False, max_printed=0) as c:
        _train_steps(net, c, steps=4)
    assert c.step_cnt == 4
    assert c.counts["failed"] == 4                       # 2 layers x steps 1 and 2 only
    assert c.first_failure["step"] == 1


def test_tf32_matmuls_are_judged_at_tf32_tolerance_and_a_wrong_one_still_fails(planted):
    """With TF32 allowed, musa's matmuls under the cuda driver are CUDA's TF32 ones: the tool
    must not report them (a real TF32 product of these sizes is up to ~1e-2 off float32), and a
    wrong kernel must still stand out. Under the host driver the kernels stay float32."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(64, 64, generator=g).to(DEV) for _ in range(2))
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        with CompareWithCPU(verbose=False, max_printed=0) as c:
            torch.mm(a, b)
            torch.addmm(a, a, b)
        assert c.counts["checked"] == 2 and c.counts["failed"] == 0
        planted("mm", lambda x, y: (torch.mm(x.cpu(), y.cpu()) + 0.5).to(x.device))
        with CompareWithCPU(verbose=False, max_printed=0) as c:
            torch.mm(a, b)
        assert c.counts["failed"] == 1
    finally:
        torch.set_float32_matmul_precision(before)


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """float32 rounded to TF32's 10-bit mantissa (to nearest), as a GPU's TF32 matmul
    reads its factors."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def test_tf32_products_pass_at_their_per_element_bound_and_a_wrong_one_fails(planted, monkeypatch):
    """The TF32 allowance of each output element scales with |A| @ |B| there: a product of
    64 unit normals is up to ~1e-2 off in TF32 where it is near zero, which the scalar
    tolerance (1e-3, 1e-2) reported as wrong on the GPU. Emulated here on any driver: musa
    counts as a TF32 device and its mm/addmm round their factors to TF32."""
    import torch_musa.utils.compare_tool.compare as compare

    monkeypatch.setattr(compare, "TF32_DEVICE_TYPES", ("cuda", "musa"))
    planted("mm", lambda x, y: (_tf32(x.cpu()).double() @ _tf32(y.cpu()).double())
            .float().to(x.device))
    planted("addmm", lambda c, x, y, beta=1, alpha=1: (
        beta * c.cpu().double() + alpha * (_tf32(x.cpu()).double() @ _tf32(y.cpu()).double()))
            .float().to(c.device))
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(64, 64, generator=g) for _ in range(2))
    emulated = (_tf32(a).double() @ _tf32(b).double()).float()
    exact = a @ b
    # The scalar tolerance alone would report these products (what the GPU suite saw).
    assert not torch.allclose(emulated, exact, atol=1e-3, rtol=1e-2)
    a, b = a.to(DEV), b.to(DEV)
    torch.set_float32_matmul_precision("high")  # restored after the test (conftest)
    with CompareWithCPU(verbose=False, max_printed=0) as c:
        torch.mm(a, b)
        torch.addmm(a, a, b, beta=-0.5, alpha=-2.0)
    assert c.counts["checked"] == 2 and c.counts["failed"] == 0
    # One element off by more than TF32 can explain there (its terms' magnitudes sum
    # to ~20: at most ~0.08 off).
    small = (a.cpu().abs() @ b.cpu().abs()).argmin()
    planted("mm", lambda x, y: (x.cpu() @ y.cpu()).flatten().index_add(
        0, small.view(1), torch.tensor([0.2])).view(64, 64).to(x.device))
    with CompareWithCPU(verbose=False, max_printed=0) as c:
        torch.mm(a, b)
    assert c.counts["failed"] == 1
    # At full float32 precision the TF32 results are wrong again.
    torch.set_float32_matmul_precision("highest")
    planted("mm", lambda x, y: (_tf32(x.cpu()).double() @ _tf32(y.cpu()).double())
            .float().to(x.device))
    with CompareWithCPU(verbose=False, max_printed=0) as c:
        torch.mm(a, b)
    assert c.counts["failed"] == 1


def test_rank_selection(planted, tmp_path, monkeypatch):
    planted("exp", bad_exp)
    x = torch.randn(4, device=DEV)
    monkeypatch.setenv("RANK", "1")
    with CompareWithCPU(enable_ranks=[0], output_dir=str(tmp_path / "r0"), should_log_to_file=True) as c:
        torch.exp(x)
    assert c.counts["checked"] == 0 and not os.path.exists(tmp_path / "r0")
    with CompareWithCPU(enable_ranks=[1], output_dir=str(tmp_path / "r1"), should_log_to_file=True,
                        plot=False) as c:
        torch.exp(x)
    assert c.counts["failed"] == 1
    text = (tmp_path / "r1" / "compare_result_rank1.txt").read_text()
    assert "FIRST DIVERGENCE: aten.exp.default" in text
    assert (tmp_path / "r1" / "compare_result_rank1.jsonl").exists()


def test_dump_and_replay(planted, tmp_path):
    planted("exp", bad_exp)
    x = torch.randn(3, 4, device=DEV)
    with pytest.raises(CompareError, match="aten.exp.default"):
        with CompareWithCPU(dump_error_data=True, output_dir=str(tmp_path), verbose=False, plot=False) as c:
            torch.exp(x).sum()
    path = tmp_path / "torch.ops.aten.exp_inputs_rank0.pkl"
    assert path.exists() and (tmp_path / "torch.ops.aten.exp_outputs_rank0.pkl").exists()
    ok, args, kwargs, out = compare_for_single_op(str(path))          # op taken from the dump
    assert not ok and args[0].device.type == "musa"
    torch.testing.assert_close(args[0].cpu(), x.cpu())
    # torch_musa's call shape: (path, op_func, atol, rtol)
    ok, *_ = compare_for_single_op(str(path), torch.ops.aten.exp, 1e-3, 1e-3)
    assert not ok
    assert c.dumped == ["torch.ops.aten.exp"]


def test_replay_passes_once_kernel_is_fixed(tmp_path):
    x = torch.randn(3, 4, device=DEV)
    from torch_musa.utils.compare_tool import save_data_for_op
    p = save_data_for_op(None, (x.cpu(),), {}, str(tmp_path), "manual", op="aten.exp.default",
                         device="musa:0")
    ok, _, _, out = compare_for_single_op(p)
    assert ok and out.device.type == "musa"


def test_dtype_aware_tolerances():
    a = torch.randn(64) * 10
    # one bf16 ulp-ish difference: fine for bfloat16, far too much for float32
    noisy = a * (1 + 4e-3)
    assert compare_tensor(noisy.bfloat16(), a.bfloat16().float(), None, None)[0]
    assert not compare_tensor(noisy, a, None, None)[0]
    # float32: the package's policy (torch.testing's rtol 1.3e-6, atol 1e-5)
    assert compare_tensor(a * (1 + 1e-6), a, None, None)[0]
    assert not compare_tensor(a * (1 + 2e-4), a, None, None)[0]
    assert not compare_tensor(a.double() * (1 + 1e-6), a.double(), None, None)[0]
    # integers and bools: exact
    i = torch.arange(10)
    assert compare_tensor(i, i.clone(), None, None)[0]
    j = i.clone()
    j[3] += 1
    assert not compare_tensor(j, i, 1.0, 1.0)[0]        # user tolerance does not loosen ints
    assert not compare_tensor(i > 4, i > 5, None, None)[0]
    # user-given tolerance applies to floats
    assert compare_tensor(noisy, a, 1.0, 0.01)[0]
    nan = torch.tensor([1.0, float("nan")])
    assert compare_tensor(nan, nan.clone(), None, None)[0]          # equal_nan
    assert not compare_tensor(nan, torch.tensor([1.0, 2.0]), None, None)[0]


def test_cpu_without_dtype_kernel_retries_float32(tmp_path):
    lib = torch.library.Library("cmp_tool_test", "DEF")
    try:
        lib.define("scale(Tensor x) -> Tensor")

        def cpu_scale(x):
            if x.dtype == torch.float16:
                raise RuntimeError('"scale_cpu" not implemented for \'Half\'')
            return x * 3

        lib.impl("scale", cpu_scale, "CPU")
        lib.impl("scale", lambda x: (x.cpu().float() * 3).to(x.dtype).to(x.device), "PrivateUse1")
        x = torch.randn(32, device=DEV).half()
        with CompareWithCPU(output_dir=str(tmp_path), plot=False) as c:
            torch.ops.cmp_tool_test.scale(x)
        assert c.counts["fp32_retry"] == 1 and c.counts["failed"] == 0
        assert c.stats["cmp_tool_test.scale.default"].checked == 1
        rec = [r for r in _records(c) if r["op"] == "cmp_tool_test.scale.default"][0]
        assert rec["fp32_retry"] is True
    finally:
        lib._destroy()


def test_inplace_foreach_optimizer_step_compared(planted):
    """Ops that return nothing (_foreach_*_) are compared through the tensors they write."""
    m = torch.nn.Linear(4, 4).to(DEV)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, foreach=True)
    m(torch.randn(2, 4, device=DEV)).sum().backward()

    def bad_foreach_add_(self, other, alpha=1):
        for s, o in zip(self, other):
            s.copy_((s.cpu() + o.cpu() * alpha * 2).to(s.device))
    planted("_foreach_add_.List", bad_foreach_add_)
    with CompareWithCPU(verbose=False) as c:
        opt.step()
    assert c.stats["aten._foreach_add_.List"].failed == 1


def test_bounded_state_over_many_steps(net):
    with CompareWithCPU(verbose=False) as c:
        _train_steps(net, c, steps=2)
        n_ops = len(c.stats)
        _train_steps(net, c, steps=6)
    assert len(c.stats) == n_ops and c.step_cnt == 8
    assert len(c._taint.keys) == 0
