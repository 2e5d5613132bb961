"""Generate the musa operator registrations from musa_functions.yaml.

Every entry is checked against PyTorch's own native_functions.yaml (shipped in
the wheel under torchgen/packaged): unknown ops, schemas that differ from
PyTorch's, unknown keys and inconsistent structured groups are rejected with
the file and line of the entry. The output is C++ (unboxed host-kernel
wrappers, compiled into torch_musa._C) and Python (Customized kernels).

    python -m torch_musa.ops.codegen --out-dir build/generated [--dry-run]
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REGISTRY = HERE / "musa_functions.yaml"
ALLOWED_KEYS = {"func", "dispatch", "structured", "structured_delegate", "structured_inherits",
                "precomputed", "device_guard", "device_check", "variants", "tags", "autogen",
                "python_module", "manual_cpp_binding", "category_override"}
SHARDS = 4


class RegistryError(ValueError):
    pass


@dataclasses.dataclass
class Entry:
    name: str          # "add.Tensor" or "musa::rms_norm"
    schema: str
    line: int
    strategy: str      # Legacy | LegacyMeta | Customized
    kernel: str | None
    structured: bool
    delegate: str | None
    device_guard: bool
    namespace: str     # aten | musa

    @property
    def ops_struct(self) -> str:
        from torchgen.model import FunctionSchema

        return FunctionSchema.parse(self.schema).name.unambiguous_name()

    @property
    def header(self) -> str:
        """The ATen/ops header declaring this op's at::_ops struct."""
        import torch

        base = self.name.split(".")[0]
        ops_dir = Path(torch.__file__).parent / "include" / "ATen" / "ops"
        if not (ops_dir / f"{base}_ops.h").exists() and (ops_dir / f"{base.rstrip('_')}_ops.h").exists():
            base = base.rstrip("_")
        return f"ATen/ops/{base}_ops.h"


class _LineLoader(yaml.SafeLoader):
    pass


def _mapping_with_line(loader, node):
    mapping = loader.construct_mapping(node, deep=True)
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_with_line)


def native_functions_path() -> Path:
    import torchgen

    return Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"


def load_native() -> dict[str, dict]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(native_functions_path()) as f:
        return {e["func"].split("(")[0]: e for e in yaml.load(f, Loader=loader)}


def _normalize(schema: str) -> str:
    from torchgen.model import FunctionSchema

    return str(FunctionSchema.parse(schema))


def parse_registry(path: Path = REGISTRY, native: dict[str, dict] | None = None) -> list[Entry]:
    """Read and validate the registry; raise RegistryError naming file:line."""
    from torchgen.model import FunctionSchema

    native = load_native() if native is None else native
    text = Path(path).read_text()
    try:
        raw = yaml.load(text, Loader=_LineLoader) or []
    except yaml.YAMLError as e:
        raise RegistryError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, list):
        raise RegistryError(f"{path}: expected a list of entries")
    entries: dict[str, Entry] = {}
    for item in raw:
        if isinstance(item, dict) and "op" in item and "func" not in item:
            continue  # a hand-written kernel (ops/kernels.py reads these): nothing to generate
        line = item.get("__line__", 0) if isinstance(item, dict) else 0
        where = f"{path}:{line}"
        if not isinstance(item, dict) or "func" not in item:
            raise RegistryError(f"{where}: every entry needs a 'func:' schema")
        unknown = set(item) - ALLOWED_KEYS - {"__line__"}
        if unknown:
            raise RegistryError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(ALLOWED_KEYS)}")
        func = str(item["func"])
        namespace = "aten"
        if "::" in func:
            namespace, func = func.split("::", 1)
            if namespace != "musa":
                raise RegistryError(f"{where}: only 'aten' and 'musa' operators can be declared, got {namespace}::")
        try:
            schema = FunctionSchema.parse(func)
        except Exception as e:  # torchgen raises AssertionError/RuntimeError on bad schemas
            raise RegistryError(f"{where}: bad schema {func!r}: {e}") from None
        name = str(schema.name)
        full = name if namespace == "aten" else f"musa::{name}"
        if full in entries:
            raise RegistryError(f"{where}: {full} is declared twice (first at line {entries[full].line})")
        if namespace == "aten":
            if name not in native:
                raise RegistryError(f"{where}: aten::{name} is not an operator of this PyTorch")
            theirs = _normalize(native[name]["func"])
            if str(schema) != theirs:
                raise RegistryError(f"{where}: schema of {name} differs from PyTorch's:\n  ours:   {schema}\n  theirs: {theirs}")
        dispatch = item.get("dispatch") or {}
        if isinstance(dispatch, dict):
            dispatch = {k: v for k, v in dispatch.items() if k != "__line__"}
        if not isinstance(dispatch, dict) or set(dispatch) - {"PrivateUse1"}:
            raise RegistryError(f"{where}: dispatch may only name the PrivateUse1 key, got {dispatch!r}")
        kernel = dispatch.get("PrivateUse1")
        structured = bool(item.get("structured", False))
        delegate = item.get("structured_delegate")
        if kernel and str(kernel).startswith("python:"):
            strategy = "Customized"
        elif structured and kernel and kernel != _cpu_kernel(native.get(name, {})):
            strategy = "LegacyMeta"
        elif delegate and _is_legacy_meta_delegate(raw, delegate):
            strategy = "LegacyMeta"
        else:
            strategy = "Legacy"
        if namespace == "musa" and strategy != "Customized":
            raise RegistryError(f"{where}: musa::{name} is a new operator and needs a Customized kernel "
                                "(dispatch: PrivateUse1: python:<module>:<function>)")
        if structured and namespace == "aten" and not native[name].get("structured"):
            raise RegistryError(f"{where}: {name} is marked structured but PyTorch's is not")
        entries[full] = Entry(full, func, line, strategy, kernel, structured, delegate,
                              bool(item.get("device_guard", True)), namespace)
    for e in entries.values():
        if e.delegate is None:
            continue
        target = entries.get(e.delegate)
        if target is None or not target.structured:
            raise RegistryError(f"{path}:{e.line}: {e.name} delegates to {e.delegate}, which this registry "
                                "does not declare as structured (inconsistent group)")
        if e.namespace == "aten" and native[e.name].get("structured_delegate") != e.delegate:
            raise RegistryError(f"{path}:{e.line}: {e.name}'s structured_delegate in PyTorch is "
                                f"{native[e.name].get('structured_delegate')!r}, not {e.delegate!r}")
        if e.strategy == "LegacyMeta" and not e.schema.rstrip().endswith("-> Tensor") and "(a!)" not in e.schema:
            raise RegistryError(f"{path}:{e.line}: LegacyMeta needs a single-Tensor result, {e.name} has another")
    return list(entries.values())


