"""The EF-without-delay control at ``opt-180k`` (pre-registered in
``experiments/opt-180k/ef-control.md``): learning rate chosen on selection seeds 100 and 101,
then claims seeds 0–4 at lr*, then the same seeds at the synchronous cell's lr.

Resumable: a (cell, seed) whose result JSON exists is skipped; each run is written when it
finishes (the sweep's format, provenance and lock files), into
``experiments/opt-180k/ef-control/`` (not the tier's results folder, whose run statistics are
the ladder's own). Run from a clean checkout (entry
point ``experiments/ef_control.py``)::

    python experiments/ef_control.py [--results DIR] [--deadline UNIX_TIME] [--list]

Cells: ``efnd-<opt>-lr<lr>`` (selection), ``<opt>-efnd`` (claims at lr*), ``<opt>-efnd-lrsync``
(claims at the synchronous lr, when it differs from lr*).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from . import sweep, tables_opt
from .paths import EXPERIMENTS
from .tables_cells import Cell, result_path

TIER = "opt-180k"
MODE = {"pipeline.schedule": "1f1b", "delay.correction": "ef"}  # the sync cell + EF
GRIDS = {"muon": (0.02, 0.04, 0.08, 0.16), "adamw": (0.005, 0.01, 0.02)}
SYNC_LR = {"muon": 0.16, "adamw": 0.01}  # the synchronous cells' lr* at opt-180k
SELECTION_SEEDS = (100, 101)
CLAIMS_SEEDS = (0, 1, 2, 3, 4)


def cell(tier, name: str, opt: str, lr: float) -> Cell:
    return tables_opt.opt_cell(tier, name, opt, {**MODE, **tables_opt.lr_overrides(opt, lr)})


def selection_name(opt: str, lr: float) -> str:
    return f"efnd-{opt}-lr{lr:g}"


def _loss(results: Path, name: str, seed: int) -> float | None:
    p = result_path(results, name, seed)
    if not p.is_file():
        return None
    v = json.loads(p.read_text())["final"].get("val_loss")
    return v if v is not None and math.isfinite(v) else math.inf


def grid(results: Path, opt: str) -> list[float]:
    """The pre-registered grid, widened once by ×2 or ×½ if the current choice is on an edge
    (only once every selection run of the grid is on disk)."""
    lrs = list(GRIDS[opt])
    best = choose(results, opt, lrs)
    if best is not None and best in (lrs[0], lrs[-1]):
        lrs = sorted({*lrs, best * 2 if best == lrs[-1] else best / 2})
    return lrs


def choose(results: Path, opt: str, lrs: list[float]) -> float | None:
    """lr* = argmin over ``lrs`` of the mean final val loss over the selection seeds; None
    until every selection run of ``lrs`` is on disk."""
    means = {}
    for lr in lrs:
        vals = [_loss(results, selection_name(opt, lr), s) for s in SELECTION_SEEDS]
        if any(v is None for v in vals):
            return None
        means[lr] = sum(vals) / len(vals)
    return min(means, key=means.get)


def plan(tier, results: Path):
    """The runs still to do, in the pre-registered order, as (cell, seed); stops at what the
    runs on disk do not decide yet (lr* before its claims)."""
    todo = []
    for opt in GRIDS:
        lrs = grid(results, opt)
        sel = [(cell(tier, selection_name(opt, lr), opt, lr), s) for lr in lrs
               for s in SELECTION_SEEDS]
        todo += [(c, s) for c, s in sel if _loss(results, c.name, s) is None]
    for opt in GRIDS:
        lrs = grid(results, opt)
        best = choose(results, opt, lrs)
        if best is None:
            continue
        runs = [(cell(tier, f"{opt}-efnd", opt, best), s) for s in CLAIMS_SEEDS]
        if best != SYNC_LR[opt]:
            runs += [(cell(tier, f"{opt}-efnd-lrsync", opt, SYNC_LR[opt]), s)
                     for s in CLAIMS_SEEDS]
        todo += [(c, s) for c, s in runs if _loss(results, c.name, s) is None]
    return todo


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(EXPERIMENTS / TIER / "ef-control"),
                    help="results folder (default: experiments/opt-180k/ef-control)")
    ap.add_argument("--deadline", type=float, default=0.0,
                    help="Unix time: start no run expected to end after it")
    ap.add_argument("--run-estimate-s", type=float, default=240.0)
    ap.add_argument("--list", action="store_true", help="list the runs still to do")
    args = ap.parse_args(argv)
    tier = sweep.get_tier(TIER).at(results=args.results)
    results = tier.results
    return sweep.run_lane(lambda: plan(tier, results), results, args.deadline,
                          args.run_estimate_s, args.list)
