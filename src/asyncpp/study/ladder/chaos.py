"""The chaos floor of an ``opt-180k`` claims cell: the spread of final losses when one seed's
run is nudged by a rounding-sized amount, beside the spread over seeds.

    python experiments/chaos.py [--cells muon-sync,adamw-sync] [--seed 0] [--repeats 3]
                                [--results DIR] [--deadline UNIX_TIME] [--list]
    python experiments/chaos.py --v2-study [--cells …] [--seed 0] [--repeats 3]
    python experiments/chaos.py --v2-report

(``--v2-study`` writes protocol v2's chaos study for ``asyncpp-study`` to run, ``--v2-report``
prints its spreads, ``asyncpp.study.ladder.protocol_v2_chaos``, and what pairing by seed
removes from each primary contrast with the seeds its power needs at the chaos floor,
``asyncpp.study.ladder.protocol_v2_pairing``.)

Run j (0..R) of a cell trains the cell exactly as ``opt-claims`` does at ``--seed``, with
its peak learning rate moved j units in the last place *of float32*, the precision the
weights and updates are computed in: a float64 ulp is lost when the lr meets a float32 tensor
(the first two results here, float64 ulps 0 and 1 at opt-180k muon-sync seed 0, ended bit for
bit equal). Run 0 is the unperturbed re-run at this commit: the cell's claims result was made
at an older commit, so comparing against it would mix the nudge with any change of code.
``--report`` prints, per cell, the sd of the final val loss over runs 0..R (the chaos spread)
beside the sd over the claims seeds 0-4. Resumable like the sweep (one result JSON per run,
lock files). The sweep refuses a checkout with untracked files, so run from a clean checkout
with ``--results`` outside it and copy the JSONs into ``experiments/opt-180k/chaos/``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from .. import spec
from . import protocol_v2, sweep, tables_opt
from . import protocol_v2_chaos as v2c
from . import protocol_v2_pairing as v2p
from .nudge import nudged
from .paths import EXPERIMENTS
from .tables_cells import result_path

TIER = "opt-180k"
CLAIMS_SEEDS = (0, 1, 2, 3, 4)


def chaos_name(cell: str, ulps: int) -> str:
    """Float32 nudges are named ``f32ulp``; the float64 ones of the first results ``ulp``."""
    return f"chaos-{cell}-f32ulp{ulps}"


def plan(tier, cells: list[str], seed: int, repeats: int, results: Path):
    """(Cell, seed) still to run: each claims cell at its settled lr, nudged 0..R ulps."""
    todo = []
    for name in cells:
        opt, mode = name.split("-", 1)
        lr = tables_opt.chosen_lr(tier, opt, mode)
        for j in range(repeats + 1):
            c = tables_opt.opt_cell(tier, chaos_name(name, j), opt, {
                **tables_opt.OPT_MODES[mode], **tables_opt.lr_overrides(opt, nudged(lr, j))})
            if not result_path(results, c.name, seed).is_file():
                todo.append((c, seed))
    return todo


def _val(path: Path) -> float | None:
    if not path.is_file():
        return None
    v = json.loads(path.read_text())["final"].get("val_loss")
    return v if v is not None and math.isfinite(v) else math.inf


def report(tier, cells: list[str], seed: int, repeats: int, results: Path) -> str:
    lines = ["| cell | chaos runs | chaos sd | seeds | seed sd |", "|---|---:|---:|---:|---:|"]
    for name in cells:
        xs = [v for j in range(repeats + 1)
              if (v := _val(result_path(results, chaos_name(name, j), seed))) is not None]
        seeds = [v for s in CLAIMS_SEEDS if (v := _val(result_path(tier.results, name, s)))
                 is not None]
        sd = f"{statistics.stdev(xs):.4f}" if len(xs) > 1 else "—"
        ssd = f"{statistics.stdev(seeds):.4f}" if len(seeds) > 1 else "—"
        lines.append(f"| {name} | {len(xs)} | {sd} | {len(seeds)} | {ssd} |")
    return "\n".join(lines)


def _v2(args) -> int:
    """``--v2-study`` / ``--v2-report``: protocol v2's cells (``protocol_v2_chaos``)."""
    if args.v2_report:
        print(v2c.report(seed=args.seed), end="")
        print()
        fam = protocol_v2.family()
        print(v2p.pairing_table(fam["power"], fam["alpha"], seed=args.seed), end="")
        return 0
    cells = v2c.CELLS if args.cells == CELLS_DEFAULT else tuple(
        c for c in args.cells.split(",") if c)
    try:
        text = v2c.chaos_study_text(spec.load(v2c.STUDY), cells, args.seed, args.repeats)
    except spec.StudyError as e:
        print(f"chaos.py: error: {e}", file=sys.stderr)
        return 2
    tmp = v2c.CHAOS.with_name(f".{v2c.CHAOS.name}.tmp")
    tmp.write_text(text)
    tmp.replace(v2c.CHAOS)
    print(v2c.CHAOS)
    return 0


CELLS_DEFAULT = "muon-sync,adamw-sync"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", default=CELLS_DEFAULT)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--results", default=str(EXPERIMENTS / TIER / "chaos"))
    ap.add_argument("--deadline", type=float, default=0.0)
    ap.add_argument("--run-estimate-s", type=float, default=400.0)
    ap.add_argument("--list", action="store_true", help="list the runs still to do")
    ap.add_argument("--report", action="store_true", help="print the spreads, run nothing")
    ap.add_argument("--v2-study", action="store_true",
                    help="write protocol v2's chaos study (protocol-v2/chaos.toml) for "
                    "asyncpp-study to run (asyncpp.study.ladder.protocol_v2_chaos)")
    ap.add_argument("--v2-report", action="store_true",
                    help="print protocol v2's chaos spreads beside its seed sds")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    if args.v2_study or args.v2_report:
        return _v2(args)
    tier = sweep.get_tier(TIER)
    cells = [c for c in args.cells.split(",") if c]
    results = Path(args.results)
    if args.report:
        print(report(tier, cells, args.seed, args.repeats, results))
        return 0
    return sweep.run_lane(lambda: plan(tier, cells, args.seed, args.repeats, results), results,
                          args.deadline, args.run_estimate_s, args.list,
                          label=lambda c: f" (lr {c.overrides['optimizer.lr']})")
