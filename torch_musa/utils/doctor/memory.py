"""The memory collector: peak allocated and reserved device memory per step (the
allocator's statistics), memory over the run (sampled after each op), and the
largest tensors alive at the peak (replayed from the allocator's memory history)."""
from __future__ import annotations

import torch

from torch_musa.utils.doctor.frames import UserCode

#: Allocator events kept in the history (alloc and free each count one).
HISTORY_ENTRIES = 200_000
#: Points of the memory-over-time curve kept (every n-th op once there are more).
TIMELINE_POINTS = 4000


class MemoryRecorder:
    def __init__(self, user: UserCode):
        self.user = user
        self.per_step: list[dict] = []
        self.timeline: list[tuple[int, int]] = []   # (op index, bytes allocated)
        self._ops = 0
        self._every = 1

    def __enter__(self):
        torch.musa.reset_peak_memory_stats()
        torch.musa.memory._record_memory_history("all", context="all", stacks="python",
                                                 max_entries=HISTORY_ENTRIES)
        return self

    def __exit__(self, *exc):
        self.largest = self._largest_at_peak()
        torch.musa.memory._record_memory_history(None)
        return False

    def on_op(self, _name: str) -> None:
        self._ops += 1
        if self._ops % self._every == 0:
            self.timeline.append((self._ops, torch.musa.memory_allocated()))
            if len(self.timeline) >= 2 * TIMELINE_POINTS:
                self.timeline = self.timeline[::2]
                self._every *= 2

    def close_step(self) -> None:
        self.per_step.append({"peak_allocated": torch.musa.max_memory_allocated(),
                              "peak_reserved": torch.musa.max_memory_reserved(),
                              "ops_so_far": self._ops})
        torch.musa.reset_peak_memory_stats()

    def _largest_at_peak(self, top: int = 10) -> list[dict]:
        """The allocations alive when the most bytes were, largest first."""
        trace = torch.musa.memory._snapshot()["device_traces"]
        events = trace[0] if trace else []
        alive: dict[int, dict] = {}
        total = best = 0
        best_alive: list[dict] = []
        for e in events:
            if e["action"] == "alloc":
                alive[e["addr"]] = e
                total += e["size"]
                if total > best:
                    best, best_alive = total, list(alive.values())
            elif e["action"] == "free_completed" and e["addr"] in alive:
                total -= alive.pop(e["addr"])["size"]
        out = []
        for e in sorted(best_alive, key=lambda e: -e["size"])[:top]:
            site = next((f"{f['filename']}:{f['line']}" for f in e["frames"]
                         if self.user.is_user_file(f["filename"])), None)
            out.append({"bytes": e["size"], "site": site})
        return out

    def to_json(self) -> dict:
        return {"capacity": torch.musa.get_device_properties(0).total_memory,
                "per_step": self.per_step, "timeline": self.timeline,
                "largest_at_peak": getattr(self, "largest", [])}
