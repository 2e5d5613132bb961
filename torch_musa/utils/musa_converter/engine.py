"""Walking a tree, converting files in parallel, writing results and backups."""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import difflib
import io
import multiprocessing
import os
import shutil
import signal
import stat
import sys
import threading
import time
import tokenize
from collections import Counter
from dataclasses import asdict, dataclass, field

from torch_musa.utils.musa_converter import c_porter
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
    interrupted: str | None = None   # the signal that stopped the run early
    not_done: int = 0                # files not converted because of it

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
            "interrupted": self.interrupted,
            "not_done": self.not_done,
            "read_only": [f.path for f in self.files if f.status == "read-only"],
            "notebooks": [f.path for f in self.files if f.kind == "notebook"],
            "summary": {"files": len(self.files), "lines": sum(f.lines for f in self.files),
                        **{k: status.get(k, 0) for k in ("converted", "unchanged", "skipped", "failed",
                                                            "read-only")},
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


# Build scripts are read, never rewritten: their CUDA lines are listed for review.
BUILD_NAMES = {"CMakeLists.txt", "Makefile", "makefile", "GNUmakefile"}
BUILD_SUFFIXES = (".cmake", ".mk")


def _kind(name: str, opts: Options, c_ext: tuple[str, ...]) -> str | None:
    if opts.python and name.endswith(".py"):
        return "python"
    if opts.python and name.endswith(".ipynb"):
        return "notebook"
    if opts.c and name.endswith(c_ext):
        return "c"
    base = os.path.basename(name)
    if base in BUILD_NAMES or base.endswith(BUILD_SUFFIXES):
        return "build"
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


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the converter: stop and report what was done."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def _interruptible():
    """SIGINT and SIGTERM raise ``Interrupted`` in the main thread while the
    run lasts (a file being written finishes first, see _write_in_place)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise_interrupted) for s in _GUARDED}
    try:
        yield
    except Interrupted:
        for s in _GUARDED:          # no second interrupt while the pool stops
            signal.signal(s, signal.SIG_IGN)
        raise
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _init_pool_worker(ctx: dict, parent: int) -> None:
    """A worker ends with the converter: SIGTERM when the parent dies (Linux
    prctl PR_SET_PDEATHSIG, elsewhere a thread watching the parent pid).
    Ctrl-C goes to the parent, which stops the pool and writes the report."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    armed = False
    if sys.platform.startswith("linux"):
        try:
            armed = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:      # the parent died before prctl
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    _init_worker(ctx)


_PR_SET_PDEATHSIG = 1


def _watch_parent(parent: int) -> None:
    if _HAS_SIGMASK:   # let the main thread take the signal (it may be mid-write)
        signal.pthread_sigmask(signal.SIG_BLOCK, _GUARDED)
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)


def _read_text(path: str, kind: str) -> tuple[str | None, str, str]:
    """(text, why not, codec). Python files are decoded with the encoding they
    declare (PEP 263 cookie or BOM, UTF-8 by default) and written back with
    it; other files must be UTF-8 (a BOM is kept)."""
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data:
        return None, "binary file (NUL bytes)", ""
    codec = "utf-8-sig" if data.startswith(b"\xef\xbb\xbf") else "utf-8"
    if kind == "python":
        try:
            codec, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError:   # undecodable or a bad cookie: UTF-8 decides below
            pass
    try:
        text = data.decode(codec)
    except (UnicodeDecodeError, LookupError) as e:
        why = e.reason if isinstance(e, UnicodeDecodeError) else str(e)
        at = f" at byte {e.start}" if isinstance(e, UnicodeDecodeError) else ""
        name = "UTF-8" if codec.startswith("utf-8") else codec
        return None, f"not {name} ({why}{at})", ""
    return text, "", codec


def _read_only(path: str) -> str:
    """Why ``path`` must be left alone ("" if it may be rewritten): no write
    bit at all (0444, even for root), or no write permission for this user."""
    st = os.stat(path)
    if not st.st_mode & 0o222 or not os.access(path, os.W_OK):
        return f"read-only file (mode {stat.S_IMODE(st.st_mode):04o}): left unchanged"
    return ""


_GUARDED = {signal.SIGINT, signal.SIGTERM}
_HAS_SIGMASK = hasattr(signal, "pthread_sigmask")


def _write_in_place(path: str, data: bytes) -> None:
    """Overwrite ``path``'s bytes in place: the file keeps its inode, mode,
    owner, hard links and extended attributes (a new file moved over it would
    not). SIGINT/SIGTERM wait until the write is done, so an interrupted run
    never leaves a half-written file."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _GUARDED) if _HAS_SIGMASK else None
    try:
        with open(path, "r+b") as f:
            f.write(data)
            f.truncate()
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def process_file(job: tuple[str, str, str]) -> FileResult:
    path, rel, kind = job
    ctx = _CTX
    t = load_table()
    try:
        text, why, codec = _read_text(path, kind)
    except OSError as e:
        return FileResult(rel, kind, "failed", f"cannot read: {e.strerror}")
    if text is None:
        return FileResult(rel, kind, "failed", why)
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    res = FileResult(rel, kind, "unchanged", lines=lines)
    new_abs = path
    try:
        if kind == "python":
            # libcst takes ~0.2 s to import: only runs that rewrite Python pay it.
            from torch_musa.utils.musa_converter import python_rewriter
            launch = os.path.realpath(path) in ctx.get("launch", ())
            r = python_rewriter.convert_source(text, t, launch=launch, filename=rel)
        elif kind == "notebook":
            from torch_musa.utils.musa_converter import notebook
            r = notebook.convert_notebook(text, t)
            res.reason = r.note
        elif kind == "build":
            res.review = c_porter.review_build_script(text)
            return res
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
    try:
        ro = _read_only(path)
    except OSError as e:
        ro = f"cannot stat: {e.strerror}"
    if ro:                       # reported the same way in a dry run
        res.status, res.reason = "read-only", ro
        return res
    if ctx.get("dry_run"):
        res.diff = "".join(difflib.unified_diff(
            text.splitlines(keepends=True), r.source.splitlines(keepends=True),
            fromfile="a/" + rel, tofile="b/" + (res.new_path or rel)))
        if renamed and not res.diff:
            res.diff = f"rename {rel} -> {res.new_path}\n"
        return res
    try:
        data = r.source.encode(codec)
        if ctx.get("backup_dir"):
            dst = os.path.join(ctx["backup_dir"], rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(path, dst)
        if renamed:
            os.rename(path, new_abs)   # the same file under its new name
        _write_in_place(new_abs, data)
    except (OSError, UnicodeEncodeError) as e:
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
    interrupted = None
    try:
        with _interruptible():
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
                with mp.Pool(n, initializer=_init_pool_worker, initargs=(ctx, os.getpid())) as pool:
                    for r in pool.imap_unordered(process_file, jobs, chunksize=chunk):
                        results.append(r)
                        if bar:
                            bar.update(1)
    except Interrupted as e:   # the pool's __exit__ has stopped the workers
        interrupted = signal.Signals(e.signum).name
    if bar:
        bar.close()
    results.sort(key=lambda f: f.path)
    if backup_dir and not any(f.status == "converted" for f in results):
        backup_dir = None
    return RunResult(os.path.abspath(opts.root), results, time.perf_counter() - t0,
                     opts.dry_run, backup_dir, t.version, interrupted,
                     len(jobs) + len(early) - len(results))
