"""Ctrl-C (SIGINT) during a long synchronize() of a device, a stream or an event raises
KeyboardInterrupt promptly, as on CUDA, instead of after the device work ends: through
torch.musa's functions and through torch's generic ones (torch.accelerator, torch.Stream,
torch.Event), which reach the driver through the device guard without Python."""
import pytest

SCRIPT = """
import os, signal, threading, time, torch, torch_musa
# Python leaves SIGINT ignored when started ignoring it (a job run with & by a script).
signal.signal(signal.SIGINT, signal.default_int_handler)
hz = torch.musa.get_device_properties(0).clock_rate * 1000
stream = torch.musa.Stream()
x = torch.ones(2, device="musa")
def item():                                  # a host read waits for the stream's work
    with torch.musa.stream(stream):
        return x[0].item()
with torch.musa.stream(stream):
    torch.musa._sleep(int(12 * hz))          # 12 s of device work
    event = torch.musa.Event(); event.record()
    plain_event = torch.Event(device="musa"); plain_event.record(stream)
# The same stream as a plain torch.Stream: its synchronize is the guard's.
plain_stream = torch.Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                            device_type=stream.device_type)
wait = {"device": torch.musa.synchronize, "stream": stream.synchronize, "event": event.synchronize,
        "accelerator": torch.accelerator.synchronize, "torch.Stream": plain_stream.synchronize,
        "torch.Event": plain_event.synchronize, "c10 stream": lambda: torch.Stream.synchronize(stream),
        "item": item}[WHAT]
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
t0 = time.perf_counter()
try:
    wait()
    print("returned", time.perf_counter() - t0)
except KeyboardInterrupt:
    print("interrupted", time.perf_counter() - t0)
print(stream.query())                        # the device is still busy; the process may go on
"""


# torch.musa's own waits are interruptible under both drivers; the generic ones reach the
# driver's wait through the device guard, which under the cuda driver is CUDA's own.
_GUARD_WAIT = pytest.mark.requires_host_driver(
    "the cuda driver's guard waits in CUDA's synchronize, which does not return on a signal")


@pytest.mark.slow
@pytest.mark.parametrize("what", ["device", "stream", "event"] + [
    pytest.param(w, marks=_GUARD_WAIT)
    for w in ("accelerator", "torch.Stream", "torch.Event", "c10 stream", "item")])
def test_sigint_interrupts_a_long_synchronize(subpython, what):
    r = subpython(SCRIPT.replace("WHAT", repr(what)), timeout=60)
    assert r.returncode == 0, r.stderr
    verdict, seconds, busy = r.stdout.split()
    assert verdict == "interrupted" and float(seconds) < 5
    assert busy == "False"


def test_synchronize_still_waits_for_the_work():
    import time

    import torch

    hz = torch.musa.get_device_properties(0).clock_rate * 1000
    for sync in ("device", "stream", "event"):
        s = torch.musa.Stream()
        with torch.musa.stream(s):
            torch.musa._sleep(int(0.15 * hz))
            e = torch.musa.Event()
            e.record()
        t0 = time.perf_counter()
        {"device": torch.musa.synchronize, "stream": s.synchronize, "event": e.synchronize}[sync]()
        assert time.perf_counter() - t0 > 0.1 and s.query() and e.query()


def test_generic_synchronize_still_waits_for_the_work():
    import time

    import torch

    hz = torch.musa.get_device_properties(0).clock_rate * 1000
    for sync in ("accelerator", "torch.Stream", "torch.Event"):
        s = torch.musa.Stream()
        with torch.musa.stream(s):
            torch.musa._sleep(int(0.15 * hz))
            e = torch.Event(device="musa")
            e.record(s)
        plain = torch.Stream(stream_id=s.stream_id, device_index=s.device_index,
                             device_type=s.device_type)
        t0 = time.perf_counter()
        {"accelerator": torch.accelerator.synchronize, "torch.Stream": plain.synchronize,
         "torch.Event": e.synchronize}[sync]()
        assert time.perf_counter() - t0 > 0.1 and s.query() and e.query()


