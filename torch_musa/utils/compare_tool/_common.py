"""Shared pieces of the debugging tools: op names, lists, step window, logs, source lines."""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torch_musa._table import render

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_TOOL_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_KNOWN_NS = {"aten", "prim", "prims", "profiler", "c10d", "_c10d_functional", "musa",
             "quantized", "torchvision", "_quantized", "mkldnn", "quantized_decomposed"}


class _DefaultFloat(float):
    """A default tolerance: prints as its value, but tells "not given" from "given".

    ``CompareWithCPU(atol=0.001)`` keeps the documented signature; only when the
    caller leaves it out is the package's per-dtype policy used
    (``torch_musa.testing.TOLERANCES``).
    """

    def __repr__(self) -> str:
        return float.__repr__(self)


DEFAULT_ATOL = _DefaultFloat(0.001)
DEFAULT_RTOL = _DefaultFloat(0.001)


# ----------------------------------------------------------------------------- op names
class OpName:
    """Names of one OpOverload: ``aten.exp.default`` / ``aten.exp`` / ``torch.ops.aten.exp``."""

    __slots__ = ("full", "packet", "legacy", "base", "schema", "ns")

    def __init__(self, func):
        ns, _, name = func._schema.name.partition("::")
        if not name:
            ns, name = "aten", ns
        overload = func._overloadname or "default"
        self.base = name
        self.ns = ns
        self.full = f"{ns}.{name}.{overload}"
        self.packet = f"{ns}.{name}"
        # the name torch_musa's tool prints and uses for dump files
        self.legacy = "torch.ops." + (self.packet if overload == "default" else self.full)
        self.schema = func._schema


def normalize_op_entry(entry: str) -> str:
    """User spelling -> ``ns.name[.overload]``.

    Accepts ``torch.ops.aten.exp``, ``aten::exp``, ``aten.exp.default``, ``exp``,
    ``torch.ops.isinf`` (torch_musa's list spelling) and ``torch.exp``.
    """
    e = entry.strip()
    if e.startswith("torch.ops."):
        e = e[len("torch.ops."):]
    elif e.startswith("torch."):
        e = e[len("torch."):]
    e = e.replace("::", ".")
    first = e.split(".", 1)[0]
    if first not in _KNOWN_NS:
        e = "aten." + e
    if e.endswith(".default"):
        e = e[: -len(".default")]
    return e


class OpSet:
    """A set of op spellings matched against an OpName (packet or exact overload)."""

    def __init__(self, entries: Iterable[str] | None):
        self.entries = {normalize_op_entry(e) for e in (entries or []) if e}

    def __bool__(self) -> bool:
        return bool(self.entries)

    def matches(self, name: OpName) -> bool:
        return name.packet in self.entries or name.full in self.entries


# ops whose result is random or uninitialised: never compared
NONDETERMINISTIC = [
    "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty",
    "aten.new_empty_strided", "aten.empty_permuted", "aten.rand", "aten.randn", "aten.randint",
    "aten.rand_like", "aten.randn_like", "aten.randint_like", "aten.randperm", "aten.normal",
    "aten.normal_", "aten.uniform_", "aten.bernoulli", "aten.bernoulli_", "aten.random_",
    "aten.exponential_", "aten.geometric_", "aten.cauchy_", "aten.log_normal_",
    "aten.multinomial", "aten.native_dropout", "aten.dropout", "aten._fused_dropout",
    "aten.rrelu_with_noise", "aten.set_", "aten.resize_", "aten.as_strided",
    "aten.as_strided_", "aten.record_stream", "aten._record_function_enter_new",
    "profiler._record_function_enter_new", "profiler._record_function_exit",
    "aten.is_same_size", "aten._has_compatible_shallow_copy_type", "aten.lift_fresh",
    "aten.detach", "aten.alias", "c10d.barrier", "aten.sym_size", "aten.sym_stride",
    "aten.sym_numel", "aten.sym_storage_offset", "aten.resize_as_",
]


