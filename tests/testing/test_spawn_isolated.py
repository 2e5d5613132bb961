"""torch_musa.testing.common_utils.spawn_isolated_test, as the real package's: each
call of the test runs in a fresh interpreter, failures come back with its stderr."""
import os

import pytest

from torch_musa.testing.common_utils import spawn_isolated_test

# set on the first import (pytest's process); the child inherits it and imports anew
os.environ.setdefault("TORCH_MUSA_TEST_ISOLATED_PARENT", str(os.getpid()))
_PARENT = int(os.environ["TORCH_MUSA_TEST_ISOLATED_PARENT"])


def _check_in_child(marker, expected):
    assert os.getpid() != _PARENT  # another process
    assert marker == expected, f"child saw {marker!r}"


@spawn_isolated_test
@pytest.mark.parametrize("n", [1, 2])
def test_runs_in_a_fresh_process(n):
    assert os.getpid() != _PARENT
    assert n in (1, 2)


def test_failure_in_the_child_is_raised_with_its_stderr():
    wrapped = spawn_isolated_test(_check_in_child)
    wrapped("a", "a")
    with pytest.raises(RuntimeError, match=r"(?s)Error raised in subprocess.*child saw 'a'"):
        wrapped("a", "b")
