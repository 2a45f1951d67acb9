"""``asyncpp-study plan|status|run`` on a ladder study (a tier of the project's own ladder,
``experiments/<tier>/study.toml``): the tier's tables are listed by the sweep and trained by
``experiments/ladder.sh`` lanes, which train from a clean worktree of the current commit (the
results name the code that made them) and pass over the tables until nothing is left.

- ``plan``: every (cell, seed) of the tier's tables and whether it is on disk (``sweep.py
  --list``); ``status``: the counts.
- ``run``: ``lanes`` lanes of ``ladder.sh`` at once (runs claimed by lock files), each stopping
  before a run that would end after ``deadline``; exit 0 when the tables are settled, 3 when
  the deadline left runs (the same command continues), 1 when a lane failed.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

from . import sweep
from .paths import EXPERIMENTS
from .tiers import get_tier


def _listing(tier: str) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        sweep.main(["--tier", tier, "--tables", ",".join(get_tier(tier).table_order),
                    "--list"])
    return [ln for ln in out.getvalue().splitlines() if ln.startswith(("done", "todo"))]


def status_line(tier: str) -> str:
    lines = _listing(tier)
    done = sum(ln.startswith("done") for ln in lines)
    return (f"{tier}: {done} of {len(lines)} listed run(s) on disk, {len(lines) - done} to do "
            "(tables list a pair's claims cells once its lr has settled)")


def command(tier: str, what: str, lanes: int = 1, deadline: float | None = None) -> int:
    """Exit code of ``asyncpp-study WHAT`` on the ladder tier ``tier`` (module docstring)."""
    if what in ("plan", "status"):
        if what == "plan":
            print("\n".join(_listing(tier)))
        print(status_line(tier))
        return 0
    extra = ["--", "--deadline", str(int(deadline))] if deadline else []
    procs = [subprocess.Popen(["bash", str(EXPERIMENTS / "ladder.sh"), tier, *extra])
             for _ in range(lanes)]
    codes = [p.wait() for p in procs]
    if any(codes):
        return 1
    left = sum(ln.startswith("todo") for ln in _listing(tier))
    print(status_line(tier), file=sys.stderr)
    return 3 if left else 0
