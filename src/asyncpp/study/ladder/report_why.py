"""The why-the-gap tables, H1–H5 (tables h1, h3-tune, h3, h4, h5): losses per cell, then the
paired comparisons (``report_common``)."""

from __future__ import annotations

import math
import statistics

from asyncpp.delay.ef_gamma import critical_p

from . import tables
from .report_common import (
    COMPARE_HEAD,
    LABEL,
    compare_cells,
    diffs,
    grid,
    loss,
    lr_of,
    section,
    share_val,
    spectral_drift,
    vals,
    values,
)
from .report_common import tc as _tc
from .tiers import get_tier

H1_FRACTIONS = (*_tc.LR_FRACTIONS, 1.0)
H1_SEEDS = tables.TABLES["h1"].seeds  # f = 1 (Table 1, 3 seeds) is read on these seeds as well
H4_SEEDS = tables.TABLES["h4"].seeds  # the base length (Table 1) is read on these seeds too
H5_SEEDS = tables.TABLES["h5"].seeds
H5_LABEL = {"b98": "0.98, 0.92, 0.99 (reference)", "alg1": "0.02, 0.08, 0.01 (Alg. 1 as torch β's)"}
h1_cell = _tc.h1_name


def frac(f: float) -> str:
    return "1" if f == 1 else f"1/{round(1 / f)}"


def table_h1(R) -> str:
    """H1: the gap and EF's share at lr*/8, lr*/4, lr*/2 and lr* (seeds 0 and 1 at every
    fraction, paired by seed)."""
    losses, cmp = [], []
    for o in _tc.H1_OPTIMIZERS:
        for f in H1_FRACTIONS:
            s, a, e = (h1_cell(o, m, f) for m in ("sync", "async", "ef"))
            losses.append([LABEL[o], frac(f), lr_of(R, s), loss(R, s, H1_SEEDS),
                           loss(R, a, H1_SEEDS), loss(R, e, H1_SEEDS)])
            losses[-1].append(share_val(R, s, a, e, H1_SEEDS))
            cmp += [[LABEL[o], frac(f), "async − sync", *compare_cells(R, a, s, H1_SEEDS)],
                    [LABEL[o], frac(f), "EF − sync", *compare_cells(R, e, s, H1_SEEDS)]]
    return "\n\n".join([
        grid(["optimizer", "lr / lr*", "lr", "sync", "async", "async + EF",
              "EF recovers"], losses),
        grid(["optimizer", "lr / lr*", "comparison", *COMPARE_HEAD], cmp)])


def h2_best(R, o: str, m: str) -> tuple[float | None, int]:
    """H2's protocol: the fraction f of lr* (grid H1_FRACTIONS) with the lowest mean final val
    loss of mode m over seeds 0 and 1 (diverged = +inf); (None, 0) when no cell has run. The
    second value is how many fractions had a result."""
    scored = []
    for f in H1_FRACTIONS:
        v = list(vals(R, h1_cell(o, m, f), H1_SEEDS).values())
        if v:
            scored.append((statistics.fmean(v) if all(map(math.isfinite, v)) else math.inf, f))
    if not scored:
        return None, 0
    return min(scored)[1], len(scored)


def h2_cells(R, o: str, m: str) -> tuple[str, str] | None:
    """(sync at its own best lr, mode m at its own best lr) of H2; None before both ran."""
    fs, _ = h2_best(R, o, "sync")
    fm, _ = h2_best(R, o, m)
    if fs is None or fm is None:
        return None
    return h1_cell(o, "sync", fs), h1_cell(o, m, fm)


def h2_gap(R, o: str, m: str) -> list[float]:
    """Per-seed gap of mode m at its own best lr against sync at its own best lr (H2)."""
    c = h2_cells(R, o, m)
    return [] if c is None else diffs(R, c[0], c[1], H1_SEEDS)


