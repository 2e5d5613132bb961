"""musa-doctor: what it finds in a run (planted float64 with its line, syncs as
sync debug mode counts them, memory against a card, a failure with its op),
its roofline arithmetic and data, its outputs, and real models through the CLI."""
import json
import os
import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from torch_musa.utils.doctor import native_ops, render, roofline
from torch_musa.utils.doctor.cards import card, cards
from torch_musa.utils.doctor.html_page import page
from torch_musa.utils.doctor.report import build
from torch_musa.utils.doctor.session import Session
from torch_musa.utils.doctor.syncs import MESSAGE
from torch_musa.utils.doctor.worker import run_script

SCRIPTS = Path(__file__).with_name("doctor_scripts")

TRAIN = """\
import torch
model = torch.nn.Linear(8, 4).to("musa")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    x = torch.randn(16, 8, device="musa")
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("MARK", step, loss.item())
"""

FLOAT64 = """\
import torch
x = torch.randn(4, 4, device="musa")
y = x.double()
z = y.exp()   # planted: float64 compute
print(float(z.sum()))
"""

SYNCS = """\
import torch
model = torch.nn.Linear(8, 2).to("musa")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(32, 8, device="musa")
    out = model(x)
    keep = out[out[:, 0] > 0]
    idx = torch.nonzero(out[:, 1] > 0)
    loss = out.square().mean() + keep.sum() * 0 + idx.numel() * 0
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(loss.item(), out.cpu().shape)
"""