# namespaces whose ops talk to other processes: never replayed on CPU
COLLECTIVE_NS = {"c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd",
                 "_dtensor", "symm_mem"}


# ----------------------------------------------------------------------------- trees
def flatten_tensors(obj, out: list | None = None) -> list:
    """Every tensor in nested tuples/lists/dicts, in order."""
    if out is None:
        out = []
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            flatten_tensors(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            flatten_tensors(x, out)
    return out


def tree_map(fn, obj):
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple):
        return tuple(tree_map(fn, x) for x in obj)
    if isinstance(obj, list):
        return [tree_map(fn, x) for x in obj]
    if isinstance(obj, dict):
        return {k: tree_map(fn, v) for k, v in obj.items()}
    return obj


def describe_tensor(t: torch.Tensor) -> str:
    return (f"Tensor<shape={tuple(t.shape)}, dtype={str(t.dtype).replace('torch.', '')}, "
            f"device={t.device}, contiguous={t.is_contiguous()}>")


def describe(obj, limit: int = 6) -> str:
    if isinstance(obj, torch.Tensor):
        return describe_tensor(obj)
    if isinstance(obj, (list, tuple)):
        inner = ", ".join(describe(x, limit) for x in obj[:limit])
        more = ", ..." if len(obj) > limit else ""
        return ("[" + inner + more + "]") if isinstance(obj, list) else ("(" + inner + more + ")")
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{k}={describe(v, limit)}" for k, v in obj.items()) + "}"
    return repr(obj)


# ----------------------------------------------------------------------------- source lines
_internal_cache: dict[str, bool] = {}


def _is_internal(filename: str) -> bool:
    r = _internal_cache.get(filename)
    if r is None:
        r = (filename.startswith(_TORCH_DIR) or filename.startswith(_TOOL_DIR)
             or filename.startswith("<") or os.sep + "contextlib.py" in filename)
        _internal_cache[filename] = r
    return r


def user_frame(depth: int = 2):
    """(filename, lineno, function) of the first frame outside torch and this tool."""
    f = sys._getframe(depth)
    while f is not None:
        code = f.f_code
        if not _is_internal(code.co_filename):
            return (code.co_filename, f.f_lineno, code.co_name)
        f = f.f_back
    return None


def format_frame(fr) -> str:
    if not fr:
        return ""
    fn, line, func = fr
    try:
        rel = os.path.relpath(fn)
        if not rel.startswith(".."):
            fn = rel
    except ValueError:
        pass
    return f"{fn}:{line} in {func}"


def source_text(fr) -> str:
    """The source line of a frame tuple, stripped ('' when unavailable)."""
    if not fr:
        return ""
    import linecache
    return linecache.getline(fr[0], fr[1]).strip()


# ----------------------------------------------------------------------------- ranks/steps
def global_rank() -> int:
    for var in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        v = os.environ.get(var)
        if v not in (None, ""):
            try:
                return int(v)
            except ValueError:
                pass
    return 0