@pytest.mark.slow
def test_sigint_in_a_thread_other_than_main_does_not_break_its_wait(subpython):
    """Python runs signal handlers only in the main thread: a wait in another thread runs
    to its end, and the main thread's KeyboardInterrupt arrives as usual."""
    r = subpython("""
        import os, signal, threading, time, torch, torch_musa
        signal.signal(signal.SIGINT, signal.default_int_handler)
        hz = torch.musa.get_device_properties(0).clock_rate * 1000
        s = torch.musa.Stream()
        with torch.musa.stream(s):
            torch.musa._sleep(int(0.8 * hz))
        took = []
        def waiter():
            t0 = time.perf_counter(); torch.accelerator.synchronize(); took.append(time.perf_counter() - t0)
        th = threading.Thread(target=waiter); th.start()
        time.sleep(0.2)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
            print("no interrupt")
        except KeyboardInterrupt:
            print("interrupted")
        th.join()
        print(took[0] > 0.5, s.query())
    """, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["interrupted", "True", "True"]


# The cuda driver's synchronisations wait on a helper thread that stays for the process
# (the host driver's wait on the caller's thread); _sleep_on_wait_helper runs a wait
# there under any driver.
@pytest.mark.slow
def test_helper_waits_of_several_threads_run_side_by_side(subpython):
    """A wait that finds the helper busy with another thread's gets a helper of its own:
    three threads' waits of 0.5 s end together, not one after another."""
    r = subpython("""
        import threading, time, torch_musa
        wait = torch_musa._C._sleep_on_wait_helper
        wait(0.01)                                   # the helper exists
        t0 = time.perf_counter()
        threads = [threading.Thread(target=wait, args=(0.5,)) for _ in range(3)]
        for t in threads: t.start()
        for t in threads: t.join()
        took = time.perf_counter() - t0
        wait(0.01)                                   # and is free again
        print(took < 1.4, took)
    """, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "True", r.stdout


@pytest.mark.slow
def test_sigint_ends_a_helper_wait_and_the_next_wait_works(subpython):
    r = subpython("""
        import os, signal, threading, time, torch_musa
        signal.signal(signal.SIGINT, signal.default_int_handler)
        wait = torch_musa._C._sleep_on_wait_helper
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.perf_counter()
        try:
            wait(10.0)
            print("returned")
        except KeyboardInterrupt:
            print("interrupted", time.perf_counter() - t0 < 5)
        t0 = time.perf_counter()
        wait(0.05)                                   # the helper is still in the old wait
        print(time.perf_counter() - t0 < 5)
    """, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["interrupted", "True", "True"]


@pytest.mark.slow
def test_a_forked_child_gets_a_helper_of_its_own(subpython):
    """A child has none of its parent's threads: its waits would wait forever on the
    parent's helper."""
    r = subpython("""
        import os, torch_musa
        wait = torch_musa._C._sleep_on_wait_helper
        wait(0.01)
        pid = os.fork()
        if pid == 0:
            wait(0.01)
            os._exit(7)
        import time
        for _ in range(200):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9); os.waitpid(pid, 0)
            print("hung"); raise SystemExit
        print(os.waitstatus_to_exitcode(status))
    """, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["7"]


def test_the_wait_helper_is_named_so_its_spin_is_not_taken_for_the_callers(subpython):
    """A CUDA wait spins: on the cuda driver the helper's CPU time is the device wait's.
    Named, the benchmarks (and top, py-spy) tell it from autograd's and the caller's."""
    r = subpython("""
        import os, threading, torch_musa
        wait = torch_musa._C._sleep_on_wait_helper
        before = {t for t in os.listdir("/proc/self/task")}
        seen = []
        def look():
            seen.extend(open(f"/proc/self/task/{t}/comm").read().strip()
                        for t in os.listdir("/proc/self/task") if t not in before)
        threading.Timer(0.1, look).start()
        wait(0.3)
        print(sorted(set(seen)))
    """, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "'musa_wait'" in r.stdout, r.stdout
