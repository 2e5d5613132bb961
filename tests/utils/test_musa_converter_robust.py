"""musa-converter on awkward trees (issue 24): start-up without torch, line
endings and encodings, file modes, interruption, big files, notebooks, build
scripts, comments. Each test builds a small tree under tmp_path."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _py(code, **kw):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, **kw)


# -- item 5: start-up -------------------------------------------------------

def test_launcher_starts_without_torch_or_libcst():
    r = _py("import sys, torch_musa_converter\n"
            "print(sorted(m for m in ('torch', 'libcst', 'numpy') if m in sys.modules))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    r = subprocess.run([sys.executable, "-m", "torch_musa_converter", "--version"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("musa-converter (mapping table "), r.stderr


def test_console_script_points_at_the_launcher():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'musa-converter = "torch_musa_converter:main"' in text


def test_launcher_converts_a_tree(tmp_path):
    (tmp_path / "a.py").write_text("x = y.cuda()\n")
    r = subprocess.run([sys.executable, "-m", "torch_musa_converter", "-r", str(tmp_path),
                        "--no-backup", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a.py").read_text() == "x = y.musa()\n"


def _run(root, *extra):
    from torch_musa.utils.musa_converter import cli
    return cli.main(["-r", str(root), "--no-backup", "--no-progress", "-q", *extra])


# -- item 1: every byte that is not a rewrite is kept ---------------------------

def test_line_endings_encoding_bom_and_final_newline_are_kept(tmp_path):
    cases = {
        "cr.py": (b"x = torch.ones(2).cuda()\ry = 1", b"x = torch.ones(2).musa()\ry = 1"),
        "mixed.py": (b"a = 1\nx = t.cuda()\ry = 2\r\nz = 'cuda'\n",
                     b"a = 1\nx = t.musa()\ry = 2\r\nz = 'musa'\n"),
        "crlf_nofinal.py": (b"if a:\r\n    x = t.cuda()", b"if a:\r\n    x = t.musa()"),
        "bom.py": (b"\xef\xbb\xbfx = t.cuda()\r\n", b"\xef\xbb\xbfx = t.musa()\r\n"),
        "latin1.py": (b"# -*- coding: latin-1 -*-\ns = 'caf\xe9'\rx = t.cuda()\n",
                      b"# -*- coding: latin-1 -*-\ns = 'caf\xe9'\rx = t.musa()\n"),
        "k.cpp": (b"#include <cuda_runtime.h>\r#include <cuda.h>\rcudaFree(p);",
                  b"#include <musa_runtime.h>\r#include <musa.h>\rmusaFree(p);"),
    }
    for name, (src, _) in cases.items():
        (tmp_path / name).write_bytes(src)
    assert _run(tmp_path) == 0
    for name, (_, want) in cases.items():
        assert (tmp_path / name).read_bytes() == want, name


def test_launch_import_after_an_unterminated_docstring(tmp_path):
    from torch_musa.utils.musa_converter import convert_source
    assert convert_source('"""doc"""', launch=True).source == '"""doc"""\nimport torch_musa\n'
    assert convert_source('"""doc"""\rx = t.cuda()\r', launch=True).source == \
        '"""doc"""\rimport torch_musa\rx = t.musa()\r'


# -- item 2: mode, owner, inode; read-only files --------------------------------

def test_mode_owner_and_inode_are_kept_and_read_only_files_listed(tmp_path):
    import json
    ex = tmp_path / "tool.py"
    ex.write_text("x = t.cuda()\n")
    ex.chmod(0o751)
    os.link(ex, tmp_path / "alias.py.txt")      # a hard link sees the rewrite
    ro = tmp_path / "ro.py"
    ro.write_text("x = t.cuda()\n")
    ro.chmod(0o444)
    cu = tmp_path / "k.cu"
    cu.write_text("cudaFree(p);\n")
    cu.chmod(0o640)
    before = {p.name: os.stat(p) for p in (ex, ro, cu)}
    report = tmp_path / "r.json"
    assert _run(tmp_path, "--dry-run", "--report", str(report)) == 0
    assert __import__("json").loads(report.read_text())["read_only"] == ["ro.py"]
    assert _run(tmp_path, "--report", str(report)) == 0
    assert ex.read_text() == "x = t.musa()\n"
    assert (tmp_path / "alias.py.txt").read_text() == "x = t.musa()\n"
    st = os.stat(ex)
    b = before["tool.py"]
    assert (st.st_mode, st.st_uid, st.st_gid, st.st_ino) == (b.st_mode, b.st_uid, b.st_gid, b.st_ino)
    # k.cu has one link: a new file, written beside it, replaced it (same mode
    # and owner, a new inode); tool.py has two links and was rewritten in place.
    mu = os.stat(tmp_path / "k.mu")
    assert (mu.st_mode, mu.st_uid, mu.st_gid) == (before["k.cu"].st_mode, before["k.cu"].st_uid,
                                                  before["k.cu"].st_gid)
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp" in p.name) == []
    assert ro.read_text() == "x = t.cuda()\n" and os.stat(ro).st_mode == before["ro.py"].st_mode
    data = json.loads(report.read_text())
    assert data["read_only"] == ["ro.py"] and data["summary"]["read-only"] == 1


# -- item 3: interruption ----------------------------------------------------------

SLOW_LINES = 6000   # per file: enough that 24 files outlast the pool start (fast path ~30k lines/s)


def _slow_tree(root, n=24, lines=SLOW_LINES):
    root.mkdir()
    for i in range(n):
        (root / f"m{i:02d}.py").write_text("".join(f"x{j} = t{j}.cuda()\n" for j in range(lines)))


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _start(root, report):
    import time
    p = subprocess.Popen([sys.executable, "-m", "torch_musa_converter", "-r", str(root), "-j", "2",
                          "--no-backup", "--no-progress", "-q", "--report", str(report)],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while len(_children(p.pid)) < 2 and time.time() < deadline:
        time.sleep(0.05)
    kids = _children(p.pid)
    assert len(kids) >= 2, "the pool did not start"
    time.sleep(0.5)
    return p, kids


def _converted(root):
    return sorted(p.name for p in root.iterdir() if "musa" in p.read_text())


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_signal_stops_workers_and_writes_a_partial_report(tmp_path, sig):
    import json
    import signal
    import time
    root = tmp_path / "t"
    _slow_tree(root)
    report = tmp_path / "r.json"
    p, kids = _start(root, report)
    p.send_signal(getattr(signal, sig))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + getattr(signal, sig), err
    assert f"INTERRUPTED by {sig}" in out
    time.sleep(0.5)
    assert not [k for k in kids if _alive(k)]
    data = json.loads(report.read_text())
    assert data["interrupted"] == sig and data["not_done"] > 0
    done = sorted(f["path"] for f in data["files"] if f["status"] == "converted")
    assert set(done) <= set(_converted(root))
    assert data["not_done"] + len(data["files"]) == 24
    for name in _converted(root):     # no half-written file
        text = (root / name).read_text()
        assert text.count("\n") == SLOW_LINES and "cuda" not in text
    assert [p.name for p in root.iterdir() if not p.name.endswith(".py")] == []   # no temp file left


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_end_when_the_parent_is_killed(tmp_path):
    import signal
    import time
    root = tmp_path / "t"
    _slow_tree(root)
    p, kids = _start(root, tmp_path / "r.json")
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=30)
    deadline = time.time() + 10
    while [k for k in kids if _alive(k)] and time.time() < deadline:
        time.sleep(0.05)
    assert not [k for k in kids if _alive(k)], "workers outlived the parent"
    done = _converted(root)
    time.sleep(2)
    assert _converted(root) == done and len(done) < 24
    assert [p.name for p in root.iterdir() if not p.name.endswith(".py")] == []   # no temp file left


# -- item 4: big files ----------------------------------------------------------------

_MIXED = '''\
@decorator("cuda")
def f{i}(x, device="cuda"):
    # move x.cuda() here
    y = torch.ones(2).cuda()  # and torch.cuda
    if torch.cuda.is_available():
        y = y.to('cuda:0', non_blocking=True)
    elif t.is_cuda:
        z = (a .cuda ( ), "cuda" "x", f"cuda:{{r}}", b"cuda")
    return torch.cuda.amp.autocast(True), x.cuda(0).cuda()
s{i} = """
x = t.cuda()
"""
if a:
    w = [
  t.cuda(),
    "nccl"]
else:
    import torch.cuda
with torch.cuda.device(0) as d, ctx(): q = t.is_cuda
for k in torch.cuda.x: pass
os.environ["CUDA_VISIBLE_DEVICES"] = "kernels/k.cu"
'''


def _mixed(n):
    return "".join(_MIXED.format(i=i) for i in range(n))


@pytest.mark.slow
def test_blocks_and_fast_path_equal_one_libcst_pass(monkeypatch):
    from torch_musa.cuda_mapping import load_table
    from torch_musa.utils.musa_converter import python_rewriter as pr
    t = load_table()
    src = _mixed(500)                      # 11,500 lines: parsed in blocks
    assert src.count("\n") > 2 * pr.blocks._SPLIT
    got = pr.convert_source(src, t)
    monkeypatch.setattr(pr.blocks, "_SPLIT", 10 ** 9)
    monkeypatch.setattr(pr, "_FAST", False)
    want = pr.convert_source(src, t)
    assert got.source == want.source and got.counts == want.counts
    assert got.review == want.review
    small = _mixed(3)
    counts = __import__("collections").Counter()
    whole = pr._transform(small, t, {}, counts)   # one libcst pass over the whole text
    assert pr.convert_source(small, t).source == whole


def _measure(path):
    code = ("import sys, time, torch_musa_converter\n"
            "from torch_musa.utils.musa_converter import convert_source\n"
            f"src = open({str(path)!r}).read()\n"
            "t0 = time.process_time(); r = convert_source(src)\n"
            "cpu = time.process_time() - t0\n"
            # VmHWM: this process's own peak (ru_maxrss would include the
            # parent's size at fork, here pytest's)
            "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
            "print(cpu, hwm, sum(r.counts.values()))\n")
    r = _py(code)
    assert r.returncode == 0, r.stderr
    cpu, rss_kb, n = r.stdout.split()
    return float(cpu), int(rss_kb) / 1024, int(n)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_big_files_take_linear_time_and_memory(tmp_path):
    """A rewrite on every line, and one 20,000-entry literal (quadratic
    before: 5,000 entries took 25 s): 4x the lines cost about 4x the CPU time
    (a quadratic cost would be 16x), and memory stays small."""
    shapes = {
        "flat": lambda n: "".join(f"x{i} = torch.ones({i}).cuda()\n" for i in range(n)),
        "lit": lambda n: "T = {\n" + "".join(f"    'k{i}': 'cuda:{i % 8}',\n" for i in range(n)) + "}\n",
    }
    for name, make in shapes.items():
        got = {}
        for n in (5000, 20000):
            path = tmp_path / f"{name}{n}.py"
            path.write_text(make(n))
            got[n] = _measure(path)
            assert got[n][2] == n
        (c1, _, _), (c4, rss, _) = got[5000], got[20000]
        assert c4 < 8 * c1 + 1.0, (name, got)
        assert rss < 300, (name, got)


# -- item 6: notebooks ------------------------------------------------------------------

def _notebook(cells, **dump):
    import json
    nb = {"cells": cells, "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, **dump) + "\n", nb


def test_notebooks_convert_code_cells_only_and_keep_the_rest(tmp_path):
    import json
    out_cell = {"cell_type": "code", "execution_count": 3, "id": "a1", "metadata": {"tags": ["x"]},
                "outputs": [{"name": "stdout", "output_type": "stream", "text": ["device = 'cuda'\n"]}],
                "source": ["import torch\n", "%matplotlib inline\n", "device = 'cuda'\n",
                           "x = torch.ones(2).cuda()  # on the gpu: x.cuda()"]}
    md = {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": ["Use `x.cuda()` – é"]}
    magic = {"cell_type": "code", "execution_count": None, "id": "c2", "metadata": {}, "outputs": [],
             "source": ["%%bash\n", "nvidia-smi --query cuda\n"]}
    text, nb = _notebook([out_cell, md, magic], indent=1, sort_keys=True, ensure_ascii=False)
    (tmp_path / "gen.ipynb").write_text(text, encoding="utf-8")
    text2, _ = _notebook([dict(out_cell, id="b")], indent=2)    # another layout
    (tmp_path / "other.ipynb").write_text(text2.rstrip("\n"), encoding="utf-8")
    report = tmp_path / "r.json"
    assert _run(tmp_path, "--report", str(report)) == 0
    got = (tmp_path / "gen.ipynb").read_text(encoding="utf-8")
    want_cell = dict(out_cell, source=["import torch\n", "%matplotlib inline\n", "device = 'musa'\n",
                                       "x = torch.ones(2).musa()  # on the gpu: x.musa()"])
    want, _ = _notebook([want_cell, md, magic], indent=1, sort_keys=True, ensure_ascii=False)
    assert got == want            # outputs, markdown, metadata, layout: unchanged
    got2 = (tmp_path / "other.ipynb").read_text(encoding="utf-8")
    assert got2 == _notebook([dict(want_cell, id="b")], indent=2)[0].rstrip("\n")
    data = json.loads(report.read_text())
    assert data["notebooks"] == ["gen.ipynb", "other.ipynb"]
    gen = next(f for f in data["files"] if f["path"] == "gen.ipynb")
    assert gen["status"] == "converted" and "cells 3" in gen["reason"]


# -- item 7: build scripts ------------------------------------------------------------------

def test_cu_patterns_in_build_scripts_are_rewritten_or_flagged(tmp_path):
    import json
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "k.cu").write_text("__global__ void k() {}\n")
    (tmp_path / "setup.py").write_text(
        "import glob, os\n"
        "srcs = glob.glob('csrc/*.cu') + glob.glob(os.path.join('csrc', '**', '*.cuh'), recursive=True)\n"
        "more = [f for f in os.listdir('csrc') if f.endswith('.cu')]\n"
        "odd = glob.glob(f'{root}/*.cu') + glob.glob('csrc/*.{cu,cpp}')\n")
    (tmp_path / "CMakeLists.txt").write_text(
        "project(x LANGUAGES CXX CUDA)\nfile(GLOB SRCS csrc/*.cu)\nadd_library(x ${SRCS})\n")
    report = tmp_path / "r.json"
    assert _run(tmp_path, "--report", str(report)) == 0
    assert (tmp_path / "csrc" / "k.mu").exists()
    setup = (tmp_path / "setup.py").read_text()
    assert "glob.glob('csrc/*.mu')" in setup and "'*.muh'" in setup and "endswith('.mu')" in setup
    data = json.loads(report.read_text())
    flagged = {(r["path"], r["line"], r["id"]) for r in data["review"]}
    assert ("setup.py", 4, "cu-source-pattern") in flagged
    assert {("CMakeLists.txt", 1, "build-script-cuda"),
            ("CMakeLists.txt", 2, "build-script-cuda")} <= flagged
    assert ("CMakeLists.txt", 3, "build-script-cuda") not in flagged
    assert (tmp_path / "CMakeLists.txt").read_text().count("*.cu") == 1   # never rewritten


# -- item 8: comments ---------------------------------------------------------------------------

@pytest.mark.parametrize("src,want", [
    ("# storage.cuda(torch.cuda.current_device())\n", "# storage.musa(torch.musa.current_device())\n"),
    ("x = 1  # storage.cuda(torch.cuda.current_device())\n",
     "x = 1  # storage.musa(torch.musa.current_device())\n"),
    ("y = t.cuda()  # then storage.cuda(torch.cuda.current_device()) and .cuda()\n",
     "y = t.musa()  # then storage.musa(torch.musa.current_device()) and .musa()\n"),
    ("# device = 'cuda:0'\n", "# device = 'musa:0'\n"),
    ("# run with CUDA_VISIBLE_DEVICES=0 on a cuda box\n", "# run with MUSA_VISIBLE_DEVICES=0 on a cuda box\n"),
    ("# CUDA kernels are fast; cuda is a word here\n", None),
])
def test_comments_are_rewritten_like_code_never_half(src, want):
    from torch_musa.utils.musa_converter import convert_source
    r = convert_source(src)
    assert r.source == (src if want is None else want)
    assert convert_source(r.source).source == r.source


def test_comment_rule_is_documented():
    doc = (ROOT / "docs" / "CONVERTER.md").read_text()
    assert "## Comments" in doc and "storage.cuda(torch.cuda.current_device())" in doc
