"""musa (host driver) against the CPU device, side by side in one run.

Small ops measure the dispatch overhead of the device (10,000-call loops on
64x64 tensors); large ops and training steps measure whether the overhead
disappears behind real work; the recurrent steps (nn.LSTM/GRU/RNN, 2 layers of
256, sequence 35, batch 20, forward + backward + SGD, and variants: one or three
layers, bidirectional, packed, inference) measure per-timestep cost; the autocast
ops (a 64x64 mm and softmax in a bf16 region) the per-op cost of autocast's policy; the optimizer
steps (AdamW over 148 small parameters) the cost per tensor of a list op. Each figure is the median of several repeats,
and the two devices alternate so that machine noise hits both alike.

    python benchmarks/bench_device.py [--repeats 7] [--kinds rnn] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import torch_musa  # noqa: F401
from torch_musa.testing.models import SmallCNN, SmallTransformer

# small: the performance issue's 1.15 (the registry issue's was 1.25, the foundation's 1.5);
# amp: a small op's, for a small op under autocast
# nn: a layer's small op (NN_OPS), held to a small op's target
TARGETS = {"small": 1.15, "amp": 1.15, "nn": 1.15, "large": 1.05, "train": 1.05, "rnn": 1.10, "optim": 1.15}


def small_op(name: str, device: str, calls: int):
    a = torch.randn(64, 64, device=device)
    b = torch.randn(64, 64, device=device)
    fn = {
        "add": lambda: torch.add(a, b),
        "mul": lambda: torch.mul(a, b),
        "relu": lambda: torch.relu(a),
        "add_ (in-place)": lambda: a.add_(b),
    }[name]

    def run():
        for _ in range(calls):
            fn()
    return run


NN_OPS = ("upsample_nearest2d backward", "upsample_bilinear2d backward", "glu", "reflection_pad2d",
          "log_sigmoid", "huber_loss", "adaptive_max_pool2d", "pixel_shuffle", "grid_sampler_2d")


def nn_op(name: str, device: str, calls: int):
    """A layer's op on a 1x4x8x8 activation, of those that took the boxed fallback until
    2026-12-07 (the OpInfo and module_db sweeps counted them): now registry entries."""
    F = torch.nn.functional
    x = torch.randn(1, 4, 8, 8, device=device)
    grid = torch.rand(1, 8, 8, 2, device=device) * 2 - 1
    fn = {
        "upsample_nearest2d backward": lambda: torch.ops.aten.upsample_nearest2d_backward(
            x, [8, 8], [1, 4, 4, 4]),
        "upsample_bilinear2d backward": lambda: torch.ops.aten.upsample_bilinear2d_backward(
            x, [8, 8], [1, 4, 4, 4], False),
        "glu": lambda: F.glu(x, 1),
        "reflection_pad2d": lambda: F.pad(x, (1, 1, 1, 1), mode="reflect"),
        "log_sigmoid": lambda: F.logsigmoid(x),
        "huber_loss": lambda: F.huber_loss(x, grid[..., 0].expand_as(x)),
        "adaptive_max_pool2d": lambda: F.adaptive_max_pool2d(x, 2),
        "pixel_shuffle": lambda: F.pixel_shuffle(x, 2),
        "grid_sampler_2d": lambda: F.grid_sample(x, grid, align_corners=False),
    }[name]

    def run():
        for _ in range(calls):
            fn()
    return run


def autocast_op(name: str, device: str, calls: int):
    """A 64x64 op inside a bf16 autocast region: the region's per-op cast policy
    (musa's: csrc/aten/autocast_kernels.cpp; the CPU device's: ATen's) on top of
    the op. ``mm`` runs in bfloat16 under both devices' policies, ``softmax`` in float32."""
    a = torch.randn(64, 64, device=device)
    b = torch.randn(64, 64, device=device)
    fn = {"mm": lambda: torch.mm(a, b), "softmax": lambda: torch.softmax(a, -1)}[name]

    def run():
        with torch.autocast(device, dtype=torch.bfloat16):
            for _ in range(calls):
                fn()
    return run


def large_op(name: str, device: str):
    if name == "matmul 1024²":
        a, b = torch.randn(1024, 1024, device=device), torch.randn(1024, 1024, device=device)
        return lambda: torch.mm(a, b)
    x = torch.randn(8, 64, 56, 56, device=device)
    w = torch.randn(64, 64, 3, 3, device=device)
    return lambda: torch.nn.functional.conv2d(x, w, padding=1)


def train_step(name: str, device: str):
    torch.manual_seed(0)
    model = (SmallCNN() if name == "cnn step" else SmallTransformer()).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    if name == "cnn step":
        x = torch.randn(32, 3, 32, 32, device=device)
    else:
        x = torch.randint(0, 100, (32, 16), device=device)
    y = torch.randint(0, 10, (32,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
    return step


RNN_MODULES = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}
# The shapes the recurrent-layers issue names: 1-3 layers, bidirectional, packed
# sequences, training and inference; each a variant of word_language_model's
# 2 layers of 256, sequence 35, batch 20.
RNN_VARIANTS = {
    "step": {},
    "1 layer": {"num_layers": 1},
    "3 layers": {"num_layers": 3},
    "bidir": {"bidirectional": True},
    "packed": {"packed": True},
    "inference": {"train": False},
}


def rnn_step(module: str, variant: str, device: str):
    """Forward + backward + SGD (or a no-grad forward for inference)."""
    torch.manual_seed(0)
    opts = dict(RNN_VARIANTS[variant])
    train = opts.pop("train", True)
    packed = opts.pop("packed", False)
    opts.setdefault("num_layers", 2)
    model = RNN_MODULES[module](256, 256, **opts).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(35, 20, 256, device=device)
    lengths = torch.randint(5, 36, (20,), generator=torch.Generator().manual_seed(0))
    lengths[0] = 35

    def inputs():
        if not packed:
            return x
        return torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)

    def step():
        opt.zero_grad(set_to_none=True)
        out, _ = model(inputs())
        if packed:
            out = out.data
        out.sum().backward()
        opt.step()

    def infer():
        with torch.no_grad():
            model(inputs())
    return step if train else infer


def optimizer_step(name: str, device: str):
    """GPT-2 small's 148 parameter tensors, made small (64 floats each) so that the
    step's per-tensor overhead shows: five lists of 148 arguments in one op."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(64, device=device)) for _ in range(148)]
    for p in params:
        p.grad = torch.randn_like(p)
    kind = {"adamw fused": {"fused": True}, "adamw foreach": {"foreach": True}}[name]
    opt = torch.optim.AdamW(params, lr=1e-3, **kind)
    return opt.step


def sync(device: str) -> None:
    if device != "cpu":
        torch.accelerator.synchronize()


def measure(make, repeats: int, inner: int) -> dict[str, float]:
    """Median seconds per call on each device, alternating musa and cpu."""
    runs = {dev: make(dev) for dev in ("musa", "cpu")}
    times = {dev: [] for dev in runs}
    for dev, fn in runs.items():  # warm-up
        fn(); sync(dev)
    for _ in range(repeats):
        for dev, fn in runs.items():
            sync(dev)
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            sync(dev)
            times[dev].append((time.perf_counter() - t0) / inner)
    return {dev: statistics.median(v) for dev, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--kinds", nargs="+", choices=sorted(TARGETS), default=sorted(TARGETS),
                    help="the kinds of case to run (default: all)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    torch.set_num_threads(1)

    cases = []
    for name in ("add", "mul", "relu", "add_ (in-place)"):
        cases.append(("small", f"{name} 64x64 ×{args.calls}",
                      lambda d, n=name: small_op(n, d, args.calls), 1))
    for name in ("mm", "softmax"):
        cases.append(("amp", f"{name} 64x64 bf16 autocast ×{args.calls // 10}",
                      lambda d, n=name: autocast_op(n, d, args.calls // 10), 1))
    for name in NN_OPS:
        cases.append(("nn", f"{name} ×{args.calls // 10}", lambda d, n=name: nn_op(n, d, args.calls // 10), 1))
    for name in ("matmul 1024²", "conv 8x64x56² k3"):
        cases.append(("large", name, lambda d, n=name: large_op(n, d), 3))
    for name in ("cnn step", "transformer step"):
        cases.append(("train", name, lambda d, n=name: train_step(n, d), 5))
    for name in ("adamw fused", "adamw foreach"):
        cases.append(("optim", f"{name} 148×64", lambda d, n=name: optimizer_step(n, d), 20))
    for module in RNN_MODULES:
        for variant in RNN_VARIANTS:
            cases.append(("rnn", f"{module} {variant}",
                          lambda d, m=module, v=variant: rnn_step(m, v, d), 3))
    cases = [c for c in cases if c[0] in args.kinds]

    print(f"torch {torch.__version__}, torch_musa {torch_musa.__version__}, "
          f"{torch.musa.get_device_name()} on the {torch_musa._C._driver_name()} driver, "
          f"1 thread, median of {args.repeats}")
    print(f"{'kind':<6} {'case':<34} {'musa':>11} {'cpu':>11} {'ratio':>7} {'target':>7}")
    results = []
    for kind, name, make, inner in cases:
        t = measure(make, args.repeats, inner)
        ratio = t["musa"] / t["cpu"]
        unit, scale = ("ms", 1e3)
        ok = ratio <= TARGETS[kind]
        print(f"{kind:<6} {name:<34} {t['musa'] * scale:9.3f}{unit} {t['cpu'] * scale:9.3f}{unit} "
              f"{ratio:6.2f}x {'≤' + str(TARGETS[kind]):>7}{'' if ok else '  (over)'}")
        results.append({"kind": kind, "case": name, "musa_s": t["musa"], "cpu_s": t["cpu"],
                        "ratio": ratio, "target": TARGETS[kind]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
