"""Print the musa operator coverage: native ops vs ops that take the CPU fallback.

    python -m torch_musa.ops [--json FILE] [--run SCRIPT]

With --run, SCRIPT is executed first so that the fallback column shows what a
real workload used.
"""
from __future__ import annotations

import argparse
import json
import runpy
import sys

from torch_musa.ops import coverage


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the coverage as JSON here ('-' for stdout)")
    ap.add_argument("--run", help="a Python script to run first (its fallbacks are counted)")
    args = ap.parse_args(argv)
    if args.run:
        saved = sys.argv
        sys.argv = [args.run]
        try:
            runpy.run_path(args.run, run_name="__main__")
        finally:
            sys.argv = saved
    cov = coverage()
    if args.json == "-":
        json.dump(cov, sys.stdout, indent=2)
        return 0
    if args.json:
        with open(args.json, "w") as f:
            json.dump(cov, f, indent=2)
    print(f"hardware profile: {cov['profile']} ({cov['driver']} driver)")
    refused = ", ".join(cov["profile_refuses"]) or "nothing"
    print(f"the profile refuses to compute in: {refused} "
          f"(except in the {len(cov['dtype_agnostic'])} ops that only move or select data)")
    print(f"native ops (musa_functions.yaml), in their kernel's dtypes: {len(cov['native'])}")
    width = max(len(n) for n in cov["native"])
    for name in cov["native"]:
        print(f"  {name:<{width}}  {cov['strategy'][name]}")
    print(f"ops that took the CPU fallback: {len(cov['fallback'])}")
    for name, calls in cov["fallback"].items():
        print(f"  {name:<{width}}  {calls} call(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
