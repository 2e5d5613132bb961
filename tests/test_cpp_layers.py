"""The C++ runtime's layers (docs/ARCHITECTURE.md, "Drivers and the C++ runtime"):
the folders of torch_musa/csrc are layers, bottom up driver -> core -> aten ->
utils -> python, and a file includes (#include "...") only its own folder and
those below it. Beside that rule, the csrc paths that comments, tests and the op
registry name exist (a file that moves takes its references along)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "torch_musa" / "csrc"

# Bottom up. A folder's subfolders (driver/cuda, aten/musa) are its layer.
LAYERS = ("driver", "core", "aten", "utils", "python")
SOURCES = (".h", ".hpp", ".cpp", ".cc", ".cuh", ".cu")
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def _sources(csrc: Path):
    return sorted(p for p in csrc.rglob("*") if p.is_file() and p.suffix in SOURCES)


def layering_problems(csrc: Path) -> list[str]:
    """`file:line: what` for every quoted include of a file under `csrc` that
    reaches a layer above the file's own, or a folder that is no layer."""
    found = []
    for path in _sources(csrc):
        rel = path.relative_to(csrc)
        if len(rel.parts) < 2 or rel.parts[0] not in LAYERS:
            found.append(f"{rel}: not in a layer folder ({', '.join(LAYERS)})")
            continue
        own = LAYERS.index(rel.parts[0])
        text = path.read_text()
        for m in INCLUDE.finditer(text):
            target = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            if "/" not in target:
                continue  # beside the file: its own folder
            top = target.split("/", 1)[0]
            if top not in LAYERS:
                found.append(f"{rel}:{line}: includes \"{target}\", outside the layers")
            elif LAYERS.index(top) > own:
                found.append(f"{rel}:{line}: includes \"{target}\" ({top} is above {rel.parts[0]})")
    return found


def test_csrc_includes_run_downwards():
    problems = layering_problems(CSRC)
    assert not problems, "C++ includes against the layers:\n" + "\n".join(problems)


def _tree(root: Path, files: dict) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_check_sees_an_upward_include(tmp_path):
    csrc = _tree(tmp_path / "csrc", {
        "driver/Driver.h": "#pragma once\n#include <c10/core/Device.h>\n",
        "driver/cuda/CudaDriver.cpp": '#include "driver/Driver.h"\n#include "core/Device.h"\n',
        "core/Device.h": '#include "driver/Driver.h"\n#include "Local.h"\n',
        "aten/kernel.cpp": '#include "core/Device.h"\n  #  include "utils/check.h"\n',
        "utils/check.cpp": '#include "aten/kernel.h"\n#include "python/bind.h"\n',
        "python/module.cpp": '#include "utils/check.h"\n#include "ops/thing.h"\n',
        "stray.cpp": '#include "core/Device.h"\n',
    })
    assert layering_problems(csrc) == [
        'aten/kernel.cpp:2: includes "utils/check.h" (utils is above aten)',
        'driver/cuda/CudaDriver.cpp:2: includes "core/Device.h" (core is above driver)',
        'python/module.cpp:2: includes "ops/thing.h", outside the layers',
        "stray.cpp: not in a layer folder (driver, core, aten, utils, python)",
        'utils/check.cpp:2: includes "python/bind.h" (python is above utils)',
    ]


# ---- paths that name csrc files ---------------------------------------------------
# Inside csrc, relative to it ("core/Device.h"); elsewhere from it ("csrc/aten/x.cpp"),
# where a file directly in a csrc folder is the mccl backend's (distributed/csrc).
_IN_CSRC = re.compile(r"(?<![\w/.-])((?:%s)/[\w/]+\.(?:h|cpp))\b" % "|".join(LAYERS))
_FROM_CSRC = re.compile(r"(?<![\w/.-])(?:torch_musa/)?csrc/((?:(?:%s)/[\w/]+|\w+)\.(?:h|cpp))\b" % "|".join(LAYERS))
# Names of the real torch_musa's headers that the converter maps CUDA's to and the
# runtime does not provide (utils/musa_extension.py writes stand-ins for them).
_NOT_PROVIDED = {"core/MUSAException.h"}


def stale_references(root: Path) -> list[str]:
    csrc = root / "torch_musa" / "csrc"
    homes = (csrc, root / "torch_musa" / "distributed" / "csrc")
    texts = [(p, _IN_CSRC) for p in _sources(csrc)]
    texts += [(p, _FROM_CSRC) for p in sorted((root / "torch_musa").rglob("*.py"))]
    texts += [(p, _FROM_CSRC) for p in sorted((root / "tests").rglob("*.py")) if p.name != Path(__file__).name]
    texts += [(root / "torch_musa" / "ops" / "musa_functions.yaml", _FROM_CSRC),
              (root / "docs" / "ARCHITECTURE.md", _IN_CSRC)]
    found = []
    for path, pattern in texts:
        text = path.read_text()
        for m in pattern.finditer(text):
            name = m.group(1)
            if name not in _NOT_PROVIDED and not any((h / name).is_file() for h in homes):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{path.relative_to(root)}:{line}: {m.group(0)}")
    return found


def test_named_csrc_files_exist():
    stale = stale_references(ROOT)
    assert not stale, "references to csrc files that do not exist:\n" + "\n".join(stale)


def test_the_check_sees_a_stale_reference(tmp_path):
    _tree(tmp_path, {
        "torch_musa/csrc/driver/Driver.h": "// (core/MUSAGraph.cpp records it; core/Device.h)\n",
        "torch_musa/csrc/core/Device.h": "#include <ATen/core/Tensor.h>  // not ours\n",
        "torch_musa/distributed/csrc/mccl_ops.cpp": "",
        "torch_musa/distributed/mccl/kernels.py": "# csrc/mccl_ops.cpp, torch/csrc/cuda/Module.cpp\n",
        "tests/test_x.py": '"""csrc/nan_check.cpp, csrc/core/Device.h, csrc/aten/gone.h"""\n',
        "torch_musa/ops/musa_functions.yaml": "# (csrc/structured_kernel.h)\n",
        "docs/ARCHITECTURE.md": "`core/Device.h`, `utils/compare_tool/nan_inf.py`, `core/Gone.cpp`\n",
    })
    assert stale_references(tmp_path) == [
        "torch_musa/csrc/driver/Driver.h:1: core/MUSAGraph.cpp",
        "tests/test_x.py:1: csrc/nan_check.cpp",
        "tests/test_x.py:1: csrc/aten/gone.h",
        "torch_musa/ops/musa_functions.yaml:1: csrc/structured_kernel.h",
        "docs/ARCHITECTURE.md:1: core/Gone.cpp",
    ]
