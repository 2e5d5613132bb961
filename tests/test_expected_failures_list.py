"""The cuda driver's expected-failures list names tests that exist: a renamed or
removed test must not leave an entry that silently covers nothing."""
import subprocess
import sys

from tests import expected_failures

ROOT = expected_failures.LIST.parent.parent


def test_every_entry_names_a_collected_test():
    listed = expected_failures.load()
    assert listed and all(isinstance(r, str) and r.strip() for r in listed.values()), \
        "every entry needs a reason"
    files = sorted({e.split("::")[0] for e in listed})
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *files], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    nodeids = [line for line in proc.stdout.splitlines() if "::" in line]
    empty = [e for e in listed if not any(expected_failures.covers(e, n) for n in nodeids)]
    assert not empty, f"entries that name no collected test: {empty}"


def test_patterns_and_prefixes_cover_what_they_say():
    c = expected_failures.covers
    assert c("tests/a.py", "tests/a.py::test_x[1]") and c("tests/a.py::test_x", "tests/a.py::test_x[1]")
    assert not c("tests/a.py::test_x", "tests/a.py::test_xy")
    assert c("tests/a.py::test_[!d]*[[]native]", "tests/a.py::test_run[native]")
    assert not c("tests/a.py::test_[!d]*[[]native]", "tests/a.py::test_dump[native]")
    assert not c("tests/a.py::test_[!d]*[[]native]", "tests/a.py::test_run[python]")
