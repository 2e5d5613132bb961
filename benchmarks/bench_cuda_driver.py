"""musa on the cuda driver against native cuda, side by side.

Run on a machine with an NVIDIA GPU (scripts/gpu_run.sh does it):

    TORCH_MUSA_DRIVER=cuda python benchmarks/bench_cuda_driver.py --out benchmarks/results

Per-op times for small (launch-bound) ops, among them those a GPT-2 step issues most
(where a host-bound step's extra host time per op comes from), large ops, the replay of a captured graph of
small ops (MUSA graph against CUDA graph), and GPT-2-small training steps
(random initialisation, bf16 autocast, fused AdamW) eager and under
``torch.compile`` (``--train``): b16x1024, and two host-bound cases, the same model
and a 2-layer one at b4x256 (``--cases``). Each is measured in alternating rounds on
musa and on cuda (a training round's steps in short chunks that alternate between the
sides); the ratio is median(musa) / median(cuda), and for the training
steps each round's ratio, their spread, the ratios of chunks that ran side by side
and the host's issue time per step are kept too (a training target must hold in every
round; ``--cpus`` pins both sides' workers to the same CPUs), with 95 % intervals from the
pairs' spread (how finely a round, and the run, can judge a ratio); ``--control`` times
native against native the same way, and ``--fresh-workers`` gives each round a new pair
of processes.
The op table runs both sides in this process (forward only: once a PrivateUse1
backend is registered, PyTorch's autograd engine cannot run a CUDA backward in that
process, pytorch/pytorch#161129); each training case runs each side in a fresh worker
process (native cuda without torch_musa), driven chunk by chunk from this one. Writes
cuda_driver.json, cuda_driver.md and cuda_driver.png to --out (with --profile also cuda_driver_gpt2[_compiled]_profile_{musa,cuda}.txt).
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

import torch

TARGETS = {"small": 1.3, "large": 1.05, "graph": 1.1, "train": 1.02, "train_compiled": 1.03,
           "host_bound": 1.10}

#: The training cases (issue 37): GPT-2 small as users train it, the same model at a batch
#: small enough for the host to be the bound, and a 2-layer model there. Each runs eager
#: and under torch.compile; a host-bound case has one target for both.
#: ``steps`` per round and side, run in chunks of ``chunk`` steps that alternate between
#: the sides (:func:`chunk_order`): the lent H100s' hosts drift by a fifth within seconds
#: (one process's 40-step medians of the 2-layer step: 7.0-9.6 ms; docs/PERFORMANCE.md,
#: run 4), so a round's sides are timed interleaved, not one after the other. The
#: host-bound cases take 32 pairs a round, enough to resolve a few per cent: a pair's log
#: ratio scatters by 0.08-0.11 (runs 21-23), so 16 pairs gave +-6 % and 32 give +-3-4 %
#: (95 %), seconds of steps against the ~19 s a fresh pair of workers took to start (run 23).
TRAIN_CASES = {
    "gpt2": {"batch": 16, "seq": 1024, "n_layer": 12, "host_bound": False, "steps": 8, "chunk": 4},
    "gpt2-b4x256": {"batch": 4, "seq": 256, "n_layer": 12, "host_bound": True, "steps": 128, "chunk": 4},
    "gpt2-2layer-b4x256": {"batch": 4, "seq": 256, "n_layer": 2, "host_bound": True, "steps": 256, "chunk": 8},
}


def chunk_order(round_index: int, chunks: int) -> list[str]:
    """The order of one round's chunks: pairs of one chunk per side, the pairs' order
    alternating (musa cuda, cuda musa, ...) and the first side alternating by round, so
    that neither side always runs first or right after the other's idle gap."""
    a, b = ("musa", "cuda") if round_index % 2 == 0 else ("cuda", "musa")
    return [side for j in range(chunks) for side in ((a, b) if j % 2 == 0 else (b, a))]


def sync(device: str) -> None:
    """Drains ``device``'s queue (the CPU device has none: nothing to wait for)."""
    if device != "cpu":
        (torch.musa if device.startswith("musa") else torch.cuda).synchronize()


def time_loop(fn, device: str, iters: int, issue: list | None = None) -> float:
    """Seconds per call of fn, over iters calls, queue drained before and after; appends
    the host's issue time per call (before the final drain) to ``issue``."""
    sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    if issue is not None:
        issue.append((time.perf_counter() - t0) / iters)
    sync(device)
    return (time.perf_counter() - t0) / iters


