"""Walking a tree, converting files in parallel, writing results and backups."""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import difflib
import errno
import hashlib
import io
import multiprocessing
import os
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


class SetupError(Exception):
    """The run cannot start safely (a backup folder that is a link or lies
    outside the root, a report that cannot be written...): nothing was converted."""


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
    notes: list = field(default_factory=list)   # lines for the report (a root that is a link...)

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
            "notes": list(self.notes),
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


def resolve_root(path: str) -> tuple[str, str | None]:
    """(the root to convert, a note if ``path`` is a symlink). A root given as
    a link is converted at its target: the user named it, so its target is
    what they mean (the walk itself never follows links)."""
    root = os.path.abspath(path)
    if os.path.islink(root):
        target = os.path.realpath(root)
        if not os.path.exists(target):
            raise SetupError(f"root {path} is a broken symlink (-> {target})")
        return target, f"root {path} is a symlink: converting its target {target}"
    return root, None


def _file_type(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "directory")):
        if test(mode):
            return name
    return "special file"


def collect(opts: Options) -> tuple[list[tuple[str, str, str]], list[FileResult], str]:
    """(jobs, early results, root_dir). A job is (abs path, rel path, kind)."""
    t = load_table()
    c_ext = tuple(t.c_sources) + EXTRA_C_SOURCES
    if not os.path.lexists(os.path.abspath(opts.root)):
        raise FileNotFoundError(f"root path {opts.root!r} does not exist")
    root, _ = resolve_root(opts.root)
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
        try:
            mode = os.lstat(path).st_mode
        except OSError as e:
            early.append(FileResult(rel, kind, "failed", f"cannot stat: {e.strerror}"))
            return
        if not stat.S_ISREG(mode):   # a FIFO would block the read forever
            early.append(FileResult(rel, kind, "skipped",
                                    f"not a regular file ({_file_type(mode)}): skipped"))
            return
        jobs.append((path, rel, kind))

    if os.path.isdir(root):
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
    if hasattr(signal, "SIGXFSZ"):   # past the file-size limit: EFBIG, not death mid-run
        old[signal.SIGXFSZ] = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
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
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
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


def _start_method() -> str | None:
    """fork where the process has one thread (the musa-converter command): workers start at
    once. A process with other threads (the converter called from a library, a test run, a
    notebook) spawns them: a fork copies locks another thread held, and a worker that needs
    one waits forever (seen once in five test runs). Spawned workers are children of this
    process too, so the parent check in _init_pool_worker holds."""
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = threading.active_count()
    if threads == 1 and "fork" in multiprocessing.get_all_start_methods():
        return "fork"
    return "spawn"


def _watch_parent(parent: int) -> None:
    if _HAS_SIGMASK:   # let the main thread take the signal (it may be mid-write)
        signal.pthread_sigmask(signal.SIG_BLOCK, _GUARDED)
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)


class _NotRegular(OSError):
    pass


