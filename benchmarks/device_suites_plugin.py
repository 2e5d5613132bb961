"""pytest plugin loaded by ``benchmarks/device_suites.py`` into each PyTorch test process.

Two jobs:

* It writes one JSON line per test to ``$DEVICE_SUITES_LOG`` as the test runs
  (a ``start`` line first, then the outcome), so a process that crashes or is
  killed still leaves every finished result and names the test it died in.
* It fills in names that PyTorch test files of another release import from
  ``torch.testing._internal`` but the installed torch moved or renamed, so a
  checkout a few releases away from the wheel still imports. Each shim is the
  smallest stand-in (a moved function, an identity decorator); it runs the same
  on CPU and on musa, so it cannot make the two devices differ.
"""
from __future__ import annotations

import json
import os
import time

import pytest

_LOG = os.environ.get("DEVICE_SUITES_LOG")


def _identity_decorator_factory(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda fn: fn


def _install_compat_shims() -> list[str]:
    import torch.testing._internal.common_cuda as ccu
    import torch.testing._internal.common_device_type as cdt
    import torch.testing._internal.common_methods_invocations as cmi
    import torch.testing._internal.common_mkldnn as cmk
    import torch.testing._internal.common_nn as cnn
    import torch.testing._internal.common_utils as cu

    added = []

    def put(mod, name, value):
        if not hasattr(mod, name):
            setattr(mod, name, value)
            added.append(f"{mod.__name__.rsplit('.', 1)[-1]}.{name}")

    for name in ("skip", "xfail"):
        put(cmi, name, getattr(cdt, name))
    # Older files call skipOps(test_case_name, base_test_name, to_skip); newer ones skipOps(to_skip).
    cmi.skipOps = lambda *args: cdt.skipOps(args[-1])
    put(cu, "skipIfMps", getattr(cu, "skipIfMPS", _identity_decorator_factory))
    put(cmk, "bf32_on_and_off", _identity_decorator_factory)
    put(ccu, "tf32_is_not_fp32", getattr(cmk, "tf32_is_not_fp32", lambda: False))
    if not hasattr(cnn, "new_module_tests"):
        cnn.new_module_tests = cnn.get_new_module_tests()
        added.append("common_nn.new_module_tests")
    if not hasattr(cmi, "binary_ufuncs_and_refs"):
        from torch.testing._internal.opinfo.core import BinaryUfuncInfo

        seen = {(op.name, op.variant_test_name) for op in cmi.binary_ufuncs}
        ops = list(cmi.binary_ufuncs)
        for op in cmi.python_ref_db:
            if isinstance(op, BinaryUfuncInfo) and (op.name, op.variant_test_name) not in seen:
                seen.add((op.name, op.variant_test_name))
                ops.append(op)
        cmi.binary_ufuncs_and_refs = ops
        added.append("common_methods_invocations.binary_ufuncs_and_refs")
    return added


if os.environ.get("DEVICE_SUITES_COMPAT", "1") != "0":
    _SHIMS = _install_compat_shims()
else:
    _SHIMS = []


def _write(record: dict) -> None:
    if not _LOG:
        return
    with open(_LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _first_line(report) -> str:
    lr = report.longrepr
    if lr is None:
        return ""
    if isinstance(lr, tuple):  # skip: (path, line, reason)
        return str(lr[2]).splitlines()[0] if lr[2] else ""
    crash = getattr(lr, "reprcrash", None)
    if crash is not None and crash.message:
        text = crash.message
    else:
        text = str(lr)
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:400]
    return ""


_state: dict[str, dict] = {}


def pytest_runtest_logstart(nodeid, location):
    _state[nodeid] = {"id": nodeid, "outcome": None, "t0": time.perf_counter()}
    _write({"start": nodeid})


def pytest_runtest_logreport(report):
    rec = _state.setdefault(report.nodeid, {"id": report.nodeid, "outcome": None, "t0": time.perf_counter()})
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "xpassed"
    elif report.skipped:
        outcome = "skipped"
    elif report.failed:
        outcome = "failed" if report.when == "call" else "error"
    else:
        outcome = "passed"
    # The first non-pass phase decides; a later teardown error still counts.
    if rec["outcome"] in (None, "passed") and (outcome != "passed" or report.when == "call"):
        rec["outcome"] = outcome
        if outcome != "passed":
            rec["message"] = _first_line(report)
            rec["when"] = report.when


def pytest_runtest_logfinish(nodeid, location):
    rec = _state.pop(nodeid, None)
    if rec is None:
        return
    rec["duration"] = round(time.perf_counter() - rec.pop("t0"), 4)
    rec["outcome"] = rec["outcome"] or "passed"
    _write(rec)


def _fix_self_class_super(items) -> None:
    """Older files call ``super(self.__class__, self).setUp()``; since the device-type classes
    derive from the generic class, that recurses forever. Replace such setUp/tearDown with the
    same source with ``super(<generic class>, self)`` (test_linalg's TestLinalg toggles TF32 there)."""
    import inspect
    import textwrap

    seen = set()
    for item in items:
        cls = getattr(item, "cls", None)
        for base in (cls.__mro__ if cls else ()):
            for name in ("setUp", "tearDown"):
                fn = base.__dict__.get(name)
                if fn is None or (base, name) in seen:
                    continue
                seen.add((base, name))
                try:
                    src = inspect.getsource(fn)
                except (OSError, TypeError):
                    continue
                if "super(self.__class__, self)" not in src:
                    continue

                code = textwrap.dedent(src).replace("super(self.__class__, self)", "super(_ds_base, self)")
                ns = dict(fn.__globals__, _ds_base=base)
                exec(compile(code, inspect.getsourcefile(fn) or "<shim>", "exec"), ns)
                setattr(base, name, ns[name])
                _SHIMS.append(f"{base.__name__}.{name}: super(self.__class__)")


def pytest_collection_modifyitems(session, config, items):
    if os.environ.get("DEVICE_SUITES_COMPAT", "1") != "0":
        _fix_self_class_super(items)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    if _SHIMS:
        _write({"shims": _SHIMS})


def pytest_sessionfinish(session, exitstatus):
    if _SHIMS:
        _write({"shims": _SHIMS})
