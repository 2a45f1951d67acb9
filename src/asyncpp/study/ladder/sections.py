"""The sections of a tier's ``tables.md``: :data:`SECTIONS` maps a table id to the plain function
that renders it, ``function(R, tier) -> (markdown lines, figures written)``; ``report`` calls
them in ``tables.REPORT_ORDER``. The sections that draw a figure beside their table are
written here, above both the tables (``report_*``) and the figures (``report_figures``); the
others live with their tables."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from . import report_beyond as beyond
from . import report_opt as opt
from . import report_paper as paper
from . import report_why as why
from .report_beyond import nag_caption, run_beta, table_efg_beta, table_nag
from .report_common import LABEL, section
from .report_common import tc as _tc
from .report_figures import (
    figure_efg_beta,
    figure_gap_vs_lr,
    figure_h3,
    figure_h4,
    figure_nag,
    image,
)
from .report_why import t3_edge_fractions, table_h1, table_h3, table_h4
from .report_zero_gap import section_zero_gap


def section_efg_beta(R, tier):
    md = section("efg-beta", ["", "Sync and async are Table 2's cells; β = 0.95 is Table 1's "
                              "and the efg table's.", "", table_efg_beta(R), ""])
    fig = figure_efg_beta(R, tier.figures / "efg_share_vs_beta.png", tier)
    if fig:
        md += [image(fig), ""]
    return md, [fig] if fig else []


def section_nag(R, tier):
    md = section("nag", ["", nag_caption(R), "", table_nag(R), ""])
    fig = figure_nag(R, tier.figures / "nag_depth.png")
    if fig:
        md += [image(fig), ""]
    return md, [fig] if fig else []


def section_h1(R, tier):
    fig = figure_gap_vs_lr(R, tier.figures / "gap_vs_lr.png")
    edges = []
    for o in _tc.H1_OPTIMIZERS:
        b = run_beta(R, o)
        e = t3_edge_fractions(b)
        if e is not None:
            edges.append(f"{LABEL[o]} (β = {b:g}): {e[0]:.4f} without EF, {e[1]:.4f} with EF")
    md = section("h1", [
        "", "Every mode at lr* × {1/8, 1/4, 1/2, 1} (lr* of the tier's lr file; Muon's AdamW "
        "side scaled with it). lr* × 1 is Table 1's cells, read on seeds 0 and 1 like the "
        "others; gaps paired by seed.", "", table_h1(R), ""])
    if fig:
        md += [image(fig), "",
               "The vertical lines are T3's edge fractions c*(β, τ=1)/c*(β, τ=0) "
               "(theory/stability.py; dashed without EF, dotted with EF) at each optimizer's β: "
               "the lr fraction at which the delayed run would reach its stability edge if lr* "
               "sat at the synchronous edge (an assumption, not a measurement; T3 is the "
               "heavy-ball quadratic model). "
               + ("Fractions: " + "; ".join(edges) + "." if edges else ""), ""]
    return md, [fig] if fig else []


def section_h3(R, tier):
    md = section("h3", [
        "", "Per β the synchronous lr is re-tuned over lr* × {1/2, 1, 2} on seed 0 (lowest final "
        "val loss); sync and async then run there (seeds 0, 1). δ̄ is T2's drift in its own "
        "norm (`drift.spectral_mean` of each result), mean ± sd over seeds.", "",
        table_h3(R, tier), ""])
    fig = figure_h3(R, tier.figures / "h3_gap_drift_vs_beta.png")
    if fig:
        md += [image(fig), ""]
    return md, [fig] if fig else []


def section_h4(R, tier):
    md = section("h4", [
        "", "The same cells at 2× and 4× the steps (the lr schedule stretched with them); the "
        "base length is Table 1's cells, read on seeds 0 and 1 like the others.", "",
        table_h4(R, tier), ""])
    fig = figure_h4(R, tier, tier.figures / "h4_gap_vs_steps.png")
    if fig:
        md += [image(fig), ""]
    return md, [fig] if fig else []


Section = Callable[..., tuple[list[str], list[Path]]]
SECTIONS: dict[str, Section] = {
    "opt-lr": opt.section_lr, "opt-claims": opt.section_claims, "opt-more": opt.section_more,
    "opt-tokens": opt.section_tokens,
    "lr": paper.section_lr, "1": paper.section_1, "2": paper.section_2, "3": paper.section_3,
    "4": paper.section_4, "5": paper.section_5, "6": paper.section_6, "7": paper.section_7,
    "gpu135": paper.section_gpu135,
    "efg": beyond.section_efg, "efg-beta": section_efg_beta,
    "efg-depth": beyond.section_efg_depth, "nag": section_nag, "wpipe": beyond.section_wpipe,
    "h1": section_h1, "h2": why.section_h2, "h3": section_h3, "h4": section_h4,
    "h5": why.section_h5,
    "zero-gap": section_zero_gap,
}


def render(table: str, R, tier) -> tuple[list[str], list[Path]]:
    """The tables.md section of ``table`` and the figures it wrote."""
    return SECTIONS[table](R, tier)
