"""python -m torch_musa.config [--markdown]: this process's configuration, or the
README's table of environment variables."""
from __future__ import annotations

import argparse
import dataclasses

from torch_musa.config import CONFIG
from torch_musa.config.variables import markdown_table


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m torch_musa.config", description=__doc__)
    ap.add_argument("--markdown", action="store_true",
                    help="print the environment-variable table of README.md")
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown_table(), end="")
        return
    for field in dataclasses.fields(CONFIG):
        value = getattr(CONFIG, field.name)
        if field.name == "profile":
            value = f"{value.key} ({value.name}, arch {value.major}.{value.minor})"
        print(f"{field.name:24} {value}")
    print(f"{'device_count':24} {CONFIG.device_count}")


if __name__ == "__main__":
    main()
