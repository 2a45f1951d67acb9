r"""Every experiment table, declared once: its id, its cells, its seeds, where its prediction is
written. ``sweep`` runs a table's cells on its seeds (:func:`cells`, :func:`seeds`,
:func:`plan`); ``report`` renders each tier's tables in :data:`REPORT_ORDER` through the
section function ``sections.SECTIONS`` registers for the table id. Cell names come from
``tables_cells`` only.

A declaration (:class:`Table`)::

    Table("efg", "EF(γ*) — the gap", cells=_efg, seeds=(0, 1, 2),
          prediction="EF(γ*) in training")

- ``cells(tier)`` → the tier's :class:`~tables_cells.Cell` list, in run order (None: the
  table shows cells of the tables in ``reads`` and runs nothing of its own);
- ``seeds`` run first for every cell, ``extra_seeds`` after every table's ``seeds`` (more seeds
  where time allows);
- ``prediction``: the heading of the ``experiments/README.md`` section that states the
  prediction, written before the first run (None: a table of the paper's own set-up);
"""

from __future__ import annotations

from . import tables_cells as tc
from .tables_cells import (
    BASE_BATCH,
    BATCH_OPT,
    BATCHES,
    BETA_KEY,
    BETAS,
    DEPTH_OPT,
    DEPTHS,
    GPU_MODES,
    GPU_OPTIMIZERS,
    H1_OPTIMIZERS,
    H3_FACTORS,
    H4_LENGTHS,
    H5_GRIDS,
    LOWER_LR,
    LR_FRACTIONS,
    MODES,
    NAG_CORRECTIONS,
    NAG_P,
    OPTIMIZERS,
    SPECTRAL,
    Cell,
    Table,
)
from .tables_opt import tables as opt_tables
from .tiers import Tier


def _cell(tier, name: str, opt: str, overrides: dict, base: str | None = None) -> Cell:
    """A cell on the tier's base config, its deep one (``base="deep"``) or a named file."""
    if base is None:
        base = tier.base
    elif base == "deep":
        base = tier.deep
    return Cell(name, base, opt, {"optimizer.name": opt, **overrides})


def _deep(tier, opt: str, sched: str, P: int, m: int, corr: str = "none") -> Cell:
    """A simulated cell of the deep model: ``sched`` on P stages, m microbatches."""
    return _cell(tier, tc.deep_name(opt, sched, P, corr), opt, {
        "pipeline.schedule": sched, "pipeline.stages": str(P), "pipeline.microbatches": str(m),
        "pipeline.simulate": "true", **NAG_CORRECTIONS[corr]}, "deep")


def _deep_sync(tier, opt: str) -> Cell:
    return _cell(tier, tc.deep_name(opt, "sync"), opt, {
        "pipeline.schedule": "1f1b", "pipeline.stages": "2", "pipeline.microbatches": "2"},
        "deep")


def _lr(tier):
    return [_cell(tier, tc.lr_name(o, lr), o, {**MODES["sync"], "optimizer.lr": repr(lr)})
            for o in OPTIMIZERS for lr in tier.lr_grid[o]]


def _t1(tier):
    return [_cell(tier, tc.name(o, m), o, MODES[m]) for o in OPTIMIZERS for m in MODES]


def _t3(tier):
    return [_cell(tier, tc.name(o, k), o, v) for o in ("adamw", "muon")
            for k, v in tc.mitigations(tier.steps).items()]


def _t2(tier):
    return [_cell(tier, tc.name(o, m, beta=tc.beta_variant(o, b)), o,
                  {**MODES[m], BETA_KEY[o]: repr(b)})
            for o in ("muon", "adamw") for b in BETAS for m in ("sync", "async")]


def _t4(tier):
    # Most informative first: P = 16 for both schedules, then PipeDream at smaller P, then
    # 2BW. 2BW needs microbatches >= P (config rule), so its P = 16 run has 16 microbatches of
    # one sequence; PipeDream uses 2. In one process microbatching changes only the float
    # summation order, not the update.
    order = [("pipedream", 16), ("2bw", 16)] + [("pipedream", P) for P in (8, 4, 2)] + [
        ("2bw", P) for P in (8, 4, 2)]
    return [_deep_sync(tier, DEPTH_OPT)] + [
        _deep(tier, DEPTH_OPT, s, P, P if s == "2bw" else 2) for s, P in order]


