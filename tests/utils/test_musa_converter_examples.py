"""Convert each CUDA example with musa-converter and train it on musa for a few
steps: the losses must equal the unmodified script's losses on the CPU."""
import contextlib
import io
import os
import re
import runpy
import shutil
import subprocess
import sys

import pytest

from torch_musa.testing import gen_ip_port
from torch_musa.utils.musa_converter import cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples", "cuda")
SINGLE = ["train_cnn.py", "train_lm.py"]
STEPS = ["--steps", "3"]


def run_script(path, argv):
    """Run a script as __main__ in this process; return its stdout."""
    buf = io.StringIO()
    old = sys.argv
    sys.argv = [path, *argv]
    try:
        with contextlib.redirect_stdout(buf):
            runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv = old
    return buf.getvalue()


def losses(text):
    return [float(x) for x in re.findall(r"^step \d+ loss ([-0-9.eE+]+)", text, re.M)]


def assert_same_losses(got, want):
    assert len(want) == int(STEPS[1]) and len(got) == len(want), (got, want)
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    dst = tmp_path_factory.mktemp("examples") / "cuda"
    shutil.copytree(EXAMPLES, dst)
    names = sorted(n for n in os.listdir(dst) if n.endswith(".py"))
    assert cli.main(["-r", str(dst), "-l", *names, "--no-backup", "-q", "-j", "1"]) == 0
    return dst


def test_examples_use_cuda_idioms():
    src = {n: open(os.path.join(EXAMPLES, n)).read() for n in os.listdir(EXAMPLES) if n.endswith(".py")}
    joined = "\n".join(src.values())
    for idiom in ["argparse", "torch.cuda.is_available()", ".cuda()", '"cuda:0"',
                  "torch.cuda.amp.GradScaler", 'torch.autocast("cuda"', "torch.backends.cudnn.benchmark",
                  'backend = "nccl"', "DistributedDataParallel", "torch.cuda.set_device"]:
        assert idiom in joined, idiom


@pytest.mark.parametrize("name", SINGLE)
@pytest.mark.requires_host_driver(
    "the examples' cuda side trains in the same process, and PyTorch cannot run a CUDA backward once "
    "a PrivateUse1 backend is registered (pytorch/pytorch#161129)")
def test_converted_example_trains_on_musa_like_cpu(converted, name):
    cpu = run_script(os.path.join(EXAMPLES, name), STEPS)       # torch.cuda is unavailable here
    assert "device: cpu" in cpu
    text = (converted / name).read_text()
    assert text.startswith(text.split("import torch_musa")[0]) and "import torch_musa\n" in text
    code = re.sub(r'""".*?"""', "", text, count=1, flags=re.S)          # module docstring
    code = "\n".join(line.split("#")[0] for line in code.splitlines())     # comments
    code = code.replace("torch.backends.cuda.", "")                        # kept on purpose
    code = code.replace('"--no-cuda"', "").replace("(torch.cuda.amp)", "")    # CLI flag, help text
    assert re.findall(r"(?<![\w])cuda(?![\w])", code) == [], "leftover cuda"
    musa = run_script(str(converted / name), STEPS)
    assert "device: musa:0" in musa
    assert_same_losses(losses(musa), losses(cpu))


def test_converted_ddp_example_is_ported(converted):
    text = (converted / "train_ddp.py").read_text()
    compile(text, "train_ddp.py", "exec")
    for want in ['backend = "mccl" if torch.musa.is_available() else "gloo"',
                 'if backend == "mccl":', "torch.musa.set_device(local_rank)",
                 'torch.device(f"musa:{local_rank}")', 'device.type == "musa"',
                 "torch.musa.device_count()", "import torch_musa\n"]:
        assert want in text, want


@pytest.mark.slow
@pytest.mark.requires_devices(2)
def test_converted_ddp_example_trains_on_musa_like_cpu(converted):
    args = ["--world-size", "2", *STEPS]
    env = {**os.environ, "PYTHONPATH": REPO}
    cpu = subprocess.run([sys.executable, os.path.join(EXAMPLES, "train_ddp.py"), *args, "--port",
                          gen_ip_port()[1]], capture_output=True, text=True, env=env, timeout=120)
    musa = subprocess.run([sys.executable, str(converted / "train_ddp.py"), *args, "--port",
                           gen_ip_port()[1]], capture_output=True, text=True, env=env, timeout=120)
    assert cpu.returncode == 0 and musa.returncode == 0, musa.stderr[-2000:]
    assert "backend mccl" in musa.stdout
    assert_same_losses(losses(musa.stdout), losses(cpu.stdout))
