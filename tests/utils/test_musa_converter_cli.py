"""musa-converter command line: dry-run, backups, copies, bad files, report, parallel."""
import json
import os
import subprocess
import sys

import pytest

from torch_musa.utils.musa_converter import cli

GOOD = 'import torch\nx = torch.randn(2, device="cuda")\ntorch.cuda.synchronize()\n'
GOOD_OUT = 'import torch\nx = torch.randn(2, device="musa")\ntorch.musa.synchronize()\n'
KERNEL = '#include <cuda_runtime.h>\n#include "util.cuh"\nvoid f() { cudaDeviceSynchronize(); }\n'


def write(path, text, mode="w"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(text)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "proj"
    write(str(root / "train.py"), GOOD)
    write(str(root / "pkg" / "model.py"), "import torch\n\nclass M(torch.nn.Module):\n    pass\n")
    write(str(root / "pkg" / "util.py"), "def f(t):\n    return t.cuda()\n")
    write(str(root / "csrc" / "k.cu"), KERNEL)
    write(str(root / "csrc" / "util.cuh"), "#pragma once\n#include <cuda_fp16.h>\n")
    write(str(root / "README.md"), "cuda everywhere\n")
    return root


def test_dry_run_prints_diff_and_changes_nothing(tree, capsys):
    before = {p: read(os.path.join(dp, p)) for dp, _, fs in os.walk(tree) for p in fs}
    rc = cli.main(["-r", str(tree), "--dry-run", "--no-progress"])
    assert rc == 0
    outp = capsys.readouterr().out
    assert "--- a/train.py" in outp and "+++ b/train.py" in outp
    assert '-x = torch.randn(2, device="cuda")' in outp
    assert '+x = torch.randn(2, device="musa")' in outp
    assert "+++ b/csrc/k.mu" in outp
    assert "would change 4" in outp
    after = {p: read(os.path.join(dp, p)) for dp, _, fs in os.walk(tree) for p in fs}
    assert before == after
    assert not (tree / ".musa_converter_backup").exists()


def test_in_place_keeps_backups_and_is_idempotent(tree, capsys):
    rc = cli.main(["-r", str(tree), "-l", "train.py", "--no-progress"])
    assert rc == 0
    assert read(tree / "train.py") == "import torch_musa\n" + GOOD_OUT
    assert read(tree / "pkg" / "util.py") == "def f(t):\n    return t.musa()\n"
    assert not (tree / "csrc" / "k.cu").exists()
    assert read(tree / "csrc" / "k.mu") == (
        '#include <musa_runtime.h>\n#include "util.muh"\nvoid f() { musaDeviceSynchronize(); }\n')
    assert read(tree / "csrc" / "util.muh") == "#pragma once\n#include <musa_fp16.h>\n"
    assert read(tree / "README.md") == "cuda everywhere\n"
    backups = list((tree / ".musa_converter_backup").iterdir())
    assert len(backups) == 1
    assert read(backups[0] / "train.py") == GOOD
    assert read(backups[0] / "csrc" / "k.cu") == KERNEL
    assert not (backups[0] / "pkg" / "model.py").exists()     # unchanged files are not copied
    capsys.readouterr()
    # Second run: nothing changes, no new backup.
    rc = cli.main(["-r", str(tree), "-l", "train.py", "--no-progress"])
    assert rc == 0
    assert "changed 0" in capsys.readouterr().out
    assert read(tree / "train.py") == "import torch_musa\n" + GOOD_OUT
    assert len(list((tree / ".musa_converter_backup").iterdir())) == 1


def test_no_backup_and_single_file_root(tree):
    assert cli.main(["-r", str(tree / "train.py"), "--no-backup", "-q"]) == 0
    assert read(tree / "train.py") == GOOD_OUT
    assert read(tree / "pkg" / "util.py") == "def f(t):\n    return t.cuda()\n"   # not in root
    assert not (tree / ".musa_converter_backup").exists()


def test_output_copy_leaves_source_alone(tree, tmp_path):
    out = tmp_path / "converted"
    assert cli.main(["-r", str(tree), "-o", str(out), "-l", "train.py", "-q"]) == 0
    assert read(tree / "train.py") == GOOD
    assert (tree / "csrc" / "k.cu").exists()
    assert read(out / "train.py") == "import torch_musa\n" + GOOD_OUT
    assert (out / "csrc" / "k.mu").exists() and (out / "README.md").exists()
    assert not (out / ".musa_converter_backup").exists()
    # Refuses an output inside the root.
    assert cli.main(["-r", str(tree), "-o", str(tree / "sub"), "-q"]) == 2


def test_excluded_paths(tree):
    assert cli.main(["-r", str(tree), "-e", str(tree / "pkg"), "csrc", "--no-backup", "-q"]) == 0
    assert read(tree / "train.py") == GOOD_OUT
    assert read(tree / "pkg" / "util.py") == "def f(t):\n    return t.cuda()\n"
    assert (tree / "csrc" / "k.cu").exists()


def test_bad_files_are_reported_and_the_rest_continue(tree, tmp_path, capsys):
    write(str(tree / "broken.py"), "x = torch.cuda.current_device(\n")
    write(str(tree / "blob.py"), b"\x00\x01cuda\x00", mode="wb")
    write(str(tree / "latin1.py"), 'name = "Jos\xe9"\nx = "cuda"\n'.encode("latin-1"), mode="wb")
    outside = tmp_path / "outside.py"
    write(str(outside), GOOD)
    os.symlink(outside, tree / "link_out.py")
    os.symlink(tree / "train.py", tree / "link_in.py")
    os.symlink(tmp_path, tree / "dir_out")
    report = tmp_path / "report.json"
    rc = cli.main(["-r", str(tree), "--no-backup", "--no-progress", "--report", str(report)])
    assert rc == 1
    captured = capsys.readouterr()
    assert "skipped broken.py: syntax error" in captured.err
    assert read(tree / "train.py") == GOOD_OUT                 # the rest went on
    assert read(outside) == GOOD                                 # never written through a link
    data = json.loads(read(report))
    by_path = {f["path"]: f for f in data["files"]}
    assert by_path["broken.py"]["status"] == "failed"
    assert "syntax error" in by_path["broken.py"]["reason"]
    assert "binary" in by_path["blob.py"]["reason"]
    assert "not UTF-8" in by_path["latin1.py"]["reason"]
    assert "link out of the root" in by_path["link_out.py"]["reason"]
    assert "link out of the root" in by_path["dir_out"]["reason"]
    assert by_path["link_in.py"]["status"] == "skipped"
    assert by_path["train.py"]["status"] == "converted"
    assert data["summary"]["failed"] == 5


def test_report_json(tree, tmp_path):
    write(str(tree / "check.py"),
          'import torch\nif t.device.type == "cuda":\n    pass\nimport pynvml\n')
    report = tmp_path / "r.json"
    assert cli.main(["-r", str(tree), "--dry-run", "-q", "--report", str(report)]) == 0
    data = json.loads(read(report))
    assert data["table_version"] and data["dry_run"] is True
    assert data["summary"]["converted"] == 5 and data["summary"]["failed"] == 0
    assert data["rules"]["py.dotted:torch.cuda"] == 1
    assert data["rules"]["c.cuda-runtime:cudaDeviceSynchronize"] == 1
    f = {x["path"]: x for x in data["files"]}["train.py"]
    assert f["counts"] == {"py.string.device": 1, "py.dotted:torch.cuda": 1}
    review = {(r["path"], r["line"], r["id"]) for r in data["review"]}
    assert review == {("check.py", 2, "device-type-compare"), ("check.py", 4, "nvml")}
    assert all(r["advice"] for r in data["review"])
    assert {x["id"] for x in data["limitations"]} >= {"device-type-compare", "is-cuda-attribute",
                                                       "nvml", "nccl-check"}


def test_parallel_equals_serial(tmp_path):
    for i in range(24):
        write(str(tmp_path / "a" / f"m{i}.py"), GOOD * (i + 1))
        write(str(tmp_path / "b" / f"m{i}.py"), GOOD * (i + 1))
    assert cli.main(["-r", str(tmp_path / "a"), "-j", "2", "--no-backup", "-q"]) == 0
    assert cli.main(["-r", str(tmp_path / "b"), "-j", "1", "--no-backup", "-q"]) == 0
    for i in range(24):
        assert read(tmp_path / "a" / f"m{i}.py") == read(tmp_path / "b" / f"m{i}.py") == GOOD_OUT * (i + 1)


@pytest.mark.slow
def test_module_entry_point(tree):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    r = subprocess.run([sys.executable, "-m", "torch_musa.utils.musa_converter", "-r", str(tree),
                        "--dry-run", "-q"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "would change 4" in r.stdout


def test_usage_errors(tree, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([])
    assert e.value.code == 2 and "--root_path" in capsys.readouterr().err
    assert cli.main(["-r", str(tree / "missing")]) == 2
    assert cli.main(["-r", str(tree), "--dry-run", "-o", str(tree) + "_out"]) == 2
    assert cli.main(["-r", str(tree), "-l", "no_such_script.py"]) == 2


def test_custom_backup_dir_inside_root_is_not_converted(tree):
    bk = tree / "bk"
    assert cli.main(["-r", str(tree), "--backup-dir", str(bk), "-q"]) == 0
    assert read(bk / "train.py") == GOOD
    write(str(tree / "more.py"), GOOD)
    assert cli.main(["-r", str(tree), "--backup-dir", str(bk), "-q"]) == 0
    assert read(bk / "train.py") == GOOD          # the backup itself was left alone
    assert read(bk / "more.py") == GOOD and read(tree / "more.py") == GOOD_OUT


def test_a_process_with_threads_spawns_its_workers():
    """A fork copies locks other threads hold; a forked worker once hung the whole run."""
    import threading

    from torch_musa.utils.musa_converter import engine

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert engine._start_method() == "spawn"
    finally:
        stop.set()
        t.join()
