"""The README stays a user's README that tells the truth.

Its ```python blocks run as written (a user copies them), it fits in 12 KiB,
it starts with the two commands a new user runs, and every relative link in
it and in docs/*.md points at a file (and heading) that exists.

A block whose first line is ``# readme-test: <how>`` says how it must run:
``own process`` (it changes the interpreter for good, e.g. patches
torch.cuda) or ``torchrun`` (a distributed script: run as rank 0 of a
one-rank job, with the variables torchrun would set). Every other block runs,
in order and each in a fresh namespace, in one shared interpreter.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torch_musa.testing.ports import free_port_block

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_BYTES = 12 * 1024
DIRECTIVE = re.compile(r"#\s*readme-test:\s*(.+)")
KNOWN = ("own process", "torchrun")

FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _blocks(lang: str) -> list[tuple[int, str]]:
    """(line number, code) of the README's fenced blocks in ``lang``."""
    text = README.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(2))
            for m in FENCE.finditer(text) if m.group(1) == lang]


def _how(code: str) -> str | None:
    m = DIRECTIVE.match(code.lstrip().splitlines()[0])
    return m.group(1).split("(")[0].strip() if m else None


def _run(code: str, tmp_path: Path, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"


def _shared_program(blocks: list[tuple[int, str]]) -> str:
    """One program running each block in a fresh namespace, naming the block that failed."""
    lines = ["import sys, traceback"]
    for line, code in blocks:
        lines += [f"try:\n    exec(compile({code!r}, 'README.md block at line {line}', 'exec'), {{}})",
                  f"except BaseException:\n    traceback.print_exc()\n"
                  f"    sys.exit('README.md: the python block at line {line} failed')"]
    return "\n".join(lines) + "\n"


def _groups():
    shared = []
    for line, code in _blocks("python"):
        how = _how(code)
        if how is None:
            shared.append((line, code))
        else:
            yield pytest.param(how, [(line, code)], id=f"line{line}-{how.replace(' ', '-')}")
    yield pytest.param("shared", shared, id="shared")


@pytest.mark.slow
@pytest.mark.parametrize("how, blocks", list(_groups()))
def test_readme_python_blocks_run_as_written(how, blocks, tmp_path):
    assert blocks, "the README should have python blocks that run in one interpreter"
    assert how in KNOWN + ("shared",), (
        f"README.md line {blocks[0][0]}: unknown '# readme-test: {how}'; allowed: {', '.join(KNOWN)}")
    if how == "torchrun":
        env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port_block())}
        _run(blocks[0][1], tmp_path, env)
    else:
        _run(_shared_program(blocks), tmp_path)


def test_readme_fits_in_12_kib():
    size = README.stat().st_size
    assert size <= MAX_BYTES, (f"README.md is {size} bytes, over {MAX_BYTES}: move measurements "
                               "and guides to docs/ and link them")


def test_readme_starts_with_the_two_setup_commands():
    text = README.read_text()
    first = FENCE.search(text)
    assert first is not None and first.group(1) == "bash", "the README's first block is the setup"
    commands = [ln.split("#")[0].strip() for ln in first.group(2).splitlines() if ln.strip()]
    assert commands == ["bash scripts/run_main.sh", "bash scripts/run_tests.sh"], commands
    for cmd in commands:
        assert (ROOT / cmd.split()[1]).is_file(), cmd


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(md: Path) -> set[str]:
    text = FENCE.sub("", md.read_text())
    return {_slug(h) for h in HEADING.findall(text)}


def _markdown_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("md", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(md):
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", md.read_text()))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (md.parent / path).resolve() if path else md
        if not file.is_relative_to(ROOT) or not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, f"{md.relative_to(ROOT)}: " + "; ".join(broken)


def test_link_checker_sees_links_and_headings():
    """The checker would catch a broken link: it finds the README's links and GitHub's anchors."""
    assert len(LINK.findall(FENCE.sub("", README.read_text()))) >= 5
    assert _slug("The cuda driver against native CUDA (NVIDIA H200)") == \
        "the-cuda-driver-against-native-cuda-nvidia-h200"
    assert _slug("Debugging tools' overhead") == "debugging-tools-overhead"
