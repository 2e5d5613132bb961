"""Walking a tree, converting files in parallel, writing results and backups."""
from __future__ import annotations

import dataclasses
import difflib
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

from torch_musa.utils.musa_converter import c_porter, python_rewriter
from torch_musa.cuda_mapping import load_table

BACKUP_DIRNAME = ".musa_converter_backup"
SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", BACKUP_DIRNAME}
# Converted C/C++ files keep their new extension, so a second run reads them too.
EXTRA_C_SOURCES = (".mu", ".muh")


@dataclass
class Options:
    root: str
    launch_paths: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    dry_run: bool = False
    backup: bool = True
    backup_dir: str | None = None
    jobs: int = 0
    progress: bool | None = None
    python: bool = True
    c: bool = True


@dataclass
class FileResult:
    path: str                      # relative to the root
    kind: str                      # python | c
    status: str                    # converted | unchanged | skipped | failed
    reason: str = ""
    new_path: str | None = None    # relative, when the file was renamed (.cu -> .mu)
    lines: int = 0
    counts: dict = field(default_factory=dict)
    review: list = field(default_factory=list)
    diff: str = ""

    @property
    def error(self) -> bool:
        return self.status == "failed"


@dataclass
class RunResult:
    root: str
    files: list[FileResult]
    seconds: float
    dry_run: bool
    backup_dir: str | None
    table_version: str

    @property
    def failed(self) -> list[FileResult]:
        return [f for f in self.files if f.error]

    def rule_counts(self) -> Counter:
        c: Counter = Counter()
        for f in self.files:
            c.update(f.counts)
        return c

    def to_json(self) -> dict:
        t = load_table()
        by_id = {i.id: i for i in t.review}
        review = []
        for f in self.files:
            for r in f.review:
                item = by_id.get(r["id"])
                review.append({"path": f.path, **r,
                               "title": item.title if item else "symbol mapped by prefix only",
                               "advice": item.converter if item else "check that musa provides it"})
        status = Counter(f.status for f in self.files)
        return {
            "tool": "musa-converter",
            "table_version": self.table_version,
            "root": self.root,
            "dry_run": self.dry_run,
            "backup_dir": self.backup_dir,
            "seconds": round(self.seconds, 3),
            "summary": {"files": len(self.files), "lines": sum(f.lines for f in self.files),
                        **{k: status.get(k, 0) for k in ("converted", "unchanged", "skipped", "failed")},
                        "rewrites": sum(self.rule_counts().values()), "review": len(review)},
            "rules": dict(sorted(self.rule_counts().items())),
            "files": [{k: v for k, v in asdict(f).items() if k != "diff"} for f in self.files],
            "review": review,
            "limitations": [{"id": i.id, "title": i.title, "runtime": i.runtime,
                             "converter": i.converter} for i in t.review],
        }


# ---------------------------------------------------------------------------
# Collecting files
# ---------------------------------------------------------------------------

def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _resolve_user_path(p: str, root_dir: str) -> str:
    if os.path.isabs(p) or os.path.exists(p):
        return os.path.realpath(p)
    return os.path.realpath(os.path.join(root_dir, p))


def _kind(name: str, opts: Options, c_ext: tuple[str, ...]) -> str | None:
    if opts.python and name.endswith(".py"):
        return "python"
    if opts.c and name.endswith(c_ext):
        return "c"
    return None


def collect(opts: Options) -> tuple[list[tuple[str, str, str]], list[FileResult], str]:
    """(jobs, early results, root_dir). A job is (abs path, rel path, kind)."""
    t = load_table()
    c_ext = tuple(t.c_sources) + EXTRA_C_SOURCES
    root = os.path.abspath(opts.root)
    if not os.path.lexists(root):
        raise FileNotFoundError(f"root path {opts.root!r} does not exist")
    root_dir = root if os.path.isdir(root) else os.path.dirname(root)
    real_root = os.path.realpath(root_dir)
    excluded = [_resolve_user_path(e, root_dir) for e in opts.excluded]
    jobs: list[tuple[str, str, str]] = []
    early: list[FileResult] = []

    def consider(path: str) -> None:
        rel = os.path.relpath(path, root_dir)
        kind = _kind(path, opts, c_ext)
        if os.path.islink(path):
            target = os.path.realpath(path)
            is_dir = os.path.isdir(target)
            if kind is None and not is_dir:
                return
            kind = kind or "link"
            if not _is_within(target, real_root):
                early.append(FileResult(rel, kind, "failed", f"link out of the root (-> {target})"))
            else:
                early.append(FileResult(rel, kind, "skipped",
                                        "symlink inside the root (its target is converted directly)"))
            return
        if kind is None:
            return
        if any(_is_within(os.path.realpath(path), e) for e in excluded):
            return
        jobs.append((path, rel, kind))

    if os.path.isdir(root) and not os.path.islink(root):
        for dirpath, dirnames, filenames in os.walk(root):
            keep = []
            for d in sorted(dirnames):
                full = os.path.join(dirpath, d)
                if d in SKIP_DIRS or any(_is_within(os.path.realpath(full), e) for e in excluded):
                    continue
                if os.path.islink(full):
                    consider(full)
                    continue
                keep.append(d)
            dirnames[:] = keep
            for name in sorted(filenames):
                consider(os.path.join(dirpath, name))
    else:
        consider(root)
    return jobs, early, root_dir


