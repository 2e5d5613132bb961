"""The package's layers, bottom up: configuration (torch_musa.config, the CUDA
mapping data) -> runtime glue (_runtime) -> ops -> torch.musa (core) ->
subsystems -> tools. Imports run one way (the import-linter contract in
pyproject.toml), and no module imports the package root except for the C++
extension it holds (torch_musa._C)."""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "torch_musa"


def test_the_import_contract_holds():
    lint = Path(sys.executable).with_name("lint-imports")  # import-linter, a test dependency
    r = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "1 kept, 0 broken" in r.stdout, r.stdout[-2000:]


def _root_imports(path: Path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch_musa":
                    yield node.lineno, "import torch_musa"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "torch_musa":
            for a in node.names:
                if a.name != "_C" and not (PACKAGE / a.name).is_dir() and not (PACKAGE / f"{a.name}.py").exists():
                    yield node.lineno, f"from torch_musa import {a.name}"


def test_no_module_imports_the_package_root():
    found = [f"{p.relative_to(ROOT)}:{line}: {what}"
             for p in sorted(PACKAGE.rglob("*.py")) if p.name != "__init__.py" or p.parent != PACKAGE
             for line, what in _root_imports(p)]
    assert not found, "modules below the root import it (only its _C may be):\n" + "\n".join(found)


def test_the_check_sees_a_root_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch_musa\nfrom torch_musa import __version__\nfrom torch_musa import _C\n")
    assert [w for _, w in _root_imports(bad)] == ["import torch_musa", "from torch_musa import __version__"]


def test_no_import_cycles():
    """Module-level imports form no cycle (a function-level import that only
    dodges one counts too: grimp records imports wherever they are)."""
    import grimp

    graph = grimp.build_graph("torch_musa", cache_dir=None)
    # `from torch_musa import _C` (or torch_musa.distributed's) reads as an import
    # of the package, whose __init__ imports its children: those edges are the
    # C++ extension's, not cycles.
    for a in list(graph.modules):
        for b in list(graph.find_modules_directly_imported_by(a)):
            details = graph.get_import_details(importer=a, imported=b)
            if details and all(d["line_contents"].rstrip().split("#")[0].rstrip().endswith("import _C")
                               or " import _C as " in d["line_contents"] for d in details):
                graph.remove_import(importer=a, imported=b)
    cycles = []
    for a in sorted(graph.modules):
        for b in sorted(graph.find_modules_directly_imported_by(a)):
            if b == "torch_musa" or a.startswith(b + ".") or b.startswith(a + "."):
                continue  # the root (checked above) and a package's own __init__/children
            if graph.find_shortest_chain(importer=b, imported=a):
                cycles.append(f"{a} -> {b} -> ... -> {a}")
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
