"""Validate musa-doctor's step-time estimate against measured step times.

Run on a machine with an NVIDIA GPU, under the cuda driver (the card comes from the
GPU's name: H100 -> h100, H200 -> h200; --card overrides it):

    TORCH_MUSA_DRIVER=cuda python benchmarks/doctor_validate.py --json RESULTS.json

For GPT-2 small (HF, batch 16 x 1024, bf16 autocast, fused AdamW), ResNet-18
(HF ResNet, basic blocks, batch 64 x 224^2, bf16 autocast, SGD momentum) and a
2-layer LSTM language model (650 wide, vocab 10,000, bptt 35, batch 20, fp32,
clipped SGD), all on musa: warm up, record one training step with musa-doctor's
session, estimate it on --card with the roofline model, then time --steps steps
without the session. Prints estimate, band, measured time and the error per model
(goal: within +-30 %), the estimate's device and host parts, the ops that dominate
it, and GPT-2's recorded FLOPs against 6 x parameters x tokens; --json writes it all. ``--small`` shrinks every model
so the script runs on the host driver (a smoke test; its times mean nothing).
``--calibrate-host`` first measures this host's cost per op and per DNN-library call on two
tiny training steps and prices the estimates' host part at those instead of the constants
(a slower host CPU issues the same ops more slowly); both errors are printed.
``--reprice RESULTS.json`` prices a saved run's rows again under today's host model,
without a device.
``--native`` also times each step on native cuda, in a process without torch_musa: what
the GPU itself takes, against which musa's own overhead shows, and how long the host
took to issue it (with ``--profile-dir``, native's per-op host costs as well).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

import torch

# The native-cuda worker (--native) must not import torch_musa: with a PrivateUse1 backend
# registered, PyTorch's autograd engine cannot run a CUDA backward (pytorch/pytorch#161129).
NATIVE_WORKER = "--native-worker" in sys.argv
if NATIVE_WORKER:
    sys.modules["torch_musa"] = None  # transformers imports it when it finds it installed
else:
    from torch_musa.utils.doctor import roofline
    from torch_musa.utils.doctor.cards import card, cards
    from torch_musa.utils.doctor.session import Session

DEVICE = "cuda" if NATIVE_WORKER else "musa"


def _bf16_step(model, opt, **inputs):
    """One training step of a Hugging Face model under bf16 autocast."""
    def step():
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = model(**inputs).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def gpt2(small: bool):
    from transformers import GPT2Config, GPT2LMHeadModel
    batch, seq = (2, 64) if small else (16, 1024)
    cfg = GPT2Config(n_positions=seq, **({"n_layer": 2, "n_embd": 128, "n_head": 4} if small else {}))
    model = GPT2LMHeadModel(cfg).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=DEVICE)
    return _bf16_step(model, opt, input_ids=ids, labels=ids)


def resnet18(small: bool):
    from transformers import ResNetConfig, ResNetForImageClassification
    batch, size = (2, 64) if small else (64, 224)
    cfg = ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512],
                       embedding_size=64, num_labels=1000)
    model = ResNetForImageClassification(cfg).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, size, size, device=DEVICE)
    y = torch.randint(0, 1000, (batch,), device=DEVICE)
    return _bf16_step(model, opt, pixel_values=x, labels=y)


def lstm_lm(small: bool):
    vocab, hidden, bptt, batch = (1000, 64, 8, 4) if small else (10000, 650, 35, 20)
    embed = torch.nn.Embedding(vocab, hidden)
    rnn = torch.nn.LSTM(hidden, hidden, num_layers=2, dropout=0.5)
    decoder = torch.nn.Linear(hidden, vocab)
    model = torch.nn.ModuleList([embed, rnn, decoder]).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    data = torch.randint(0, vocab, (bptt + 1, batch), device=DEVICE)

    def step():
        out, _ = rnn(embed(data[:-1]))
        loss = torch.nn.functional.cross_entropy(decoder(out).view(-1, vocab), data[1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


MODELS = {"gpt2-small": gpt2, "resnet18": resnet18, "lstm-lm": lstm_lm}


def _mlp_step():
    """A tiny eager training step that mixes library calls and other ops as models do:
    4 x (Linear 64, LayerNorm, GELU) on 32 x 64."""
    torch.manual_seed(0)
    layers = [m for _ in range(4) for m in (torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.GELU())]
    model = torch.nn.Sequential(*layers).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64, device=DEVICE)

    def step():
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def _conv_step():
    """The same around three 16-channel 3x3 convolutions on 16x16 images, bf16 autocast."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 16, 3, padding=1)).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4, 16, 16, 16, device=DEVICE)

    def step():
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            y = model(x)
        y.float().square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def calibrate_host(rounds: int = 5, steps: int = 50) -> tuple["roofline.HostCosts", dict]:
    """This host's costs per op, measured on two tiny training steps (neither of the
    validated models) whose kernels the device finishes faster than the host issues them
    (the rule: :func:`host_costs_from`)."""
    counts, issued = {}, {}
    for name, make in (("mlp", _mlp_step), ("conv", _conv_step)):
        step = make()
        calls = recorded_step(step, warmup=3)
        counts[name] = {"ops": sum(c.kind != "view" for c in calls), "views": sum(c.kind == "view" for c in calls),
                        "convolutions": sum(c.kind != "view" and c.op.startswith("aten::convolution")
                                            for c in calls)}
        issued[name] = sorted(measure(step, steps)[1] for _ in range(rounds))[rounds // 2]
    return host_costs_from(counts, issued)


def host_costs_from(counts: dict, issued: dict) -> tuple["roofline.HostCosts", dict]:
    """Per launching op, BLAS calls included: the MLP's issue time over its ops (a view
    counted at the constants' view/op ratio); per DNN-library call: what the convolution
    step's convolutions take beyond that rate (at least the rate). ``counts`` as
    :func:`calibrate_host` takes them; the first runs' JSON (2026-12-06, runs 4 and 5)
    counted a step's library calls apart from its other ops, which is read too."""
    def norm(c: dict, conv: bool) -> dict:
        if "convolutions" in c:
            return c
        return {"ops": c["ops"] + c["library"], "views": c["views"], "convolutions": c["library"] if conv else 0}
    m, c = norm(counts["mlp"], False), norm(counts["conv"], True)
    view_ratio = roofline.HOST_VIEW_S / roofline.HOST_S
    op_s = issued["mlp"] / (m["ops"] + view_ratio * m["views"])
    beyond = issued["conv"] - op_s * (c["ops"] + view_ratio * c["views"])
    dnn_s = op_s + beyond / max(c["convolutions"], 1)
    costs = roofline.HostCosts(op_s=op_s, view_s=op_s * view_ratio, blas_s=op_s, dnn_s=max(dnn_s, op_s),
                               source="this host, measured (doctor_validate.py --calibrate-host)")
    return costs, {"counts": counts, "issued_s": issued, "op_us": op_s * 1e6, "dnn_us": dnn_s * 1e6,
                   "view_us": op_s * view_ratio * 1e6}


def reprice(path: str) -> list[dict]:
    """A saved run's rows priced again under today's host model: its device part and op
    counts as recorded, the host at its own calibration (if it has one) and at the
    constants. Counts of BLAS and DNN-library calls come from the row's ``host_classes``,
    or, in runs saved before it, from its ``top_ops`` (the twelve costliest ops)."""
    with open(path) as f:
        run = json.load(f)
    measured_costs = host_costs_from(run["host_calibration"]["counts"],
                                     run["host_calibration"]["issued_s"])[0] if run.get("host_calibration") else None
    rows = []
    for r in run["rows"]:
        if "host_classes" in r:
            blas, dnn = r["host_classes"]["blas"], r["host_classes"]["dnn"]
        else:
            blas = sum(o["calls"] for o in r["top_ops"] if roofline.host_class(o["op"]) == "blas")
            dnn = sum(o["calls"] for o in r["top_ops"] if roofline.host_class(o["op"]) == "dnn")
        other = r["launching_ops"] - blas - dnn
        row = {"model": r["model"], "measured_s": r["measured_s"], "device_s": r["device_s"],
               "blas": blas, "dnn": dnn, "other": other, "views": r["view_ops"]}
        for name, hc in (("calibrated", measured_costs), ("constants", roofline.HostCosts())):
            if hc is None:
                continue
            host = other * hc.op_s + blas * hc.blas_s + dnn * hc.dnn_s + r["view_ops"] * hc.view_s
            estimate = max(r["device_s"], host)
            row[name] = {"host_s": host, "estimate_s": estimate, "error": estimate / r["measured_s"] - 1}
        rows.append(row)
    return rows


def recorded_step(step, warmup: int) -> list:
    """The op calls of one ``step`` after ``warmup`` unrecorded ones, as musa-doctor's
    session records them."""
    for _ in range(warmup):
        step()
    with Session([os.path.dirname(os.path.abspath(__file__))], steps_from_optimizer=False) as s:
        step()
    return s.ops.steps[0]


def measure(step, steps: int) -> tuple[float, float]:
    """Seconds per step, and the host's share: the time to issue the steps before the
    final synchronize (the whole time when the host is the bound)."""
    sync = torch.cuda.synchronize if NATIVE_WORKER else torch.musa.synchronize
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    issued = time.perf_counter() - t0
    sync()
    return (time.perf_counter() - t0) / steps, issued / steps


def profile_table(step, path: str) -> None:
    """torch.profiler's tables of two steps: CPU time per op (the host cost the model
    prices at HOST_S) and device time per kernel."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        for _ in range(2):
            step()
        (torch.cuda.synchronize if NATIVE_WORKER else torch.musa.synchronize)()
    ka = prof.key_averages()
    with open(path, "w") as f:
        f.write(ka.table(sort_by="self_cpu_time_total", row_limit=40) + "\n")
        if len(activities) > 1:
            f.write(ka.table(sort_by="self_device_time_total", row_limit=30) + "\n")


def card_of_gpu(name: str) -> str:
    """The card whose key the GPU's name (``torch.musa.get_device_name()``) contains:
    "NVIDIA H100 80GB HBM3" -> h100, "NVIDIA H200" -> h200, "MTT S4000" -> s4000."""
    squeezed = name.lower().replace(" ", "")
    found = [key for key in cards() if key in squeezed]
    if len(found) != 1:
        raise SystemExit(f"no card for the GPU {name!r}: pass --card, one of {', '.join(cards())}")
    return found[0]


def gpt2_flops_check(model_flops: int, small: bool) -> dict:
    """The 6·N·tokens rule (N without the position table, the tied LM head counted once)
    plus attention's 14·layers·tokens·seq·width (the forward's two products, the
    backward's five), against the FLOPs the recorder counted."""
    from transformers import GPT2Config, GPT2LMHeadModel
    batch, seq = (2, 64) if small else (16, 1024)
    cfg = GPT2Config(n_positions=seq, **({"n_layer": 2, "n_embd": 128, "n_head": 4} if small else {}))
    with torch.device("meta"):
        n = sum(p.numel() for p in GPT2LMHeadModel(cfg).parameters()) - cfg.n_positions * cfg.n_embd
    tokens = batch * seq
    rule = 6 * n * tokens + 14 * cfg.n_layer * tokens * seq * cfg.n_embd
    return {"params": n, "tokens": tokens, "rule_flops": rule, "recorded_flops": model_flops,
            "recorded_over_rule": model_flops / rule}


def native_step_time(name: str, warmup: int, steps: int, profile_dir: str | None) -> dict:
    """The same step on native cuda, in a process without torch_musa: seconds per step
    and the host's issue time (``measured_s``, ``issued_s``); with ``profile_dir``, its
    profile tables too (``..._profile_native.txt``: native per-op host costs)."""
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}  # torch would load torch_musa itself
    cmd = [sys.executable, os.path.abspath(__file__), "--native-worker", "--models", name,
           "--warmup", str(warmup), "--steps", str(steps)]
    proc = subprocess.run(cmd + (["--profile-dir", profile_dir] if profile_dir else []),
                          capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"the native-cuda worker for {name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def validate(name: str, card_key: str, small: bool, warmup: int, steps: int, profile_dir: str | None,
             native: bool = False, host_costs: "roofline.HostCosts | None" = None) -> dict:
    step = MODELS[name](small)
    calls = recorded_step(step, warmup)
    constants = roofline.estimate(calls, card(card_key))
    e = roofline.estimate(calls, card(card_key), host_costs) if host_costs else constants
    measured, issued = measure(step, steps)
    if profile_dir:
        os.makedirs(profile_dir, exist_ok=True)
        profile_table(step, os.path.join(profile_dir, f"doctor_validate_{name}_profile.txt"))
    r = {"model": name, "card": card_key, "estimate_s": e["estimate_s"], "low_s": e["low_s"],
         "high_s": e["high_s"], "device_s": e["device_s"], "host_s": e["host_s"], "measured_s": measured,
         "issued_s": issued,
         "error": e["estimate_s"] / measured - 1, "in_band": e["low_s"] <= measured <= e["high_s"],
         "host_costs": dataclasses.asdict(host_costs or roofline.HostCosts()),
         "constants_estimate_s": constants["estimate_s"], "constants_error": constants["estimate_s"] / measured - 1,
         "flops": e["flops"], "bytes": e["bytes"],
         "launching_ops": sum(c.kind != "view" for c in calls), "view_ops": sum(c.kind == "view" for c in calls),
         # what the host part prices, so that a saved run can be priced again under other costs
         "host_classes": {k: sum(c.kind != "view" and roofline.host_class(c.op) == k for c in calls)
                          for k in ("blas", "dnn")},
         "layouts": {k: sum(c.layout == k for c in calls) for k in ("unaligned", "channels_first")},
         "model_text": e["model"],
         "top_ops": [{"op": o["op"], "calls": o["calls"], "ms": round(o["time_s"] * 1e3, 3),
                      "gflop": round(o["flops"] / 1e9, 1), "mb": round(o["bytes"] / 1e6, 1),
                      "compute_bound_calls": o["compute_bound"]} for o in e["ops"][:12]]}
    if native:
        got = native_step_time(name, warmup, steps, profile_dir)
        r["native_s"], r["native_issued_s"] = got["measured_s"], got["issued_s"]
    if name == "gpt2-small":
        r["flops_check"] = gpt2_flops_check(e["flops"], small)
    return r


