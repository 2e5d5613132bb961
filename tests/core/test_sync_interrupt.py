"""Ctrl-C (SIGINT) during a long synchronize() of a device, a stream or an event raises
KeyboardInterrupt promptly, as on CUDA, instead of after the device work ends."""
import pytest

SCRIPT = """
import os, signal, threading, time, torch, torch_musa
# Python leaves SIGINT ignored when started ignoring it (a job run with & by a script).
signal.signal(signal.SIGINT, signal.default_int_handler)
hz = torch.musa.get_device_properties(0).clock_rate * 1000
stream = torch.musa.Stream()
with torch.musa.stream(stream):
    torch.musa._sleep(int(30 * hz))          # 30 s of device work
    event = torch.musa.Event(); event.record()
wait = {"device": torch.musa.synchronize, "stream": stream.synchronize, "event": event.synchronize}[WHAT]
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
t0 = time.perf_counter()
try:
    wait()
    print("returned", time.perf_counter() - t0)
except KeyboardInterrupt:
    print("interrupted", time.perf_counter() - t0)
print(stream.query())                        # the device is still busy; the process may go on
"""


@pytest.mark.parametrize("what", ["device", "stream", "event"])
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
