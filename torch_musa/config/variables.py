"""Every environment variable torch_musa reads, declared once.

A declaration gives the name, the values allowed, the default and the meaning.
``runtime.py`` reads them all once, at import; the README's table is printed
from them (``python -m torch_musa.config --markdown``); a bad value is a
ValueError naming the variable, the value and what is allowed.
"""
from __future__ import annotations

import dataclasses
import decimal
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from torch_musa._table import render
from torch_musa.config.profiles import DEFAULT_PROFILE, PROFILES, profile_key

INT64_MAX = (1 << 63) - 1


#: The CUDA -> MUSA mapping table; its ``env:`` section is the one table of environment
#: twins (the converter renames them, cuda_compat copies them, the variables below take theirs).
MAPPING_TABLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cuda_mapping.yaml")


def read_env_table(path: str = MAPPING_TABLE) -> dict[str, str]:
    """The mapping table's ``env:`` section, CUDA name -> MUSA name, in its order.

    This layer imports no PyYAML (``torch_musa.cuda_mapping`` reads the whole table with it),
    so it reads this one flat section itself: ``NAME: NAME`` lines indented under a top-level
    ``env:``, comments and blank lines skipped; any other line there is an error, not a guess
    (tests/config pins that this reads what PyYAML reads)."""
    out: dict[str, str] = {}
    inside = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.split("#", 1)[0].rstrip()
            if not text:
                continue
            if not text[0].isspace():  # a top-level key
                if inside:
                    break
                inside = text == "env:"
            elif inside:
                m = re.fullmatch(r"\s+([A-Za-z_]\w*):\s*([A-Za-z_]\w*)", text)
                if not m:
                    raise ValueError(f"{path}:{number}: the env: section holds `CUDA_NAME: MUSA_NAME` "
                                     f"lines only, not {line.strip()!r}")
                out[m.group(1)] = m.group(2)
    if not out:
        raise ValueError(f"{path}: no env: section")
    return out


#: CUDA name -> MUSA name (the mapping table's ``env:`` section).
CUDA_ENV: dict[str, str] = read_env_table()
#: MUSA name -> its CUDA twin.
CUDA_TWIN: dict[str, str] = {musa: cuda for cuda, musa in CUDA_ENV.items()}


class Invalid(ValueError):
    """Why a text is not a value of a kind; ``Variable.parse`` adds the name and what is allowed."""


# ----------------------------------------------------------------------------- kinds of value
# Each kind has ``allowed`` (the values, for errors), ``brief`` (for the README's
# table) and ``parse(text)``, which raises Invalid.
class Choice:
    def __init__(self, *values: str, synonyms: Mapping[str, str] | None = None, what: str = ""):
        self.values = values
        self.synonyms = dict(synonyms or {})
        self.what = what or "not one of the choices"
        self.brief = ", ".join(f"`{v}`" for v in values)

    @property
    def allowed(self) -> str:
        parts = []
        for v in self.values:
            alts = [s for s, target in self.synonyms.items() if target == v]
            parts.append(v + (f" (or {', '.join(alts)})" if alts else ""))
        return ", ".join(parts)

    def parse(self, text: str) -> str:
        key = text.strip().lower()
        key = self.synonyms.get(key, key)
        if key not in self.values:
            raise Invalid(self.what)
        return key


_TRUE = ("1", "true", "on", "yes")
_FALSE = ("0", "false", "off", "no")


