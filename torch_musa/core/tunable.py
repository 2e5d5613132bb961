"""``torch.musa.tunable``: torch.cuda.tunable's TunableOp interface for musa.

TunableOp picks, per GEMM shape, the fastest of several BLAS kernels and keeps the
choices in a results file. Under the cuda driver musa's GEMMs are cuBLAS's, so every
function here is torch.cuda.tunable's own. Under the host driver there is one kernel
per GEMM (the host's), so there is nothing to choose between: tuning records no
results and ``tune_gemm_in_file`` tunes nothing. What is kept is everything a script
or a results file relies on: the switches and limits with torch.cuda.tunable's
defaults, environment variables and argument checks, the filename with the device
ordinal inserted (``%d`` or before the last dot), and results files in TunableOp's
format (``Validator,KEY,VALUE`` lines, then ``op,params,solution[,time]`` lines), read
into ``get_results()`` and written back by ``write_file``. Validators this driver does
not have (a CUDA file's ``CUBLASLT_VERSION``, ``CUDA_DEVICE``) are warned about and
ignored, as their solutions choose no kernel here; ``PT_VERSION`` must match.
"""
from __future__ import annotations

import atexit
import functools
import glob
import shutil
import threading
import warnings

import torch

from torch_musa._driver import pick
from torch_musa.config import CONFIG
from torch_musa.core.device import (current_device, device_count, get_device_capability,
                                    get_device_name, get_device_properties)

__all__ = [
    "enable", "is_enabled", "tuning_enable", "tuning_is_enabled",
    "record_untuned_enable", "record_untuned_is_enabled",
    "set_max_tuning_duration", "get_max_tuning_duration",
    "set_max_tuning_iterations", "get_max_tuning_iterations",
    "set_filename", "get_filename", "get_results", "get_validators",
    "write_file_on_exit", "write_file", "read_file",
    "tune_gemm_in_file", "mgpu_tune_gemm_in_file",
    "set_rotating_buffer_size", "get_rotating_buffer_size", "set_numerical_check_tolerances",
]

_MB = 1024 * 1024
_DEFAULT_FILENAME = "tunableop_results.csv"


def _cuda(name: str):
    """torch.cuda.tunable's function ``name`` (the cuda driver's TunableOp)."""
    fn = getattr(torch.cuda.tunable, name, None)
    if fn is None:
        raise RuntimeError(f"torch.musa.tunable.{name}: this PyTorch's torch.cuda.tunable has no "
                           f"{name} (it appends results to the file as it tunes)")
    return fn


def _own(fn):
    """The host driver's TunableOp: musa's own function."""
    return fn


def _torch_cuda(fn):
    """The cuda driver's TunableOp: torch.cuda.tunable's function of the same name."""
    return _cuda(fn.__name__)


#: Whose TunableOp a public function runs, asked at each call.
_implementation = pick(host=_own, cuda=_torch_cuda)


def _twin(fn):
    """Under the cuda driver, torch.cuda.tunable's function of the same name runs instead."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        return _implementation(fn)(*args, **kwargs)
    return run


def _env(name: str) -> str | None:
    """PyTorch's TunableOp variable ``name`` as set at import (torch_musa.config reads it)."""
    return CONFIG.pytorch_env.get(name)


def _env_int(name: str) -> int | None:
    text = _env(name)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None


def _check_bool(what: str, value) -> bool:
    if not isinstance(value, bool):
        raise RuntimeError(f"musa_tunableop_{what} expects a bool, but got {type(value).__name__}")
    return value


