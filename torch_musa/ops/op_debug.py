"""TORCH_MUSA_OP_DEBUG: log every musa op served by a host kernel.

Levels: 1 names and shapes; 2 statistics (min/max/mean/std, NaN/Inf counts);
3 the first N values (TORCH_MUSA_OP_DEBUG_LENGTH, default 50); 4 all values;
5 = 2+3; 6 = 2+4. TORCH_MUSA_OP_DEBUG_LIST / TORCH_MUSA_OP_DEBUG_BLACK_LIST
filter by case-insensitive substrings (not both). Output goes to
TORCH_MUSA_OP_DEBUG_DIR (default ./DEBUG_DIR): full_log.txt and one numbered
folder per op. When off, no callback is installed and the runtime checks a
single pointer per op.
"""
from __future__ import annotations

import atexit
import os
from pathlib import Path

import torch

from torch_musa import _C
from torch_musa.config import CONFIG


class OpDebugLogger:
    def __init__(self, level: int, out_dir: str | os.PathLike = "DEBUG_DIR", length: int = 50,
                 allow: list[str] | None = None, deny: list[str] | None = None):
        if not 1 <= level <= 6:
            raise ValueError(f"TORCH_MUSA_OP_DEBUG level must be 1..6, got {level}")
        if allow and deny:
            raise ValueError("TORCH_MUSA_OP_DEBUG_LIST and TORCH_MUSA_OP_DEBUG_BLACK_LIST cannot be used together")
        self.level, self.length = level, length
        self.allow = [s.lower() for s in allow or []]
        self.deny = [s.lower() for s in deny or []]
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.count = 0
        self._full = open(self.dir / "full_log.txt", "a", buffering=1)

    def wanted(self, op: str) -> bool:
        name = op.lower()
        if self.allow:
            return any(s in name for s in self.allow)
        return not any(s in name for s in self.deny)

    def describe(self, t) -> list[str]:
        if isinstance(t, list):
            return [line for e in t for line in self.describe(e)]
        if not isinstance(t, torch.Tensor):
            return []
        lines = [f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')} {t.device}"]
        host = t.detach().to("cpu")
        stats = self.level in (2, 5, 6)
        values = {3: self.length, 5: self.length, 4: None, 6: None}.get(self.level, 0)
        if stats and host.numel() and (host.is_floating_point() or host.is_complex()):
            f = host.double() if not host.is_complex() else host.abs().double()
            finite = f[torch.isfinite(f)]
            nan, inf = int(torch.isnan(f).sum()), int(torch.isinf(f).sum())
            if finite.numel():
                lines.append(f"  min={finite.min().item():.6g} max={finite.max().item():.6g} "
                             f"mean={finite.mean().item():.6g} std={finite.std(unbiased=False).item():.6g} "
                             f"nan={nan} inf={inf}")
            else:
                lines.append(f"  nan={nan} inf={inf}")
        if values != 0:
            flat = host.reshape(-1)
            shown = flat if values is None else flat[:values]
            lines.append(f"  values={shown.tolist()}{' ...' if values is not None and flat.numel() > values else ''}")
        return lines

    def __call__(self, op: str, args: list, results: list) -> None:
        if not self.wanted(op):
            return
        self.count += 1
        lines = [f"[{self.count:06d}] {op}"]
        for kind, items in (("in", args), ("out", results)):
            for i, item in enumerate(items):
                for j, line in enumerate(self.describe(item)):
                    lines.append(f"  {kind}[{i}] {line}" if j == 0 else f"  {line}")
        text = "\n".join(lines) + "\n"
        self._full.write(text)
        folder = self.dir / f"{self.count:06d}_{op.replace('::', '.')}"
        folder.mkdir(exist_ok=True)
        (folder / "log.txt").write_text(text)

    def close(self) -> None:
        self._full.close()


_active: OpDebugLogger | None = None
_disable_at_exit = False


def enable(level: int, **kwargs) -> OpDebugLogger:
    global _active, _disable_at_exit
    disable()
    _active = OpDebugLogger(level, **kwargs)
    _C._set_op_debug_callback(_active)
    if not _disable_at_exit:
        # The log files close while Python still runs (their last lines flushed).
        atexit.register(disable)
        _disable_at_exit = True
    return _active


def disable() -> None:
    global _active
    _C._set_op_debug_callback(None)
    if _active is not None:
        _active.close()
        _active = None


def configure() -> None:
    """Start the log TORCH_MUSA_OP_DEBUG asks for (nothing at level 0)."""
    if CONFIG.op_debug_level:
        try:
            enable(CONFIG.op_debug_level, out_dir=CONFIG.op_debug_dir, length=CONFIG.op_debug_length,
                   allow=list(CONFIG.op_debug_list), deny=list(CONFIG.op_debug_black_list))
        except OSError as e:  # checked by the configuration; this is a race with the file system
            raise ValueError(f"TORCH_MUSA_OP_DEBUG_DIR={CONFIG.op_debug_dir!r}: the op log of "
                             f"TORCH_MUSA_OP_DEBUG={CONFIG.op_debug_level} cannot be written there: {e}") from e
