"""The intra-op thread count of musa's host kernels (csrc/aten/kernel_threads.h): the
main thread's, whatever thread runs them. A DataLoader with pin_memory=True and
workers sets the count that new threads start with to 1 (its pinning thread calls
torch.set_num_threads(1)); autograd's musa thread, started at the first backward,
took it, so musa's backward ran single-threaded and its reductions differed from
the CPU's backward, which runs on the caller's thread (karpathy's makemore parted
from the CPU at step 3)."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow

HOST_ONLY = pytest.mark.requires_host_driver(
    "the thread count is the host kernels': the cuda driver's kernels run on the GPU")

AFTER_A_PINNED_LOADER = r'''
import json, torch, torch_musa
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(2)
loader = DataLoader(TensorDataset(torch.arange(32.0)), batch_size=4, num_workers=2,
                    pin_memory=True)
assert sum(len(b) for (b,) in loader) == 32

seen = []


class Probe(torch.autograd.Function):
    """Records the intra-op thread count its backward runs with."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        seen.append(torch.get_num_threads())
        return g


def step(device):
    torch.manual_seed(0)
    w = torch.randn(1).to(device).requires_grad_()
    x = torch.randn(1 << 20).to(device)  # w's gradient sums 1M products: a parallel reduction
    lin = torch.nn.Linear(256, 256).to(device)
    inp = torch.randn(4096, 256).to(device)  # the weight's gradient: a matmul over 4096 rows
    loss = (Probe.apply(w) * x).pow(2).mean() + lin(inp).tanh().sum()
    loss.backward()
    return [t.cpu() for t in (loss.detach(), w.grad, lin.weight.grad, lin.bias.grad)]


out = []
for n in (None, 1, 2):  # as the loader left it, then the user's own counts
    if n:
        torch.set_num_threads(n)
    seen.clear()
    cpu = step("cpu")
    cpu_seen, seen[:] = list(seen), []
    musa = step("musa")
    out.append({"main": torch.get_num_threads(), "cpu_backward": cpu_seen,
                "musa_backward": seen[:], "same": [torch.equal(a, b) for a, b in zip(musa, cpu)],
                "cpu": cpu})
one, two = out[1]["cpu"], out[2]["cpu"]
print(json.dumps({"runs": [{k: v for k, v in r.items() if k != "cpu"} for r in out],
                  "cpu_1_vs_2_threads": [torch.equal(a, b) for a, b in zip(one, two)]}))
'''


@HOST_ONLY
def test_backward_after_a_pinned_loader_runs_with_the_main_threads_count(subpython):
    # MKL_CBWR: without conditional numerical reproducibility MKL's sgemm on an AVX-512
    # machine rounded the first step's matmul differently now and then (1 process in
    # 12, with or without the thread fix; MKL_CBWR=AVX2 made them agree). Under it
    # MKL's results still depend on the thread count, which is what this checks.
    r = subpython(AFTER_A_PINNED_LOADER, env={"MKL_CBWR": "AVX2"})
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    # The case tests something: the CPU's own gradients depend on the thread count.
    assert not all(res["cpu_1_vs_2_threads"]), res
    for run, main in zip(res["runs"], (2, 1, 2)):
        assert run["main"] == main, run
        assert run["cpu_backward"] == [main], run
        assert run["musa_backward"] == [main], run
        assert all(run["same"]), f"musa's loss and gradients differ from the CPU's: {run}"


OTHER_THREAD = r'''
import threading, torch, torch_musa

torch.set_num_threads(2)
torch.manual_seed(0)
x = torch.randn(1 << 20)
m = x.to("musa")
cpu = x.sum()  # the main thread's count
got = {}


def worker():
    torch.set_num_threads(1)  # this thread's own CPU work runs alone
    got["musa"] = m.sum().cpu()  # musa's kernel does not: the device's count
    got["after"] = torch.get_num_threads()


t = threading.Thread(target=worker)
t.start()
t.join()
print(torch.equal(got["musa"], cpu), torch.equal(x.sum(), cpu), got["after"],
      torch.get_num_threads())
'''


@HOST_ONLY
def test_a_kernel_on_another_thread_runs_with_the_main_threads_count(subpython):
    r = subpython(OTHER_THREAD)
    assert r.returncode == 0, r.stderr
    same, cpu_repeatable, worker_after, main_after = r.stdout.split()
    assert cpu_repeatable == "True"
    assert same == "True", "musa's sum on a 1-thread thread should equal the main thread's"
    assert worker_after == "1", "the worker's own count should be given back after the kernel"
    assert main_after == "2"