class _WindowedMode(TorchDispatchMode):
    """A dispatch mode active only for ``start_step <= step < end_step`` on chosen ranks."""

    LOG_STEM = "log"

    def __init__(self, enabled, target_list, white_list, enable_ranks, should_log_to_file,
                 output_dir, start_step, end_step, verbose):
        super().__init__()
        self.enabled = bool(enabled)
        self.target_list = OpSet(target_list)
        self.white_list = OpSet(list(NONDETERMINISTIC) + list(white_list or []))
        self.user_white_list = OpSet(white_list)
        self.enable_ranks = None if enable_ranks is None else {int(r) for r in enable_ranks}
        self.global_rank = global_rank()
        self.rank_enabled = self.enable_ranks is None or self.global_rank in self.enable_ranks
        self.should_log_to_file = bool(should_log_to_file)
        if output_dir is None and self.should_log_to_file:
            output_dir = os.getcwd()
        self.output_dir = output_dir or None
        self.start_step = 0 if start_step is None else int(start_step)
        self.end_step = None if end_step is None else int(end_step)
        self.verbose = verbose
        self.step_cnt = 0
        self.file_suffix = f"_rank{self.global_rank}"
        self._text_file = None
        self._jsonl_file = None
        self.is_active = False
        self._depth = 0
        self._pushed: list[bool] = []     # per open context: whether it pushed the dispatch mode
        self.update_active_state()

    # -- context (re-entrant: only the outermost exit finishes the run)
    def __enter__(self):
        self._depth += 1
        self._open_files()
        if self._depth == 1 and self.enabled and self.rank_enabled:
            self._on_outermost_enter()
        push = self._wants_dispatch_mode()
        if push:
            super().__enter__()
        self._pushed.append(push)
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        r = None
        if self._pushed.pop():
            r = super().__exit__(exc_type, exc_val, exc_tb)
        self._depth -= 1
        if self._depth == 0 and self.enabled and self.rank_enabled:
            self._on_outermost_exit(exc_type)
        return r

    def _push_dispatch_mode_now(self) -> None:
        """Start seeing ops through the dispatch mode inside an open context (from step())."""
        if self._pushed and not self._pushed[-1]:
            TorchDispatchMode.__enter__(self)
            self._pushed[-1] = True

    def _wants_dispatch_mode(self) -> bool:
        """Whether ops are seen through the Python dispatch mode (NanInfTracker's
        native path on musa sees them in C++ instead)."""
        return True

    def _on_outermost_enter(self) -> None:
        """Called when the outermost context opens; the tools may override it."""

    def _on_outermost_exit(self, exc_type) -> None:
        """Reports and closes files; the tools override it."""

    # -- window
    def update_active_state(self) -> None:
        after = self.step_cnt >= self.start_step
        before = self.end_step is None or self.step_cnt < self.end_step
        self.is_active = self.enabled and self.rank_enabled and after and before

    def step(self) -> None:
        """Mark the end of one training step (call once per iteration)."""
        if not self.enabled:
            return
        self._on_step_end()
        self.step_cnt += 1
        self.update_active_state()
        if self.is_active and self.verbose and self.should_log_to_file:
            self._emit_text(f"------------------------- step = {self.step_cnt} -------------------------")

    def _on_step_end(self) -> None:
        pass

    # -- files
    def _path(self, stem: str, ext: str) -> str | None:
        if not self.output_dir:
            return None
        os.makedirs(self.output_dir, exist_ok=True)
        return os.path.join(self.output_dir, f"{stem}{self.file_suffix}.{ext}")

    @property
    def log_file_path(self) -> str | None:
        return self._path(self.LOG_STEM, "txt") if self.should_log_to_file else None

    @property
    def jsonl_path(self) -> str | None:
        return self._path(self.LOG_STEM, "jsonl")

    def _open_files(self) -> None:
        if not (self.rank_enabled and self.enabled):
            return
        if self.should_log_to_file and self._text_file is None and self.log_file_path:
            self._text_file = open(self.log_file_path, "w", encoding="utf-8", buffering=1)
            self._text_file.write(time.strftime("%Y-%m-%d, %H:%M:%S") + "\n")
        if self._jsonl_file is None and self.jsonl_path:
            self._jsonl_file = open(self.jsonl_path, "w", encoding="utf-8", buffering=1)

    def _close_files(self) -> None:
        for f in (self._text_file, self._jsonl_file):
            if f is not None:
                f.close()
        self._text_file = self._jsonl_file = None

    def _emit_text(self, text: str) -> None:
        if self._text_file is not None:
            self._text_file.write(text + "\n")
        else:
            print(text, flush=True)

    def _emit_json(self, record: dict) -> None:
        if self._jsonl_file is not None:
            self._jsonl_file.write(json.dumps(record, default=str) + "\n")


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    """The first column left-aligned, the figures right-aligned."""
    return render(headers, rows, ["<"] + [">"] * (len(headers) - 1))


def fmt_err(x: float | None) -> str:
    if x is None:
        return "-"
    if x != x:
        return "nan"
    if x == float("inf"):
        return "inf"
    return f"{x:.3g}"