def table_h2(R) -> str:
    """H2: every mode at its own best lr (grid lr* × {1/8, 1/4, 1/2, 1}, lowest mean val loss
    over seeds 0 and 1), the gaps there next to the shared-lr gaps (at lr*)."""
    best, cmp = [], []
    for o in _tc.H1_OPTIMIZERS:
        row = [LABEL[o]]
        for m in ("sync", "async", "ef"):
            f, k = h2_best(R, o, m)
            row.append("—" if f is None else (
                frac(f) + ("" if k == len(H1_FRACTIONS) else f" ({k} of {len(H1_FRACTIONS)})")))
        s, a, e = (_tc.name(o, m) for m in ("sync", "async", "ef"))
        ta, te = h2_cells(R, o, "async"), h2_cells(R, o, "ef")
        tuned_share = "—" if ta is None or te is None else share_val(R, ta[0], ta[1], te[1],
                                                                      H1_SEEDS)
        best.append([*row, tuned_share])
        cmp += [[LABEL[o], "async − sync at lr*", *compare_cells(R, a, s, H1_SEEDS)],
                [LABEL[o], "async − sync, tuned", *(compare_cells(R, ta[1], ta[0], H1_SEEDS)
                                                    if ta else ["—"] * 4)],
                [LABEL[o], "EF − sync at lr*", *compare_cells(R, e, s, H1_SEEDS)],
                [LABEL[o], "EF − sync, tuned", *(compare_cells(R, te[1], te[0], H1_SEEDS)
                                                 if te else ["—"] * 4)]]
    return "\n\n".join([
        grid(["optimizer", "best lr / lr*: sync", "async", "async + EF", "EF recovers, tuned"],
             best),
        grid(["optimizer", "comparison", *COMPARE_HEAD], cmp)])


H5_GRIDS = tuple((tag, H5_LABEL[tag], grid_) for tag, (_, grid_) in _tc.H5_GRIDS.items())


def table_h5(R, tier=None) -> str:
    """H5 (Adan): sync, async and async + EF at Adan's reference β's over an lr grid and at
    Alg. 1's β's read in the torch convention; Table 1's Adan (β₁ = 0.9, AdamW's default) and
    H1's lower-lr cells for comparison (seeds 0 and 1, paired)."""
    tier = tier or get_tier("tiny")
    lr_star = _tc.load_lrs(tier.lrs_file)["adan"]
    rows = [("0.9, 0.92, 0.99 (Table 1, H1)", lr_star * f, h1_cell("adan", "sync", f),
             h1_cell("adan", "async", f), h1_cell("adan", "ef", f)) for f in H1_FRACTIONS]
    for tag, label, grid_ in H5_GRIDS:
        rows += [(label, lr, *(_tc.name("adan", m, tag=tag, lr=lr)
                               for m in ("sync", "async", "ef"))) for lr in grid_]
    losses = [[label, f"{lr:g}", loss(R, s, H5_SEEDS), loss(R, a, H5_SEEDS),
               loss(R, e, H5_SEEDS), share_val(R, s, a, e, H5_SEEDS)]
              for label, lr, s, a, e in rows]
    cmp = [[label, f"{lr:g}", *compare_cells(R, a, s, H5_SEEDS)] for label, lr, s, a, e in rows]
    return "\n\n".join([
        grid(["Adan β₁, β₂, β₃", "lr", "sync", "async", "async + EF", "EF recovers"],
             losses), "async − sync, paired by seed:",
        grid(["Adan β₁, β₂, β₃", "lr", *COMPARE_HEAD], cmp)])


def t3_edge_fractions(b: float) -> tuple[float, float] | None:
    """T3 (theory/stability.py) at momentum β: the delayed stable step over the synchronous
    one, c*(β, τ=1)/c*(β, τ=0), without and with EF (γ = 0 and 1 of the product's root locus,
    ``asyncpp.delay.ef_gamma.critical_p``, which verify/ checks against T3).
    If lr* sat at the synchronous edge, these are the lr fractions at which the delayed run
    would reach its own edge."""
    sync = critical_p(b, 0, 0.0)  # c* = p*/(1 − β): the factor cancels in the ratios
    return critical_p(b, 1, 0.0) / sync, critical_p(b, 1, 1.0) / sync


def h3_factor(o: str, b: float, tier) -> float | None:
    try:
        return _tc.h3_choice(o, b, tier)
    except ValueError:  # h3-tune not finished for (o, b)
        return None