def _check_int(what: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RuntimeError(f"musa_tunableop_{what} expects an int, but got {type(value).__name__}")
    return value


class _Context:
    """The process's TunableOp state (at::cuda::tunable::TuningContext's fields and defaults)."""

    def __init__(self):
        self.lock = threading.RLock()
        self.enabled = False
        self.tuning = True
        self.record_untuned = False
        self.max_duration_ms = 30
        self.max_iterations = 100
        self.rotating_buffer = -1  # bytes; negative: the device's L2 cache size
        self.numerics = (False, 1e-5, 1e-5)
        self.filename = ""
        self.results: dict[str, dict[str, tuple[str, float]]] = {}
        self.count_from_file = 0
        self.manager_ready = False
        self.write_on_exit = True

    def manager(self) -> dict[str, dict[str, tuple[str, float]]]:
        """The results, reading the results file the first time (as TunableOp does on first use)."""
        with self.lock:
            if not self.manager_ready:
                self.manager_ready = True
                if not self.filename:
                    set_filename(_env("PYTORCH_TUNABLEOP_FILENAME") or _DEFAULT_FILENAME, True)
                if self.filename and not record_untuned_is_enabled():
                    _read(self.filename)
            return self.results

    def size(self) -> int:
        return sum(len(m) for m in self.results.values())


_ctx = _Context()


@_twin
def enable(val: bool = True) -> None:
    """Switch TunableOp on or off (``PYTORCH_TUNABLEOP_ENABLED=1`` keeps it on)."""
    _ctx.enabled = _check_bool("enable", val)


@_twin
def is_enabled() -> bool:
    return _env("PYTORCH_TUNABLEOP_ENABLED") == "1" or _ctx.enabled


@_twin
def tuning_enable(val: bool = True) -> None:
    """Allow tuning a GEMM that has no result yet (on by default; ``PYTORCH_TUNABLEOP_TUNING=0``
    turns it off). On the host driver tuning finds one kernel and records nothing."""
    _ctx.tuning = _check_bool("tuning_enable", val)


@_twin
def tuning_is_enabled() -> bool:
    return _env("PYTORCH_TUNABLEOP_TUNING") != "0" and _ctx.tuning


@_twin
def record_untuned_enable(val: bool = True) -> None:
    """Record untuned GEMMs for offline tuning (``PYTORCH_TUNABLEOP_RECORD_UNTUNED=1``)."""
    _ctx.record_untuned = _check_bool("record_untuned_enable", val)


@_twin
def record_untuned_is_enabled() -> bool:
    return _env("PYTORCH_TUNABLEOP_RECORD_UNTUNED") == "1" or _ctx.record_untuned


@_twin
def set_max_tuning_duration(duration: int) -> None:
    """Milliseconds to spend tuning one solution (30; negative counts as 0)."""
    _ctx.max_duration_ms = max(0, _check_int("set_max_tuning_duration", duration))


@_twin
def get_max_tuning_duration() -> int:
    env = _env_int("PYTORCH_TUNABLEOP_MAX_TUNING_DURATION_MS")
    return max(0, env) if env is not None else _ctx.max_duration_ms


@_twin
def set_max_tuning_iterations(iterations: int) -> None:
    """Iterations to spend tuning one solution (100; negative counts as 0)."""
    _ctx.max_iterations = max(0, _check_int("set_max_tuning_iterations", iterations))


@_twin
def get_max_tuning_iterations() -> int:
    env = _env_int("PYTORCH_TUNABLEOP_MAX_TUNING_ITERATIONS")
    return max(0, env) if env is not None else _ctx.max_iterations


@_twin
def set_filename(filename: str, insert_device_ordinal: bool = False) -> None:
    """The results file. With ``insert_device_ordinal`` the current device's index replaces
    ``%d``, or goes before the last ``.``, or at the end (one file per device and process)."""
    if not isinstance(filename, str):
        raise RuntimeError(f"musa_tunableop_set_filename expects a string, but got {type(filename).__name__}")
    _check_bool("set_filename", insert_device_ordinal)
    if filename and insert_device_ordinal:
        dev = str(current_device())
        if "%d" in filename:
            filename = filename.replace("%d", dev, 1)
        elif "." in filename:
            dot = filename.rfind(".")
            filename = filename[:dot] + dev + filename[dot:]
        else:
            filename += dev
    _ctx.filename = filename


@_twin
def get_filename() -> str:
    """The results file ('' until set or until TunableOp first reads its results)."""
    return _ctx.filename


@_twin
def get_results() -> tuple[tuple[str, str, str, float], ...]:
    """Every result as ``(op, params, solution, time_ms)``: those read from results files (the
    host driver tunes nothing, so it adds none of its own)."""
    with _ctx.lock:
        return tuple((op, params, sol, t) for op, m in _ctx.manager().items()
                     for params, (sol, t) in m.items())


@_twin
def get_validators() -> tuple[tuple[str, str], ...]:
    """``(key, value)`` pairs a results file must match: the PyTorch version and the device
    (``MUSA_DEVICE``: ``major.minor:name``, as CUDA's ``CUDA_DEVICE``)."""
    return tuple(_validators().items())


def _validators() -> dict[str, str]:
    major, minor = get_device_capability()
    return {"PT_VERSION": torch.__version__.split("+")[0],
            "MUSA_DEVICE": f"{major}.{minor}:{get_device_name()}"}


def _read(filename: str) -> bool:
    try:
        with open(filename) as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    validators: dict[str, str] = {}
    results: dict[str, dict[str, tuple[str, float]]] = {}
    for line in lines:
        if not line:
            continue
        parts = line.split(",")
        if parts[0] == "Validator" and len(parts) >= 3:
            validators[parts[1]] = parts[2]
        elif len(parts) >= 3:
            try:
                t = float(parts[3]) if len(parts) >= 4 else 0.0
            except ValueError:
                t = 0.0  # C's atof: what does not parse is 0
            results.setdefault(parts[0], {}).setdefault(parts[1], (parts[2], t))
    ours = _validators()
    if "PT_VERSION" not in validators:
        warnings.warn(f"TunableOp results file {filename} has no PT_VERSION validator; not loaded",
                      stacklevel=3)
        return False
    for key, value in validators.items():
        if key in ours and ours[key] != value:
            warnings.warn(f"TunableOp results file {filename}: validator {key} is {value!r}, this "
                          f"process has {ours[key]!r}; not loaded", stacklevel=3)
            return False
    foreign = [f"{k}={v}" for k, v in validators.items() if k not in ours]
    if foreign:
        warnings.warn(f"TunableOp results file {filename}: validators {', '.join(foreign)} name "
                      f"what the musa host driver does not have; ignored", stacklevel=3)
    with _ctx.lock:
        for op, m in results.items():  # results already held win, as TunableOp's merge
            held = _ctx.results.setdefault(op, {})
            for params, entry in m.items():
                held.setdefault(params, entry)
        _ctx.count_from_file = _ctx.size()
    return True


@_twin
def read_file(filename: str | None = None) -> bool:
    """Load results from a TunableOp file (``get_filename()`` when not given). False when the
    file cannot be opened or its validators do not match."""
    if filename is not None and not isinstance(filename, str):
        raise RuntimeError(f"musa_tunableop_read_file expects a string, but got {type(filename).__name__}")
    return _read(filename or get_filename())


@_twin
def write_file(filename: str | None = None) -> bool:
    """Write the validators and results to ``filename`` (``get_filename()`` when not given),
    as older torch.cuda.tunable releases do; False when it cannot be written."""
    if filename is not None and not isinstance(filename, str):
        raise RuntimeError(f"musa_tunableop_write_file expects a string, but got {type(filename).__name__}")
    with _ctx.lock:
        results = _ctx.manager()
        target = filename or get_filename()
        lines = [f"Validator,{k},{v}" for k, v in _validators().items()]
        lines += [f"{op},{params},{sol},{t}" for op, m in results.items()
                  for params, (sol, t) in m.items()]
        try:
            with open(target, "w") as f:
                f.write("".join(line + "\n" for line in lines))
        except OSError:
            return False
        return True


@_twin
def write_file_on_exit(val: bool) -> None:
    """At exit, rewrite the results file when TunableOp and tuning are on and there are more
    results than were read (older torch.cuda.tunable releases; on by default)."""
    _ctx.write_on_exit = _check_bool("write_file_on_exit", val)


def _write_at_exit() -> None:
    """Musa's own TunableOp's write at exit (torch.cuda.tunable's writes its own)."""
    if not (_ctx.write_on_exit and _ctx.manager_ready):
        return
    if is_enabled() and tuning_is_enabled() and get_filename() and _ctx.count_from_file < _ctx.size():
        write_file()


def _nothing_at_exit() -> None:
    """The cuda driver's: torch.cuda.tunable writes its own results."""


atexit.register(pick(host=_write_at_exit, cuda=_nothing_at_exit))


@_twin
def set_rotating_buffer_size(buffer_size: int) -> None:
    """Rotating buffer in MB (0: off; negative: the device's L2 cache size)."""
    _ctx.rotating_buffer = _check_int("set_rotating_buffer_size", buffer_size) * _MB


@_twin
def get_rotating_buffer_size() -> int:
    """The rotating buffer in bytes (the device's L2 cache size unless set non-negative)."""
    env = _env_int("PYTORCH_TUNABLEOP_ROTATING_BUFFER_SIZE")
    size = env * _MB if env is not None else _ctx.rotating_buffer
    if size < 0:
        return get_device_properties(current_device()).L2_cache_size
    return size


@_twin
def set_numerical_check_tolerances(enable: bool, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """Compare each candidate's output with the default kernel's within atol/rtol (both > 0)."""
    if not (atol > 0.0 and rtol > 0.0):
        raise RuntimeError(f"Numerical check tolerances must be positive (atol={atol}, rtol={rtol})")
    _ctx.numerics = (bool(enable), float(atol), float(rtol))


def _gemm_lines(filename: str) -> list[str]:
    with open(filename) as f:
        return [line for line in f if line.startswith(("Gemm", "ScaledGemm"))]


@_twin
def tune_gemm_in_file(filename: str) -> None:
    """Tune the untuned GEMMs a ``record_untuned`` run listed in ``filename``. Needs TunableOp
    and tuning on. The host driver has one kernel per GEMM: it reads the file and records
    nothing."""
    if not is_enabled():
        raise AssertionError("TunableOp is not enabled")
    if not tuning_is_enabled():
        raise AssertionError("Tuning is not enabled")
    _gemm_lines(filename)


@_twin
def mgpu_tune_gemm_in_file(filename_pattern: str, num_gpus: int) -> None:
    """Tune the GEMMs of every untuned file matching ``filename_pattern`` over ``num_gpus``
    devices, then merge the per-device results files into ``..._full0`` and copy it once per
    device, as torch.cuda.tunable does. On the host driver nothing is tuned, so only the
    merge of existing results files happens."""
    total = device_count()
    if not 1 <= num_gpus <= total:
        raise AssertionError(f"num_gpus must be between 1 and {total}, got {num_gpus}")
    for path in glob.glob(filename_pattern):
        _gemm_lines(path)
    _gather_results()


def _results_pattern() -> str:
    """The glob of the per-device results files (torch.cuda.tunable's rules)."""
    name = get_filename()
    if name:
        dot = name.find(".")
        pattern = name[:dot - 1] + "?" + name[dot:] if dot > 0 else ""
    else:
        env = _env("PYTORCH_TUNABLEOP_FILENAME")
        if not env:
            pattern = "tunableop_results?.csv"
        elif "%d" in env:
            pattern = env.replace("%d", "?")
        else:
            pattern = env.replace(".", "?.")
    if "?" not in pattern:
        raise AssertionError(f"filename_pattern must contain '?', got {pattern!r}")
    return pattern


def _gather_results() -> None:
    pattern = _results_pattern()
    files = sorted(glob.glob(pattern))
    validators: list[str] = []
    lines: dict[str, None] = {}
    for i, path in enumerate(files):
        with open(path) as f:
            for line in f:
                if line.startswith("Validator"):
                    if i == 0:
                        validators.append(line)
                else:
                    lines[line] = None
    out = pattern.replace("?", "_full0")
    with open(out, "w") as f:
        f.writelines(validators + list(lines))
    for i in range(1, len(files)):
        shutil.copy(out, out.replace("0", str(i)))