def op_cases():
    def binary(op, shape, dtype):
        def make(device):
            g = torch.Generator().manual_seed(0)
            a = torch.randn(shape, generator=g).to(device, dtype)
            b = torch.randn(shape, generator=g).to(device, dtype)
            return lambda: op(a, b)
        return make

    def unary(op, shape, dtype):
        def make(device):
            a = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(device, dtype)
            return lambda: op(a)
        return make

    def conv(device):
        x = torch.randn(32, 256, 56, 56, device=device, dtype=torch.bfloat16)
        w = torch.randn(256, 256, 3, 3, device=device, dtype=torch.bfloat16)
        return lambda: torch.nn.functional.conv2d(x, w, padding=1)

    def in_autocast(op, shape):
        # the per-op cast policy on top of the op (musa: csrc/aten/autocast_kernels.cpp)
        def make(device):
            g = torch.Generator().manual_seed(0)
            a, b = (torch.randn(shape, generator=g).to(device) for _ in range(2))

            def call():
                with torch.autocast(device, dtype=torch.bfloat16):
                    return op(a, b)
            return call
        return make

    def embedding(device):
        table = torch.randn(50257, 64, device=device)
        ids = torch.randint(0, 50257, (64,), generator=torch.Generator().manual_seed(0)).to(device)
        return lambda: torch.nn.functional.embedding(ids, table)

    def attention(device):
        # GPT-2 b4x256's attention (musa: torch_musa/attention/gpu.py's entry, the choice asked
        # of CUDA's rule, then the chosen kernel); forward only, see the module docstring
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(4, 12, 256, 64, generator=g).to(device, torch.bfloat16) for _ in range(3))
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    def graph_replay(device):
        # 30 small kernels captured once (MUSA graph / CUDA graph), timed per replay
        mod = torch.musa if device == "musa" else torch.cuda
        g = torch.Generator().manual_seed(0)
        a, b = (torch.randn(64, 64, generator=g).to(device) for _ in range(2))

        def chain():
            x = a
            for _ in range(10):
                x = torch.relu(x @ b + a) * 0.5
            return x
        side = mod.Stream()
        side.wait_stream(mod.current_stream())
        with mod.stream(side):
            for _ in range(3):
                chain()
        mod.current_stream().wait_stream(side)
        graph = mod.MUSAGraph() if device == "musa" else mod.CUDAGraph()
        with mod.graph(graph):
            chain()
        return graph.replay

    return [
        ("graph replay 30 ops 64x64", "graph", graph_replay, 2000),
        ("add 64x64", "small", binary(torch.add, (64, 64), torch.float32), 3000),
        ("mul 64x64", "small", binary(torch.mul, (64, 64), torch.float32), 3000),
        ("relu 64x64", "small", unary(torch.relu, (64, 64), torch.float32), 3000),
        ("add_ 64x64", "small", binary(lambda a, b: a.add_(b), (64, 64), torch.float32), 3000),
        # The other ops a GPT-2 step issues most, one at a time (where a host-bound step's
        # extra host time per op comes from).
        ("mm 64x64 bf16", "small", binary(torch.mm, (64, 64), torch.bfloat16), 3000),
        ("addmm 64x64 bf16", "small", binary(lambda a, b: torch.addmm(a, a, b), (64, 64),
                                             torch.bfloat16), 3000),
        ("to bf16 64x64", "small", unary(lambda a: a.to(torch.bfloat16), (64, 64), torch.float32), 3000),
        ("layer_norm 64x64", "small", unary(lambda a: torch.nn.functional.layer_norm(a, (64,)),
                                            (64, 64), torch.float32), 3000),
        ("softmax 64x64", "small", unary(lambda a: torch.softmax(a, -1), (64, 64), torch.float32), 3000),
        ("dropout 64x64", "small", unary(lambda a: torch.nn.functional.dropout(a, 0.1), (64, 64),
                                         torch.float32), 3000),
        ("embedding 64 of 50257x64", "small", embedding, 3000),
        ("sdpa causal 4x12x256x64 bf16", "small", attention, 1000),
        ("mm 64x64 in bf16 autocast", "small", in_autocast(torch.mm, (64, 64)), 3000),
        ("matmul 8192² bf16", "large", binary(torch.matmul, (8192, 8192), torch.bfloat16), 30),
        ("add 64M fp32", "large", binary(torch.add, (64 << 20,), torch.float32), 50),
        ("softmax 8192² fp32", "large", unary(lambda a: torch.softmax(a, -1), (8192, 8192),
                                              torch.float32), 30),
        ("conv 3x3 256ch 56² bf16", "large", conv, 30),
    ]


