"""The process that runs the user's script under a session (started by the
command, with the card's profile in its environment, since the configuration
is read once, at import) and writes the raw data as JSON, also after a failure.

    python -m torch_musa.utils.doctor.worker OUT.json MAX_STEPS PROGRESS(0|1) SCRIPT [ARGS...]

MAX_STEPS 0 means no limit.
"""
from __future__ import annotations

import json
import os
import runpy
import sys
import traceback

from torch_musa.utils.doctor.cuda_isms import converter_review
from torch_musa.utils.doctor.session import Session, StepLimitReached


def _save(path: str, raw: dict) -> None:
    """Writes ``raw`` whole or not at all (a reader never sees half a file)."""
    with open(path + ".tmp", "w") as f:
        json.dump(raw, f)
    os.replace(path + ".tmp", path)


def run_script(script: str, args: list[str], max_steps: int | None, progress: bool = True,
               partial: str | None = None) -> dict:
    """Runs ``script`` as ``__main__`` with ``sys.argv`` = [script, *args]; the raw data.

    ``partial``: a path where the data so far is saved after each step, for a report
    even if the interpreter dies (a crash in native code, a kill)."""
    script = os.path.abspath(script)
    folder = os.path.dirname(script)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *args]
    sys.path.insert(0, folder)
    status, error = "completed", None
    session = Session([folder], max_steps=max_steps, progress=progress)
    if partial:
        session.on_step = lambda s: _save(partial, dict(
            s.to_json(), script=script, args=args, status="failed", converter={"rewrites": {}, "review": []},
            error={"type": "died", "message": f"the interpreter died after step {s.steps_done}", "site": None}))
    try:
        with session:
            runpy.run_path(script, run_name="__main__")
    except StepLimitReached:
        status = "step limit"
    except SystemExit as e:
        if e.code not in (None, 0):
            status, error = "failed", {"type": "SystemExit", "message": f"exit status {e.code}", "site": None}
    except BaseException as e:      # the report still comes, up to the failure
        status = "failed"
        error = {"type": type(e).__name__, "message": str(e).split("\n")[0][:500],
                 "site": session.user.site_of_traceback(e.__traceback__),
                 "traceback": traceback.format_exception(e)[-6:]}
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    raw = session.to_json()
    files = sorted({script} | {s["site"].rsplit(":", 1)[0] for o in raw["ops"].values() for s in o["sites"]
                               if s["site"] and session.user.is_user_file(s["site"].rsplit(":", 1)[0])})
    raw.update(script=script, args=args, status=status, error=error, converter=converter_review(files))
    return raw


def main(argv: list[str]) -> int:
    out, max_steps, progress, script, *args = argv
    raw = run_script(script, args, int(max_steps) or None, progress=progress == "1", partial=out + ".partial")
    _save(out, raw)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