def _cpu_kernel(native_entry: dict) -> str | None:
    for key, value in (native_entry.get("dispatch") or {}).items():
        if "CPU" in key.split(", "):
            return value
    return None


def _is_legacy_meta_delegate(raw: list, delegate: str) -> bool:
    for item in raw:
        if isinstance(item, dict) and str(item.get("func", "")).split("(")[0] == delegate:
            k = (item.get("dispatch") or {}).get("PrivateUse1")
            return bool(item.get("structured")) and bool(k) and not str(k).startswith("python:")
    return False


def generate_cpp(entries: list[Entry]) -> dict[str, str]:
    """C++ sources registering the Legacy and LegacyMeta entries, in shards."""
    native = [e for e in entries if e.namespace == "aten"]
    shards: list[list[Entry]] = [[] for _ in range(SHARDS)]
    for i, e in enumerate(sorted(native, key=lambda e: e.name)):
        shards[i % SHARDS].append(e)
    outputs = {}
    structs = {e.name: e.ops_struct for e in native}
    for n, shard in enumerate(shards):
        headers = sorted({e.header for e in shard} | {entries_by(native, e.delegate).header for e in shard if e.delegate})
        lines = ["// Generated by torch_musa/ops/codegen.py from musa_functions.yaml. Do not edit.",
                 '#include "aten/unboxed_kernel.h"', '#include "aten/structured_kernel.h"', "",
                 "#include <torch/library.h>"]
        lines += [f"#include <{h}>" for h in headers]
        lines += ["", "namespace {", "using namespace torch_musa::unboxed;", "}", "",
                  "TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {"]
        for e in shard:
            guard = "true" if e.device_guard else "false"
            op = f"at::_ops::{structs[e.name]}"
            if e.strategy == "LegacyMeta" and e.delegate and not e.schema.split("->")[0].count("(a!)"):
                fn = f"MetaThenOut<{op}, at::_ops::{structs[e.delegate]}, {guard}>::call"
            elif e.strategy == "LegacyMeta" and e.delegate:
                fn = f"InPlaceViaOut<{op}, at::_ops::{structs[e.delegate]}, {guard}>::call"
            else:
                fn = f"UnboxedKernel<{op}, typename {op}::schema, {guard}>::call"
            lines.append(f'  m.impl("{e.name}", TORCH_FN(({fn})));  // {e.strategy}')
        lines.append("}")
        outputs[f"musa_registrations_{n}.cpp"] = "\n".join(lines) + "\n"
    return outputs


def entries_by(entries: list[Entry], name: str) -> Entry:
    for e in entries:
        if e.name == name:
            return e
    raise KeyError(name)


def generate_python(entries: list[Entry]) -> str:
    """A Python module registering the Customized entries (read at import)."""
    custom = [e for e in entries if e.strategy == "Customized"]
    rows = ",\n".join(
        f"    ({e.namespace!r}, {e.schema!r}, {e.kernel.split(':', 1)[1]!r}, {e.device_guard!r})" for e in custom
    )
    return ("# Generated by torch_musa/ops/codegen.py from musa_functions.yaml. Do not edit.\n"
            "# (namespace, schema, 'module:function', device_guard)\n"
            f"CUSTOMIZED = [\n{rows}\n]\n"
            f"NATIVE_ATEN = {sorted(e.name for e in entries if e.namespace == 'aten')!r}\n")


def write(out_dir: Path, py_out: Path, dry_run: bool = False, registry: Path = REGISTRY) -> list[Entry]:
    entries = parse_registry(registry)
    files = {out_dir / k: v for k, v in generate_cpp(entries).items()}
    files[py_out] = generate_python(entries)
    counts = {s: sum(e.strategy == s for e in entries) for s in ("Legacy", "LegacyMeta", "Customized")}
    print(f"musa_functions.yaml: {len(entries)} entries ({', '.join(f'{k} {v}' for k, v in counts.items())})")
    for path, text in files.items():
        if dry_run:
            print(f"--- would write {path} ({text.count(chr(10))} lines)")
            print(text if len(text) < 4000 else text[:4000] + "...\n")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:  # keep mtimes for incremental builds
            path.write_text(text)
    return entries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default="build/generated", help="where the C++ sources go")
    ap.add_argument("--py-out", default=str(HERE / "_generated.py"), help="the Python registrations module")
    ap.add_argument("--registry", default=str(REGISTRY))
    ap.add_argument("--dry-run", action="store_true", help="print what would be generated, write nothing")
    args = ap.parse_args(argv)
    try:
        write(Path(args.out_dir), Path(args.py_out), args.dry_run, Path(args.registry))
    except RegistryError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
