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
    assert _run(tmp_path, "--report", str(report)) == 0
    assert ex.read_text() == "x = t.musa()\n"
    assert (tmp_path / "alias.py.txt").read_text() == "x = t.musa()\n"
    st = os.stat(ex)
    b = before["tool.py"]
    assert (st.st_mode, st.st_uid, st.st_gid, st.st_ino) == (b.st_mode, b.st_uid, b.st_gid, b.st_ino)
    mu = os.stat(tmp_path / "k.mu")
    assert (mu.st_mode, mu.st_ino) == (before["k.cu"].st_mode, before["k.cu"].st_ino)
    assert ro.read_text() == "x = t.cuda()\n" and os.stat(ro).st_mode == before["ro.py"].st_mode
    data = json.loads(report.read_text())
    assert data["read_only"] == ["ro.py"] and data["summary"]["read-only"] == 1


# -- item 3: interruption ----------------------------------------------------------

def _slow_tree(root, n=24, lines=1500):
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_stops_workers_and_writes_a_partial_report(tmp_path):
    import json
    import signal
    import time
    root = tmp_path / "t"
    _slow_tree(root)
    report = tmp_path / "r.json"
    p, kids = _start(root, report)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, err
    assert "INTERRUPTED by SIGTERM" in out
    time.sleep(0.5)
    assert not [k for k in kids if _alive(k)]
    data = json.loads(report.read_text())
    assert data["interrupted"] == "SIGTERM" and data["not_done"] > 0
    done = sorted(f["path"] for f in data["files"] if f["status"] == "converted")
    assert set(done) <= set(_converted(root))
    assert data["not_done"] + len(data["files"]) == 24
    for name in _converted(root):     # no half-written file
        text = (root / name).read_text()
        assert text.count("\n") == 1500 and "cuda" not in text


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
