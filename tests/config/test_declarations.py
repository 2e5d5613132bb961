"""Every environment variable torch_musa reads is declared once, in torch_musa/config,
and only that layer reads them; the README's table is the declarations' own."""
from __future__ import annotations

import ast
import pathlib
import re

import torch_musa
from torch_musa.config import variables
from torch_musa.config.variables import PYTORCH_VARIABLES, VARIABLES

PACKAGE = pathlib.Path(torch_musa.__file__).parent
README = PACKAGE.parent / "README.md"
OURS = re.compile(r"^(TORCH_MUSA_|TORCH_USE_MUSA_|MUSA_|PYTORCH_MUSA_|MCCL_)")


def _module_strings(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "text" assignments (ENV_VAR = "TORCH_MUSA_CUDA_COMPAT")."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or \
        (isinstance(node, ast.Name) and node.id == "environ")


def environment_reads(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, name) of every read of a named environment variable in a Python file:
    os.environ.get/[...]/in/pop/setdefault, os.getenv, with a literal or module constant name."""
    tree = ast.parse(path.read_text(), str(path))
    consts = _module_strings(tree)

    def name_of(arg):
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        if isinstance(arg, ast.Name):
            return consts.get(arg.id)
        return None

    found = []
    for node in ast.walk(tree):
        arg = None
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if isinstance(f, ast.Attribute) and _is_environ(f.value) and \
                    f.attr in ("get", "pop", "setdefault", "__getitem__", "__contains__"):
                arg = node.args[0]
            elif isinstance(f, ast.Attribute) and f.attr == "getenv":
                arg = node.args[0]
        elif isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
            arg = node.slice
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            arg = node.left
        name = name_of(arg) if arg is not None else None
        if name:
            found.append((node.lineno, name))
    return found


def test_only_the_config_layer_reads_the_package_variables():
    """Outside torch_musa/config nothing reads a musa variable from the environment:
    each is declared once and read once, into CONFIG."""
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if PACKAGE / "config" in path.parents:
            continue
        stray += [f"{path.relative_to(PACKAGE.parent)}:{line} reads {name}"
                  for line, name in environment_reads(path) if OURS.match(name) or name in PYTORCH_VARIABLES]
    assert not stray, "read torch_musa.config.CONFIG instead:\n" + "\n".join(stray)


def test_the_scanner_sees_every_spelling(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import os\nNAME = 'MCCL_X'\n"
                   "a = os.environ.get('TORCH_MUSA_A', 'x')\nb = os.environ['MUSA_B']\n"
                   "c = 'PYTORCH_MUSA_C' in os.environ\nd = os.getenv('TORCH_USE_MUSA_D')\n"
                   "e = os.environ.get(NAME)\nos.environ['MUSA_W'] = '1'\n")
    assert [n for _, n in environment_reads(src)] == \
        ["TORCH_MUSA_A", "MUSA_B", "PYTORCH_MUSA_C", "TORCH_USE_MUSA_D", "MCCL_X"]


def test_the_cpp_runtime_reads_no_undeclared_variable():
    names = set()
    for path in PACKAGE.rglob("*"):
        if path.suffix in (".cpp", ".h", ".cu"):
            names |= set(re.findall(r"getenv\(\s*\"([A-Z0-9_]+)\"", path.read_text(errors="replace")))
    # a declared variable's CUDA name (CUDA_VISIBLE_DEVICES) is read where the cuda driver maps it
    declared = set(VARIABLES) | {v.cuda_name for v in VARIABLES.values() if v.cuda_name}
    assert names <= declared, f"C++ reads undeclared variables: {sorted(names - declared)}"


def test_the_config_layer_imports_nothing_above_it():
    """Bottom layer: torch, the standard library, itself and the stdlib-only text tables."""
    for path in (PACKAGE / "config").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for m in mods:
                if m.startswith("torch_musa"):
                    assert m.startswith(("torch_musa.config", "torch_musa._table")), f"{path.name} imports {m}"


def test_readme_table_is_the_generated_one():
    text = README.read_text()
    begin, end = "<!-- env-table:begin", "<!-- env-table:end -->"
    assert begin in text and end in text, "README.md lacks the environment-variable table markers"
    table = text.split(begin, 1)[1].split("-->", 1)[1].split(end, 1)[0]
    assert table.strip() == variables.markdown_table().strip(), \
        "README.md's table is stale: paste `python -m torch_musa.config --markdown` between the markers"
