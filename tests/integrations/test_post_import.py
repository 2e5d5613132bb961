"""torch_musa._post_import: a callback runs once its module is imported (at once if it
already is), a failing callback is a warning, and nothing is imported on its behalf."""
import sys

import pytest

from torch_musa import _post_import


@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    """A directory on sys.path with fresh module names; forgets them after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def write(name: str, body: str = "VALUE = 1\n") -> str:
        (tmp_path / f"{name}.py").write_text(body)
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)
        _post_import._pending.pop(name, None)


def test_callback_waits_for_the_import_and_runs_once(module_dir):
    name = module_dir("musa_hook_later")
    seen = []
    _post_import.when_imported(name, lambda m: seen.append(m.VALUE), failure="x")
    assert seen == [] and name not in sys.modules  # nothing imported on the callback's behalf
    mod = __import__(name)
    assert seen == [1]
    assert type(mod.__loader__).__name__ != "_HookedLoader"  # the module keeps its own loader
    assert name not in _post_import._pending  # the finder no longer wraps it
    import importlib
    importlib.reload(mod)
    assert seen == [1]


def test_callback_runs_at_once_for_a_loaded_module(module_dir):
    mod = __import__(module_dir("musa_hook_loaded"))
    seen = []
    _post_import.when_imported(mod.__name__, lambda m: seen.append(m), failure="x")
    assert seen == [mod]


def test_a_failing_callback_warns_and_the_import_still_succeeds(module_dir):
    name = module_dir("musa_hook_fails")

    def broken(_m):
        raise KeyError("moved")

    _post_import.when_imported(name, broken, failure="feature Z will not work")
    with pytest.warns(UserWarning, match=r"hooking into musa_hook_fails failed \(KeyError: 'moved'\); "
                                         r"feature Z will not work"):
        mod = __import__(name)
    assert mod.VALUE == 1
