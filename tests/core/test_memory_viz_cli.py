"""docs/GUIDE.md's way to view a musa memory snapshot: the visualiser's subcommands it
names are the real ones, and the offline ones run on a musa snapshot."""
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow  # starts interpreters

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "GUIDE.md"


def viz(*args, env=None):
    r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", *args], capture_output=True,
                       text=True, env={**os.environ, **(env or {})}, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture
def snapshot(tmp_path):
    torch.musa.memory._record_memory_history(stacks="python")
    try:
        keep = torch.empty(3 << 20, dtype=torch.uint8, device="musa")
        gone = torch.empty(1000, device="musa")
        del gone
        path = tmp_path / "snap.pickle"
        torch.musa.memory._dump_snapshot(str(path))
        del keep
    finally:
        torch.musa.memory._record_memory_history(None)
    return path


def test_the_guide_names_the_real_subcommands():
    text = " ".join(GUIDE.read_text().split())
    listed = re.search(r"_memory_viz <subcommand> snap\.pickle`, subcommands (.*?) \(`segsum`", text).group(1)
    named = re.findall(r"`(\w+)`", listed)
    real = re.search(r"\{([\w,]+)\}", viz("--help")).group(1).split(",")
    assert sorted(named) == sorted(real)
    assert "segsum" not in real


@pytest.mark.requires_host_driver("the expected segment sizes are the host driver's caching "
                                   "allocator's (CUDA's lays the snapshot's segments out its own way)")
def test_offline_views_run_on_a_musa_snapshot(snapshot, tmp_path):
    stats = viz("stats", str(snapshot))
    assert "Summary of segments" in stats and "segments:" in stats
    trace = viz("trace", str(snapshot))  # the 3 MiB block made, the 1000 floats made and freed
    assert "[0:3.0MiB]" in trace and re.search(r"^del \w+ # 4\.0KiB", trace, re.M), trace
    # flamegraph.pl copied to ~/.cache (here: a stand-in that wraps its input) is all `segments` needs
    cache = tmp_path / "home" / ".cache"
    cache.mkdir(parents=True)
    script = cache / "flamegraph.pl"
    script.write_text(f"#!{sys.executable}\nimport sys\nprint('<svg>' + sys.stdin.read() + '</svg>')\n")
    script.chmod(0o755)
    out = tmp_path / "segments.svg"
    viz("segments", str(snapshot), "-o", str(out), env={"HOME": str(tmp_path / "home")})
    svg = out.read_text()
    assert svg.startswith("<svg>") and "active_allocated" in svg


def test_the_interactive_view_loads_its_scripts_from_a_cdn(snapshot):
    """Why the GUIDE sends the HTML views to a connected machine."""
    import pickle

    from torch.cuda import _memory_viz

    html = _memory_viz.trace_plot(pickle.loads(snapshot.read_bytes()))
    assert re.search(r'import .* from "https://[^"]*MemoryViz\.js"', html)