def _t5(tier):
    # eval_batches x batch = 128 sequences: the same validation set at every size
    return [_cell(tier, tc.name(BATCH_OPT, m, batch=None if b == BASE_BATCH else b), BATCH_OPT,
                  {**MODES[m], "train.batch_size": str(b), "train.eval_batches": str(128 // b)})
            for b in BATCHES for m in ("sync", "async")]


def _t7(tier):
    # Not in the paper: the gap at the second-best synchronous lr (lower than lr*).
    return [_cell(tier, tc.name(o, m, lr=lr), o, {**MODES[m], "optimizer.lr": repr(lr)})
            for o, lr in LOWER_LR.items() for m in MODES]


def _efg(tier):
    return [_cell(tier, tc.name(o, "efg"), o, GPU_MODES["efg"]) for o in tc.EFG_OPTIMIZERS]


def _efg_beta(tier):
    # Table 2's sync/async cells are reused; beta = 0.95 is Table 1's muon-ef and efg's muon-efg.
    return [_cell(tier, tc.name("muon", m, beta=tc.beta_variant("muon", b)), "muon",
                  {**GPU_MODES[m], BETA_KEY["muon"]: repr(b)})
            for b in BETAS for m in ("ef", "efg")]


def _efg_depth(tier):
    # PipeDream (stage delays P-1-s) with EF (gamma = 1) and per-stage EF(gamma*(beta, tau_s)),
    # beside Table 4's uncorrected PipeDream and 2BW.
    return [_deep(tier, DEPTH_OPT, "pipedream", P, 2, m) for P in (4, 8) for m in ("ef", "efg")]


def _nag(tier):
    # Table 3's mitigations at depth: the Nesterov correction against EF and EF(gamma*), 2BW
    # and PipeDream at P = 4 (Muon's uncorrected cells and PipeDream's EF/EF(gamma*) are
    # Table 4's and efg-depth's).
    return [_deep_sync(tier, "adamw")] + [
        _deep(tier, o, sched, NAG_P, m, corr) for o in ("muon", "adamw")
        for sched, m in (("2bw", 4), ("pipedream", 2)) for corr in NAG_CORRECTIONS]


def _wpipe(tier):
    return [_deep(tier, o, "wpipe", NAG_P, 4, corr) for o in ("muon", "adamw")
            for corr in ("none", "ef")]


def _h5(tier):
    # Adan's reference beta1 = 0.98 (every Table 1 run used AdamW's 0.9) over an lr grid, and
    # Algorithm 1's betas (0.02, 0.08, 0.01) read in the torch convention.
    out = []
    for tag, (betas, grid) in H5_GRIDS.items():
        for lr in grid:
            for m in MODES:
                out.append(_cell(tier, tc.name("adan", m, tag=tag, lr=lr), "adan", {
                    **MODES[m], "optimizer.lr": repr(lr), "optimizer.beta1": betas[0],
                    "optimizer.adan_beta2": betas[1], "optimizer.adan_beta3": betas[2]}))
    return out


def _h1(tier):
    # Every mode at lr*/8, lr*/4, lr*/2 (lr* = Table 1's cells), the whole step scaled.
    lrs = tc.load_lrs(tier.lrs_file)
    return [_cell(tier, tc.h1_name(o, m, f), o, {**MODES[m], **tc.scaled_lr(o, lrs, f),
                                                 **SPECTRAL})
            for o in H1_OPTIMIZERS for f in LR_FRACTIONS for m in MODES]


def _h3_tune(tier):
    # The synchronous lr re-tuned per beta over lr* x {1/2, 1, 2} (seed 0).
    lrs = tc.load_lrs(tier.lrs_file)
    return [_cell(tier, tc.h3_tune_name(o, b, f), o, {**MODES["sync"], BETA_KEY[o]: repr(b),
                                                      **tc.scaled_lr(o, lrs, f)})
            for o in ("muon", "adamw") for b in BETAS for f in H3_FACTORS]


def _h3(tier):
    # Sync and async at each beta's re-tuned lr, T2's drift logged.
    lrs, out = tc.load_lrs(tier.lrs_file), []
    for o in ("muon", "adamw"):
        for b in BETAS:
            f = tc.h3_choice(o, b, tier)
            for m in ("sync", "async"):
                out.append(_cell(tier, tc.name(o, m, beta=b, tuned=True), o, {
                    **MODES[m], BETA_KEY[o]: repr(b), **tc.scaled_lr(o, lrs, f), **SPECTRAL}))
    return out


def _h4(tier):
    # The same runs 2x and 4x longer (the lr schedule stretched with them).
    return [_cell(tier, tc.h4_name(o, m, n, tier.steps), o,
                  {**MODES[m], "train.steps": str(n * tier.steps), **SPECTRAL})
            for n in H4_LENGTHS[1:] for o in ("adamw", "muon") for m in MODES]


def _flat(tier):
    # Is the run long enough? The synchronous run at twice the steps (same schedule shape).
    return [_cell(tier, tc.name(o, "sync", long=True), o,
                  {**MODES["sync"], "train.steps": str(2 * tier.steps)})
            for o in ("adamw", "muon")]


def _gpu(tier):
    return [_cell(tier, tc.name(o, m), o, GPU_MODES[m]) for o in GPU_OPTIMIZERS
            for m in GPU_MODES]


def _gpu135(tier):
    # The earlier 135M runbook's cells (4.3 epochs of the KJV: retired).
    lr = {"adamw": {"optimizer.lr": "0.002"},
          "muon": {"optimizer.lr": "0.02", "optimizer.adamw_lr": "0.002"}}
    return [_cell(tier, tc.gpu135_name(o, m), o, {**MODES[m], **lr[o]}, "gpu135.toml")
            for o in ("muon", "adamw") for m in MODES]


_WHY = "Why the gap"  # the README section of H1-H5's predictions
TABLES: dict[str, Table] = {t.id: t for t in (
    Table("lr", "Table 0 — synchronous learning-rate sweep (seed 0)", _lr, (0,)),
    Table("1", "Table 1 — optimizers × {sync, async, async + EF}", _t1, (0, 1, 2)),
    Table("flat", "How flat the synchronous loss is at the end", _flat, (0,),
          reads=("1",)),  # shown in Table 1's section
    Table("2", "Table 2 — momentum", _t2, (0, 1), (2,)),
    Table("3", "Table 3 — mitigations", _t3, (0, 1, 2)),
    Table("4", "Table 4 — depth: PipeDream vs PipeDream-2BW", _t4, (0,), (1, 2)),
    Table("5", "Table 5 — batch size (AdamW, same steps and lr)", _t5, (0, 1), (2,)),
    Table("6", "Table 6 — theory meets practice: update drift vs EF", None, reads=("1",)),
    Table("7", "Table 7 — not in the paper: the gap at a lower learning rate", _t7, (0,),
          (1,)),
    Table("efg", "EF(γ*) — the gap", _efg, (0, 1, 2), prediction="EF(γ*) in training"),
    Table("efg-beta", "EF(γ*) — Muon's momentum sweep", _efg_beta, (0, 1), (2,),
          prediction="EF(γ*) in training"),
    Table("efg-depth", "EF(γ*) at depth", _efg_depth, (0, 1, 2),
          prediction="EF(γ*) in training"),
    Table("nag", "Delay corrections at depth", _nag, (0, 1, 2),
          prediction="The Nesterov delay correction"),
    Table("wpipe", "WPipe against 2BW", _wpipe, (0, 1, 2),
          prediction="The Nesterov delay correction"),
    Table("h1", "H1 — the gap versus the learning rate", _h1, (0, 1), prediction=_WHY),
    Table("h2", "H2 — every mode at its own learning rate", None, prediction=_WHY, reads=("h1",)),
    Table("h3-tune", "H3 — the synchronous lr re-tuned per β", _h3_tune, (0,),
          prediction=_WHY, reads=("h3",)),  # shown in H3's section
    Table("h3", "H3 — momentum at a re-tuned learning rate", _h3, (0, 1), prediction=_WHY),
    Table("h4", "H4 — training length", _h4, (0, 1), prediction=_WHY),
    Table("h5", "H5 — Adan's β's and lr", _h5, (0, 1), prediction=_WHY),
    Table("zero-gap", "The zero-gap table: the best correction against sync", None,
          reads=("1", "opt-claims")),
    Table("gpu", "GPU tier — Table 1 at about 20 tokens per parameter", _gpu, (0, 1),
          (2, 3, 4), prediction="GPU protocol"),  # report_gpu builds the page
    Table("gpu135", "GPU runbook — smollm-135m on one H200", _gpu135, (0,)),
)}
TABLES.update({t.id: t for t in opt_tables()})  # the compute-optimal ladder
# The order of the sections of a tier's tables.md (a table shows when the tier runs it, or,
# for a table without cells, any table it reads); gpu135 shows wherever its results exist.
REPORT_ORDER = ("opt-lr", "opt-claims", "lr", "1", "zero-gap", "opt-more", "opt-tokens", "2", "3",
                "4", "5", "6", "7", "efg", "efg-beta", "efg-depth", "nag", "wpipe", "h1", "h2",
                "h3", "h4", "h5", "gpu135")


def get(table: str, choices=()) -> Table:
    """The declaration of ``table``; ``ValueError`` naming ``choices`` (a tier's tables)."""
    if table not in TABLES or TABLES[table].cells is None:
        raise ValueError(f"unknown table {table!r}; choose from {', '.join(choices or TABLES)}")
    return TABLES[table]


def cells(table: str, tier) -> list[Cell]:
    """The cells of ``table`` on ``tier``, in run order."""
    return get(table, tier.table_order).cells(tier)


def seeds(table: str) -> tuple[int, ...]:
    return get(table).seeds


def extra_seeds(table: str) -> tuple[int, ...]:
    return get(table).extra_seeds


def shown(table: str, tier) -> bool:
    """Whether ``tier``'s report renders ``table`` (see :data:`REPORT_ORDER`): a table with
    cells when the tier runs it, one without when the tier runs any table it reads."""
    t = TABLES[table]
    if t.cells is None:
        return any(r in tier.table_order for r in t.reads)
    return table in tier.table_order


# The constants the sweep's callers read through ``sweep`` (kept there for them).
__all__ = ["BASE_BATCH", "BATCHES", "BATCH_OPT", "DEPTHS", "H1_OPTIMIZERS", "REPORT_ORDER",
           "TABLES", "Table", "cells", "extra_seeds", "get", "seeds", "shown"]


# Seeds per table (the declarations' ``seeds``); EXTRA_SEEDS run after every table's SEEDS.
SEEDS = {t.id: t.seeds for t in TABLES.values() if t.cells is not None}
EXTRA_SEEDS = {t.id: t.extra_seeds for t in TABLES.values() if t.extra_seeds}


def table_cells(table: str, tier: Tier) -> list[Cell]:
    """The cells of one table of ``tier``, in run order (the declarations of ``tables``;
    table ids: lr, 1, 2, 3, 4, 5, 7, flat, efg, efg-beta, efg-depth, nag, wpipe, h1, h3-tune,
    h3, h4, h5, gpu, gpu135)."""
    return cells(table, tier)


def plan(tables: list[str], seeds: list[int] | None, only: list[str] | None, tier: Tier):
    """(cell, seed) pairs of ``tier`` in run order: table by table, seed-major inside a table
    (every cell gets seed 0 before any gets seed 1), duplicates (cells shared by tables) once."""
    out, seen = [], set()
    for t in tables:
        if t not in SEEDS:
            raise ValueError(f"unknown table {t!r}; choose from {', '.join(tier.table_order)}")
    passes = [(t, seeds if seeds is not None else SEEDS[t]) for t in tables]
    if seeds is None:
        passes += [(t, EXTRA_SEEDS[t]) for t in tables if t in EXTRA_SEEDS]
    for t, tseeds in passes:
        cells = table_cells(t, tier)
        for s in tseeds:
            for c in cells:
                if only and c.name not in only:
                    continue
                if (c.name, s) not in seen:
                    seen.add((c.name, s))
                    out.append((c, s))
    return out


