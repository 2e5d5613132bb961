"""Names this project imports from torch that another torch release lacks.

The GPU machine runs torch 2.11; here it is 2.13. A name that 2.13 added (Inductor's
``CUDAGraphPolicy``) imports fine here and fails there, found only after a GPU run.
This reads, without importing anything, every ``from torch... import name`` and
``import torch....`` in the given trees (function-local ones too) and resolves each
against two torch source trees: it reports what resolves in the reference tree (the
installed torch) but not in the other one. Imports under ``try: ... except
ImportError`` (or ``Exception``) are skipped: they are the code's own version guard;
so is an import whose line says ``# needs torch>=X.Y`` for code only that release runs.

    python scripts/check_torch_imports.py OTHER_TORCH_PARENT [PATH ...]

OTHER_TORCH_PARENT holds the other release's ``torch/`` package (its .py and .pyi
files, as ``scripts/check_gpu_build.sh`` unpacks them from the wheel). Exit 1 when one is missing.
"""
from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

GUARDS = {"ImportError", "ModuleNotFoundError", "Exception", "AttributeError"}


@functools.cache
def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py", base.with_suffix(".pyi")):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _top_level_names(path: Path) -> frozenset[str] | None:
    """Names a module binds at top level (None: it may bind anything: ``*`` imports,
    a module ``__getattr__``)."""
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    names: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        return False
                    names.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for part in ("body", "orelse", "finalbody"):
                    if visit(getattr(node, part, [])) is False:
                        return False
                for handler in getattr(node, "handlers", []):
                    if visit(handler.body) is False:
                        return False
        return True

    if visit(tree.body) is False or "__getattr__" in names:
        return None
    return frozenset(names)


def resolves(root: Path, module: str, name: str | None) -> bool:
    path = _module_file(root, module)
    if path is None:
        return False
    if name is None:
        return True
    if _module_file(root, f"{module}.{name}") is not None:  # a submodule
        return True
    names = _top_level_names(path)
    return names is None or name in names


def _guarded(parents: list[ast.AST]) -> bool:
    for node in parents:
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                caught = handler.type
                kinds = caught.elts if isinstance(caught, ast.Tuple) else [caught]
                if caught is None or any(isinstance(k, ast.Name) and k.id in GUARDS for k in kinds):
                    return True
    return False


def torch_imports(path: Path):
    """(line, module, name or None) for each unguarded import of torch in ``path``."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    tree = ast.parse(text)

    def pinned(node) -> bool:
        return any("# needs torch>=" in lines[i - 1] for i in range(node.lineno, node.end_lineno + 1))

    def walk(node, parents):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] == "torch" and not _guarded(parents) and not pinned(node):
            for alias in node.names:
                if alias.name != "*":
                    yield node.lineno, node.module, alias.name
        elif isinstance(node, ast.Import) and not _guarded(parents) and not pinned(node):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    yield node.lineno, alias.name, None
        for child in ast.iter_child_nodes(node):
            yield from walk(child, parents + [node])

    yield from walk(tree, [])


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    other = Path(argv[0])
    if not (other / "torch" / "__init__.py").is_file():
        print(f"no torch package under {other}")
        return 2
    import torch  # the reference: where the project's imports are known to work

    reference = Path(torch.__file__).parent.parent
    trees = [Path(p) for p in argv[1:]] or [Path("torch_musa"), Path("tests"), Path("benchmarks")]
    files = sorted(f for t in trees for f in (t.rglob("*.py") if t.is_dir() else [t]))
    missing = []
    for f in files:
        for line, module, name in torch_imports(f):
            if resolves(reference, module, name) and not resolves(other, module, name):
                what = f"{module}.{name}" if name else module
                missing.append(f"{f}:{line}: {what}")
    found = re.search(r"^__version__ = '([^']+)'", (other / "torch" / "version.py").read_text(), re.M)
    version = found.group(1) if found else "(unknown version)"
    for m in missing:
        print(f"{m} is not in torch {version}")
    print(f"{'ok' if not missing else 'MISSING'}: {len(files)} files' torch imports checked "
          f"against torch {version}" + (f", {len(missing)} missing" if missing else ""))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
