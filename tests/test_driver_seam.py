"""Python asks which driver it is on in one place: ``torch_musa/_driver.py`` (``pick``
and the facts it derives), besides the configuration that reads the variable and
``_runtime.py`` that hands it to C++. A module with driver-specific behaviour defines one
implementation per driver and takes the one ``pick`` returns; nothing else compares the
driver's name (issue 34, item 1)."""
import ast
from pathlib import Path

import torch_musa._driver as drv
from torch_musa import _C
from torch_musa.config import CONFIG

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "torch_musa"

#: Where the driver's name may be compared, relative to torch_musa/.
ALLOWED = {
    "config",  # reads TORCH_MUSA_DRIVER
    "_runtime.py",  # hands the driver to the C++ runtime
    "_driver.py",  # the selector
    "ops/kernels.py",  # the kernel list's per-kernel `drivers:` column (issue 34, item 2)
}


def _names_the_driver(node: ast.AST) -> bool:
    """``<anything>.driver``, ``_driver_name()``, or the selector's ``NAME``."""
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in ("driver", "_driver_name", "NAME") and (
                n.attr != "NAME" or (isinstance(n.value, ast.Name) and "driver" in n.value.id)):
            return True
        if isinstance(n, ast.Name) and n.id in ("driver", "_driver_name"):
            return True
    return False


def driver_questions(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, text) of each comparison or lookup keyed by the driver's name."""
    tree = ast.parse(source, filename)
    names_from_driver = {a.asname or a.name for node in ast.walk(tree)
                         if isinstance(node, ast.ImportFrom) and node.module == "torch_musa._driver"
                         for a in node.names if a.name == "NAME"}
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Subscript):
            operands = [node.slice]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            operands = node.args[:1]  # {"host": ..., "cuda": ...}.get(CONFIG.driver)
        else:
            continue
        if any(_names_the_driver(o) or any(isinstance(n, ast.Name) and n.id in names_from_driver
                                           for n in ast.walk(o)) for o in operands):
            found.append((node.lineno, lines[node.lineno - 1].strip()))
    return found


def _allowed(path: Path) -> bool:
    rel = path.relative_to(PACKAGE).as_posix()
    return any(rel == a or rel.startswith(a + "/") for a in ALLOWED)


def test_only_the_selector_asks_which_driver_runs():
    found = [f"torch_musa/{p.relative_to(PACKAGE).as_posix()}:{line}: {text}"
             for p in sorted(PACKAGE.rglob("*.py")) if not _allowed(p)
             for line, text in driver_questions(p.read_text(), str(p))]
    assert not found, ("modules ask which driver they are on; define one implementation per "
                       "driver and take the one torch_musa._driver.pick returns:\n" + "\n".join(found))


def test_the_check_sees_each_form():
    bad = '''
from torch_musa._driver import NAME as DRIVER_NAME
if CONFIG.driver == "cuda": pass
x = _CONFIG.driver != "host"
y = {"host": 1, "cuda": 2}[CONFIG.driver]
z = table.get(config.driver)
w = _C._driver_name() == "host"
v = DRIVER_NAME == "cuda"
u = _driver.NAME in ("cuda",)
'''
    assert [line for line, _ in driver_questions(bad)] == [3, 4, 5, 6, 7, 8, 9]
    fine = '''
impl = pick(host=_Host, cuda=_Cuda)
report = {"driver": CONFIG.driver}
exact = KERNEL_DEVICE == "cpu"
'''
    assert driver_questions(fine) == []


def test_pick_takes_this_drivers_implementation():
    host, cuda = object(), object()
    assert drv.pick(host=host, cuda=cuda) is {"host": host, "cuda": cuda}[CONFIG.driver]
    assert drv.NAME == CONFIG.driver == _C._driver_name()
    assert drv.KERNEL_DEVICE == {"host": "cpu", "cuda": "cuda"}[CONFIG.driver]
    assert drv.serves_configured_driver()