FAILS = """\
import torch
a = torch.randn(16, 16, device="musa")
b = a @ a
huge = torch.empty(1 << 58, device="musa")
print("never reached")
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def line_of(text, needle):
    return next(i for i, l in enumerate(text.splitlines(), 1) if needle in l)


# ---- what a run reveals (in-process, on this process's profile) ----

def test_planted_float64_is_found_with_its_line(tmp_path):
    script = write(tmp_path, "f64.py", FLOAT64)
    raw = run_script(script, [], None, progress=False)
    r = build(raw, "s4000")
    site = f"{script}:{line_of(FLOAT64, 'planted')}"
    assert r["status"] == "completed"
    assert site in r["float64_sites"]
    s80 = [x for x in r["dtypes"]["s80"] if x["dtype"] == "float64"]
    assert [x["op"] for x in s80] == ["aten::exp", "aten::sum"]     # the cast only moves data
    assert s80[0]["sites"] == [site] and s80[1]["sites"] == [f"{script}:{line_of(FLOAT64, 'print')}"]
    assert all(x["double_cast_carries"] for x in s80)
    assert r["dtypes"]["s4000"] == []                     # the S4000 profile has float64
    assert "TORCH_USE_MUSA_DOUBLE_CAST=1" in r["verdicts"]["s80"]["line"]
    assert r["verdicts"]["s4000"]["ok"]


def test_sync_count_equals_sync_debug_mode(tmp_path):
    script = write(tmp_path, "syncs.py", SYNCS)
    counted = []
    before = torch.musa.get_sync_debug_mode()
    torch.musa.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            runpy.run_path(script, run_name="__main__")
        counted = [w for w in seen if str(w.message).startswith(MESSAGE)]
    finally:
        torch.musa.set_sync_debug_mode(before)
    raw = run_script(script, [], None, progress=False)
    assert raw["syncs"]["total"] == len(counted) > 0
    lines = {s["site"].rsplit(":", 1)[1] for s in raw["syncs"]["sites"]}
    assert {str(line_of(SYNCS, "keep =")), str(line_of(SYNCS, "nonzero")),
            str(line_of(SYNCS, "print("))} <= lines
    assert raw["steps_completed"] == 3 and sum(raw["syncs"]["per_step"]) == len(counted)


def test_failing_script_reports_up_to_the_failing_op(tmp_path):
    script = write(tmp_path, "fails.py", FAILS)
    raw = run_script(script, [], None, progress=False)
    r = build(raw, "s4000")
    assert r["status"] == "failed"
    assert r["failure"]["op"] == "aten::empty.memory_format"
    assert r["failure"]["site"] == f"{script}:{line_of(FAILS, 'huge')}"
    assert "aten::mm" in {o["op"] for o in r["ops"]}       # what ran before the failure is reported
    assert r["memory"]["oom"] and r["memory"]["fits"]["s80"]["fits"] is False
    assert "failed at aten::empty.memory_format" in r["verdicts"]["s4000"]["line"]


def test_steps_are_bounded_and_measured(tmp_path, capfd):
    script = write(tmp_path, "train.py", TRAIN)
    raw = run_script(script, [], 2, progress=False)
    assert raw["status"] == "step limit" and raw["steps_completed"] == 2
    assert capfd.readouterr().out.count("MARK") == 1         # stopped in the second step's opt.step()
    assert len(raw["memory"]["per_step"]) == 2
    params = 8 * 4 * 4 + 4 * 4
    assert all(s["peak_allocated"] >= params for s in raw["memory"]["per_step"])


def test_backward_ops_carry_the_line_that_called_backward(tmp_path):
    text = TRAIN.replace("torch.nn.Linear(8, 4)", "torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())")
    script = write(tmp_path, "relu.py", text)
    raw = run_script(script, [], 1, progress=False)
    sites = {x["site"] for x in raw["ops"]["aten::threshold_backward"]["sites"]}
    assert sites == {f"{script}:{line_of(text, 'loss.backward()')}"}


def test_recorded_flops_and_bytes_of_a_matmul():
    a = torch.randn(64, 32, device="musa")
    b = torch.randn(32, 16, device="musa")
    with Session([os.path.dirname(__file__)], steps_from_optimizer=False) as s:
        torch.mm(a, b)
    (call,) = [c for c in s.ops.steps[0] if c.op == "aten::mm"]
    assert call.flops == 2 * 64 * 32 * 16
    assert call.bytes == (64 * 32 + 32 * 16 + 64 * 16) * 4
    assert (call.dtype, call.kind) == ("float32", "matmul")


def test_recorded_flops_match_pytorchs_counter_for_a_training_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 14 * 14, 10))
    x = torch.randn(4, 3, 16, 16)
    with FlopCounterMode(display=False) as ref:
        model(x).sum().backward()
    model.to("musa")
    with Session([os.path.dirname(__file__)], steps_from_optimizer=False) as s:
        model(x.to("musa")).sum().backward()
    assert sum(c.flops for c in s.ops.steps[0]) == ref.get_total_flops() > 0


def test_attention_flops_on_musa():
    q = torch.randn(2, 4, 16, 8, device="musa", requires_grad=True)
    with Session([os.path.dirname(__file__)], steps_from_optimizer=False) as s:
        torch.nn.functional.scaled_dot_product_attention(q, q, q).sum().backward()
    flops = [c.flops for c in s.ops.steps[0] if c.flops]
    matmul = 2 * (2 * 4) * 16 * 16 * 8          # one (b*h) x s x s x d product
    assert flops == [2 * matmul, 5 * matmul]     # QK^T and PV; the backward's five products


# ---- the estimate and its data ----

def test_roofline_takes_the_dtypes_peak_and_the_bandwidth():
    s4000 = card("s4000")
    flops, moved = 2 * 4096 ** 3, 3 * 4096 * 4096 * 2
    e = roofline.estimate([("aten::mm", "float16", flops, moved, "matmul")], s4000)
    assert e["device_s"] == pytest.approx(flops / (100e12 * roofline.COMPUTE_EFFICIENCY))   # 100 TFLOPS FP16
    small = roofline.estimate([("aten::add.Tensor", "float32", 0, 3 * 4 << 20, "memory")], s4000)
    assert small["device_s"] == pytest.approx((3 * 4 << 20) / (768e9 * roofline.MEMORY_EFFICIENCY))
    conv = roofline.estimate([("aten::convolution", "float32", flops, 0, "matmul")], s4000)
    assert conv["device_s"] == pytest.approx(flops / (50e12 * roofline.COMPUTE_EFFICIENCY))   # TF32
    views = roofline.estimate([("aten::view", "float32", 0, 0, "view")] * 5, s4000)
    assert views["device_s"] == 0 and views["estimate_s"] == pytest.approx(5 * roofline.HOST_VIEW_S)
    many = roofline.estimate([("aten::relu", "float32", 0, 64, "memory")] * 100, s4000)
    assert many["estimate_s"] == pytest.approx(100 * roofline.HOST_S) and many["bound"].startswith("host")


def test_roofline_prices_the_host_per_kind_of_op():
    s4000 = card("s4000")
    tiny = [("aten::relu", "float32", 0, 64, "memory"), ("aten::mm", "float32", 1000, 64, "matmul"),
            ("aten::convolution", "bfloat16", 1000, 64, "matmul"),
            ("aten::convolution_backward", "bfloat16", 2000, 64, "matmul"), ("aten::view", "float32", 0, 0, "view")]
    e = roofline.estimate(tiny, s4000)
    assert e["host_s"] == pytest.approx(roofline.HOST_S + roofline.HOST_BLAS_S + 2 * roofline.HOST_DNN_S
                                        + roofline.HOST_VIEW_S)
    slow = roofline.HostCosts(op_s=50e-6, view_s=7e-6, blas_s=80e-6, dnn_s=300e-6, source="a slow host")
    e = roofline.estimate(tiny, s4000, slow)
    assert e["host_s"] == pytest.approx(50e-6 + 80e-6 + 2 * 300e-6 + 7e-6) and e["estimate_s"] == e["host_s"]
    assert "300 us per DNN-library call" in e["model"] and "a slow host" in e["model"]
    # the overload does not matter
    assert slow.of("aten::_scaled_dot_product_flash_attention_for_cpu.default") == 300e-6
    assert slow.of("aten::mm") == slow.of("aten::addmm.default") == 80e-6
    assert slow.of("aten::add.Tensor") == slow.of("aten::native_layer_norm") == 50e-6


def test_roofline_prices_layouts_and_extra_passes():
    h100 = card("h100")
    flops, moved = 2 * 16384 * 768 * 50257, 10 << 30
    plain = roofline.estimate([("aten::mm", "bfloat16", flops, 0, "matmul", "")], h100)
    unaligned = roofline.estimate([("aten::mm", "bfloat16", flops, 0, "matmul", "unaligned")], h100)
    assert unaligned["device_s"] / plain["device_s"] == pytest.approx(
        roofline.COMPUTE_EFFICIENCY / roofline.UNALIGNED_EFFICIENCY)
    bn = roofline.estimate([("aten::native_batch_norm", "float32", 0, moved, "memory")], h100)
    add = roofline.estimate([("aten::add.Tensor", "float32", 0, moved, "memory")], h100)
    assert bn["device_s"] == pytest.approx(1.5 * add["device_s"])
    nhwc = roofline.estimate([("aten::convolution", "bfloat16", flops, moved, "matmul", "")], h100)
    nchw = roofline.estimate([("aten::convolution", "bfloat16", flops, moved, "matmul", "channels_first")], h100)
    assert nchw["device_s"] - nhwc["device_s"] == pytest.approx(
        moved * roofline.TRANSPOSE_PASSES / (3350e9 * roofline.MEMORY_EFFICIENCY))
    rgb = roofline.estimate([("aten::convolution", "bfloat16", flops, 0, "matmul", "unaligned")], h100)
    assert rgb["device_s"] == pytest.approx(flops / (66.9e12 * roofline.COMPUTE_EFFICIENCY))    # FP32 peak


def test_recorder_notes_unaligned_matmuls_and_nchw_convolutions():
    with Session([os.path.dirname(__file__)], steps_from_optimizer=False) as s:
        a = torch.randn(8, 64, device="musa", dtype=torch.bfloat16)
        a @ torch.randn(64, 64, device="musa", dtype=torch.bfloat16)
        a @ torch.randn(64, 50257 % 64, device="musa", dtype=torch.bfloat16)
        a.float() @ torch.randn(64, 17, device="musa")
        x = torch.randn(2, 8, 6, 6, device="musa", dtype=torch.bfloat16)
        w = torch.randn(8, 8, 3, 3, device="musa", dtype=torch.bfloat16)
        torch.nn.functional.conv2d(x, w)
        torch.nn.functional.conv2d(x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last))
        torch.nn.functional.conv2d(x[:, :3], w[:, :3])       # an RGB input's 3 channels
    mms = [c.layout for c in s.ops.steps[0] if c.op == "aten::mm"]
    convs = [c.layout for c in s.ops.steps[0] if c.op.startswith("aten::convolution")]
    assert mms == ["", "unaligned", ""]         # fp32 GEMMs have no tensor-core alignment rule here
    assert convs == ["channels_first", "", "unaligned channels_first"]

def test_unpublished_peaks_are_stated_assumptions():
    table, said = roofline.peaks(card("s80"))
    assert table["fp16"] == table["fp32"] == 14.4
    assert any("fp16" in s and "not published" in s for s in said)
    h200, said = roofline.peaks(card("h200"))
    assert h200["bf16"] == 989.5 and not [s for s in said if "bf16" in s]


def test_cards_join_the_profiles():
    assert card("MTT S80").unsupported_dtypes == [torch.bfloat16, torch.float64, torch.complex128]
    assert card("s4000").memory_bytes == 48 << 30
    assert card("h200").profile == "s5000" and not card("h200").is_musa
    assert card("H100").bandwidth_gbs == 3350 and card("h100").tflops["bf16"] == 989.4
    with pytest.raises(ValueError, match="unknown card 'a100'.*s80.*s4000.*h100"):
        card("a100")
    assert all(c.source and c.date for c in cards().values())


def test_native_ops_table():
    assert native_ops.latest() == "v2.7.1" and "v1.2.1" in native_ops.releases()
    assert native_ops.is_native("aten::mm", "v2.7.1")
    assert native_ops.is_native("aten::add.Tensor", "v2.7.1")     # its structured group's .out kernel
    assert not native_ops.is_native("aten::no_such_op", "v2.7.1")
    with pytest.raises(ValueError, match="unknown torch_musa release 'v9'"):
        native_ops.is_native("aten::mm", "v9")


# ---- outputs ----

@pytest.fixture(scope="module")
def train_report(tmp_path_factory):
    script = write(tmp_path_factory.mktemp("doctor"), "train.py", TRAIN)
    return build(run_script(script, [], 3, progress=False), "s4000")


def test_text_ends_with_one_verdict_per_card(train_report):
    tail = render.text(train_report).rstrip().splitlines()[-3:]
    assert [l.split(":")[0] for l in tail] == ["MTT S80", "MTT S4000", "MTT S5000"]
    assert all(" ms/step " in l and "runs" in l for l in tail)


def test_markdown_json_and_offline_html(train_report):
    md = render.markdown(train_report)
    assert "## Verdict" in md and "| aten::addmm |" in md
    assert json.loads(json.dumps(train_report))["verdicts"].keys() == train_report["verdicts"].keys()
    html = page(train_report)
    assert html.count('src="data:image/png;base64,') == 2
    assert "<script" not in html and "http://" not in html and "https://" not in html


def test_memory_fits_every_card_for_a_small_model(train_report):
    m = train_report["memory"]
    assert 0 < m["peak_allocated"] <= m["peak_reserved"]
    assert all(f["fits"] for f in m["fits"].values())


@pytest.mark.parametrize("args, message", [
    (["--profile", "a100"], "unknown card 'a100': musa-doctor knows s80, s4000, s5000, h200, h100"),
    (["--release", "v0.1"], "unknown torch_musa release 'v0.1'"),
    (["--max-steps", "-1"], "--max-steps must be 0 (no limit) or a positive number, got -1"),
])
def test_cli_bad_input_names_what_is_wrong(tmp_path, capsys, args, message):
    from torch_musa.utils.doctor.cli import main
    assert main([*args, write(tmp_path, "t.py", TRAIN)]) == 2
    assert message in capsys.readouterr().err


def test_cli_missing_script(tmp_path, capsys):
    from torch_musa.utils.doctor.cli import main
    assert main([str(tmp_path / "nope.py")]) == 2
    assert "no such script" in capsys.readouterr().err


# ---- the command, in fresh interpreters, and real models ----

def doctor(tmp_path, *args):
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "torch_musa.utils.doctor", "--quiet", "--json", str(out), *args],
                          capture_output=True, text=True, timeout=600)
    return proc, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.slow
def test_cli_s80_fails_at_the_planted_float64_line(tmp_path):
    script = write(tmp_path, "f64.py", FLOAT64)
    proc, r = doctor(tmp_path, "--profile", "s80", script)
    assert proc.returncode == 1
    site = f"{script}:{line_of(FLOAT64, 'planted')}"
    assert r["failure"]["op"] == "aten::exp" and r["failure"]["site"] == site
    assert r["dtypes"]["s80"] == [{"op": "aten::exp", "dtype": "float64", "sites": [site],
                                   "double_cast_carries": True}]
    assert proc.stdout.rstrip().splitlines()[-3].startswith("MTT S80: the run failed at aten::exp")


@pytest.mark.slow
def test_cli_model_too_big_for_the_card_does_not_fit(tmp_path):
    # 6 x 1024x1024 float32 weights (24 MiB) and their grads and momentum: more than 32 MiB.
    script = write(tmp_path, "big.py", TRAIN.replace("torch.nn.Linear(8, 4)", "torch.nn.Sequential("
                                                     "*[torch.nn.Linear(1024, 1024) for _ in range(6)])")
                   .replace("randn(16, 8", "randn(16, 1024").replace("lr=0.1", "lr=0.1, momentum=0.9"))
    proc, r = doctor(tmp_path, "--profile", "s80", "--device-memory", "32MB", script)
    assert proc.returncode == 1 and r["memory"]["oom"]
    assert r["memory"]["fits"]["s80"] == {"capacity": 32 << 20, "fits": False, "reason": "out of memory"}
    assert "does not fit" in r["verdicts"]["s80"]["line"]


@pytest.mark.slow
def test_cli_reports_a_run_whose_interpreter_died(tmp_path):
    script = write(tmp_path, "dies.py", TRAIN.replace('    print("MARK", step, loss.item())',
                                                      '    if step == 1:\n        import os; os._exit(3)'))
    proc, r = doctor(tmp_path, "--max-steps", "4", script)
    assert proc.returncode == 1 and r["status"] == "failed" and r["steps_completed"] == 2
    assert r["error"]["message"] == "the interpreter died after step 2 (exit status 3)"
    assert "aten::addmm" in {o["op"] for o in r["ops"]} and len(r["memory"]["per_step"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("script, must_have", [
    ("gpt2_hf.py", {"aten::addmm", "aten::bmm", "aten::embedding"}),
    ("resnet18_hf.py", {"aten::convolution", "aten::convolution_backward"}),
    ("lstm_lm.py", {"aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl"}),
])
def test_cli_on_real_models_written_for_cuda(tmp_path, script, must_have):
    proc, r = doctor(tmp_path, "--max-steps", "2", str(SCRIPTS / script))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert r["status"] == "step limit" and r["steps_completed"] == 2
    ops = {o["op"] for o in r["ops"]}
    assert must_have <= ops, sorted(ops)
    assert r["converter"]["rewrites"]                       # CUDA code, run unmodified through cuda_compat
    e = r["estimates"]["s4000"]
    assert e["estimate_s"] > 0 and e["flops"] > 0
    assert all(v["ok"] for v in r["verdicts"].values())


@pytest.mark.slow
def test_importing_the_doctor_leaves_cuda_compat_off(subpython):
    # Importing torch_musa.cuda_compat turns it on (it patches torch.cuda and torch.amp):
    # the doctor turns it on only in the script's own interpreter.
    r = subpython("""
        import sys, torch, torch_musa
        import torch_musa.utils.doctor, torch_musa.utils.doctor.session, torch_musa.utils.doctor.report
        # torch.cuda's own is_available, not the compat layer's stand-in
        print("torch_musa.cuda_compat" in sys.modules, torch.cuda.is_available.__module__)
    """, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["False", "torch.cuda"]


# ---- benchmarks/doctor_validate.py's host calibration and re-pricing (no device needed) ----

def test_host_costs_from_calibration_timings():
    from tests.conftest import load_benchmark

    dv = load_benchmark("doctor_validate")
    counts = {"mlp": {"ops": 40, "views": 20, "convolutions": 0},
              "conv": {"ops": 30, "views": 20, "convolutions": 6}}
    per_op = 50e-6
    view = per_op * roofline.HOST_VIEW_S / roofline.HOST_S
    # convolutions 100 us dearer than the other ops
    issued = {"mlp": 40 * per_op + 20 * view, "conv": 30 * per_op + 20 * view + 6 * 100e-6}
    costs, info = dv.host_costs_from(counts, issued)
    assert costs.op_s == pytest.approx(per_op) and costs.blas_s == costs.op_s
    assert costs.view_s == pytest.approx(view) and costs.dnn_s == pytest.approx(per_op + 100e-6)
    # cheaper convolutions are never priced below another op; the first runs' counts read alike
    old = {"mlp": {"ops": 30, "library": 10, "views": 20}, "conv": {"ops": 24, "library": 6, "views": 20}}
    cheap = dv.host_costs_from(old, {"mlp": issued["mlp"], "conv": 30 * per_op * 0.5})[0]
    assert cheap.op_s == pytest.approx(per_op) and cheap.dnn_s == cheap.op_s


def test_reprice_prices_a_saved_run_again(tmp_path):
    import json

    from tests.conftest import load_benchmark

    dv = load_benchmark("doctor_validate")
    counts = {"mlp": {"ops": 40, "views": 0, "convolutions": 0}, "conv": {"ops": 30, "views": 0, "convolutions": 6}}
    run = {"host_calibration": {"counts": counts, "issued_s": {"mlp": 40 * 30e-6, "conv": 30 * 30e-6}},
           "rows": [{"model": "m", "measured_s": 0.01, "device_s": 0.002, "launching_ops": 100, "view_ops": 50,
                     "host_classes": {"blas": 10, "dnn": 5}, "top_ops": []},
                    {"model": "old", "measured_s": 0.01, "device_s": 0.05, "launching_ops": 10, "view_ops": 0,
                     "top_ops": [{"op": "aten::mm", "calls": 4}, {"op": "aten::convolution", "calls": 2}]}]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    new, old = dv.reprice(str(path))
    view = 30e-6 * roofline.HOST_VIEW_S / roofline.HOST_S
    assert new["calibrated"]["host_s"] == pytest.approx(100 * 30e-6 + 50 * view)
    assert new["constants"]["host_s"] == pytest.approx(85 * roofline.HOST_S + 10 * roofline.HOST_BLAS_S
                                                       + 5 * roofline.HOST_DNN_S + 50 * roofline.HOST_VIEW_S)
    assert new["calibrated"]["error"] == pytest.approx(new["calibrated"]["host_s"] / 0.01 - 1)
    assert (old["blas"], old["dnn"], old["other"]) == (4, 2, 4)
    assert old["constants"]["estimate_s"] == 0.05          # device-bound: the device part stands
