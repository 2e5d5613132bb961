"""torch_musa.cuda_compat: unmodified CUDA scripts run on musa.

Everything that enables the layer runs in a fresh interpreter: enabling
patches torch process-wide, which must not leak into other tests."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(REPO, "examples", "cuda")
REBINDS_CUDA = pytest.mark.requires_host_driver("cuda_compat rebinds torch.cuda to musa, which the cuda "
                                                "driver itself runs on")


def python(code, env=None, timeout=180):
    full = {**os.environ, "PYTHONPATH": REPO, **(env or {})}
    for k, v in list(full.items()):
        if v is None:
            del full[k]
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=full, timeout=timeout)
    return r


API = r'''
import io, os, warnings
import torch
import torch_musa
# As torch_musa/__init__ imports it (torch_musa still initialising): importing
# does not enable; maybe_enable_from_env() decides.
torch_musa.__spec__._initializing = True
import torch_musa.cuda_compat as cc
torch_musa.__spec__._initializing = False
from torch_musa.utils.musa_converter import review_items

assert not cc.is_enabled()
os.environ["TORCH_MUSA_CUDA_COMPAT"] = "1"  # too late: read once, at import
assert not cc.maybe_enable_from_env() and not cc.is_enabled()
cc.enable()
assert cc.is_enabled()
# torch.cuda answers from torch.musa
assert torch.cuda.is_available() and torch.cuda.device_count() == torch.musa.device_count() == 2
assert torch.cuda.get_device_name(0) == torch.musa.get_device_name(0)
torch.cuda.set_device(1); assert torch.cuda.current_device() == 1 == torch.musa.current_device()
torch.cuda.set_device("cuda:0"); assert torch.musa.current_device() == 0
with torch.cuda.device(1):
    assert torch.cuda.current_device() == 1
with torch.cuda.device(torch.device("cuda:1")):
    assert torch.musa.current_device() == 1
torch.cuda.manual_seed_all(0); torch.cuda.synchronize(); torch.cuda.empty_cache()
torch.cuda.nvtx.range_push("step"); torch.cuda.nvtx.range_pop()
with torch.cuda.nvtx.range("fwd"):
    pass
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record(); torch.ones(4, device="cuda").sum(); end.record(); end.synchronize()
assert start.elapsed_time(end) >= 0

# device arguments
dev = lambda t: str(t.device)
assert dev(torch.randn(2, device="cuda")) == "musa:0"
assert dev(torch.zeros(2, device="cuda:1")) == "musa:1"
assert dev(torch.empty(2, device=torch.device("cuda", 1))) == "musa:1"
assert dev(torch.tensor([1.0], device="cuda")) == "musa:0"
x = torch.ones(3)
assert dev(x.cuda()) == "musa:0" and dev(x.cuda(1)) == "musa:1" and dev(x.cuda("cuda:1")) == "musa:1"
assert dev(x.cuda(non_blocking=True)) == "musa:0"
assert dev(x.to("cuda")) == "musa:0" and dev(x.to(torch.device("cuda:1"))) == "musa:1"
assert dev(x.to("cuda", torch.float64)) == "musa:0" and x.to("cuda", torch.float64).dtype == torch.float64
assert dev(x.to(device="cuda:1", dtype=torch.float16)) == "musa:1"
assert dev(torch.zeros_like(x, device="cuda")) == "musa:0"
assert dev(x.new_zeros(2, device="cuda")) == "musa:0"
m = torch.nn.Linear(2, 2).cuda(); assert dev(m.weight) == "musa:0"
m = torch.nn.Linear(2, 2).to("cuda:1"); assert dev(m.weight) == "musa:1"
m = torch.nn.Linear(2, 2).to(device=torch.device("cuda")); assert dev(m.weight) == "musa:0"
assert torch.cuda.memory_allocated(0) > 0
g = torch.Generator(device="cuda"); assert str(g.device) == "musa:0"
assert isinstance(g, torch.Generator) and isinstance(torch.default_generator, torch.Generator)
assert torch.randn(2, device="cuda", generator=g.manual_seed(1)).device.type == "musa"
torch.set_default_device("cuda"); assert dev(torch.ones(1)) == "musa:0"; torch.set_default_device("cpu")

# autocast / GradScaler objects go to musa
assert torch.autocast("cuda", enabled=False).device == "musa"
assert torch.amp.autocast(device_type="cuda", enabled=False).device == "musa"
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    assert torch.cuda.amp.autocast(enabled=False).device == "musa"
    assert torch.cuda.amp.GradScaler()._device == "musa"
assert torch.amp.GradScaler("cuda")._device == "musa"
scaler = torch.amp.GradScaler("cuda", init_scale=4.0)
w = torch.nn.Parameter(torch.ones(2, device="cuda"))
opt = torch.optim.SGD([w], lr=0.1)
scaled = scaler.scale((w * 2).sum())
assert scaled.device.type == "musa" and scaled.item() == 16.0
# GradScaler.unscale_ computes in float64: a profile without it (MTT S80) needs
# TORCH_USE_MUSA_DOUBLE_CAST=1, which the test sets (the review list says so).
scaled.backward(); scaler.step(opt); scaler.update()
assert torch.allclose(w.detach().cpu(), torch.full((2,), 0.8))

# torch.load: map_location strings, and checkpoints saved on a CUDA machine
buf = io.BytesIO(); torch.save({"w": torch.arange(3.0)}, buf)
buf.seek(0); assert dev(torch.load(buf, map_location="cuda")["w"]) == "musa:0"
buf.seek(0); assert dev(torch.load(buf, map_location=torch.device("cuda:1"))["w"]) == "musa:1"
import torch.serialization as ser
orig_tag = ser.location_tag
ser.location_tag = lambda storage: "cuda:1"          # what a CUDA machine writes
buf = io.BytesIO(); torch.save({"w": torch.arange(3.0)}, buf)
ser.location_tag = orig_tag
buf.seek(0); t = torch.load(buf)["w"]; assert dev(t) == "musa:1" and t.tolist() == [0.0, 1.0, 2.0]
buf.seek(0); assert dev(torch.load(buf, map_location={"cuda:1": "cuda:0"})["w"]) == "musa:0"
buf.seek(0); assert dev(torch.load(buf, map_location=lambda s, loc: None)["w"]) == "musa:1"
buf.seek(0); assert dev(torch.load(buf, map_location="cpu")["w"]) == "cpu"

# distributed backend names
from torch_musa import cuda_compat as c2
assert c2._backend("nccl") == "mccl" and c2._backend("cpu:gloo,cuda:nccl") == "cpu:gloo,musa:mccl"
assert c2._backend("gloo") == "gloo"
import torch.distributed as dist
if "mccl" not in dist.Backend.backend_list:      # a clear message, not "Invalid backend"
    try:
        dist.init_process_group("nccl", rank=0, world_size=1, store=dist.HashStore())
    except RuntimeError as e:
        assert "'mccl'" in str(e) and "does not register" in str(e), e
    else:
        raise SystemExit("nccl accepted without mccl")

# CUDA_VISIBLE_DEVICES (set by the test) was copied for the runtime and child processes
assert os.environ["MUSA_VISIBLE_DEVICES"] == "1"
assert os.environ["PYTORCH_MUSA_ALLOC_CONF"] == "max_split_size_mb:64"   # CUDA-only option dropped
from torch_musa.config.variables import visible_devices
assert visible_devices(os.environ["MUSA_VISIBLE_DEVICES"], 2) == (1,)

# the documented limitations are the converter's review list
assert [x["id"] for x in cc.limitations()] == [i.id for i in review_items()]
# ... returned as data, printed as a table: one row per limitation, its prose wrapped
lims = cc.limitations()
assert isinstance(lims, list) and set(lims[0]) == {"id", "title", "runtime", "converter"}
table = str(lims).splitlines()
assert table[0].split() == ["id", "limitation", "under", "cuda_compat"] and set(table[1]) == {"-", " "}
assert [line.split()[0] for line in table[2:] if not line.startswith(" ")] == [x["id"] for x in lims]
assert max(map(len, table)) <= 100
assert " ".join(" ".join(table).split()).count(lims[1]["runtime"]) == 1
assert not torch.randn(1, device="cuda").is_cuda                      # documented
assert torch.randn(1, device="cuda").device.type == "musa"            # documented

# disable() restores stock behaviour; enable() turns it back on
cc.disable()
assert not torch.cuda.is_available() and not cc.is_enabled()
try:
    torch.zeros(1, device="cuda")
except (AssertionError, RuntimeError):
    pass
else:
    raise SystemExit("cuda device accepted after disable()")
assert cc.maybe_enable_from_env() is False and not cc.is_enabled()
cc.enable()
assert torch.cuda.is_available()
assert torch.zeros(1, device="cuda").device.type == "musa"
print("API-OK")
'''


@pytest.mark.slow
@REBINDS_CUDA
def test_api_translation():
    r = python(API, env={"CUDA_VISIBLE_DEVICES": "1", "MUSA_VISIBLE_DEVICES": None,
                         "TORCH_MUSA_CUDA_COMPAT": None, "TORCH_USE_MUSA_DOUBLE_CAST": "1",
                         "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:64",
                         "PYTORCH_MUSA_ALLOC_CONF": None})
    assert r.returncode == 0 and "API-OK" in r.stdout, r.stderr[-3000:]
    # CUDA_VISIBLE_DEVICES was read after the runtime started in this process: it says so.
    assert "applies to child processes" in r.stderr
    assert "['expandable_segments:True'] have no musa equivalent" in r.stderr


def _cpu_losses(name):
    # The unmodified script on the CPU (no compat layer in this process).
    sys.path.insert(0, os.path.join(REPO, "tests", "utils"))
    try:
        from test_musa_converter_examples import losses, run_script
    finally:
        sys.path.pop(0)
    out = run_script(os.path.join(EXAMPLES, name), ["--steps", "3"])
    assert "device: cpu" in out
    return losses(out)


@pytest.mark.slow
@REBINDS_CUDA
@pytest.mark.parametrize("name", ["train_cnn.py", "train_lm.py"])
def test_unmodified_example_runs_on_musa(name, tmp_path):
    extra = ["--save", str(tmp_path / "ckpt.pt")] if name == "train_cnn.py" else []
    r = python(f'''
        import runpy, sys
        import torch_musa.cuda_compat
        sys.argv = [{name!r}, "--steps", "3", *{extra!r}]
        runpy.run_path({os.path.join(EXAMPLES, name)!r}, run_name="__main__")
    ''')
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"on musa:0|memory allocated", r.stdout), r.stdout
    if extra:
        assert "checkpoint reloaded on musa:0" in r.stdout
    got = [float(x) for x in re.findall(r"^step \d+ loss ([-0-9.eE+]+)", r.stdout, re.M)]
    want = _cpu_losses(name)
    assert len(got) == len(want) == 3
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)


@pytest.mark.slow
@REBINDS_CUDA
def test_env_switch_with_autoload():
    code = ('import torch\nx = torch.ones(2, device="cuda")\n'
            'print(torch.cuda.is_available(), x.device)\n')
    r = python(code, env={"TORCH_MUSA_CUDA_COMPAT": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "musa:0"]
    r = python("import torch, torch_musa\nprint(torch.cuda.is_available())\n",
               env={"TORCH_MUSA_CUDA_COMPAT": None})
    assert r.stdout.strip() == "False"
    # the configuration reads CUDA_VISIBLE_DEVICES for the unset MUSA_VISIBLE_DEVICES
    r = python("import torch\nprint(torch.cuda.device_count(), torch.musa.device_count())\n",
               env={"TORCH_MUSA_CUDA_COMPAT": "1", "CUDA_VISIBLE_DEVICES": "1",
                    "MUSA_VISIBLE_DEVICES": None})
    assert r.stdout.split() == ["1", "1"], r.stderr[-2000:]



ENV_AGREEMENT = r'''
import json, os, warnings
from torch_musa.config import runtime
from torch_musa.config.variables import CUDA_ENV, VARIABLES
given = dict(os.environ)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch_musa.cuda_compat  # enables: apply_env_aliases copies the CUDA names
    config = runtime._with_cuda_names(given)  # what the configuration reads under the switch
print(json.dumps({"copied": {m: os.environ.get(m) for m in CUDA_ENV.values()},
                  "config": {v.name: config.get(v.name) for v in VARIABLES.values() if v.cuda_twin},
                  "warnings": [str(w.message) for w in caught if "ALLOC_CONF" in str(w.message)]}))
'''


@REBINDS_CUDA
def test_config_and_cuda_compat_read_every_cuda_name_alike():
    """Issue 34, item 3: one table (cuda_mapping.yaml's env:), one translation. For every
    entry, cuda_compat copies the CUDA value to the MUSA name; for the variables the
    configuration reads under TORCH_MUSA_CUDA_COMPAT, it reads the same value, silently,
    where cuda_compat warns about the dropped allocator options."""
    import json

    from torch_musa.config.variables import CUDA_ENV

    special = {"CUDA_VISIBLE_DEVICES": "1",
               "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:64"}
    given = {cuda: special.get(cuda, f"/set/as/{cuda}") for cuda in CUDA_ENV}
    r = python(ENV_AGREEMENT, env={**given, **{musa: None for musa in CUDA_ENV.values()},
                                   "TORCH_MUSA_CUDA_COMPAT": None})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    expected = {musa: given[cuda] for cuda, musa in CUDA_ENV.items()}
    expected["PYTORCH_MUSA_ALLOC_CONF"] = "max_split_size_mb:64"
    assert out["copied"] == expected
    assert out["config"] and all(out["copied"][name] == value for name, value in out["config"].items())
    assert out["warnings"] == ["torch_musa.cuda_compat: PYTORCH_CUDA_ALLOC_CONF options "
                               "['expandable_segments:True'] have no musa equivalent and are ignored"]

DEVICE_SPELLINGS = r'''
import torch, torch_musa
from torch_musa import cuda_compat as cc
assert cc.is_enabled()
cuda = torch.cuda
# CUDA's spellings of a device, and the musa index each names (device 0 is current).
spellings = [("cuda", 0), ("cuda:0", 0), ("cuda:1", 1), (torch.device("cuda"), 0),
             (torch.device("cuda", 1), 1), (0, 0), (1, 1)]
x = torch.ones(1 << 10, device="cuda:1")
for d, i in spellings:
    assert cuda.Stream(device=d).device == torch.device("musa", i), d
    assert cuda.Stream(d, priority=-1).device_index == i, d
    assert cuda.ExternalStream(5, device=d).device_index == i, d
    assert cuda.current_stream(d).device_index == cuda.default_stream(device=d).device_index == i
    with cuda.device(d):
        assert cuda.current_device() == i, d
    assert cuda.current_device() == 0
    cuda.set_device(d); assert cuda.current_device() == i; cuda.set_device(0)
    cuda.synchronize(d); cuda.synchronize(device=d)
    assert cuda.memory_allocated(d) == cuda.memory_allocated(device=d) \
        == torch.musa.memory_allocated(i)
    assert cuda.max_memory_allocated(device=d) == torch.musa.max_memory_allocated(i)
    assert cuda.memory_reserved(d) == torch.musa.memory_reserved(i)
    assert cuda.mem_get_info(d) == torch.musa.mem_get_info(i)
    stats = cuda.memory_stats(device=d)
    assert stats["allocated_bytes.all.current"] == torch.musa.memory_allocated(i)
    cuda.reset_peak_memory_stats(d)
    assert cuda.get_device_properties(d).uuid == torch.musa.get_device_properties(i).uuid
    assert cuda.get_device_properties(device=d).uuid == torch.musa.get_device_properties(i).uuid
    assert cuda.get_device_capability(d) == torch.musa.get_device_capability(i)
    assert cuda.get_rng_state(d).equal(torch.musa.get_rng_state(i))
assert torch.musa.memory_allocated(1) >= x.nbytes > torch.musa.memory_allocated(0)
assert cuda.can_device_access_peer("cuda:0", peer_device=torch.device("cuda", 1))
cuda.set_device(-1); assert cuda.current_device() == 0          # as on CUDA: no device, no-op
with cuda.device(-1):
    assert cuda.current_device() == 0
with cuda.stream(cuda.Stream("cuda:1")):
    assert cuda.current_device() == 1
assert isinstance(cuda.device(0), cuda.device) and isinstance(cuda.current_stream(), cuda.Stream)
for bad, err in (("cpu", "Expected a musa device, but got: cpu"),
                 ("cuda:7", "valid indices are 0..1")):
    try:
        cuda.Stream(device=bad)
    except (ValueError, IndexError) as e:
        assert err in str(e), e
    else:
        raise SystemExit(f"Stream(device={bad!r}) accepted")
# the default generators are musa's, as torch.cuda's are CUDA's
assert [str(g.device) for g in cuda.default_generators] == ["musa:0", "musa:1"]
cuda.manual_seed_all(7); assert cuda.default_generators[1].initial_seed() == 7

# timm's data prefetcher, unmodified
device = torch.device("cuda")
stream = cuda.Stream(device=device)
batch = torch.arange(8.0).reshape(2, 4).pin_memory()
with cuda.stream(stream):
    nxt = batch.to(device=device, non_blocking=True).float().sub_(1.0).div_(2.0)
cuda.current_stream(device=device).wait_stream(stream)
nxt.record_stream(cuda.current_stream())
assert nxt.device == torch.device("musa", 0) and nxt.cpu().equal((batch - 1) / 2)

# PyTorch takes the device for CUDA, not ROCm, and finds every property it reads
from packaging.version import Version
assert torch.version.hip is None and Version(torch.version.cuda) >= Version("12")
from torch._inductor.codecache import CacheBase
assert CacheBase.get_system()["device"]["name"] == "MTT S4000"     # read gcnArchName before
from torch._inductor.runtime.hints import DeviceProperties
hints = DeviceProperties.create(torch.device("cuda", 1))
assert (hints.multi_processor_count, hints.regs_per_multiprocessor, hints.warp_size) \
    == (128, 65536, 32)
p = cuda.get_device_properties("cuda:1")
assert p.gcnArchName == p.name and p.max_threads_per_block <= p.max_threads_per_multi_processor
cc.disable()
assert torch.version.cuda is None
try:
    torch.musa.Stream(device="cuda")
except ValueError:
    pass
else:
    raise SystemExit("'cuda' still names a musa device after disable()")
print("SPELLINGS-OK")
'''


@pytest.mark.slow
@REBINDS_CUDA
@pytest.mark.requires_devices(2)  # cuda:1
def test_every_torch_cuda_device_argument_takes_cuda_spellings():
    r = python(DEVICE_SPELLINGS, env={"TORCH_MUSA_CUDA_COMPAT": "1"})
    assert r.returncode == 0 and "SPELLINGS-OK" in r.stdout, r.stderr[-3000:]


DATA_PARALLEL = r'''
import copy, importlib
import torch
from torch import nn
from torch_musa import cuda_compat as cc
assert cc.is_enabled()
data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")
comm = importlib.import_module("torch_musa.core.comm")
stock_type = torch._utils._get_available_device_type


class Net(nn.Module):
    """Makes tensors on "cuda" inside forward, as CUDA code does (in DataParallel's
    replica threads, which do not inherit the caller's TorchFunctionMode)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 4)

    def forward(self, x):
        shift = torch.arange(4, dtype=x.dtype, device="cuda") + torch.ones(1).cuda()
        return self.linear(x) + shift.to(x.device)


torch.manual_seed(0)
cpu = Net()
x = torch.randn(10, 6)
want = cpu(x)
want.square().sum().backward()
# PyTorch's ImageNet example: wrap first, then move with .cuda()
model = copy.deepcopy(cpu)
dp = nn.DataParallel(model).cuda()
assert dp.device_ids == [0, 1] and dp.src_device_obj == torch.device("musa", 0)
got = dp(x.cuda())
assert got.device == torch.device("musa", 0)
got.square().sum().backward()
TOL = dict(rtol=1e-5, atol=1e-5)   # the batch split adds the weight gradient in another order
torch.testing.assert_close(got.cpu(), want.detach(), **TOL)
for (name, p), q in zip(model.named_parameters(), cpu.parameters()):
    torch.testing.assert_close(p.grad.cpu(), q.grad, **TOL, msg=name)

# device objects and an output device, spelled for CUDA
dp = nn.DataParallel(copy.deepcopy(cpu).to("cuda:1"), device_ids=[torch.device("cuda:1"), 0],
                     output_device="cuda:0")
assert dp.src_device_obj == torch.device("musa", 1)
out = dp(x.cuda(1))
assert out.device == torch.device("musa", 0)
torch.testing.assert_close(out.cpu(), want.detach(), **TOL)

# the replicas keep the caller's autocast along with the translation
class Half(Net):
    def forward(self, x):
        y = self.linear(x)      # float16 under autocast
        return y + torch.arange(4, dtype=y.dtype, device="cuda").to(x.device)


half = Half()
half.load_state_dict(cpu.state_dict())
with torch.autocast("cuda", dtype=torch.float16):
    out = nn.DataParallel(half.cuda())(x.cuda())
assert out.dtype == torch.float16
torch.testing.assert_close(out.float().cpu(), want.detach() - 1, rtol=1e-2, atol=1e-2)

# disable() puts torch's function back where it was bound
cc.disable()
assert torch._utils._get_available_device_type is data_parallel._get_available_device_type
assert torch._utils._get_available_device_type is not stock_type   # bound by enable()
try:
    nn.DataParallel(Net())   # forward makes tensors on "cuda": refused without the layer
    nn.DataParallel(copy.deepcopy(cpu).to("musa"))(x.to("musa"))
except (RuntimeError, AssertionError) as e:
    assert "cuda" in str(e).lower(), e
else:
    raise SystemExit("'cuda' translated in the replicas after disable()")
assert all(f.__name__ != "_compat_mode_for_workers" for f in comm._worker_state)
print("DP-OK")
'''


@pytest.mark.slow
@pytest.mark.requires_devices(2)  # cuda:1
def test_data_parallel_under_the_layer():
    """nn.DataParallel takes musa as its device type and the replica threads
    translate "cuda"; disable() undoes both."""
    r = python(DATA_PARALLEL, env={"TORCH_MUSA_CUDA_COMPAT": "1"})
    assert r.returncode == 0 and "DP-OK" in r.stdout, r.stderr[-3000:]


STREAMS_ACCELERATOR = r'''
import torch
from torch_musa import cuda_compat as cc
assert cc.is_enabled()
Stream, Event = torch.Stream, torch.Event
for d, i in (("cuda", 0), ("cuda:1", 1), (torch.device("cuda", 1), 1), (1, 1)):
    s = torch.Stream(device=d)
    assert s.device == torch.device("musa", i) and s.device_index == i, d
    assert torch.Stream(d, priority=-1).device_index == i
    assert torch.accelerator.current_stream(d).device_index == i
    torch.accelerator.synchronize(d)
    assert torch.accelerator.memory_allocated(d) == torch.musa.memory_allocated(i)
e = torch.Event(device="cuda", enable_timing=True)
s = torch.Stream(device="cuda:1")
x = torch.ones(256, device="cuda:1")
e.record(s); e.synchronize()
assert e.device == torch.device("musa", 1) and e.query()
torch.accelerator.set_device_index("cuda:1"); assert torch.musa.current_device() == 1
torch.accelerator.set_device_index(torch.device("cuda", 0)); assert torch.musa.current_device() == 0
# the stand-ins are torch's classes to every check, and can be derived from
assert isinstance(s, torch.Stream) and isinstance(torch.musa.current_stream(), torch.Stream)
assert isinstance(e, torch.Event) and issubclass(torch.musa.Stream, torch.Stream)
assert isinstance(None, torch.Stream | None) and torch.Stream.__name__ == "Stream"


class Timed(torch.Event):
    def __init__(self, device=None):
        super().__init__()
        self.tag = "mine"


t = Timed("cuda:1")
assert isinstance(t, Event) and t.tag == "mine" and t.device.type == "musa"   # index: at record
t.record(s)
assert t.device == torch.device("musa", 1)
for bad in ("cuda:7", "musa:7"):
    try:
        torch.Stream(device=bad)
    except (RuntimeError, ValueError, IndexError):
        pass
    else:
        raise SystemExit(f"torch.Stream(device={bad!r}) accepted")
cc.disable()
assert type(torch.Stream) is type and torch.Stream is not Stream
for make in (lambda: torch.Stream(device="cuda"), lambda: torch.Event(device="cuda"),
             lambda: torch.accelerator.current_stream("cuda")):
    try:
        make()
    except (RuntimeError, ValueError):
        pass
    else:
        raise SystemExit("'cuda' still names a musa device after disable()")
print("STREAMS-OK")
'''


@pytest.mark.slow
@pytest.mark.requires_devices(2)  # cuda:1
def test_torch_stream_event_and_accelerator_take_cuda_spellings():
    r = python(STREAMS_ACCELERATOR, env={"TORCH_MUSA_CUDA_COMPAT": "1"})
    assert r.returncode == 0 and "STREAMS-OK" in r.stdout, r.stderr[-3000:]
