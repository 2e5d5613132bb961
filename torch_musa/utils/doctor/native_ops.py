"""Which ops the real torch_musa serves with a musa kernel, per release.

``data/native_ops.json`` is derived from the real torch_musa's public operator
list (``musa_functions.yaml`` and the ops its C++ registers by name) at each
release tag; ``scripts/doctor_native_ops.py`` regenerates it. An op absent there
runs on the CPU through torch_musa's fallback on that release.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

DATA = Path(__file__).with_name("data") / "native_ops.json"


@functools.cache
def _table() -> dict:
    return json.loads(DATA.read_text())


def releases() -> list[str]:
    return [r["release"] for r in _table()["releases"]]


def latest() -> str:
    return releases()[-1]


def source() -> str:
    t = _table()
    last = t["releases"][-1]
    return f"{t['source']} (newest: {last['release']}, {last['date']}, commit {last['commit'][:12]})"


@functools.cache
def _ops_in(release: str) -> frozenset[str]:
    names = releases()
    if release not in names:
        raise ValueError(f"unknown torch_musa release {release!r}: the table has {', '.join(names)}")
    i = names.index(release)
    return frozenset(op for op, idx in _table()["ops"].items() if i in idx)


def is_native(op: str, release: str) -> bool:
    """Whether ``op`` ("aten::add.Tensor", "add.Tensor", "aten.mm.default") has a musa
    kernel in ``release``. A structured op counts when its group's ``.out`` kernel is
    listed, since the real torch_musa serves the functional and in-place forms with it."""
    ops = _ops_in(release)
    name = op.replace("aten::", "").replace("aten.", "")
    if "." not in name:
        name += ".default"
    if name in ops:
        return True
    base = name.split(".")[0]
    return f"{base.rstrip('_')}.out" in ops
