"""``musa-converter``: port CUDA PyTorch code (Python and C/C++) to musa.

Safety policy
-------------
* ``--dry-run`` prints a unified diff of every change and writes nothing.
* Writing in place (the default) first copies every file it changes into
  ``ROOT/.musa_converter_backup/<timestamp>/`` (same relative path), or into
  ``--backup-dir``; ``--no-backup`` turns that off. ``.cu``/``.cuh`` files are
  renamed to ``.mu``/``.muh`` (the original goes to the backup).
* ``-o/--output_path DIR`` converts a copy of the tree into DIR and leaves the
  source untouched (no backup needed).
* Files keep their bytes outside the rewrites (line endings, encoding, BOM,
  final newline), their mode and owner; read-only files are left alone and
  listed. A file is never half-written: the new text goes to a temporary
  file beside it that then replaces it (a file with several hard links is
  rewritten in place, its growth written first); a full disk or the
  file-size limit leaves the file intact and reported as failed.
* Backups never go through a link (exclusive create, O_NOFOLLOW); a backup
  folder that is a link, or resolves outside the root without --backup-dir,
  is refused. A file edited while it was converted is left as it is and
  reported. FIFOs and other non-regular files are skipped. A root given as
  a symlink is converted at its target (said in the report).
* SIGINT/SIGTERM stop the run after the files being written; the report (and
  ``--report``) says what was done; workers end with the command.
* A second run changes nothing. Files that do not parse, are binary or not
  UTF-8, or are links out of the root are skipped and reported; the exit code
  is 1 if any file failed, 0 otherwise (2 for bad arguments, an unusable
  --report path or backup folder: then nothing is converted).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import stat
import sys

from torch_musa._table import render
from torch_musa.utils.musa_converter import engine
from torch_musa.cuda_mapping import load_table


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="musa-converter",
        description="Convert CUDA PyTorch code (Python, .cu/.cuh/C++) to torch_musa.",
        epilog=__doc__.split("Safety policy", 1)[1].replace("-------------", "safety policy:"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-r", "--root_path", required=True, help="file or folder to convert")
    p.add_argument("-l", "--launch_path", nargs="+", default=[],
                   help="script(s) that get `import torch_musa` inserted at the top")
    p.add_argument("-e", "--excluded_path", nargs="+", default=[],
                   help="files or folders to leave alone (relative to the cwd or the root)")
    p.add_argument("-o", "--output_path", default=None,
                   help="write a converted copy of the root here instead of converting in place")
    p.add_argument("--dry-run", action="store_true", help="print a unified diff, change nothing")
    p.add_argument("--no-backup", action="store_true", help="in place, without keeping backups")
    p.add_argument("--backup-dir", default=None, help="where backups go (default: ROOT/%s/<time>)"
                   % engine.BACKUP_DIRNAME)
    p.add_argument("-j", "--jobs", type=int, default=0, help="worker processes (default: all cores)")
    p.add_argument("--report", metavar="FILE", default=None, help="write the full report as JSON")
    p.add_argument("--python-only", action="store_true", help="only .py files")
    p.add_argument("--c-only", action="store_true", help="only C/C++/CUDA sources")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("-q", "--quiet", action="store_true", help="only the summary")
    p.add_argument("--version", action="version",
                   version=f"musa-converter (mapping table {load_table().version})")
    return p


def print_report(res: engine.RunResult, quiet: bool = False, out=None, limit: int = 40) -> None:
    out = out or sys.stdout
    data = res.to_json()
    s = data["summary"]
    if not quiet:
        touched = [f for f in res.files if f.status != "unchanged"]
        if touched:
            rows = [(f.path + (f" -> {f.new_path}" if f.new_path else ""), f.status,
                     sum(f.counts.values()), len(f.review), f.reason) for f in touched[:limit]]
            print(render(("file", "status", "rewrites", "review", "note"), rows), file=out)
            if len(touched) > limit:
                print(f"... {len(touched) - limit} more files (see --report)", file=out)
            print(file=out)
        rules: dict[str, int] = {}
        for k, v in data["rules"].items():
            rid = k.split(":", 1)[0]
            rules[rid] = rules.get(rid, 0) + v
        if rules:
            rows = sorted(rules.items(), key=lambda kv: -kv[1])
            print(render(("rule", "count"), rows), file=out)
            print(file=out)
        if data["review"]:
            print("Needs a human look (a rewrite cannot fix these):", file=out)
            rows = [(f"{r['path']}:{r['line']}", r["id"], r["text"][:70]) for r in data["review"][:limit]]
            print(render(("where", "issue", "code"), rows), file=out)
            if len(data["review"]) > limit:
                print(f"... {len(data['review']) - limit} more (see --report)", file=out)
            seen = []
            for r in data["review"]:
                if r["id"] not in seen:
                    seen.append(r["id"])
            for rid in seen:
                r = next(x for x in data["review"] if x["id"] == rid)
                print(f"  {rid}: {r['advice']}", file=out)
            print(file=out)
    if data["read_only"]:
        print("Read-only files left unchanged (they need a rewrite; make them writable "
              "and run again):", file=out)
        for p in data["read_only"][:limit]:
            print(f"  {p}", file=out)
        if len(data["read_only"]) > limit:
            print(f"  ... {len(data['read_only']) - limit} more (see --report)", file=out)
        print(file=out)
    for note in res.notes:
        print(f"musa-converter: {note}", file=out)
    for title, key in (("Not written, left intact (disk full, file-size limit...): ",
                        "the file is intact"),
                       ("Changed by someone while being converted, left as they are now "
                        "(run again): ", "changed while being converted")):
        hit = [f.path for f in res.files if f.status == "failed" and key in f.reason]
        if hit:
            print(title + ", ".join(hit[:limit]) + (" ..." if len(hit) > limit else ""), file=out)
    skipped = [f for f in res.files if f.status == "skipped" and f.reason.startswith("not a regular file")]
    if skipped:
        print("Not regular files (FIFOs, sockets, devices), skipped:", file=out)
        for f in skipped[:limit]:
            print(f"  {f.path}: {f.reason}", file=out)
        print(file=out)
    verb = "would change" if res.dry_run else "changed"
    print(f"musa-converter (table {data['table_version']}): {s['files']} files, {s['lines']} lines, "
          f"{verb} {s['converted']}, unchanged {s['unchanged']}, skipped {s['skipped']}, "
          f"failed {s['failed']}, read-only {s['read-only']}; {s['rewrites']} rewrites, {s['review']} to review; "
          f"{data['seconds']:.2f} s", file=out)
    if res.backup_dir:
        print(f"backups: {res.backup_dir}", file=out)
    if res.interrupted:
        print(f"musa-converter: INTERRUPTED by {res.interrupted}: the files above were done, "
              f"{res.not_done} were not converted (run again to finish)", file=out)


def _report_problem(path: str) -> str:
    """Why the report file cannot be written ("" if it can): its folder must
    exist and be writable, and the file, if there, a writable regular file."""
    full = os.path.abspath(path)
    folder = os.path.dirname(full)
    if not os.path.isdir(folder):
        return f"folder {os.path.dirname(path) or '.'} does not exist"
    if os.path.lexists(full):
        if os.path.isdir(full):
            return "is a folder"
        if not os.access(full, os.W_OK):
            return "not writable"
    elif not os.access(folder, os.W_OK | os.X_OK):
        return f"folder {os.path.dirname(path) or '.'} is not writable"
    return ""


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:    # `musa-converter ... | head`
        sys.stderr.close()
        return 0


def _main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.python_only and args.c_only:
        print("musa-converter: --python-only and --c-only exclude each other", file=sys.stderr)
        return 2
    root = args.root_path
    if not os.path.lexists(root):
        print(f"musa-converter: {root}: no such file or directory", file=sys.stderr)
        return 2
    launch = list(args.launch_path)
    excluded = list(args.excluded_path)
    src_root = os.path.abspath(root if os.path.isdir(root) else os.path.dirname(root))
    for p in launch:
        full = engine._resolve_user_path(p, src_root)
        if not (full.endswith(".py") and os.path.isfile(full)) or not engine._is_within(
                full, os.path.realpath(src_root)):
            print(f"musa-converter: launch path {p}: not a Python file under the root",
                  file=sys.stderr)
            return 2
    backup = not args.no_backup
    if args.output_path:
        if args.dry_run:
            print("musa-converter: --dry-run and --output_path exclude each other", file=sys.stderr)
            return 2
        src_dir = os.path.abspath(root if os.path.isdir(root) else os.path.dirname(root))
        out = os.path.abspath(args.output_path)
        if engine._is_within(out, src_dir) or os.path.exists(out) and os.listdir(out):
            print(f"musa-converter: output path {args.output_path} must be a new folder "
                  "outside the root", file=sys.stderr)
            return 2
        ex = [engine._resolve_user_path(e, src_dir) for e in excluded]

        special: list[str] = []

        def ignore(d, names):
            out = []
            for n in names:
                full = os.path.join(d, n)
                if n in engine.SKIP_DIRS or any(engine._is_within(os.path.realpath(full), e)
                                                for e in ex):
                    out.append(n)
                    continue
                try:
                    mode = os.lstat(full).st_mode
                except OSError:
                    continue
                if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                    special.append(os.path.relpath(full, root))   # a FIFO would block the copy
                    out.append(n)
            return out
        if os.path.isdir(root):
            shutil.copytree(root, out, symlinks=True, ignore=ignore)
            new_root = out
        else:
            os.makedirs(out, exist_ok=True)
            new_root = os.path.join(out, os.path.basename(root))
            shutil.copy2(root, new_root)
        launch = [os.path.join(out, os.path.relpath(engine._resolve_user_path(p, src_dir), src_dir))
                  for p in launch]
        root, excluded, backup = new_root, [], False
        for p in special:
            print(f"musa-converter: {p}: not a regular file: not copied", file=sys.stderr)
    if args.report:    # checked before anything is converted
        why = _report_problem(args.report)
        if why:
            print(f"musa-converter: --report {args.report}: {why}", file=sys.stderr)
            return 2
    opts = engine.Options(
        root=root, launch_paths=tuple(launch), excluded=tuple(excluded), dry_run=args.dry_run,
        backup=backup, backup_dir=args.backup_dir, jobs=args.jobs,
        progress=False if args.no_progress else None,
        python=not args.c_only, c=not args.python_only)
    try:
        res = engine.run(opts)
    except engine.SetupError as e:
        print(f"musa-converter: {e} (nothing was converted)", file=sys.stderr)
        return 2
    if args.dry_run and not args.quiet:
        for f in res.files:
            if f.diff:
                sys.stdout.write(f.diff if f.diff.endswith("\n") else f.diff + "\n")
    print_report(res, quiet=args.quiet)
    if args.report:
        try:
            with open(args.report, "w", encoding="utf-8") as fh:
                json.dump(res.to_json(), fh, indent=2)
        except OSError as e:   # checked at the start; the folder changed since
            print(f"musa-converter: cannot write the report {args.report}: {e.strerror}",
                  file=sys.stderr)
            return 1
    for f in res.failed:
        print(f"musa-converter: skipped {f.path}: {f.reason}", file=sys.stderr)
    if res.interrupted:
        return 128 + int(getattr(signal, res.interrupted))
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