def _read_bytes(path: str) -> tuple[bytes, tuple]:
    """(content, fingerprint). Opened without following a link and without
    blocking (a FIFO put in place of a file), and only read if it is a
    regular file. The fingerprint (size, mtime_ns, inode, sha256) tells later
    whether the file changed while it was being converted."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                 | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _NotRegular(errno.EINVAL, f"not a regular file ({_file_type(st.st_mode)})")
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        data = b"".join(chunks)
        st2 = os.fstat(fd)
    finally:
        os.close(fd)
    if (st2.st_size, st2.st_mtime_ns) != (st.st_size, st.st_mtime_ns) or len(data) != st.st_size:
        raise _Changed()
    return data, _fingerprint(st, data)


def _fingerprint(st: os.stat_result, data: bytes) -> tuple:
    return (st.st_size, st.st_mtime_ns, st.st_ino, hashlib.sha256(data).digest())


class _Changed(Exception):
    """The file changed while it was being read or converted."""


CHANGED = "changed while being converted (someone edited it): left as it is now; run again"


def _still_same(path: str, fp: tuple) -> bool:
    """Whether ``path`` still has the size, mtime, inode and content it had when read."""
    try:
        data, now = _read_bytes(path)
    except (OSError, _Changed):
        return False
    return now == fp


def _read_text(path: str, kind: str, data: bytes | None = None) -> tuple[str | None, str, str]:
    """(text, why not, codec). Python files are decoded with the encoding they
    declare (PEP 263 cookie or BOM, UTF-8 by default) and written back with
    it; other files must be UTF-8 (a BOM is kept)."""
    if data is None:
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


class WriteFailed(OSError):
    """A file could not be written; it was left intact."""


def _block_signals():
    return signal.pthread_sigmask(signal.SIG_BLOCK, _GUARDED) if _HAS_SIGMASK else None


def _unblock_signals(old) -> None:
    if old is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


_TMP_SEQ = [0]


def _can_replace(path: str, st: os.stat_result) -> bool:
    """Whether a new file moved over ``path`` keeps what the old one had:
    only one link (a rename would cut the others off), no extended
    attributes (ACLs, labels), and an owner and group this user can give."""
    if st.st_nlink != 1:
        return False
    try:
        if os.listxattr(path, follow_symlinks=False):
            return False
    except (OSError, AttributeError):
        pass
    euid = os.geteuid() if hasattr(os, "geteuid") else None
    if euid is None or euid == 0:
        return True
    return st.st_uid == euid and (st.st_gid == os.getegid() or st.st_gid in os.getgroups())


def write_file(path: str, data: bytes, fp: tuple, rename_from: str | None = None) -> None:
    """Write ``data`` as the content of ``path`` (renamed from ``rename_from``
    first, for .cu -> .mu), so that no outcome leaves a file cut in half:

    * the usual case: ``data`` goes to a new file in the same folder, which
      takes the mode and owner, and then replaces the original (``os.replace``);
      a full disk or the file-size limit (EFBIG) fails on the new file and the
      original stays as it was;
    * a file with several hard links (or extended attributes, or an owner this
      user cannot give a new file) must keep its inode: it is rewritten in
      place, but the part longer than the original is written first, past its
      end, and cut off again if that fails; only then is the rest overwritten,
      which needs no new space (except on copy-on-write file systems).

    Raises ``_Changed`` (and writes nothing) if the file is no longer what was
    read (``fp``), ``WriteFailed`` if it could not be written (left intact).
    SIGINT/SIGTERM wait until the write is done."""
    orig = rename_from or path
    st = os.lstat(orig)
    if not stat.S_ISREG(st.st_mode):
        raise _Changed()
    if _can_replace(orig, st) and _write_replace(path, data, fp, orig, st):
        return
    _write_over(path, data, fp, orig, st)


def _write_replace(path, data, fp, orig, st) -> bool:
    """False (nothing done) if no file can be made in the folder (a folder
    without write permission holding a writable file), or the disk has no
    room for a second copy of a file that does not grow: then _write_over,
    which needs no new space for it."""
    no_room = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
    shrinks = len(data) <= st.st_size
    folder = os.path.dirname(path) or "."
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        _TMP_SEQ[0] += 1
        tmp = os.path.join(folder, f".{os.path.basename(path)}.musa-converter-{os.getpid()}-{_TMP_SEQ[0]}.tmp")
        try:
            fd = os.open(tmp, flags, 0o600)
            break
        except FileExistsError:
            continue
        except PermissionError:
            return False
        except OSError as e:
            if e.errno in no_room and shrinks:
                return False
            raise WriteFailed(e.errno, f"cannot create a temporary file in its folder ({e.strerror})")
    old = None
    try:
        try:
            _write_all(fd, data, 0)
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
            if hasattr(os, "fchown"):
                now = os.fstat(fd)
                if (now.st_uid, now.st_gid) != (st.st_uid, st.st_gid):
                    os.fchown(fd, st.st_uid, st.st_gid)
        finally:
            os.close(fd)
        old = _block_signals()
        if not _still_same(orig, fp):
            raise _Changed()
        os.replace(tmp, path)
        tmp = None
        if orig != path:
            os.unlink(orig)
    except OSError as e:
        if isinstance(e, WriteFailed):
            raise
        if e.errno in no_room and shrinks and tmp is not None:
            return False            # (finally removes the temporary file)
        raise WriteFailed(e.errno, e.strerror or str(e))
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _unblock_signals(old)
    return True


def _write_over(path, data, fp, orig, st) -> None:
    old = _block_signals()
    renamed = False
    try:
        if not _still_same(orig, fp):
            raise _Changed()
        if orig != path:
            os.rename(orig, path)       # the same file (inode) under its new name
            renamed = True
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            size = os.fstat(fd).st_size
            if len(data) > size:
                # The growth first, past the end: if the disk is full or the
                # file-size limit hits, cut it off again; the original bytes
                # were not touched.
                try:
                    _write_all(fd, data[size:], size)
                except OSError:
                    os.ftruncate(fd, size)
                    raise
            _write_all(fd, data[:size], 0)
            if len(data) < size:
                os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
    except OSError as e:
        if renamed:
            with contextlib.suppress(OSError):
                os.rename(path, orig)
        raise WriteFailed(e.errno, e.strerror or str(e))
    finally:
        _unblock_signals(old)


def _backup(backup_dir: str, rel: str, data: bytes, st: os.stat_result) -> None:
    """Copy the bytes that were read to ``backup_dir/rel``. Every folder is
    entered without following a link and the file is created exclusively
    (O_CREAT|O_EXCL|O_NOFOLLOW): a link or a file planted there is never
    written through or over."""
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    dflags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | nofollow | getattr(os, "O_CLOEXEC", 0)
    parts = rel.split(os.sep)
    dfd = os.open(backup_dir, dflags)
    try:
        for part in parts[:-1]:
            try:
                os.mkdir(part, dir_fd=dfd)
            except FileExistsError:
                pass
            nfd = os.open(part, dflags, dir_fd=dfd)   # ELOOP/ENOTDIR for a link
            os.close(dfd)
            dfd = nfd
        fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | nofollow, 0o600, dir_fd=dfd)
        try:
            _write_all(fd, data, 0)
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        except OSError:
            os.close(fd)
            fd = -1
            with contextlib.suppress(OSError):
                os.unlink(parts[-1], dir_fd=dfd)
            raise
        finally:
            if fd >= 0:
                os.close(fd)
    finally:
        os.close(dfd)


def process_file(job: tuple[str, str, str]) -> FileResult:
    path, rel, kind = job
    ctx = _CTX
    t = load_table()
    try:
        data, fp = _read_bytes(path)
        st = os.lstat(path)
        text, why, codec = _read_text(path, kind, data)
    except _NotRegular as e:
        return FileResult(rel, kind, "skipped", f"{e.strerror}: skipped")
    except _Changed:
        return FileResult(rel, kind, "failed", CHANGED)
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
        new_data = r.source.encode(codec)
    except UnicodeEncodeError as e:
        res.status, res.reason = "failed", f"cannot write: {e}"
        return res
    if not _still_same(path, fp):
        res.status, res.reason = "failed", CHANGED
        return res
    # SIGINT/SIGTERM wait until the backup and the file are written: no
    # half-written backup, no temporary file left behind.
    old = _block_signals()
    try:
        return _save(ctx, res, path, rel, data, st, new_abs, new_data, fp, renamed)
    finally:
        _unblock_signals(old)


def _save(ctx, res, path, rel, data, st, new_abs, new_data, fp, renamed) -> FileResult:
    if ctx.get("backup_dir"):
        try:
            _backup(ctx["backup_dir"], rel, data, st)
        except FileExistsError:
            res.status, res.reason = "failed", (
                f"a backup {os.path.join(ctx['backup_dir'], rel)} already exists: file left unchanged")
            return res
        except OSError as e:
            why = "a link in the backup folder" if e.errno in (errno.ELOOP, errno.ENOTDIR) else e.strerror
            res.status, res.reason = "failed", f"cannot back up ({why}): file left unchanged"
            return res
    try:
        write_file(new_abs, new_data, fp, rename_from=path if renamed else None)
    except _Changed:
        res.status, res.reason = "failed", CHANGED
    except OSError as e:
        res.status, res.reason = "failed", f"cannot write ({e.strerror or e}): the file is intact, not converted"
    return res


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------

def run(opts: Options) -> RunResult:
    t0 = time.perf_counter()
    t = load_table()
    if opts.backup_dir:   # never convert the backups themselves
        opts = dataclasses.replace(opts, excluded=tuple(opts.excluded) + (opts.backup_dir,))
    _, note = resolve_root(opts.root)
    jobs, early, root_dir = collect(opts)
    backup_dir, made = None, []
    if not opts.dry_run and opts.backup and jobs:
        backup_dir, made = make_backup_dir(opts.backup_dir, root_dir)
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
                mp = multiprocessing.get_context(_start_method())
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
        for d in reversed(made):     # the folders this run made, if still empty
            with contextlib.suppress(OSError):
                os.rmdir(d)
        backup_dir = None
    return RunResult(os.path.abspath(opts.root), results, time.perf_counter() - t0,
                     opts.dry_run, backup_dir, t.version, interrupted,
                     len(jobs) + len(early) - len(results), [note] if note else [])


def make_backup_dir(given: str | None, root_dir: str) -> tuple[str, list[str]]:
    """(the backup folder, the folders made for it). The default,
    ROOT/.musa_converter_backup/<time>, is made here with mkdir (never
    reusing an existing one: a folder of that name shipped with the tree gets
    a -N suffix instead); a ``.musa_converter_backup`` that is a link, or a
    backup folder that is a link or resolves outside the root without
    ``--backup-dir`` saying so, raises SetupError."""
    real_root = os.path.realpath(root_dir)
    made: list[str] = []
    if given:
        path = os.path.abspath(given)
        if os.path.islink(path):
            raise SetupError(f"backup folder {given} is a symlink (-> {os.path.realpath(path)}): "
                             "refused; give a real folder")
        if _is_within(path, root_dir) and not _is_within(os.path.realpath(path), real_root):
            raise SetupError(f"backup folder {given} is inside the root but resolves outside it "
                             f"(-> {os.path.realpath(path)}), through a link: refused")
        if os.path.lexists(path):
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                raise SetupError(f"backup folder {given} exists and is not a folder")
        else:
            try:
                os.makedirs(path)
            except OSError as e:
                raise SetupError(f"cannot make backup folder {given}: {e.strerror}")
            made.append(path)
        return path, made
    base = os.path.join(root_dir, BACKUP_DIRNAME)
    if os.path.islink(base):
        raise SetupError(f"{base} is a symlink (-> {os.path.realpath(base)}): backups would be "
                         "written outside the root; remove it or pass --backup-dir")
    try:
        os.mkdir(base)
        made.append(base)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(base).st_mode):
            raise SetupError(f"{base} exists and is not a folder: remove it or pass --backup-dir")
    except OSError as e:
        raise SetupError(f"cannot make backup folder {base}: {e.strerror}")
    if not _is_within(os.path.realpath(base), real_root):
        raise SetupError(f"backup folder {base} resolves outside the root "
                         f"(-> {os.path.realpath(base)}): refused; pass --backup-dir")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        path = os.path.join(base, stamp if i == 0 else f"{stamp}-{i}")
        try:
            os.mkdir(path)          # exclusive: a planted folder of this name is not reused
        except FileExistsError:
            continue
        except OSError as e:
            raise SetupError(f"cannot make backup folder {path}: {e.strerror}")
        made.append(path)
        return path, made
    raise SetupError(f"cannot make a new backup folder under {base}")
