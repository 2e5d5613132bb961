"""Does the compiled GPT-2 step on musa reach Inductor whole, with the GPU's attention? (< 60 s)

    TORCH_MUSA_DRIVER=cuda python scripts/diag_compiled_gpt2.py            # the fixed path
    TORCH_MUSA_DRIVER=cuda python scripts/diag_compiled_gpt2.py --old-choice  # A/B: pre-84830ca

The step of benchmarks/bench_cuda_driver.py (HF GPT2LMHeadModel from config, bf16 autocast,
fused AdamW, torch.compile default mode) with fewer layers. Prints the graph breaks and
recompiles, every graph Inductor compiled (forward/backward, its input devices, node
count), the attention ops in them and the dtypes of their batched matmuls, then ms/step
eager and compiled on musa. Expected on the H200 after 84830ca: a fused attention op
(flash / cuDNN / efficient), no ``_scaled_dot_product_attention_math`` and no float32
bmm, and the compiled step well under the eager one (native: 109 -> 48 ms at 12 layers).
``--old-choice`` asks ``_fused_sdp_choice`` of the fake musa tensors as before the fix
(MATH while tracing, attention in float32): the compiled step should fall back to about
eager's time. Under the host driver it runs the same route with the CPU as kernel device
(a dry run at toy size; the host's flash op has no CPU kernel, so attention takes math there).
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_cuda_driver import gpt2_step  # noqa: E402  (the bench's own step, shrunk)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--old-choice", action="store_true",
                    help="the choice of SDPA backend as before the fix (MATH while tracing)")
    args = ap.parse_args(argv)

    import torch._inductor.compile_fx as cfx  # registers musa's backend (and the route)
    from torch._dynamo.utils import counters

    from torch_musa.config import CONFIG

    host = CONFIG.driver == "host"
    if host:  # dry run: the cuda driver's route with the CPU as kernel device
        from torch_musa._inductor import kernel_device
        from torch_musa._inductor.backend import ProfileDtypeCheck

        kernel_device.install("cpu", ProfileDtypeCheck())
        torch._C._set_sdp_use_flash(False)
        torch._C._set_sdp_use_overrideable(False)
        args.batch, args.seq = min(args.batch, 2), min(args.seq, 64)
    elif args.old_choice:
        from torch_musa.attention import gpu

        gpu.sdp_choice = lambda q, k, v, m=None, p=0.0, c=False, s=None, g=False: \
            torch.ops.aten._fused_sdp_choice(q, k, v, m, p, c, scale=s, enable_gqa=g)
    torch._logging.set_logs(graph_breaks=True, recompiles=True)

    graphs = []
    stock_inner = cfx.compile_fx_inner

    def inner(gm, example_inputs, *a, **kw):
        ops = collections.Counter()
        for n in gm.graph.nodes:
            if n.op != "call_function":
                continue
            name = str(n.target)
            if "attention" in name or "sdp" in name:
                ops[name] += 1
            elif "bmm" in name:
                ops[f"{name} {getattr(n.meta.get('val'), 'dtype', '?')}"] += 1
        devices = sorted({str(x.device) for x in example_inputs if isinstance(x, torch.Tensor)})
        graphs.append(("backward" if kw.get("is_backward") else "forward", devices,
                       len(gm.graph.nodes), dict(ops)))
        return stock_inner(gm, example_inputs, *a, **kw)

    cfx.compile_fx_inner = inner  # the route reads it at each compile

    def make(compiled):
        small = dict(n_embd=64, n_head=4, vocab_size=128) if host else {}  # CPU kernels
        return gpt2_step("musa", args.batch, args.seq, compiled, n_layer=args.layers, **small)

    times = {}
    for label in ("eager", "compiled"):
        step = make(label == "compiled")
        t0 = time.perf_counter()
        for _ in range(2):
            loss = step().item()
        warm = time.perf_counter() - t0
        torch.musa.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        torch.musa.synchronize()
        times[label] = (time.perf_counter() - t0) / args.steps * 1e3
        print(f"{label}: {times[label]:.1f} ms/step (warm-up {warm:.1f} s, loss {loss:.4f})",
              flush=True)

    print(f"driver {CONFIG.driver}, {args.layers} layers, batch {args.batch}x{args.seq}, "
          f"choice {'old (math while tracing)' if args.old_choice else 'fixed'}")
    print(f"graphs Inductor compiled: {len(graphs)}")
    for kind, devices, nodes, ops in graphs:
        print(f"  {kind:<8} inputs on {devices} {nodes} nodes {ops}")
    for key in ("graph_break", "stats", "aot_autograd", "inductor"):
        if counters[key]:
            print(f"{key}: " + ", ".join(f"{k[:100]!r}: {v}" for k, v in counters[key].items()))
    math = any("attention_math" in op or "float32" in op for *_, ops in graphs for op in ops)
    kernel = "cpu" if host else "cuda"
    moved = all(d.startswith(kernel) for _, devices, _, _ in graphs for d in devices)
    print(f"all graphs on {kernel}: {moved}; float32/math attention in the graphs: {math}; "
          f"compiled/eager: {times['compiled'] / times['eager']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