def show(r: dict) -> None:
    """The estimate's parts, for diagnosing a miss."""
    print(f"    device {r['device_s'] * 1e3:.2f} ms, host {r['host_s'] * 1e3:.2f} ms "
          f"({r['launching_ops']} launching ops, {r['view_ops']} views), measured {r['measured_s'] * 1e3:.2f} ms "
          f"(host issued it in {r['issued_s'] * 1e3:.2f} ms); "
          f"{r['flops'] / 1e12:.2f} TFLOP, {r['bytes'] / 1e9:.2f} GB; layouts {r['layouts']}")
    for o in r["top_ops"][:8]:
        print(f"      {o['op']:<40} {o['calls']:>5} calls {o['ms']:>9.3f} ms  {o['gflop']:>9.1f} GFLOP "
              f"{o['mb']:>9.1f} MB")
    if r["constants_estimate_s"] != r["estimate_s"]:
        print(f"    with the constants' host costs: {r['constants_estimate_s'] * 1e3:.2f} ms "
              f"({r['constants_error'] * 100:+.1f} %)")
    if "native_s" in r:
        print(f"    native cuda: {r['native_s'] * 1e3:.2f} ms, issued in {r['native_issued_s'] * 1e3:.2f} ms "
              f"(musa/native {r['measured_s'] / r['native_s']:.3f}; "
              f"estimate vs native {(r['estimate_s'] / r['native_s'] - 1) * 100:+.1f} %)")
    if "flops_check" in r:
        f = r["flops_check"]
        print(f"    FLOPs recorded {f['recorded_flops'] / 1e12:.2f} T vs 6*N*tokens + attention "
              f"{f['rule_flops'] / 1e12:.2f} T (N={f['params'] / 1e6:.1f} M): x{f['recorded_over_rule']:.3f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--card", help="the card whose peaks the estimate uses (default: the GPU's own, by name)")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--small", action="store_true", help="tiny models, for the host driver")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--profile-dir", help="also write torch.profiler tables of two steps per model here")
    p.add_argument("--calibrate-host", action="store_true",
                   help="price the host at this machine's costs per op, measured first (else the constants)")
    p.add_argument("--native", action="store_true",
                   help="also time each step on native cuda (a worker process without torch_musa)")
    p.add_argument("--native-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--reprice", metavar="RESULTS_JSON",
                   help="price a saved run's rows again under today's host model (no device needed)")
    a = p.parse_args(argv)
    if a.reprice:
        print(f"{'model':<12} {'blas':>5} {'dnn':>4} {'other':>6} {'views':>6} {'measured':>10}  "
              f"{'calibrated':>22}  {'constants':>22}")
        for r in reprice(a.reprice):
            cells = [f"{r[k]['estimate_s'] * 1e3:>9.2f}ms {r[k]['error'] * 100:>+7.1f}%" if k in r else "—"
                     for k in ("calibrated", "constants")]
            print(f"{r['model']:<12} {r['blas']:>5} {r['dnn']:>4} {r['other']:>6} {r['views']:>6} "
                  f"{r['measured_s'] * 1e3:>8.2f}ms  {cells[0]:>22}  {cells[1]:>22}")
        return 0
    if a.native_worker:
        step = MODELS[a.models](a.small)
        for _ in range(a.warmup):
            step()
        measured, issued = measure(step, a.steps)
        if a.profile_dir:
            os.makedirs(a.profile_dir, exist_ok=True)
            profile_table(step, os.path.join(a.profile_dir, f"doctor_validate_{a.models}_profile_native.txt"))
        print(json.dumps({"model": a.models, "measured_s": measured, "issued_s": issued}))
        return 0
    gpu = torch.musa.get_device_name()
    if a.card is None:
        a.card = card_of_gpu(gpu)
    card(a.card)        # an unknown --card stops here, naming the known ones
    print(f"GPU: {gpu}; card: {a.card} ({card(a.card).name}, {card(a.card).bandwidth_gbs:g} GB/s, "
          f"bf16 {card(a.card).tflops.get('bf16')} TFLOPS)")
    rows, host_costs, calibration = [], None, None
    if a.calibrate_host:
        host_costs, calibration = calibrate_host()
        print(f"host, measured: {calibration['op_us']:.1f} us per op (BLAS calls too), {calibration['dnn_us']:.1f} us "
              f"per convolution, {calibration['view_us']:.1f} us per view ({calibration['counts']})")
    print(f"{'model':<12} {'estimate':>10} {'band':>21} {'measured':>10} {'error':>8}  bound")
    for name in a.models.split(","):
        if name not in MODELS:
            sys.exit(f"unknown model {name!r}: choose from {', '.join(MODELS)}")
        r = validate(name, a.card, a.small, a.warmup, a.steps, a.profile_dir, a.native, host_costs)
        rows.append(r)
        bound = "host" if r["host_s"] > r["device_s"] else "device"
        band = f"{r['low_s'] * 1e3:.2f}-{r['high_s'] * 1e3:.2f}ms"
        print(f"{name:<12} {r['estimate_s'] * 1e3:>8.2f}ms {band:>21} {r['measured_s'] * 1e3:>8.2f}ms "
              f"{r['error'] * 100:>+7.1f}%  {bound}", flush=True)
        show(r)
    worst = max(abs(r["error"]) for r in rows)
    print(f"largest error {worst * 100:.1f} % (goal: within 30 %) on {a.card}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": gpu, "card": a.card, "torch": torch.__version__, "host_calibration": calibration,
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
