"""Environment variables that shape the runtime before it starts."""
from __future__ import annotations

import os
import re

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_bytes(text: str, what: str) -> int:
    m = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{what}={text!r}: expected a size such as 2GB, 512MiB or 1073741824")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


DRIVERS = ("host", "cuda")

# Under the cuda driver musa:i is cuda:i and musa memory is CUDA's caching allocator,
# so these musa settings stand for the CUDA ones.
_CUDA_EQUIVALENTS = (("MUSA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
                     ("PYTORCH_MUSA_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"))


def cuda_driver_env(environ) -> dict[str, str]:
    """The CUDA variables to set for the cuda driver: each musa one given, unless its
    CUDA twin is set already (an explicit CUDA setting wins)."""
    return {cuda: environ[musa] for musa, cuda in _CUDA_EQUIVALENTS if musa in environ and cuda not in environ}


def driver_name() -> str:
    """TORCH_MUSA_DRIVER: 'host' (default, no hardware needed) or 'cuda'."""
    name = os.environ.get("TORCH_MUSA_DRIVER", "host").strip().lower() or "host"
    if name not in DRIVERS:
        raise ValueError(
            f"TORCH_MUSA_DRIVER={os.environ['TORCH_MUSA_DRIVER']!r} is not a musa "
            f"driver; choose one of {list(DRIVERS)}"
        )
    return name


def visible_devices(physical: int) -> list[int]:
    """Physical indices kept by MUSA_VISIBLE_DEVICES, as CUDA_VISIBLE_DEVICES does.

    Parsing stops at the first invalid or out-of-range entry, and a repeated
    entry ends the list, matching CUDA's behaviour.
    """
    spec = os.environ.get("MUSA_VISIBLE_DEVICES")
    if spec is None:
        return list(range(physical))
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not re.fullmatch(r"[0-9]+", part):
            break
        idx = int(part)
        if idx >= physical or idx in out:
            break
        out.append(idx)
    return out


def host_memory_limit() -> int:
    """Bytes of host RAM all musa devices together may reserve (host driver)."""
    spec = os.environ.get("TORCH_MUSA_HOST_MEMORY_LIMIT")
    if spec:
        return parse_bytes(spec, "TORCH_MUSA_HOST_MEMORY_LIMIT")
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024 * 8 // 10
    except OSError:
        pass
    return 0


def allocator_settings() -> tuple[int, float]:
    """(max_split_size bytes or 0, garbage_collection_threshold) from PYTORCH_MUSA_ALLOC_CONF."""
    spec = os.environ.get("PYTORCH_MUSA_ALLOC_CONF", "").strip()
    max_split, gc = 0, 0.0
    known = ("max_split_size_mb", "garbage_collection_threshold")
    for item in filter(None, (s.strip() for s in spec.split(","))):
        key, sep, value = item.partition(":")
        key = key.strip()
        if not sep or key not in known:
            raise ValueError(
                f"PYTORCH_MUSA_ALLOC_CONF: unknown or malformed option {item!r}; "
                f"supported options are {', '.join(k + ':VALUE' for k in known)}"
            )
        try:
            if key == "max_split_size_mb":
                max_split = int(value) << 20
                if max_split <= (1 << 20):
                    raise ValueError
            else:
                gc = float(value)
                if not 0.0 < gc < 1.0:
                    raise ValueError
        except ValueError:
            allowed = "an integer > 1" if key == "max_split_size_mb" else "a number in (0, 1)"
            raise ValueError(f"PYTORCH_MUSA_ALLOC_CONF: {key} must be {allowed}, got {value!r}") from None
    return max_split, gc
