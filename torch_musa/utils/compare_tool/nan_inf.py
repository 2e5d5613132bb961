"""NanInfTracker: find the op that first produced NaN/Inf, without a host sync per op.

Per op, the floating outputs are queued (at most ``batch`` of them, and never
past an op that writes in place) and reduced on the device without a host sync:
one fused ``torch._foreach_norm(..., inf)`` per batch on CUDA, ``aminmax`` per
tensor elsewhere (a NaN anywhere gives NaN, +-Inf shows as Inf).
The per-op results stay on the device, next to a few words of metadata per op
(op, module path, source line, storage ids of inputs/outputs, weak refs to the
float inputs). Every ``check_every`` ops and at each ``step()`` the whole window
is read back with one transfer; only when something is non-finite is the window
walked op by op:

* ``origin``: all inputs came from finite tensors; the op made the NaN/Inf
  (inputs still alive and unmodified are re-checked to confirm it);
* ``entered``: a tensor from outside the tracked ops (data, a parameter) was
  already non-finite; it is named;
* ``downstream``: an input was produced by a flagged op; it only carried it
  (a NaN made from Inf inputs, e.g. inf - inf, counts as a new origin);
* ``explicit``: Inf written on purpose from a non-finite scalar argument
  (``masked_fill(mask, -inf)``); reported only if it later turns into NaN.

``check_every=1`` (or ``dump_error_data=True``) checks synchronously after every
op, like torch_musa's tracker; with ``dump_error_data`` the producing op's inputs
are saved for ``nan_inf_track_for_single_op`` and the run stops.

On musa (``backend="native"``, what ``"auto"`` picks when the musa runtime is in
use and CUDA is not) no Python runs per op: the musa op path checks each op's
floating outputs in C++ right after its host kernel (one bit-max pass; the kernels
run synchronously on the host, so no extra synchronisation), keeps the set of
storages that hold NaN/Inf and classifies the same four kinds there. Only an op
that produces NaN/Inf calls back into Python (``_native_event``), at the op, where
the module path, phase, grad_fn and source line are read as in the dispatch mode.
Counts are read at each ``step()`` and every ``check_every`` ops. Ops on other
devices are not seen on this path (NaN/Inf entering musa from a CPU tensor is
reported at the copy); ``backend="python"`` sees every device. If a tracked step
runs no musa op at all, the tracker switches to the dispatch mode for the rest of
the run.
"""
from __future__ import annotations

import math
import os
import warnings
import weakref

import torch
from torch.utils._python_dispatch import _disable_current_modes

from . import module_tracker as _mt
from ._common import (OpName, OpSet, _WindowedMode, describe, flatten_tensors,
                      format_frame, format_table, source_text, tree_map, user_frame)
from .compare import _device_of, _mutated_args, _replay_device, load_dump, resolve_op, to_cpu_tree

# outputs that need no check: uninitialised memory, pure views/metadata (the viewed
# tensor was checked when it was produced), bool results of NaN tests
NAN_SKIP = [
    "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty",
    "aten.new_empty_strided", "aten.empty_permuted", "aten.set_", "aten.resize_",
    "aten.resize_as_", "aten.as_strided", "aten.as_strided_", "aten.view", "aten._unsafe_view",
    "aten.t", "aten.transpose", "aten.permute", "aten.expand", "aten.slice", "aten.select",
    "aten.unsqueeze", "aten.squeeze", "aten.alias", "aten.detach", "aten.unbind", "aten.split",
    "aten.split_with_sizes", "aten.diagonal", "aten._reshape_alias", "aten.view_as_real",
    "aten.view_as_complex", "aten.unfold", "aten.narrow", "aten.lift_fresh", "aten.real",
    "aten.imag", "aten._conj", "aten._neg_view", "aten._local_scalar_dense", "aten.isnan",
    "aten.isinf", "aten.isfinite", "aten.record_stream", "aten.is_same_size",
    "aten._has_compatible_shallow_copy_type", "aten.sym_size", "aten.sym_stride",
    "aten.sym_numel", "aten.sym_storage_offset", "profiler._record_function_enter_new",
    "profiler._record_function_exit", "aten._record_function_enter_new", "c10d.barrier",
]


_KINDS = ("origin", "entered", "downstream", "explicit")
_NATIVE_OWNER = None          # the tracker whose C++ hook is armed (one at a time)


