r"""One worker of the GPU runbook (experiments/gpu/run.sh): the compute-optimal ladder's tables
on the ``gpu`` tier, in this process, until they are done or the deadline comes.

``opt-lr`` first, then ``opt-claims`` (experiments/tables_opt.py). An lr grid extends past an
edge only once all its points have finished, and the claims read every grid's choice, so one
pass of ``sweep.py`` is not enough: like experiments/ladder.sh, the worker runs the opt-lr
sweep again while the table has runs left. Each pass is :func:`sweep.main` called in this
interpreter (``--in-process``), so torch is imported and the model compiled once per worker,
not once per pass. Several workers share the runs through sweep's lock files; after a pass
the remaining runs are either

- unclaimed (a grid just extended, or the pass stopped for the deadline): pass again, unless
  a run would no longer end before the deadline (the same estimate as sweep's), or
- all held by live workers: wait ``--poll-s`` for them to finish (their results may extend a
  grid) and look again.

The table is settled when every run it plans is done; then the worker runs ``opt-claims``
(seed 0 of each cell is its lr run, found identical and reused; seeds 1 and 2 train).

Usage (what run.sh starts, once per worker)::

    python experiments/gpu/worker.py --deadline T --run-estimate-s 60 -- \
        --results DIR --set data.path=... [more sweep.py arguments]
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from . import sweep
from .paths import EXPERIMENTS
from .tables_cells import result_path

HERE = EXPERIMENTS / "gpu"

TABLES = ("opt-lr", "opt-claims")


def pending(tier, table: str) -> tuple[list[str], list[str]]:
    """(unclaimed, held): the runs of ``table`` on ``tier`` without a result, split by whether
    a live process holds their lock."""
    free, held = [], []
    for c, s in sweep.plan([table], None, None, tier):
        if result_path(tier.results, c.name, s).is_file():
            continue
        lock = tier.results / f".{c.name}-seed{s}.lock"
        try:
            pid = int(lock.read_text().strip() or 0)
        except (OSError, ValueError):
            pid = 0
        (held if pid and sweep._alive(pid) else free).append(f"{c.name}-seed{s}")
    return free, held


def settle_lr(sweep_args: list[str], tier, deadline: float, estimate_s: float,
              poll_s: float) -> bool:
    """Run opt-lr passes until the table has no run left (True) or the deadline stops it
    (False)."""
    while True:
        rc = sweep.main(["--tier", "gpu", "--tables", "opt-lr", *sweep_args])
        if rc:
            raise SystemExit(rc)
        free, held = pending(tier, "opt-lr")
        if not free and not held:
            return True
        est = sweep.run_estimate(tier.results, estimate_s, warm=True)
        if time.time() + est > deadline:
            print(f"worker: deadline; opt-lr has {len(free) + len(held)} runs left", flush=True)
            return False
        if not free:
            print(f"worker: waiting for {len(held)} opt-lr runs of other workers", flush=True)
            time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deadline", type=float, required=True, help="Unix time (sweep.py's)")
    ap.add_argument("--run-estimate-s", type=float, required=True,
                    help="seconds of one run before any has finished (sweep.py's)")
    ap.add_argument("--poll-s", type=float, default=2.0,
                    help="seconds between looks while other workers hold the remaining runs")
    ap.add_argument("sweep_args", nargs="*", help="after --: sweep.py arguments (--results, "
                    "--set, ...); --in-process, --deadline and --run-estimate-s are added")
    args = ap.parse_args(argv)
    rest = [*args.sweep_args, "--in-process", "--deadline", str(args.deadline),
            "--run-estimate-s", str(args.run_estimate_s)]
    results = rest[rest.index("--results") + 1] if "--results" in rest else None
    tier = sweep.get_tier("gpu").at(results=results)
    try:
        done = settle_lr(rest, tier, args.deadline, args.run_estimate_s, args.poll_s)
    except ValueError as e:  # e.g. the transfer source's grids are not settled
        print(f"worker: {e}", file=sys.stderr)
        return 2
    if not done:
        return 0
    print("worker: opt-lr settled; opt-claims", flush=True)
    return sweep.main(["--tier", "gpu", "--tables", "opt-claims", *rest])



def entry() -> int:
    """``python experiments/gpu/worker.py``: SIGTERM (the runbook's hard stop) unwinds through
    sweep's cleanup, so the run folder and lock go."""
    signal.signal(signal.SIGTERM, sweep._exit_on_sigterm)
    return main()
