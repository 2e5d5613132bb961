"""The cards musa-doctor reports on: the vendor's figures (``data/cards.yaml``)
joined with torch_musa's hardware profile for each (dtypes, capacity)."""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import torch
import yaml

from torch_musa.config.profiles import GiB, PROFILES

DATA = Path(__file__).with_name("data") / "cards.yaml"

#: The MUSA cards every report gives a verdict for.
MUSA_CARDS = ("s80", "s4000", "s5000")


@dataclasses.dataclass(frozen=True)
class Card:
    key: str
    name: str
    profile: str            # the torch_musa hardware profile the run uses
    is_musa: bool
    memory_bytes: int
    bandwidth_gbs: float
    pcie_gbs: float
    tflops: dict            # dtype name -> published dense TFLOPS, or None
    source: str
    date: str

    @property
    def unsupported_dtypes(self) -> list[torch.dtype]:
        """What the card cannot compute in: its profile's answer (none for other vendors' cards)."""
        return PROFILES[self.profile].unsupported_dtypes() if self.is_musa else []


@functools.cache
def cards() -> dict[str, Card]:
    raw = yaml.safe_load(DATA.read_text())
    out = {}
    for key, c in raw.items():
        profile = c.get("profile") or c["runs_as"]
        out[key] = Card(key, c["name"], profile, "profile" in c, int(c["memory_gib"] * GiB),
                        float(c["bandwidth_gbs"]), float(c["pcie_gbs"]), dict(c["tflops"]),
                        c["source"], str(c["date"]))
    return out


def card(key: str) -> Card:
    """The card ``key`` names; a ValueError listing the known ones otherwise."""
    known = cards()
    k = key.strip().lower().replace("mtt", "").replace(" ", "").replace("_", "")
    if k not in known:
        raise ValueError(f"unknown card {key!r}: musa-doctor knows {', '.join(known)}")
    return known[k]