def bench_ops(rounds: int) -> list[dict]:
    rows = []
    for name, kind, make, iters in op_cases():
        fns = {d: make(d) for d in ("musa", "cuda")}
        for d, fn in fns.items():  # warm up (kernel choice, caches)
            time_loop(fn, d, max(3, iters // 10))
        times = {"musa": [], "cuda": []}
        for _ in range(rounds):
            for d in ("musa", "cuda"):
                times[d].append(time_loop(fns[d], d, iters))
        rows.append(summarise(name, kind, times))
        print_row(rows[-1])
        del fns
    return rows


def paired_chunk_ratios(chunk_walls: list[dict]) -> dict:
    """The ratio of each pair of chunks that ran next to each other (musa's j-th chunk of
    a round against cuda's j-th, :func:`chunk_order`): a drift of the host slower than a
    pair cancels in it. Median and quartiles over every pair of every round."""
    pairs = [m / c for r in chunk_walls for m, c in zip(r["musa"], r["cuda"])]
    q = statistics.quantiles(pairs, n=4) if len(pairs) > 1 else [pairs[0]] * 3
    return {"pair_ratio_median": statistics.median(pairs), "pair_ratio_q1": q[0], "pair_ratio_q3": q[2],
            "pairs": len(pairs), **pair_ratio_intervals(chunk_walls)}


# Student's t, two-sided 95 %, by degrees of freedom (1-30); 1.96 beyond.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042)


def t95(dof: int) -> float:
    return _T95[dof - 1] if 1 <= dof <= len(_T95) else 1.96


def pair_ratio_intervals(chunk_walls: list[dict]) -> dict:
    """How finely the run can judge a ratio. The pairs' log ratios scatter within a round
    by the host's spread, the same for a control of native against native (~0.11 on the
    lent H100s, run 22). From it: the run's geometric-mean ratio with its 95 % interval
    over every pair, each round's interval (its own pairs, the spread pooled within
    rounds), how many pairs a round would need for +-3 %, and the interval of the rounds'
    own means, which also holds where the pairs of a round share something the other
    rounds do not (``--fresh-workers``: a pair of processes). A round's ratio means
    something against a per-round target only where its interval ends short of it."""
    logs = [[math.log(m / c) for m, c in zip(r["musa"], r["cuda"])] for r in chunk_walls]
    flat = [x for r in logs for x in r]
    dev = [x - statistics.fmean(r) for r in logs for x in r]  # around each round's own mean
    dof = len(flat) - len(logs)
    sd = math.sqrt(sum(d * d for d in dev) / dof) if dof > 0 else 0.0
    mean = statistics.fmean(flat)
    half = t95(len(flat) - 1) * (statistics.stdev(flat) if len(flat) > 1 else 0.0) / math.sqrt(len(flat))
    means = [statistics.fmean(r) for r in logs]
    rounds_half = (t95(len(means) - 1) * statistics.stdev(means) / math.sqrt(len(means))
                   if len(means) > 1 else 0.0)

    def interval(centre: float, half_width: float) -> list[float]:
        return [math.exp(centre - half_width), math.exp(centre + half_width)]

    return {"pair_log_sd": sd, "pair_ratio_gmean": math.exp(mean),
            "pair_ratio_ci95": interval(mean, half),
            "round_ci95": [interval(m, t95(dof) * sd / math.sqrt(len(r))) for m, r in zip(means, logs)],
            "rounds_gmean_ci95": interval(statistics.fmean(means), rounds_half),
            "pairs_per_round_for_3pct": math.ceil((1.96 * sd / math.log(1.03)) ** 2)}


def quiet_chunk_ratios(chunk_walls: list[dict], chunk_usage: list[dict]) -> dict:
    """musa/cuda of each side's tenth-percentile chunk, in wall time and in the process's
    CPU time per step, and how far each side's CPU time per step strayed (slowest chunk
    over the tenth percentile). Every chunk runs the same steps: on a lent H100 (run 12)
    their time still varied 2-3x on both sides with no switches or page faults, so the
    machine slowed under them (its cores or its GPU: a CUDA thread that waits spins, so
    CPU time follows wall time either way). The quiet chunks say what a step costs where
    neither side was slowed; the rounds say what a user on such a machine gets."""
    def tenth(xs):  # inclusive: never below the fastest chunk, however few there are
        return statistics.quantiles(xs, n=10, method="inclusive")[0] if len(xs) > 1 else xs[0]

    out = {}
    for side in ("musa", "cuda"):
        walls = [w for r in chunk_walls for w in r[side]]
        cpu = [u["main_cpu_ms"] + u["other_threads_cpu_ms"] for r in chunk_usage for u in r[side]]
        out[side] = (tenth(walls), tenth(cpu), max(cpu) / tenth(cpu))
    return {"quiet_ratio": out["musa"][0] / out["cuda"][0], "quiet_cpu_ratio": out["musa"][1] / out["cuda"][1],
            "cpu_spread": {side: out[side][2] for side in out}}


def summarise(name, kind, times, issue=None):
    """Medians and their ratio; each round's ratio (musa's round i against cuda's, run
    back to back) and their spread; with ``issue``, the host's issue time per call too."""
    m, c = statistics.median(times["musa"]), statistics.median(times["cuda"])
    per_round = [a / b for a, b in zip(times["musa"], times["cuda"])]
    row = {"name": name, "kind": kind, "musa_us": m * 1e6, "cuda_us": c * 1e6,
           "ratio": m / c, "target": TARGETS[kind], "rounds": len(times["musa"]),
           "round_ratios": per_round, "ratio_min": min(per_round), "ratio_max": max(per_round)}
    if issue:
        mi, ci = statistics.median(issue["musa"]), statistics.median(issue["cuda"])
        row.update(issue_musa_us=mi * 1e6, issue_cuda_us=ci * 1e6, issue_ratio=mi / ci)
    # Training targets hold in every round; the others on the medians.
    row["ok"] = (row["ratio_max"] if kind.startswith(("train", "host")) else row["ratio"]) <= row["target"]
    return row


def print_row(r):
    spread = f"{r['ratio_min']:.3f}-{r['ratio_max']:.3f}"
    issue = f"  issue {r['issue_ratio']:.3f}" if "issue_ratio" in r else ""
    print(f"{r['name']:<36} {r['musa_us']:>12.1f} {r['cuda_us']:>12.1f} "
          f"{r['ratio']:>7.3f} {spread:>13} {r['target']:>7.2f}  {'ok' if r['ok'] else 'MISS'}{issue}", flush=True)


def gpt2_step(device: str, batch: int, seq: int, compiled: bool = False, amp: bool = True,
              **config):
    """A GPT-2-small training step on ``device``, same weights and data everywhere;
    ``compiled``: the model under ``torch.compile`` (Inductor, default mode); ``amp``: the
    forward under bf16 autocast (False: float32, the same ops on every device type);
    ``config``: GPT2Config fields to change (scripts/diag_compiled_gpt2.py shrinks it)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_positions=seq, **config)  # default GPT-2 small: 12 layers, 768 wide
    model = GPT2LMHeadModel(config).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randint(0, config.vocab_size, (batch, seq),
                      generator=torch.Generator().manual_seed(1)).to(device)
    forward = torch.compile(model) if compiled else model

    def step(mark=None):
        """``mark(phase)`` after each phase (benchmarks/step_phases.py times them)."""
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            loss = forward(input_ids=x, labels=x).loss
        mark and mark("forward")
        loss.backward()
        mark and mark("backward")
        opt.step()
        mark and mark("optimizer")
        opt.zero_grad(set_to_none=True)
        mark and mark("zero_grad")
        return loss

    return step


def profile_step(step, device: str, steps: int, path: str) -> dict:
    """Where a training step's time goes: host issue time vs wall time, and a
    torch.profiler table (CPU self time and device kernel time per op)."""
    from torch.profiler import ProfilerActivity, profile

    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    issued = time.perf_counter() - t0
    sync(device)
    wall = time.perf_counter() - t0
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            step()
        sync(device)
    ka = prof.key_averages()
    with open(path, "w") as f:
        f.write(f"{device}: host issue {issued / steps * 1e3:.1f} ms/step, wall {wall / steps * 1e3:.1f} ms/step\n")
        # Every op, not the top rows: the two sides' tables are compared op by op (a
        # row under one side's cut was missing from the comparison).
        f.write(ka.table(sort_by="self_cpu_time_total", row_limit=-1))
        f.write("\n")
        f.write(ka.table(sort_by="self_device_time_total", row_limit=30))
    return {"issue_ms": issued / steps * 1e3, "wall_ms": wall / steps * 1e3}


def pin_process(cpus: set[int]) -> set[int]:
    """Pins every thread of this process (the autograd engine's device threads and the
    GPU runtime's too, not only the caller) to ``cpus``; threads made later inherit it.
    With both sides of a case on the same few CPUs the scheduler cannot put one side's
    chunk on a busier or slower core than the other's (``--cpus``)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, PermissionError):  # a thread that just ended
            pass
    return os.sched_getaffinity(0)


def worker_cpus(spec: str) -> list[set[int]] | None:
    """The CPUs both training workers run on, as groups: 'all' leaves them unpinned; 'auto'
    takes the last four of this process's CPUs where it has eight or more (the lent
    machines' 16), else none; 'rotate' splits them into groups of four (eight or more),
    both sides moving to the next group at each pair of chunks, so that every pair runs
    on the same cores and a round's pairs on several; or a list such as '12-15' or '3,5'."""
    if spec == "all":
        return None
    if spec in ("auto", "rotate"):
        mine = sorted(os.sched_getaffinity(0))
        if len(mine) < 8:
            return None
        if spec == "auto":
            return [set(mine[-4:])]
        return [set(mine[i:i + 4]) for i in range(0, len(mine) - len(mine) % 4, 4)]
    cpus: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return [cpus]


#: Threads whose CPU time is told apart (by name, /proc/self/task/*/comm): autograd's
#: device threads (PyTorch names them) and musa's device-wait helper (a CUDA wait spins:
#: musa's synchronize spends on that thread what native's spends on the main one).
THREAD_GROUPS = {"autograd": "pt_autograd", "device_wait": "musa_wait"}


def thread_cpu_s() -> dict:
    """CPU seconds so far of each thread of this process that a THREAD_GROUPS name
    starts, by thread id, with its group (schedstat: nanoseconds, not clock ticks)."""
    out = {}
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    name = f.read().strip()
                group = next((g for g, prefix in THREAD_GROUPS.items() if name.startswith(prefix)), None)
                if group:
                    with open(f"/proc/self/task/{tid}/schedstat") as f:
                        out[tid] = (group, int(f.read().split()[0]) / 1e9)
            except OSError:  # the thread ended meanwhile
                continue
    except OSError:  # not Linux
        pass
    return out


def process_usage() -> dict:
    """This process's CPU time (all threads, the main thread's own, and those of
    THREAD_GROUPS), context switches (involuntary: preempted; voluntary: waiting, on a
    lock or the GPU), page faults, threads, and the CPU the main thread last ran on:
    whether a side's slower chunks come from threads of its own competing, from waits,
    from memory it keeps returning to the system and faulting back in, or from where it
    was placed."""
    try:
        with open("/proc/thread-self/stat") as f:  # field 39, "processor"
            cpu = int(f.read().rsplit(")", 1)[1].split()[36])
        threads = len(os.listdir("/proc/self/task"))
    except OSError:  # not Linux
        cpu, threads = -1, 0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"process_s": time.process_time(), "main_s": time.thread_time(),
            "switches": usage.ru_nivcsw, "waits": usage.ru_nvcsw, "faults": usage.ru_minflt + usage.ru_majflt,
            "threads": threads, "cpu": cpu, "named_threads": thread_cpu_s()}


def usage_per_step(before: dict, after: dict, steps: int) -> dict:
    process = (after["process_s"] - before["process_s"]) / steps * 1e3
    main = (after["main_s"] - before["main_s"]) / steps * 1e3
    groups = dict.fromkeys(THREAD_GROUPS, 0.0)
    old = before.get("named_threads", {})
    for tid, (group, s) in after.get("named_threads", {}).items():
        groups[group] += (s - old.get(tid, (group, 0.0))[1]) / steps * 1e3  # a new thread from 0
    return {"main_cpu_ms": main, "other_threads_cpu_ms": max(process - main, 0.0),
            **{f"{g}_cpu_ms": ms for g, ms in groups.items()},
            "involuntary_switches": (after["switches"] - before["switches"]) / steps,
            "voluntary_switches": (after["waits"] - before["waits"]) / steps,
            "page_faults": (after["faults"] - before["faults"]) / steps,
            "threads": after["threads"], "cpu": after["cpu"]}


def gc_collections() -> int:
    """Python's garbage collections so far, all generations: a side that makes more
    Python objects per step collects more often, which a round's time includes."""
    return sum(g["collections"] for g in gc.get_stats())


def train_worker(device: str, batch: int, seq: int, n_layer: int, steps: int, compiled: bool) -> int:
    """One side of the training benchmark, in a process of its own: native cuda without
    torch_musa, or musa.

    Answers each line on stdin: 'warmup' with the loss, 'pin CPUS' (comma-separated) with
    the CPUs it now runs on, 'chunk' with seconds per step over ``steps`` steps, the
    host's issue seconds per step, the garbage collections run meanwhile and
    :func:`usage_per_step`, 'profile PATH' with :func:`profile_step`'s figures.
    """
    if device == "musa":
        import torch_musa  # noqa: F401
    else:  # transformers imports torch_musa whenever it is installed; hide it here.
        sys.modules["torch_musa"] = None
    step = gpt2_step(device, batch, seq, compiled, n_layer=n_layer)
    for line in sys.stdin:
        if line.strip() == "warmup":
            print(step().item(), flush=True)
        elif line.startswith("pin "):
            cpus = {int(c) for c in line.split(" ", 1)[1].split(",")}
            print(json.dumps(sorted(pin_process(cpus))), flush=True)
        elif line.strip() == "chunk":
            issue = []
            before, usage = gc_collections(), process_usage()
            wall = time_loop(step, device, steps, issue)
            print(json.dumps([wall, issue[0], gc_collections() - before,
                              usage_per_step(usage, process_usage(), steps)]), flush=True)
        elif line.startswith("profile "):
            print(json.dumps(profile_step(step, device, steps, line.split(" ", 1)[1].strip())), flush=True)
    return 0


class Worker:
    """A :func:`train_worker` process, asked line by line."""

    def __init__(self, device: str, batch: int, seq: int, n_layer: int, steps: int, compiled: bool):
        env = dict(os.environ)
        if device != "musa":
            env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--train-worker", device, "--batch", str(batch), "--seq", str(seq),
             "--layers", str(n_layer), "--steps", str(steps)] + (["--compiled"] if compiled else []),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def ask(self, cmd: str, parse=json.loads):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the training worker exited ({self.proc.wait()}) on {cmd!r}")
        return parse(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def bench_gpt2(rounds: int, steps: int | None, case: str, profile_dir: str | None = None,
               compiled: bool = False, cpus: list[set[int]] | None = None, control: bool = False,
               fresh_workers: bool = False) -> dict:
    """Both sides run in fresh processes of their own: a long-lived process that had
    compiled an earlier case ran the next eager one up to 1.4x slower (lent H100). With
    ``cpus`` (:func:`worker_cpus`), both are pinned to its first group after the warm-up
    (compilation keeps every CPU), and with several groups both move to the next at each
    pair of chunks.
    ``control``: native cuda in musa's place too, timed the same way: the spread of its
    rounds is the host's alone, what a per-round target can be held to there.
    ``fresh_workers``: a new pair of processes for every round. Two processes running the
    same native step differed by 3-8 % over a whole run (the pairs' geometric means of
    runs 21-22's controls: 0.922, 95 % 0.874-0.972; 1.057, 1.010-1.106; 1.034,
    1.004-1.065), a difference of the processes that more chunks do not average out;
    new processes each round do."""
    cfg = TRAIN_CASES[case]
    batch, seq, n_layer = cfg["batch"], cfg["seq"], cfg["n_layer"]
    steps = steps or cfg["steps"]
    chunk = min(cfg["chunk"], steps)
    chunks = max(1, steps // chunk)

    def pin(group: set[int]) -> None:
        for w in workers.values():
            w.ask("pin " + ",".join(map(str, sorted(group))))

    def start() -> dict:
        """A pair of warm workers, pinned to the first group: three warm-up steps each
        (allocator, kernel choice; their losses returned), then one untimed chunk (the
        GPU's clocks, lazily built workspaces). Both start before either is asked."""
        workers.update({side: Worker("cuda" if control else side, batch, seq, n_layer, chunk, compiled)
                        for side in ("musa", "cuda")})
        warm = {"musa": [], "cuda": []}
        for _ in range(3):
            for side, w in workers.items():
                warm[side].append(w.ask("warmup", float))
        if cpus:
            pin(cpus[0])
        for w in workers.values():
            w.ask("chunk")
        return warm

    workers: dict = {}
    losses = start()
    # Each round's chunks interleaved, a side's round time the mean of its chunks.
    times, issue = {"musa": [], "cuda": []}, {"musa": [], "cuda": []}
    collections = {"musa": 0, "cuda": 0}
    chunk_walls = []  # per round: each side's chunks in the order they ran
    chunk_usage = []  # the same chunks' usage_per_step
    pairs = 0
    for i in range(rounds):
        if fresh_workers and i > 0:
            for w in workers.values():
                w.close()
            start()
        got = {"musa": [], "cuda": []}
        for k, side in enumerate(chunk_order(i, chunks)):
            if k % 2 == 0 and cpus and len(cpus) > 1:  # a pair's two chunks on the same cores
                pin(cpus[pairs % len(cpus)])
                pairs += 1
            got[side].append(workers[side].ask("chunk"))
        chunk_walls.append({side: [c[0] for c in got[side]] for side in got})
        chunk_usage.append({side: [c[3] for c in got[side]] for side in got})
        for side, chunk_times in got.items():
            times[side].append(statistics.mean(c[0] for c in chunk_times))
            issue[side].append(statistics.mean(c[1] for c in chunk_times))
            collections[side] += sum(c[2] for c in chunk_times)
    if profile_dir:
        name = case.replace("-", "_") + ("_compiled" if compiled else "")
        for side, w in workers.items():
            got = w.ask(f"profile {os.path.join(profile_dir, f'cuda_driver_{name}_profile_{side}.txt')}")
            print(f"profile {side}: host issue {got['issue_ms']:.1f} ms/step, wall {got['wall_ms']:.1f} ms/step",
                  flush=True)
    for w in workers.values():
        w.close()
    kind = "host_bound" if cfg["host_bound"] else "train_compiled" if compiled else "train"
    layers = "" if n_layer == 12 else f" {n_layer}-layer"
    label = f"GPT-2 small{layers} step{' compiled' if compiled else ''} b{batch}x{seq} bf16"
    if control:
        label = f"control, cuda in musa's place: {label}"
    row = summarise(label, kind, times, issue)
    row["case"] = case
    row["control"] = control
    row["steps_per_round"] = chunk * chunks
    row["steps_per_chunk"] = chunk
    row["fresh_workers"] = fresh_workers
    row["tokens_per_s_musa"] = batch * seq / (row["musa_us"] / 1e6)
    row["warmup_losses"] = losses
    row["gc_collections_per_step"] = {side: n / (rounds * chunk * chunks) for side, n in collections.items()}
    row["chunk_walls"] = chunk_walls
    row["chunk_usage"] = chunk_usage
    row["process"] = process_summary(chunk_usage)
    row.update(paired_chunk_ratios(chunk_walls))
    row.update(quiet_chunk_ratios(chunk_walls, chunk_usage))
    row["cpus"] = sorted(set().union(*cpus)) if cpus else None
    row["cpu_groups"] = [sorted(g) for g in cpus] if cpus else None
    print_row(row)
    print("  garbage collections per step: " + ", ".join(
        f"{side} {n:.2f}" for side, n in row["gc_collections_per_step"].items())
        + f"; paired chunks: median {row['pair_ratio_median']:.3f}, quartiles "
        f"{row['pair_ratio_q1']:.3f}-{row['pair_ratio_q3']:.3f} of {row['pairs']}; quiet chunks "
        f"{row['quiet_ratio']:.3f} (CPU {row['quiet_cpu_ratio']:.3f}); the same step's CPU time up to "
        + ", ".join(f"{side} {x:.1f}x" for side, x in row["cpu_spread"].items()) + " its quiet figure", flush=True)
    (lo, hi), (rlo, rhi) = row["pair_ratio_ci95"], row["rounds_gmean_ci95"]
    print(f"  pairs' geometric mean {row['pair_ratio_gmean']:.3f} (95 % {lo:.3f}-{hi:.3f}; from the rounds' "
          f"means {rlo:.3f}-{rhi:.3f}); a round's 95 % interval is +-"
          f"{100 * (math.exp(1.96 * row['pair_log_sd'] / math.sqrt(chunks)) - 1):.0f} % with its {chunks} "
          f"pairs, +-3 % would take {row['pairs_per_round_for_3pct']}", flush=True)
    print("  per step: " + "; ".join(
        f"{side} main thread {p['main_cpu_ms']:.2f} ms CPU + other threads {p['other_threads_cpu_ms']:.2f} "
        f"(autograd {p['autograd_cpu_ms']:.2f}, device waits {p['device_wait_cpu_ms']:.2f}), "
        f"{p['involuntary_switches']:.2f} involuntary and {p['voluntary_switches']:.2f} voluntary switches, "
        f"{p['page_faults']:.1f} page faults, {p['threads']} threads, CPUs {p['cpus']}"
        for side, p in row["process"].items()), flush=True)
    return row


def process_summary(chunk_usage: list[dict]) -> dict:
    """Each side's medians over its chunks of :func:`usage_per_step`, its most threads
    and the CPUs its main thread was found on."""
    out = {}
    for side in ("musa", "cuda"):
        chunks = [u for r in chunk_usage for u in r.get(side, [])]
        if not chunks:
            continue
        out[side] = {k: statistics.median(u.get(k, 0.0) for u in chunks)
                     for k in ("main_cpu_ms", "other_threads_cpu_ms", "autograd_cpu_ms", "device_wait_cpu_ms",
                               "involuntary_switches", "voluntary_switches", "page_faults")}
        out[side]["threads"] = max(u["threads"] for u in chunks)
        out[side]["cpus"] = sorted({u["cpu"] for u in chunks})
    return out


def machine() -> dict:
    p = torch.cuda.get_device_properties(0)
    return {"gpu": p.name, "gpu_memory_gib": round(p.total_memory / 2**30, 1),
            "sm_count": p.multi_processor_count, "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "musa_driver": "cuda"}


def write(out: str, result: dict) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "cuda_driver.json"), "w") as f:
        json.dump(result, f, indent=2)
    m = result["machine"]
    cpus = {tuple(r["cpus"]) for r in result["rows"] if r.get("cpus")}
    pinned = f" (training workers pinned to CPUs {', '.join(map(str, cpus.pop()))})" if len(cpus) == 1 else ""
    if any(len(r.get("cpu_groups") or []) > 1 for r in result["rows"]):
        pinned = " (training workers moved together over groups of CPUs, each pair of chunks on one group)"
    lines = [f"# musa (cuda driver) vs native cuda — {m['gpu']}", "",
             f"torch {m['torch']} (CUDA {m['cuda']}), Python {m['python']}, "
             f"{m['cpu_count']} CPU cores{pinned}; medians of {result['rounds']} alternating rounds (training: "
             f"{result['train_rounds']}, each interleaving the sides in chunks of a few steps); a training "
             "target holds in every round; issue: the host's time "
             "to issue a step, musa/cuda; paired chunks: the median (quartiles) of the ratios of "
             "chunks that ran next to each other; quiet chunks: musa/cuda of each side's tenth-percentile "
             "chunk, in wall time (and the process's CPU time per step), what a step costs where "
             "neither side was slowed.", "",
             "| work | musa µs | cuda µs | musa/cuda | rounds' spread | issue | paired chunks | quiet chunks "
             "| target | |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in result["rows"]:
        issue = f"{r['issue_ratio']:.3f}" if "issue_ratio" in r else ""
        paired = (f"{r['pair_ratio_median']:.3f} ({r['pair_ratio_q1']:.3f}–{r['pair_ratio_q3']:.3f})"
                  if "pair_ratio_median" in r else "")
        quiet = f"{r['quiet_ratio']:.3f} ({r['quiet_cpu_ratio']:.3f})" if "quiet_ratio" in r else ""
        lines.append(f"| {r['name']} | {r['musa_us']:.1f} | {r['cuda_us']:.1f} | {r['ratio']:.3f} | "
                     f"{r['ratio_min']:.3f}–{r['ratio_max']:.3f} | {issue} | {paired} | {quiet} | ≤ {r['target']} | "
                     f"{'ok' if r['ok'] else 'MISS'} |")
    # A training target holds in every round: each round's ratio, in the order they ran.
    train = [r for r in result["rows"] if r["kind"].startswith(("train", "host"))]
    if train:
        lines += ["", "| training step | each round, musa/cuda |", "|---|---|"]
        lines += [f"| {r['name']} | {', '.join(f'{x:.3f}' for x in r['round_ratios'])} |" for r in train]
        # How finely those rounds can judge (pair_ratio_intervals); older results lack it.
        judged = [r for r in train if "pair_ratio_ci95" in r]
        if judged:
            lines += ["", "| training step | new workers each round | pairs' log spread | pairs' geometric "
                      "mean (95 %) | 95 % from the rounds' means | each round's 95 % interval | pairs a round "
                      "needs for ±3 % |", "|---|---|---:|---:|---:|---|---:|"]
            lines += [f"| {r['name']} | {'yes' if r.get('fresh_workers') else 'no'} | {r['pair_log_sd']:.3f} | "
                      f"{r['pair_ratio_gmean']:.3f} ({r['pair_ratio_ci95'][0]:.3f}–{r['pair_ratio_ci95'][1]:.3f}) | "
                      f"{r['rounds_gmean_ci95'][0]:.3f}–{r['rounds_gmean_ci95'][1]:.3f} | "
                      + ", ".join(f"{lo:.2f}–{hi:.2f}" for lo, hi in r["round_ci95"])
                      + f" | {r['pairs_per_round_for_3pct']} |" for r in judged]
        # Each worker process per step, medians over its chunks (process_usage).
        lines += ["", "| training step | side | main thread CPU ms | other threads CPU ms | of which autograd's "
                  "| of which device waits' | involuntary switches | voluntary switches | page faults | threads "
                  "| main thread's CPUs | slowest chunk's CPU time / quiet |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
        lines += [f"| {r['name']} | {side} | {p['main_cpu_ms']:.2f} | {p['other_threads_cpu_ms']:.2f} | "
                  f"{p.get('autograd_cpu_ms', 0.0):.2f} | {p.get('device_wait_cpu_ms', 0.0):.2f} | "
                  f"{p['involuntary_switches']:.2f} | {p['voluntary_switches']:.2f} | "
                  f"{p['page_faults']:.1f} | {p['threads']} | "
                  f"{', '.join(map(str, p['cpus']))} | "
                  + (f"{r['cpu_spread'][side]:.2f} |" if "cpu_spread" in r else " |")
                  for r in train for side, p in r.get("process", {}).items()]
    with open(os.path.join(out, "cuda_driver.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        rows = result["rows"]
        fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.2))
        ax.barh([r["name"] for r in rows], [r["ratio"] for r in rows],
                xerr=[[r["ratio"] - r["ratio_min"] for r in rows], [r["ratio_max"] - r["ratio"] for r in rows]],
                color=["tab:green" if r["ok"] else "tab:red" for r in rows])
        for i, r in enumerate(rows):
            ax.plot([r["target"]] * 2, [i - 0.4, i + 0.4], "k--", lw=1)
        ax.axvline(1.0, color="grey", lw=0.8)
        ax.invert_yaxis()
        ax.set_xlabel("time on musa (cuda driver) / time on native cuda (dashed: target)")
        ax.set_title(m["gpu"])
        fig.tight_layout()
        fig.savefig(os.path.join(out, "cuda_driver.png"), dpi=110)
    except ImportError:
        print("matplotlib missing: no PNG", file=sys.stderr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, help="steps per training round and side (default: the case's)")
    ap.add_argument("--cases", default=",".join(TRAIN_CASES),
                    help=f"training cases, comma-separated, of {', '.join(TRAIN_CASES)}")
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)  # the worker's
    ap.add_argument("--seq", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--layers", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--train", choices=("eager", "compiled", "both"), default="both",
                    help="the GPT-2 step eager, under torch.compile, or both (default)")
    ap.add_argument("--compiled", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--skip-ops", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="also write torch.profiler tables of the training step (cuda_driver_gpt2_profile_*.txt)")
    ap.add_argument("--cpus", default="all",
                    help="CPUs both training workers share after the warm-up: all (unpinned, the default), "
                         "auto (the last 4 of 8 or more), rotate (groups of 4, both sides moving to the next "
                         "at each pair of chunks), or a list such as 12-15; pinned on a lent H100, single "
                         "rounds strayed no less (docs/PERFORMANCE.md, run 6)")
    ap.add_argument("--control", action="store_true",
                    help="after each training case, the same with native cuda on both sides (the "
                         "spread the host alone gives a round)")
    ap.add_argument("--fresh-workers", action="store_true",
                    help="a new pair of worker processes for every training round (two processes "
                         "running the same step differed by 3-8 %% over a run; new ones average it out)")
    ap.add_argument("--train-worker", choices=("musa", "cuda"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.train_worker:
        return train_worker(args.train_worker, args.batch, args.seq, args.layers, args.steps, args.compiled)
    from torch_musa.config import CONFIG  # not in a native worker: see the module docstring

    if CONFIG.driver != "cuda":
        print("run with TORCH_MUSA_DRIVER=cuda on a machine with an NVIDIA GPU", file=sys.stderr)
        return 2
    unknown = set(args.cases.split(",")) - set(TRAIN_CASES)
    if unknown:
        ap.error(f"unknown --cases {sorted(unknown)}: choose from {', '.join(TRAIN_CASES)}")
    os.makedirs(args.out, exist_ok=True)  # the profiles are written before the results
    print(f"{'work':<36} {'musa µs':>12} {'cuda µs':>12} {'ratio':>7} {'rounds':>13} {'target':>7}")
    train_rounds = max(3, args.rounds - 2)
    result = {"machine": machine(), "rounds": args.rounds, "train_rounds": train_rounds,
              "rows": [] if args.skip_ops else bench_ops(args.rounds)}
    write(args.out, result)
    if not args.skip_train:
        for case in args.cases.split(","):
            for compiled in {"eager": [False], "compiled": [True], "both": [False, True]}[args.train]:
                for control in (False, True) if args.control else (False,):
                    result["rows"].append(bench_gpt2(train_rounds, args.steps, case,
                                                     args.out if args.profile and not control else None,
                                                     compiled, worker_cpus(args.cpus), control,
                                                     fresh_workers=args.fresh_workers))
                    # Written after every case: a lent machine's time limit, or the machine
                    # taken back, still leaves the cases that finished.
                    write(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