def table_h3(R, tier) -> str:
    """H3: per β, the synchronous lr re-tuned over lr* × {1/2, 1, 2} (seed 0, table h3-tune),
    then sync and async there (seeds 0, 1); T2's drift δ̄ of the async run beside the gap, and
    Table 2's gap at the shared lr*."""
    tune, losses, cmp = [], [], []
    for o in ("muon", "adamw"):
        for b in _tc.BETAS:
            vs = []
            for f in _tc.H3_FACTORS:
                v = vals(R, _tc.h3_tune_name(o, b, f)).get(0)
                vs.append("—" if v is None else ("diverged" if not math.isfinite(v)
                                                 else f"{v:.3f}"))
            f = h3_factor(o, b, tier)
            tune.append([LABEL[o], f"{b:g}", " / ".join(vs), "—" if f is None else f"× {f:g}"])
            s, a = (_tc.name(o, m, beta=b, tuned=True) for m in ("sync", "async"))
            v = _tc.beta_variant(o, b)
            s2, a2 = (_tc.name(o, m, beta=v) for m in ("sync", "async"))
            losses.append([LABEL[o], f"{b:g}", loss(R, s), loss(R, a),
                           values(spectral_drift(R, a)), values(spectral_drift(R, s))])
            cmp += [[LABEL[o], f"{b:g}", "re-tuned lr", *compare_cells(R, a, s)],
                    [LABEL[o], f"{b:g}", "lr* (Table 2)", *compare_cells(R, a2, s2)]]
    return "\n\n".join([
        grid(["optimizer", "β", "sync val, seed 0, at lr* × ½ / 1 / 2", "chosen"], tune),
        grid(["optimizer", "β", "sync", "async", "δ̄ async (T2)", "δ̄ sync"], losses),
        "async − sync, paired by seed:",
        grid(["optimizer", "β", "lr", *COMPARE_HEAD], cmp)])


def table_h4(R, tier) -> str:
    """H4: the gap and EF's share at 1×, 2× and 4× the steps (lr schedule stretched; seeds 0
    and 1 at every length, paired by seed)."""
    losses, cmp = [], []
    for o in ("adamw", "muon"):
        for n in _tc.H4_LENGTHS:
            s, a, e = (_tc.h4_name(o, m, n, tier.steps) for m in ("sync", "async", "ef"))
            st = n * tier.steps
            losses.append([LABEL[o], st, loss(R, s, H4_SEEDS), loss(R, a, H4_SEEDS),
                           loss(R, e, H4_SEEDS), share_val(R, s, a, e, H4_SEEDS)])
            cmp += [[LABEL[o], st, "async − sync", *compare_cells(R, a, s, H4_SEEDS)],
                    [LABEL[o], st, "EF − sync", *compare_cells(R, e, s, H4_SEEDS)]]
    return "\n\n".join([
        grid(["optimizer", "steps", "sync", "async", "async + EF", "EF recovers"],
             losses),
        grid(["optimizer", "steps", "comparison", *COMPARE_HEAD], cmp)])


# -- the sections of tables.md (registered in sections.SECTIONS) -----------------------------------
def section_h2(R, tier):
    return section("h2", [
        "", "Each mode's lr is the grid value lr* × {1/8, 1/4, 1/2, 1} with the lowest mean val "
        "loss over seeds 0 and 1; \"(k of 4)\" marks a choice made on an unfinished grid. The "
        "tuned gap is the mode at its best lr minus sync at its best lr, paired by seed.", "",
        table_h2(R), ""]), []


def section_h5(R, tier):
    return section("h5", [
        "", "Every Table 1 Adan run used β₁ = 0.9 (AdamW's default, passed to Adan); the "
        "reference implementation's is 0.98. The paper's Alg. 1 writes (0.02, 0.08, 0.01) for "
        "the torch-convention (0.98, 0.92, 0.99); read in the torch convention they make Adan "
        "nearly signSGD. Seeds 0 and 1, gaps paired by seed.", "", table_h5(R, tier), ""]), []
