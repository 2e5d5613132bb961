"""Regenerate musa-doctor's table of the real torch_musa's native ops per release.

    python scripts/doctor_native_ops.py GIT_DIR > torch_musa/utils/doctor/data/native_ops.json

GIT_DIR is a clone of github.com/MooreThreads/torch_musa (a bare one will do).
For each release tag it reads the public operator list,
``torch_musa/csrc/aten/ops/musa_functions.yaml`` (its ``- func:`` names), and the
ops the C++ registers by name (``m.impl("...")`` under ``torch_musa/csrc/aten``):
the releases before the yaml existed (v1.0, v1.1) registered every op that way.
Names only: facts about which ops have a musa kernel, not code.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

YAML = "torch_musa/csrc/aten/ops/musa_functions.yaml"


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True,
                          capture_output=True, text=True).stdout


def release_ops(git_dir: str, tag: str) -> set[str]:
    try:
        yaml = _git(git_dir, "show", f"{tag}:{YAML}")
    except subprocess.CalledProcessError:
        yaml = ""
    names = set(re.findall(r"^- func:\s*([A-Za-z0-9_.]+)", yaml, re.M))
    try:
        impl = _git(git_dir, "grep", "-h", "-o", r'm.impl("[A-Za-z0-9_.]*"', tag, "--", "torch_musa/csrc/aten")
    except subprocess.CalledProcessError:
        impl = ""
    names |= {m for m in re.findall(r'm.impl\("([A-Za-z0-9_.]+)"', impl) if m != "yaml"}
    return {n if "." in n else n + ".default" for n in names}


def main(git_dir: str) -> None:
    tags = [t for t in _git(git_dir, "tag", "--sort=creatordate").split() if re.fullmatch(r"v[\d.]+(-\w+)?", t)]
    releases, present = [], {}
    for t in tags:
        date = _git(git_dir, "log", "-1", "--format=%ad", "--date=short", t).strip()
        commit = _git(git_dir, "rev-list", "-n1", t).strip()
        releases.append({"release": t, "date": date, "commit": commit})
        for op in release_ops(git_dir, t):
            present.setdefault(op, []).append(len(releases) - 1)
    out = {
        "source": "github.com/MooreThreads/torch_musa: " + YAML + " (- func: names) and m.impl names "
                  "under torch_musa/csrc/aten, per release tag",
        "generated_by": "scripts/doctor_native_ops.py",
        "releases": releases,
        # op -> indices into releases where the op has a musa kernel
        "ops": {op: idx for op, idx in sorted(present.items())},
    }
    json.dump(out, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
