"""The tests that need the MTT S80 (no float64, no bfloat16), run in one pytest subprocess
under TORCH_MUSA_PROFILE=s80.

The default profile (MTT S4000) computes float64 as the real card does, so the tests of
refusing float64 and of Dynamic Double Casting (requires_profile("s80")) would be skipped
in an ordinary run; this runs them, so CI keeps checking the S80's behaviour.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torch_musa.config import CONFIG

pytestmark = pytest.mark.slow

TESTS = Path(__file__).parent
MARK = re.compile(r'@pytest\.mark\.requires_profile\(\s*"s80"')


def s80_files():
    return sorted(str(p) for p in TESTS.rglob("test_*.py")
                  if p.name != Path(__file__).name and MARK.search(p.read_text()))


def test_s80_only_tests_pass_under_the_s80_profile():
    if CONFIG.driver != "host":
        pytest.skip("the hardware profiles are the host driver's; under another driver the GPU's")
    if CONFIG.profile.key == "s80":
        pytest.skip("this run is on the S80 already: the tests ran in it")
    files = s80_files()
    marked = sum(len(MARK.findall(Path(f).read_text())) for f in files)
    assert marked >= 6, files
    env = {**os.environ, "TORCH_MUSA_PROFILE": "s80"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-m", "requires_profile", *files],
                       capture_output=True, text=True, env=env, timeout=300, cwd=TESTS.parent)
    tail = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    passed = re.search(r"(\d+) passed", r.stdout)
    assert passed and int(passed.group(1)) >= marked, tail
