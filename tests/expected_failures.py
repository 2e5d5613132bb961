"""The cuda driver's expected-failures list (cuda_driver_expected_failures.yaml):
which collected test each entry names, shared by conftest and the list's own check."""
from __future__ import annotations

import fnmatch
import pathlib

import yaml

LIST = pathlib.Path(__file__).parent / "cuda_driver_expected_failures.yaml"


def load() -> dict[str, str]:
    """Entry (node id, prefix or fnmatch pattern) -> reason."""
    return yaml.safe_load(LIST.read_text()) or {}


def covers(entry: str, nodeid: str) -> bool:
    """A node id itself, a file or class prefix of it, or an fnmatch pattern (has `*`)."""
    if "*" in entry:
        return fnmatch.fnmatch(nodeid, entry)
    return nodeid == entry or nodeid.startswith((entry + "[", entry + "/", entry + "::"))


def entry_for(nodeid: str, listed: dict[str, str]) -> str | None:
    return next((e for e in listed if covers(e, nodeid)), None)
