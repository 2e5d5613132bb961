"""Lazy initialisation as torch.cuda has it: the `_initialized` flag that
torch.utils.checkpoint reads, seeds queued before the first tensor, deferred
errors that name the caller, and synchronize before any tensor exists."""
import threading

import pytest
import torch


@pytest.mark.slow
def test_fresh_process_is_uninitialised_until_first_use(subpython):
    r = subpython("""
        import torch, torch_musa
        print(torch.musa._initialized, torch.musa.is_initialized())
        torch.ones(1, device="musa")
        print(torch.musa._initialized, torch.musa.is_initialized())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "True", "True"]


def test_flag_is_what_checkpoint_reads():
    from torch.utils.checkpoint import _get_device_module

    torch.ones(1, device="musa")
    assert getattr(_get_device_module("musa"), "_initialized", False) is True


@pytest.mark.slow
def test_seeds_queued_before_init_apply_last_one_wins(subpython):
    r = subpython("""
        import torch, torch_musa
        torch.musa.manual_seed_all(1)
        torch.manual_seed(7)               # reaches musa as manual_seed_all(7)
        a = torch.rand(4, device="musa")   # the first tensor: the queued seeds run
        torch.musa.manual_seed_all(7)      # now initialised: runs at once
        b = torch.rand(4, device="musa")
        torch.musa.manual_seed_all(1)
        c = torch.rand(4, device="musa")
        print(torch.equal(a, b), torch.equal(a, c))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False"]


@pytest.mark.slow
def test_a_failing_queued_call_names_where_it_was_queued(subpython):
    r = subpython("""
        import torch, torch_musa
        def queue_bad_state():
            torch.musa.set_rng_state(torch.zeros(3, dtype=torch.uint8))
        queue_bad_state()
        try:
            torch.ones(1, device="musa")
        except Exception as e:
            print(type(e).__name__)
            print("queue_bad_state" in str(e), "originally invoked" in str(e))
        # the process stays usable
        print(torch.ones(2, device="musa").sum().item())
    """)
    assert r.returncode == 0, r.stderr
    out = r.stdout.split()
    assert out[0] == "DeferredMusaCallError" and out[1:3] == ["True", "True"], r.stdout
    assert out[3] == "2.0"


@pytest.mark.slow
def test_concurrent_first_use_initialises_once(subpython):
    r = subpython("""
        import threading, torch, torch_musa
        from torch_musa.core import _lazy
        runs = []
        _lazy._lazy_call(lambda: runs.append(threading.get_ident()))
        start = threading.Barrier(8)
        def use():
            start.wait()
            torch.ones(1, device="musa")
        ts = [threading.Thread(target=use) for _ in range(8)]
        [t.start() for t in ts]; [t.join() for t in ts]
        print(len(runs), torch.musa.is_initialized())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "True"]


@pytest.mark.slow
@pytest.mark.parametrize("sync", ["torch.musa.synchronize()", "torch.accelerator.synchronize()"])
def test_synchronize_waits_before_the_first_tensor(subpython, sync):
    # A busy stream in a process that has made no tensor yet: synchronize must wait.
    r = subpython(f"""
        import time, torch, torch_musa
        clock_hz = torch.musa.get_device_properties(0).clock_rate * 1000
        torch.musa._sleep(int(0.5 * clock_hz))       # keeps the stream busy ~0.5 s
        busy = not torch.musa.current_stream().query()
        t0 = time.perf_counter()
        {sync}
        print(busy, time.perf_counter() - t0 > 0.3, torch.musa.current_stream().query())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "True"], r.stdout