def _musa_c():
    """torch_musa's extension when it has the native NaN/Inf check, else None."""
    try:
        from torch_musa import _C
    except Exception:  # noqa: BLE001 - no musa build (e.g. the tools on a CUDA machine)
        return None
    return _C if hasattr(_C, "_nan_check_arm") else None


_Tensor = torch.Tensor
_strided = torch.strided
_ref = weakref.ref
_INF = math.inf
_graph_task_id = torch._C._current_graph_task_id


def _min_max(t: torch.Tensor):
    """(min, max) of t on its device; on CPU when the device cannot compute the dtype
    (float64 on a musa profile without it)."""
    try:
        return torch.aminmax(t)
    except RuntimeError:
        try:
            return torch.aminmax(t.detach().to("cpu"))
        except RuntimeError:            # no CPU aminmax for the dtype
            a = t.detach().to("cpu").float()
            return a.amin(), a.amax()


def _skey(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage()._cdata
    except Exception:  # noqa: BLE001 - sparse / opaque tensors
        return id(t)


def _checkable(t) -> bool:
    return (isinstance(t, torch.Tensor) and (t.dtype.is_floating_point or t.dtype.is_complex)
            and t.layout == torch.strided and t.device.type != "meta" and t.numel() > 0)


class _OpInfo:
    __slots__ = ("name", "skip", "no_returns", "has_mutable")

    def __init__(self, name: OpName, skip: bool):
        self.name = name
        self.skip = skip
        self.no_returns = not name.schema.returns
        self.has_mutable = any(a.alias_info is not None and a.alias_info.is_write
                               for a in name.schema.arguments)


class _Rec:
    """One op of the current window (no tensors kept, only weak refs)."""
    __slots__ = ("seq", "info", "module", "bw", "node", "frame", "f0", "nf", "in_keys", "in_refs",
                 "out_keys", "explicit", "step", "pre")

    def __init__(self, seq, info, module, bw, node, frame, f0, nf, in_keys, in_refs, out_keys,
                 explicit, step):
        self.seq, self.info, self.module, self.bw, self.node = seq, info, module, bw, node
        self.frame, self.f0, self.nf = frame, f0, nf
        self.in_keys, self.in_refs, self.out_keys = in_keys, in_refs, out_keys
        self.explicit, self.step = explicit, step
        self.pre = None


class NanInfTrackError(RuntimeError):
    """Raised (after dumping) when ``dump_error_data`` meets an op producing NaN/Inf."""


class NanInfTracker(_WindowedMode):
    """Track the first op producing NaN/Inf (see the module docstring).

    Same shape as torch_musa's tracker: context manager with ``.step()``, active
    for ``start_step <= step < end_step`` on ``enable_ranks`` (rank from ``RANK``),
    report in ``nan_inf_report_rank{R}.txt`` with ``should_log_to_file`` and
    ``nan_inf_report_rank{R}.jsonl`` under ``output_dir``.
    """

    LOG_STEM = "nan_inf_report"

    def __init__(self, enabled=True, target_list=None, white_list=None, enable_ranks=None,
                 should_log_to_file=False, output_dir=None, dump_error_data=False, start_step=0,
                 end_step=None, *, check_every=1024, verbose=True, raise_on_error=None,
                 source_lines=True, max_printed=10, batch=64, backend="auto") -> None:
        if backend not in ("auto", "python", "native"):
            raise ValueError(f"backend must be 'auto', 'python' or 'native', got {backend!r}")
        self.backend = backend
        self._native = False            # this run checks ops in musa's C++ op path
        self._armed = False
        super().__init__(enabled, target_list, white_list, enable_ranks, should_log_to_file,
                         output_dir, start_step, end_step, verbose)
        self.white_list = OpSet(list(NAN_SKIP) + list(white_list or []))
        self.dump_error_data = dump_error_data
        self.check_every = 1 if dump_error_data else max(1, int(check_every))
        self.raise_on_error = dump_error_data if raise_on_error is None else raise_on_error
        self.source_lines = source_lines
        self.max_printed = max_printed
        self._info: dict = {}
        self._pending: list[torch.Tensor] = []      # outputs not yet reduced (<= batch)
        self._flag_parts: list = []                  # (device vector of inf-norms, flag indices)
        self._nflag = 0
        self.batch = max(1, int(batch))
        self._pending_bytes = 0
        # outputs are held (not copied) until reduced: at most `batch` of them and this many
        # bytes that would otherwise have been freed
        self.max_pending_bytes = 256 << 20
        self._recs: list[_Rec] = []
        self._bad: dict[int, str] = {}          # storage id -> "nan" | "inf" | "explicit"
        self._seq = 0
        self.counts = {"checked": 0, "checks": 0, "origin": 0, "entered": 0,
                       "downstream": 0, "explicit": 0}
        self.events: list[dict] = []             # reported origins (bounded by max_events)
        self.max_events = 100
        self._printed = 0
        self.dumped: list[str] = []
        self._native_names: dict = {}
        self.first_offender = None      # native path: {op, seq, step, kind} of the first report

    # ------------------------------------------------------------------ native path (musa)
    def _choose_native(self) -> bool:
        C = _musa_c()
        why = None
        if C is None:
            why = "torch_musa's extension has no native NaN/Inf check"
        elif self.dump_error_data or self.check_every == 1:
            why = "dump_error_data / check_every=1 need the per-op dispatch mode"
        elif _NATIVE_OWNER is not None and _NATIVE_OWNER is not self:
            why = "another NanInfTracker holds the native check"
        elif getattr(C, "_driver_name", lambda: "host")() != "host":
            why = "the native check reads host memory (host driver only)"
        if self.backend == "python":
            return False
        if why is not None:
            if self.backend == "native":
                raise ValueError(f"NanInfTracker(backend='native'): {why}")
            return False
        if self.backend == "native":
            return True
        return bool(C._is_initialized()) and not torch.cuda.is_initialized()

    def _wants_dispatch_mode(self) -> bool:
        return not self._native

    def _on_outermost_enter(self):
        self._native = self._choose_native()
        if self._native:
            _musa_c()._nan_check_release()
            self._set_armed(self.is_active, reset=True)

    def _budget(self) -> int:
        return 50 if self._jsonl_file is not None else 0

    def _set_armed(self, on: bool, reset: bool = False) -> None:
        global _NATIVE_OWNER
        C = _musa_c()
        if on and not self._armed:
            C._nan_check_arm(self, self.check_every, self._budget(), self.step_cnt, reset)
            self._armed = True
            _NATIVE_OWNER = self
        elif not on and self._armed:
            self._native_take()
            C._nan_check_disarm()
            self._armed = False
        if not self._armed and _NATIVE_OWNER is self:
            _NATIVE_OWNER = None

    def _native_take(self, step: int = -1) -> bool:
        """Add the counts of the C++ check since the last read; True if nothing new was reported."""
        if not self._armed:
            return True
        C = _musa_c()
        d = C._nan_check_take(self._budget(), step)
        self._native_seen += d["seen"]
        c = self.counts
        if d["checked"]:
            c["checked"] += d["checked"]
            c["checks"] += 1
        for k in _KINDS:
            c[k] += d[k]
        if self.first_offender is None:
            self.first_offender = C._nan_check_first()
        return not (d["origin"] or d["entered"])

    _native_seen = 0

    def update_active_state(self) -> None:
        super().update_active_state()
        if self._native and self._depth > 0:
            if self.is_active and self._armed:
                self._native_take(self.step_cnt)
            else:
                self._set_armed(self.is_active)

    def _native_skip(self, name: str) -> bool:
        """Called by C++ once per op name: is the op unwatched (white/target lists)?"""
        info = self._native_info(name)
        return info is None or info.skip

    def _native_info(self, name: str):
        if name in self._native_names:
            return self._native_names[name]
        info = None
        ns, _, rest = name.partition(".")
        base, _, overload = rest.rpartition(".")
        try:
            func = getattr(getattr(getattr(torch.ops, ns), base), overload)
            info = self._make_info(func)
        except (AttributeError, RuntimeError):
            pass
        self._native_names[name] = info
        return info

    def _native_read(self) -> None:
        """Called by C++ every ``check_every`` checked ops."""
        self._native_take()

    def _where(self):
        """(in backward, module path, autograd node name, user source frame) of the op now running."""
        bw = _graph_task_id() != -1
        module = _mt.STATE.current(bw)
        if bw:
            node = torch._C._current_autograd_node()
            return bw, module, node.name() if node is not None else "", None
        return bw, module, "", user_frame(2) if self.source_lines else None

    def _native_event(self, name, kind, has_nan, bad_outs, n_inputs, wrote_input, bad_ins, seq):
        """Called by C++ at an op that produced NaN/Inf (origin/entered; the first
        downstream/explicit ones of a window when a JSON log is kept)."""
        kind = _KINDS[kind]
        info = self._native_info(name)
        bw, module, node, frame = self._where()
        verified = None
        bad_inputs: list[str] = []
        if kind == "origin":
            if n_inputs < 0:
                verified = "inputs carried Inf only; this op made NaN from them"
            else:
                verified = (f"all {n_inputs} float input(s) finite (re-checked at the op)"
                            + ("; the tensor it wrote held no NaN/Inf made by a tracked op"
                               if wrote_input else ""))
        for pos, t in bad_ins:
            pname = _mt.STATE.param_name(t) or (
                _mt.STATE.param_name(t._base) if t._base is not None else None)
            bad_inputs.append(f"parameter {pname}" if pname else f"input {pos} {describe(t)}")
        src = (format_frame(frame) if frame else _mt.STATE.call_site.get(module, "") if bw else "")
        ev = {"step": self.step_cnt, "seq": seq, "op": info.name.full if info else name,
              "kind": kind, "what": "NaN" if has_nan else "Inf", "module": module,
              "phase": "backward" if bw else "forward", "grad_fn": node, "src": src,
              "code": source_text(frame) if frame else "", "flags": list(bad_outs),
              "verified": verified, "bad_inputs": bad_inputs}
        self._emit_json(ev)
        if kind in ("downstream", "explicit"):
            return
        if len(self.events) < self.max_events:
            self.events.append(ev)
        self._print_event(ev)

    def _on_outermost_exit(self, exc_type):
        if self._native:
            self._native_take()
            self._set_armed(False)
            _musa_c()._nan_check_release()
        elif exc_type is not NanInfTrackError:
            self.flush()
        c = self.counts
        if self.verbose or c["origin"] or c["entered"] or c["downstream"]:
            text = self.summary()
            self._emit_text(text)
            if self._text_file is not None:
                print(text, flush=True)
        self._close_files()

    def _on_step_end(self):
        if self._native and self._armed:
            seen_before = self._native_seen
            self._native_take()
            if self._native_seen == seen_before and self._depth == 1:
                # no musa op ran in this step: the work is on another device
                warnings.warn("NanInfTracker: no musa op ran in this step; tracking every "
                              "device through the dispatch mode from now on (backend='python')")
                self._set_armed(False)
                self._native = False
                self._push_dispatch_mode_now()
            return
        self.flush()

    # ------------------------------------------------------------------ dispatch
    def _make_info(self, func) -> _OpInfo:
        name = OpName(func)
        skip = self.white_list.matches(name) or (bool(self.target_list)
                                                and not self.target_list.matches(name))
        info = self._info[func] = _OpInfo(name, skip)
        return info

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if not self.is_active:
            return func(*args, **kwargs)
        info = self._info.get(func)
        if info is None:
            info = self._make_info(func)
        if info.skip:
            return func(*args, **kwargs)
        pre = None
        if info.has_mutable:
            if self._pending:           # reduce what is pending before the op overwrites it
                self._reduce_pending()
            if self.dump_error_data:    # keep what the op will overwrite
                pre = [tree_map(lambda t: t.detach().clone(), v)
                       for v in _mutated_args(info.name.schema, args, kwargs)]
        out = func(*args, **kwargs)
        if info.no_returns:
            targets = flatten_tensors(_mutated_args(info.name.schema, args, kwargs))
        elif type(out) is _Tensor:
            targets = (out,)
        else:
            targets = flatten_tensors(out)
        out_keys = []
        pending = self._pending
        f0 = self._nflag
        for t in targets:
            if (t.is_floating_point() or t.is_complex()) and t.numel() and t.layout == _strided \
                    and not t.is_meta:
                pending.append(t if not t.is_complex() else torch.view_as_real(t))
                out_keys.append(_skey(t))
                self._pending_bytes += t.nbytes
        nf = len(out_keys)
        if not nf:
            return out
        self._nflag += nf
        in_keys = []
        in_refs = []
        explicit = False
        i = 0
        for a in (args if not kwargs else (*args, *kwargs.values())):
            if isinstance(a, _Tensor):
                if a.is_floating_point() or a.is_complex():
                    in_keys.append(_skey(a))
                    base = a._base
                    in_refs.append((_ref(a), a._version, i, None if base is None else _ref(base)))
            elif type(a) is float:
                if a != a or a == _INF or a == -_INF:
                    explicit = True
            elif type(a) in (list, tuple):
                for t in a:
                    if isinstance(t, _Tensor) and (t.is_floating_point() or t.is_complex()):
                        in_keys.append(_skey(t))
                        base = t._base
                        in_refs.append((_ref(t), t._version, i, None if base is None else _ref(base)))
            i += 1
        bw, module, node, frame = self._where()
        self._seq += 1
        rec = _Rec(self._seq, info, module, bw, node, frame, f0, nf, in_keys, in_refs,
                   out_keys, explicit, self.step_cnt)
        if self.dump_error_data:
            rec.pre = (pre or [], args, kwargs, out)
        self._recs.append(rec)
        self.counts["checked"] += 1
        if len(self._recs) >= self.check_every:
            self.flush()
        elif len(pending) >= self.batch or self._pending_bytes > self.max_pending_bytes:
            self._reduce_pending()
        return out

    def _reduce_pending(self) -> None:
        """Reduce the queued outputs on their device; no host sync.

        CUDA: one fused ``_foreach_norm(inf)`` per batch (NaN stays NaN, +-Inf gives Inf).
        Other devices (musa's host driver has no fused foreach): ``aminmax`` per tensor,
        a single pass (NaN makes both NaN, +-Inf shows in max/min).
        """
        pending, self._pending = self._pending, []
        self._pending_bytes = 0
        base = self._nflag - len(pending)
        by_dev: dict = {}
        for j, t in enumerate(pending):
            by_dev.setdefault(t.device, []).append(j)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # "runs through the CPU fallback" notices
            for dev, idxs in by_dev.items():
                vals: list = []
                ids: list = []
                if dev.type == "cuda" and len(idxs) > 1:
                    try:
                        vals = list(torch._foreach_norm([pending[j] for j in idxs], math.inf))
                        ids = [base + j for j in idxs]
                    except Exception:  # noqa: BLE001 - mixed dtypes etc.: one by one below
                        vals, ids = [], []
                if not vals:
                    for j in idxs:
                        for v in _min_max(pending[j]):
                            vals.append(v)
                            ids.append(base + j)
                groups: dict = {}
                for v, i in zip(vals, ids):
                    g = groups.setdefault((v.device, v.dtype), ([], []))
                    g[0].append(v)
                    g[1].append(i)
                for vs, gids in groups.values():
                    self._flag_parts.append((torch.stack(vs), gids))

    # ------------------------------------------------------------------ checking
    def flush(self) -> bool:
        """Read the window's device flags (one transfer); locate offenders. True if clean."""
        if self._native:
            return self._native_take()
        if not self._recs:
            return True
        with _disable_current_modes():
            if self._pending:
                self._reduce_pending()
            recs, parts, n = self._recs, self._flag_parts, self._nflag
            self._recs, self._flag_parts, self._nflag = [], [], 0
            self.counts["checks"] += 1
            return self._check(recs, parts, n)

    def _check(self, recs, parts, n) -> bool:
        by_dev: dict = {}
        for vec, idxs in parts:
            by_dev.setdefault(vec.device, []).append((vec, idxs))
        finite = [True] * n
        nan = [False] * n
        for items in by_dev.values():
            vecs = [v for v, _ in items]           # dtypes may differ: test, then concatenate
            res = torch.cat([torch.isfinite(v) for v in vecs]
                            + [torch.isnan(v) for v in vecs]).cpu()          # the one read
            k = sum(v.numel() for v in vecs)
            if bool(res[:k].all()):
                continue
            fin, isn = res[:k].tolist(), res[k:].tolist()
            j = 0
            for _, idxs in items:
                for i in idxs:
                    if not fin[j]:
                        finite[i] = False
                    if isn[j]:
                        nan[i] = True
                    j += 1
        if all(finite):
            if self._bad:       # storages rewritten by finite ops are clean again (or reused)
                for rec in recs:
                    for k in rec.out_keys:
                        self._bad.pop(k, None)
            return True
        self._locate(recs, None, finite, nan)
        return False

    def _locate(self, recs, flags, finite, nan):
        logged_downstream = 0
        clean: set = set()           # storages written by finite ops earlier in this window
        for rec in recs:
            f0 = rec.f0
            if rec.nf == 1:
                ok = finite[f0]
            else:
                ok = all(finite[i] for i in range(f0, f0 + rec.nf))
            if ok:
                for k in rec.out_keys:
                    self._bad.pop(k, None)
                    clean.add(k)
                continue
            sl = range(f0, f0 + rec.nf)
            for k in rec.out_keys:
                clean.discard(k)
            has_nan = any(nan[i] for i in sl)
            in_bad = [self._bad[k] for k in rec.in_keys if k in self._bad]
            bad_inputs: list[str] = []
            verified = None
            if in_bad:
                kind = "origin" if has_nan and "nan" not in in_bad else "downstream"
                if kind == "origin":
                    verified = "inputs carried Inf only; this op made NaN from them"
            elif rec.explicit and not has_nan:
                kind = "explicit"
            else:
                kind = "origin"
                checked = made = 0
                for (ref, ver, pos, bref), key in zip(rec.in_refs, rec.in_keys):
                    t = ref()
                    if t is None and bref is not None:      # a freed view: check what it viewed
                        t = bref()
                    if t is None or t._version != ver:
                        made += key in clean
                        continue
                    checked += 1
                    if not bool(torch.isfinite(t).all()):
                        pname = _mt.STATE.param_name(t) or (
                            _mt.STATE.param_name(t._base) if t._base is not None else None)
                        bad_inputs.append(f"parameter {pname}" if pname else f"input {pos} {describe(t)}")
                if bad_inputs:
                    kind = "entered"
                elif checked + made == len(rec.in_refs):
                    verified = (f"all {len(rec.in_refs)} float input(s) finite ({checked} re-checked, "
                                f"{made} made by tracked ops with finite outputs)")
                else:
                    verified = (f"{checked + made} of {len(rec.in_refs)} float input(s) known finite; "
                                "the rest came from outside the tracked window and are gone")
            self.counts[kind] += 1
            mark = "nan" if has_nan else ("explicit" if kind == "explicit" or
                                          (kind == "downstream" and set(in_bad) == {"explicit"})
                                          else "inf")
            for k in rec.out_keys:
                self._bad[k] = mark
            if len(self._bad) > 200_000:
                for k in list(self._bad)[:100_000]:
                    del self._bad[k]
            if kind == "downstream" or kind == "explicit":
                if logged_downstream < 50 and self._jsonl_file is not None:
                    logged_downstream += 1
                    self._emit_json(self._record(rec, kind, flags, finite, nan, None, []))
                continue
            ev = self._record(rec, kind, flags, finite, nan, verified, bad_inputs)
            self._emit_json(ev)
            if len(self.events) < self.max_events:
                self.events.append(ev)
            self._print_event(ev)
            if self.dump_error_data:
                path = self._dump(rec, ev)
                if path and self.raise_on_error:
                    raise NanInfTrackError(f"NanInfTracker: {ev['op']} in {ev['module'] or '<top>'} "
                                           f"({ev['phase']}) produced {ev['what']}; inputs saved to {path}")

    def _record(self, rec, kind, flags, finite, nan, verified, bad_inputs):
        outs = []
        for j, i in enumerate(range(rec.f0, rec.f0 + rec.nf)):
            if not finite[i]:
                outs.append(i - rec.f0)
        what = "NaN" if any(nan[i] for i in range(rec.f0, rec.f0 + rec.nf)) else "Inf"
        src = (format_frame(rec.frame) if rec.frame else
               _mt.STATE.call_site.get(rec.module, "") if rec.bw else "")
        return {"step": rec.step, "seq": rec.seq, "op": rec.info.name.full, "kind": kind,
                "what": what, "module": rec.module, "phase": "backward" if rec.bw else "forward",
                "grad_fn": rec.node, "src": src, "code": source_text(rec.frame) if rec.frame else "",
                "flags": outs, "verified": verified, "bad_inputs": bad_inputs}

    def _print_event(self, ev):
        if self._printed >= self.max_printed:
            return
        self._printed += 1
        head = {"origin": f"{ev['what']} first produced by", "entered": f"{ev['what']} entered through"}[ev["kind"]]
        lines = [f"[NanInfTracker] step {ev['step']}: {head} {ev['op']} (op #{ev['seq']})",
                 f"    module : {ev['module'] or '<top>'} ({ev['phase']})"
                 + (f"  grad_fn={ev['grad_fn']}" if ev["grad_fn"] else "")]
        if ev["src"]:
            lines.append(f"    source : {ev['src']}" + (f": {ev['code']}" if ev["code"] else ""))
        if ev["verified"]:
            lines.append(f"    inputs : {ev['verified']}")
        for b in ev["bad_inputs"][:4]:
            lines.append(f"    non-finite already in {b}")
        self._emit_text("\n".join(lines))

    def _dump(self, rec, ev):
        if rec.pre is None:
            return None
        name = rec.info.name
        if name.legacy in self.dumped:
            return None
        pre, args, kwargs, out = rec.pre
        # put back the pre-op values of tensors the op overwrote
        mut = _mutated_args(name.schema, args, kwargs)
        swap = {}
        for before, after in zip(pre, mut):
            for b, a in zip(flatten_tensors(before), flatten_tensors(after)):
                swap[id(a)] = b
        sub = lambda t: swap.get(id(t), t)  # noqa: E731
        from .compare import save_data_for_op
        path = save_data_for_op(out, to_cpu_tree(tree_map(sub, args)), to_cpu_tree(tree_map(sub, kwargs)),
                                self.output_dir or os.getcwd(), name.legacy, self.file_suffix,
                                op=name.full, device=str(_device_of(args, kwargs)), info=ev)
        self.dumped.append(name.legacy)
        ev["dump"] = path
        self._emit_text(f"    dumped : {path}")
        return path

    # ------------------------------------------------------------------ summary
    def summary(self) -> str:
        c = self.counts
        head = (f"[NanInfTracker] rank {self.global_rank}: {c['checked']} op outputs checked in "
                f"{c['checks']} device reads; {c['origin']} origin(s), {c['entered']} entered from "
                f"outside, {c['downstream']} downstream, {c['explicit']} explicit Inf fills")
        if not self.events:
            return head + "\nno NaN/Inf produced" if not (c["downstream"] or c["explicit"]) else head
        rows = [[e["step"], e["kind"], e["what"], e["op"], f"{e['module'] or '<top>'} ({e['phase']})",
                 e["src"]] for e in self.events[:20]]
        return head + "\n" + format_table(["step", "kind", "what", "op", "module", "source"], rows)


def nan_inf_track_for_single_op(inputs_data_save_path, op_func=None, *, device=None, verbose=True):
    """Replay a dumped op; returns ``(has_nan_or_inf, args, kwargs, out)`` like torch_musa's tool."""
    data = load_dump(inputs_data_save_path)
    func = resolve_op(op_func, data)
    dev = _replay_device(data, device)
    args = tree_map(lambda t: t.to(dev), data["args"])
    kwargs = tree_map(lambda t: t.to(dev), data["kwargs"])
    in_bad = [t for t in flatten_tensors((args, kwargs)) if _checkable(t) and not bool(torch.isfinite(t).all())]
    out = func(*args, **kwargs)
    outs = flatten_tensors(out)
    name = OpName(func) if hasattr(func, "_schema") else None
    if name is not None and not name.schema.returns:
        outs = flatten_tensors(_mutated_args(name.schema, args, kwargs))
    bad = [t for t in outs if _checkable(t) and not bool(torch.isfinite(t).all())]
    if verbose:
        label = name.full if name else getattr(func, "__name__", str(func))
        if bad:
            t = bad[0]
            print(f"[nan_inf_track_for_single_op] {label} on {dev}: output has "
                  f"{int(torch.isnan(t).sum())} NaN, {int(torch.isinf(t).sum())} Inf; inputs "
                  + ("already non-finite" if in_bad else "all finite (this op produced them)"))
        else:
            print(f"[nan_inf_track_for_single_op] {label} on {dev}: outputs finite")
    return bool(bad), args, kwargs, out
