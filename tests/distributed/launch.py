"""Start N worker processes of ``tests.distributed._worker`` and collect their results."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port(span: int = 40) -> int:
    """A free TCP port p such that p..p+span-1 were free when probed."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p + span >= 65535:
            continue
        ok = True
        for q in range(p + 1, p + span):
            with socket.socket() as s2:
                try:
                    s2.bind(("127.0.0.1", q))
                except OSError:
                    ok = False
                    break
        if ok:
            return p
    raise RuntimeError("no free port range")


def launch(scenario: str, world: int, timeout: float = 90, env: dict | None = None):
    """Run ``scenario`` on ``world`` processes; return (per-rank results, elapsed s, outputs).

    A port taken between probing and binding (parallel test workers) means one more try.
    """
    for attempt in range(3):
        results, elapsed, logs = _launch_once(scenario, world, timeout, env)
        if not any("EADDRINUSE" in log for log in logs):
            break
    return results, elapsed, logs


def _launch_once(scenario: str, world: int, timeout: float, env: dict | None):
    port = free_port()
    tmp = tempfile.mkdtemp(prefix=f"mccl_{scenario}_")
    out = os.path.join(tmp, "res")
    # Workers dump every thread's stack shortly before the kill, so a hang shows where it waits.
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_MUSA_FALLBACK": "silent",
                "MCCL_TEST_DUMP_AT": str(time.time() + max(1.0, timeout - 5)), **(env or {})}
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "tests.distributed._worker", scenario, str(r), str(world),
                               str(port), out], cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(world)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=max(1.0, timeout - (time.monotonic() - t0)))[0])
        except subprocess.TimeoutExpired:
            p.kill()
            logs.append(p.communicate()[0] + "\n<killed: timeout>")
    elapsed = time.monotonic() - t0
    results = []
    for r in range(world):
        try:
            with open(f"{out}.rank{r}.json") as f:
                results.append(json.load(f))
        except (OSError, ValueError):
            results.append(None)
    return results, elapsed, logs