# ---------------------------------------------------------------------------
# Converting one file (runs in a worker)
# ---------------------------------------------------------------------------

_CTX: dict = {}


def _init_worker(ctx: dict) -> None:
    _CTX.clear()
    _CTX.update(ctx)
    load_table()


def _read_text(path: str) -> tuple[str | None, str, bool]:
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data:
        return None, "binary file (NUL bytes)", False
    bom = data.startswith(b"\xef\xbb\xbf")
    try:
        text = data[3:].decode("utf-8") if bom else data.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 ({e.reason} at byte {e.start})", False
    return text, "", bom


def _write_text(path: str, text: str, bom: bool, mode_from: str | None) -> None:
    d = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".musa_converter.", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
        if mode_from and os.path.exists(mode_from):
            shutil.copymode(mode_from, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def process_file(job: tuple[str, str, str]) -> FileResult:
    path, rel, kind = job
    ctx = _CTX
    t = load_table()
    try:
        text, why, bom = _read_text(path)
    except OSError as e:
        return FileResult(rel, kind, "failed", f"cannot read: {e.strerror}")
    if text is None:
        return FileResult(rel, kind, "failed", why)
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    res = FileResult(rel, kind, "unchanged", lines=lines)
    new_abs = path
    try:
        if kind == "python":
            launch = os.path.realpath(path) in ctx.get("launch", ())
            r = python_rewriter.convert_source(text, t, launch=launch, filename=rel)
        else:
            r = c_porter.port_source(text, t)
            new_abs = c_porter.new_path(path, t)
    except SyntaxError as e:
        return FileResult(rel, kind, "failed", f"syntax error: {e.msg} (line {e.lineno})", lines=lines)
    except Exception as e:  # a parser limitation must not stop the run
        return FileResult(rel, kind, "failed", f"{type(e).__name__}: {e}".splitlines()[0][:300],
                          lines=lines)
    res.counts = dict(r.counts)
    res.review = r.review
    renamed = new_abs != path
    if not r.changed and not renamed:
        return res
    res.status = "converted"
    root_dir = ctx["root_dir"]
    if renamed:
        res.new_path = os.path.relpath(new_abs, root_dir)
        if os.path.lexists(new_abs):
            res.status, res.reason = "failed", f"target {res.new_path} already exists"
            return res
    if ctx.get("dry_run"):
        res.diff = "".join(difflib.unified_diff(
            text.splitlines(keepends=True), r.source.splitlines(keepends=True),
            fromfile="a/" + rel, tofile="b/" + (res.new_path or rel)))
        if renamed and not res.diff:
            res.diff = f"rename {rel} -> {res.new_path}\n"
        return res
    try:
        if ctx.get("backup_dir"):
            dst = os.path.join(ctx["backup_dir"], rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(path, dst)
        _write_text(new_abs, r.source, bom, path)
        if renamed:
            os.unlink(path)
    except OSError as e:
        res.status, res.reason = "failed", f"cannot write: {e}"
    return res


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------

def run(opts: Options) -> RunResult:
    t0 = time.perf_counter()
    t = load_table()
    if opts.backup_dir:   # never convert the backups themselves
        opts = dataclasses.replace(opts, excluded=tuple(opts.excluded) + (opts.backup_dir,))
    jobs, early, root_dir = collect(opts)
    backup_dir = None
    if not opts.dry_run and opts.backup:
        backup_dir = opts.backup_dir or os.path.join(
            root_dir, BACKUP_DIRNAME, time.strftime("%Y%m%d-%H%M%S"))
        backup_dir = os.path.abspath(backup_dir)
    launch = {_resolve_user_path(p, root_dir) for p in opts.launch_paths}
    ctx = {"root_dir": root_dir, "dry_run": opts.dry_run, "backup_dir": backup_dir,
           "launch": launch}
    # Big files first: they bound the parallel run time.
    sizes = {}
    for j in jobs:
        try:
            sizes[j[0]] = os.path.getsize(j[0])
        except OSError:
            sizes[j[0]] = 0
    jobs.sort(key=lambda j: -sizes[j[0]])
    n = opts.jobs or os.cpu_count() or 1
    n = max(1, min(n, len(jobs)))
    progress = opts.progress if opts.progress is not None else sys.stderr.isatty()
    bar = None
    if progress and jobs:
        try:
            from tqdm import tqdm
            bar = tqdm(total=len(jobs), unit="file", desc="musa-converter", file=sys.stderr)
        except ImportError:
            bar = None
    results: list[FileResult] = list(early)
    if n == 1 or len(jobs) < 8:
        _init_worker(ctx)
        for j in jobs:
            results.append(process_file(j))
            if bar:
                bar.update(1)
    else:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
        mp = multiprocessing.get_context(method)
        chunk = max(1, min(16, len(jobs) // (n * 16)))
        with mp.Pool(n, initializer=_init_worker, initargs=(ctx,)) as pool:
            for r in pool.imap_unordered(process_file, jobs, chunksize=chunk):
                results.append(r)
                if bar:
                    bar.update(1)
    if bar:
        bar.close()
    results.sort(key=lambda f: f.path)
    if backup_dir and not any(f.status == "converted" for f in results):
        backup_dir = None
    return RunResult(os.path.abspath(opts.root), results, time.perf_counter() - t0,
                     opts.dry_run, backup_dir, t.version)