class Flag:
    allowed = f"{', '.join(_TRUE)} or {', '.join(_FALSE)} (any case)"
    brief = "`1` or `0`"

    def parse(self, text: str) -> bool:
        key = text.strip().lower()
        if key in _TRUE:
            return True
        if key in _FALSE:
            return False
        raise Invalid("not a yes/no value")


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_bytes(text: str) -> int:
    """'2GB', '512MiB', '1.5g', '1073741824' -> bytes (units are powers of 1024)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise Invalid("not a size")
    return int(decimal.Decimal(m.group(1)) * _UNITS[m.group(2).lower()])


class Size:
    def __init__(self, minimum: int, maximum: int = INT64_MAX, maximum_text: str = "2^63-1 bytes"):
        self.minimum, self.maximum, self.maximum_text = minimum, maximum, maximum_text
        self.brief = "a size: `4GB`, `512MiB`, bytes" + (" (0: no limit)" if minimum == 0 else "")

    @property
    def allowed(self) -> str:
        low = "0 (no limit)" if self.minimum == 0 else "1 byte"
        return (f"a size such as 4GB, 512MiB or 1073741824 (units B, K, M, G, T: powers of 1024), "
                f"from {low} to {self.maximum_text}")

    def parse(self, text: str) -> int:
        n = parse_bytes(text)
        if n < self.minimum:
            raise Invalid("too small")
        if n > self.maximum:
            raise Invalid("too large")
        return n


#: The largest device capacity: the allocator's limit is capacity x memory fraction, a double,
#: so capacities within 512 bytes of 2^63 round to 2^63, which no int64 holds.
MAX_DEVICE_MEMORY = 1 << 62
#: The largest max_split_size_mb whose size in bytes the allocator holds (an int64).
MAX_SPLIT_SIZE_MB = INT64_MAX >> 20
#: The largest roundup_power2_divisions value (a power of two the allocator holds as a size_t).
MAX_DIVISIONS = 1 << 62


class Integer:
    def __init__(self, low: int, high: int | None = None):
        self.low, self.high = low, high
        self.allowed = self.brief = (f"an integer from {low} to {high}" if high is not None
                                     else f"an integer >= {low}")

    def parse(self, text: str) -> int:
        if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", text):
            raise Invalid("not an integer")
        n = int(text)
        if n < self.low or (self.high is not None and n > self.high):
            raise Invalid("out of range")
        return n


class Text:
    def __init__(self, allowed: str):
        self.allowed = self.brief = allowed

    def parse(self, text: str) -> str:
        return text


class Names:
    allowed = brief = "comma-separated names"

    def parse(self, text: str) -> tuple[str, ...]:
        return tuple(s.strip() for s in text.split(",") if s.strip())


def visible_devices(spec: str | None, physical: int) -> tuple[int, ...]:
    """Physical indices ``spec`` keeps, as CUDA reads CUDA_VISIBLE_DEVICES: the list
    ends at the first invalid, out-of-range or repeated entry; None keeps all."""
    if spec is None:
        return tuple(range(physical))
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not re.fullmatch(r"[0-9]+", part):
            break
        idx = int(part)
        if idx >= physical or idx in out:
            break
        out.append(idx)
    return tuple(out)


class DeviceList:
    allowed = "comma-separated physical indices (ending at the first invalid, out-of-range or repeated one)"
    brief = "indices: `1,0`"

    def parse(self, text: str) -> str:
        return text


@dataclasses.dataclass(frozen=True)
class AllocatorSettings:
    """PYTORCH_MUSA_ALLOC_CONF: the options musa's caching allocator takes (CUDA's names and
    meanings), and the rest (passed on to CUDA's allocator under the cuda driver, an error on
    the host driver)."""
    text: str = ""
    max_split_size_bytes: int = 0  # 0: no limit
    garbage_collection_threshold: float = 0.0  # 0: off
    # Divisions per power-of-two interval of sizes, from 1 MiB up (16 intervals; 0: 512-byte steps).
    roundup_power2_divisions: tuple[int, ...] = (0,) * 16
    cpu_unified: bool = False  # cpu:unified: CPU tensors in memory the device uses
    others: tuple[str, ...] = ()


_ALLOC_OPTIONS = ("max_split_size_mb", "garbage_collection_threshold", "roundup_power2_divisions",
                  "expandable_segments", "cpu")
#: Options of musa's own, not passed on to CUDA's allocator under the cuda driver.
_MUSA_ONLY_ALLOC_OPTIONS = ("cpu",)


def _alloc_items(spec: str) -> list[str]:
    """Comma-separated items, a comma inside [...] (roundup_power2_divisions' list) kept."""
    items, depth, cur = [], 0, ""
    for ch in spec:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth <= 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return [s.strip() for s in items if s.strip()]


def split_alloc_conf(spec: str) -> tuple[list[str], list[str]]:
    """The items of an allocator configuration musa's allocator knows, and the others.
    expandable_segments:True is among the others: only CUDA's allocator (the cuda driver)
    grows segments in place."""
    known, others = [], []
    for item in _alloc_items(spec):
        key, sep, value = (s.strip() for s in item.partition(":"))
        ok = sep and key in _ALLOC_OPTIONS and not (key == "expandable_segments" and value.lower() == "true")
        (known if ok else others).append(item)
    return known, others


def cuda_alloc_conf(spec: str) -> str:
    """An allocator configuration as CUDA's allocator takes it (the cuda driver passes it
    on): every item but musa's own options, which CUDA refuses as unknown keys."""
    return ",".join(item for item in _alloc_items(spec)
                    if item.partition(":")[0].strip() not in _MUSA_ONLY_ALLOC_OPTIONS)


def from_cuda_names(environ: Mapping[str, str],
                    musa_names: Iterable[str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The MUSA variables of the mapping table's ``env:`` section (or only ``musa_names``) that
    ``environ`` leaves unset while their CUDA twin is set, each with its twin's value; and the
    PYTORCH_CUDA_ALLOC_CONF options dropped on the way (CUDA-only options have no musa meaning).

    The one CUDA -> MUSA translation of the environment: the configuration reads the CUDA names
    through it under TORCH_MUSA_CUDA_COMPAT (silently), and ``cuda_compat.apply_env_aliases``
    copies them into ``os.environ`` (warning about what it drops)."""
    wanted = None if musa_names is None else set(musa_names)
    values: dict[str, str] = {}
    dropped: list[str] = []
    for cuda, musa in CUDA_ENV.items():
        if (wanted is None or musa in wanted) and cuda in environ and musa not in environ:
            value = environ[cuda]
            if musa == "PYTORCH_MUSA_ALLOC_CONF":
                keep, dropped = split_alloc_conf(value)
                value = ",".join(keep)
            values[musa] = value
    return values, dropped


def _alloc_conf_error(option: str) -> str:
    """Why the host driver refuses an option of PYTORCH_MUSA_ALLOC_CONF."""
    why = f"unknown or malformed option {option!r}"
    if option.partition(":")[0].strip() == "expandable_segments":
        why += (" (expandable_segments:True is not available on the host driver: its segments are "
                "host memory blocks that cannot grow in place; the cuda driver passes it to CUDA)")
    return why


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _divisions(value: str) -> tuple[int, ...]:
    """roundup_power2_divisions, read as CUDA reads it: N (a power of two, every interval), or
    [256:1,512:2,>:4] (interval starts in MiB, powers of two; the first value also covers the
    intervals below it, `>` the ones above the last named; values powers of two or 0)."""
    def division(text: str, zero_ok: bool = True) -> int:
        n = int(text)
        if not (_power_of_two(n) or (zero_ok and n == 0)) or n > MAX_DIVISIONS:
            raise ValueError(text)
        return n

    if not value.startswith("["):
        return (division(value, zero_ok=False),) * 16
    if not value.endswith("]"):
        raise ValueError(value)
    out = [0] * 16
    last, first = 0, True
    for part in filter(None, (p.strip() for p in value[1:-1].split(","))):
        size, _, div = (p.strip() for p in part.partition(":"))
        d = division(div)
        if size == ">":
            out[last + 1:] = [d] * (15 - last)
            continue
        mb = int(size)
        if not _power_of_two(mb):
            raise ValueError(size)
        index = min(mb.bit_length() - 1, 15)
        if first:
            out[:index] = [d] * index
            first = False
        out[index] = d
        last = index
    return tuple(out)


class AllocConf:
    allowed = (f"comma-separated max_split_size_mb:N (an integer from 2 to {MAX_SPLIT_SIZE_MB}), "
               "garbage_collection_threshold:X (0 < X < 1), roundup_power2_divisions:N or "
               "[MiB:N,...,>:N] (N a power of two up to 2^62, or 0), "
               "expandable_segments:False (True under the cuda driver), cpu:unified (unified memory)")
    brief = ("`max_split_size_mb:N`, `garbage_collection_threshold:X`, `roundup_power2_divisions:N`, "
             "`expandable_segments:False`, `cpu:unified`")

    def parse(self, text: str) -> AllocatorSettings:
        known, others = split_alloc_conf(text)
        max_split, gc, divisions, unified = 0, 0.0, (0,) * 16, False
        for item in known:
            key, _, value = (s.strip() for s in item.partition(":"))
            try:
                if key == "max_split_size_mb":
                    max_split = int(value) << 20
                    ok = (1 << 20) < max_split <= MAX_SPLIT_SIZE_MB << 20
                elif key == "garbage_collection_threshold":
                    gc = float(value)
                    ok = 0.0 < gc < 1.0
                elif key == "roundup_power2_divisions":
                    divisions = _divisions(value)
                    ok = True
                elif key == "cpu":
                    ok = unified = value == "unified"
                else:  # expandable_segments: True is among the others
                    ok = value.lower() == "false"
            except ValueError:
                ok = False
            if not ok:
                raise Invalid(f"bad value in {item!r}")
        return AllocatorSettings(text.strip(), max_split, gc, divisions, unified, tuple(others))


# ----------------------------------------------------------------------------- declarations
@dataclasses.dataclass(frozen=True)
class Variable:
    name: str
    kind: Any  # one of the kinds above
    default: Any  # the value when unset or empty
    default_text: str  # the default as the table shows it
    meaning: str
    # Whether its CUDA twin (the name the mapping table's env: section gives it) is read in
    # its place under TORCH_MUSA_CUDA_COMPAT when this one is unset, and set from it under
    # the cuda driver when that one is unset.
    cuda_twin: bool = False
    empty_is_value: bool = False  # MUSA_VISIBLE_DEVICES="" means no device, as CUDA's

    def __post_init__(self):
        if self.cuda_twin and self.name not in CUDA_TWIN:
            raise ValueError(f"{self.name}: {MAPPING_TABLE}'s env: section names no CUDA twin for it")

    @property
    def cuda_name(self) -> str | None:
        """Its CUDA twin's name, from the mapping table (None without ``cuda_twin``)."""
        return CUDA_TWIN[self.name] if self.cuda_twin else None

    def read(self, environ: Mapping[str, str]) -> Any:
        return self.parse(environ.get(self.name))

    def parse(self, raw: str | None) -> Any:
        if raw is None or (not raw.strip() and not self.empty_is_value):
            return self.default
        try:
            return self.kind.parse(raw)
        except Invalid as e:
            raise self.error(raw, str(e)) from None

    def error(self, raw: str, reason: str) -> ValueError:
        return ValueError(f"{self.name}={raw!r}: {reason}; allowed: {self.kind.allowed}")


class _Profile(Choice):
    def parse(self, text: str) -> str:
        key = profile_key(text)
        if key is None:
            raise Invalid(self.what)
        return key


_DECLARED = (
    Variable("TORCH_MUSA_DRIVER", Choice("host", "cuda", what="not a musa driver"), "host", "`host`",
             "`host`: device memory in host RAM, kernels on the CPU; `cuda`: musa on an NVIDIA GPU"),
    Variable("TORCH_MUSA_PROFILE", _Profile(*PROFILES, what="not a known hardware profile"),
             DEFAULT_PROFILE, f"`{DEFAULT_PROFILE}`",
             "The simulated card: name, arch, memory, dtypes (the cuda driver reports the GPU)"),
    Variable("MUSA_VISIBLE_DEVICES", DeviceList(), None, "all",
             "Devices this process sees, in order, as `CUDA_VISIBLE_DEVICES` (the cuda driver sets that from it)",
             cuda_twin=True, empty_is_value=True),
    Variable("TORCH_MUSA_DEVICE_MEMORY", Size(1, MAX_DEVICE_MEMORY, "2^62 bytes (4 EiB)"), None, "the profile's", "Memory of each device"),
    Variable("TORCH_MUSA_HOST_MEMORY_LIMIT", Size(0), None, "80 % of RAM",
             "Host RAM all devices together may reserve (host driver)"),
    Variable("PYTORCH_MUSA_ALLOC_CONF", AllocConf(), AllocatorSettings(), "none",
             "Caching allocator options (the cuda driver passes any of CUDA's on as `PYTORCH_CUDA_ALLOC_CONF`)",
             cuda_twin=True),
    Variable("TORCH_MUSA_FALLBACK", Choice("warn", "silent", "error"), "warn", "`warn`",
             "An op served by the CPU fallback warns once, is silent, or raises"),
    Variable("TORCH_USE_MUSA_DOUBLE_CAST", Flag(), False, "`0`",
             "Compute float64 ops in float32 on profiles without float64"),
    Variable("TORCH_MUSA_OP_DEBUG", Integer(0, 6), 0, "`0`",
             "Log device ops: 1 shapes, 2 statistics, 3/4 first/all values, 5 = 2+3, 6 = 2+4"),
    Variable("TORCH_MUSA_OP_DEBUG_DIR", Text("a directory"), "DEBUG_DIR", "`DEBUG_DIR`", "Where the op log goes"),
    Variable("TORCH_MUSA_OP_DEBUG_LENGTH", Integer(1), 50, "`50`", "Values logged at levels 3 and 5"),
    Variable("TORCH_MUSA_OP_DEBUG_LIST", Names(), (), "all", "Log only ops whose names contain one"),
    Variable("TORCH_MUSA_OP_DEBUG_BLACK_LIST", Names(), (), "none", "Do not log ops whose names contain one"),
    Variable("TORCH_MUSA_CUDA_COMPAT", Flag(), False, "`0`",
             "Enable `torch_musa.cuda_compat` at import; CUDA's names of the variables above count when unset"),
    Variable("MCCL_ENGINE", Choice("auto", "gloo", "nccl"), "auto", "`auto`",
             "Gloo on the host driver; NCCL under the cuda driver unless ranks outnumber GPUs"),
    Variable("MCCL_CHECK_COLLECTIVES",
             Choice("first", "all", "off", synonyms={"1": "all", "true": "all", "yes": "all", "on": "all",
                                                     "every": "all", "0": "off", "false": "off",
                                                     "no": "off", "none": "off"}),
             "first", "`first`", "Check that ranks' collectives match: each signature's first call, all, none"),
    Variable("MCCL_STAGE_GLOO", Flag(), False, "`0`",
             "Stage Gloo through host copies on the host driver too (as the cuda driver does)"),
    Variable("MUSA_HOME", Text("a directory"), "", "`/usr/local/musa` if present",
             "The MUSA toolkit, for `musa_extension`"),
    Variable("TORCH_MUSA_TESTING_RENDEZVOUS", Text("host:port:pid"), "", "unset",
             "Set by `testing.gen_ip_port` for the ranks it spawns"),
)

VARIABLES: dict[str, Variable] = {v.name: v for v in _DECLARED}


def host_allocator_arguments(settings: AllocatorSettings, given: str | None = None) -> tuple[int, float, list[int]]:
    """``settings`` as the host driver's caching allocator takes them: the positional arguments
    of ``_C._set_allocator_settings``, in its order.

    An option it does not know (one of ``settings.others``, which the cuda driver passes on to
    CUDA's allocator) is PYTORCH_MUSA_ALLOC_CONF's ValueError naming ``given`` (the text as
    set; ``settings.text`` by default): the one check and the one message, for the
    configuration read at import and for ``torch.musa._set_allocator_settings``."""
    if settings.others:
        raise VARIABLES["PYTORCH_MUSA_ALLOC_CONF"].error(settings.text if given is None else given,
                                                         _alloc_conf_error(settings.others[0]))
    return (settings.max_split_size_bytes, settings.garbage_collection_threshold,
            list(settings.roundup_power2_divisions))


#: PyTorch's own variables that torch_musa reads in PyTorch's place, as set (their values are
#: checked where used, as PyTorch does): TunableOp's, which the host driver's
#: ``torch.musa.tunable`` honours as ``torch.cuda.tunable`` does (under the cuda driver
#: PyTorch's TunableOp reads them itself). PyTorch documents them: not in the README's table.
PYTORCH_VARIABLES: dict[str, Variable] = {v.name: v for v in (
    Variable(f"PYTORCH_TUNABLEOP_{name}", Text(allowed), None, "unset", meaning)
    for name, allowed, meaning in (
        ("ENABLED", "`1`", "TunableOp on"),
        ("TUNING", "`0`", "no tuning of GEMMs without a result"),
        ("RECORD_UNTUNED", "`1`", "record untuned GEMMs"),
        ("MAX_TUNING_DURATION_MS", "an integer", "milliseconds to tune one solution"),
        ("MAX_TUNING_ITERATIONS", "an integer", "iterations to tune one solution"),
        ("ROTATING_BUFFER_SIZE", "an integer (MB)", "the rotating buffer"),
        ("FILENAME", "a file name", "the results file"),
    ))}


def markdown_table() -> str:
    """The README's table of environment variables."""
    return render(["Variable", "Values", "Default", "Meaning"],
                  [[f"`{v.name}`", v.kind.brief, v.default_text, v.meaning] for v in _DECLARED],
                  markdown=True) + "\n"
