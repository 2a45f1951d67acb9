"""Every figure of the report, sized for a 700-px text column: 7 in wide at 100 dpi, so one
point of font is about 1.4 px on the page and no text is smaller than 9 pt (legends included).
Each function returns the path it wrote, or None without matplotlib or without data."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from . import protocol
from .plotting import pyplot
from .report_beyond import NAG_LABEL, NAG_MODES, NAG_OPTIMIZERS, nag_cell, nag_sync, run_beta
from .report_common import LABEL, diffs, drift, spectral_drift, vals
from .report_common import tc as _tc
from .report_why import H1_FRACTIONS, H1_SEEDS, H4_SEEDS, h1_cell, t3_edge_fractions

WIDTH_IN = 7.0  # 700 px at DPI
DPI = 100
FONT_PT = 9  # the smallest text on any figure


def _plt():
    """pyplot with the report's sizes on matplotlib's defaults, or None without matplotlib:
    the figures' bytes must not depend on what else the process drew before (a book page or
    another test that changed rcParams)."""
    plt = pyplot()
    if plt is None:
        return None
    plt.rcdefaults()
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10,
                         "legend.fontsize": FONT_PT, "xtick.labelsize": FONT_PT,
                         "ytick.labelsize": FONT_PT, "figure.titlesize": 10})
    return plt


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _mean_sd_point(xs: list[float]) -> tuple[float, float] | None:
    if not xs or not all(map(math.isfinite, xs)):
        return None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def _mean_curve(R, cell):
    recs = [r for r in R.get(cell, {}).values() if r.get("status") == "ok"]
    if not recs:
        return None, None, 0
    steps = recs[0]["curves"]["val_step"]
    ys = [r["curves"]["val_loss"] for r in recs if r["curves"]["val_step"] == steps]
    return steps, [statistics.fmean(c) for c in zip(*ys)], len(ys)


def figures(R, out: Path, pts, tier) -> list[Path]:
    """The figures of the paper's tables (1, 2, 4, 6) into ``out``; the paths written."""
    plt = _plt()
    if plt is None:
        return []
    out.mkdir(parents=True, exist_ok=True)
    made = []
    fig, axes = plt.subplots(3, 2, figsize=(WIDTH_IN, 8), sharex=True)
    for ax, o in zip(axes.flat, _tc.OPTIMIZERS):
        for m, lab in (("sync", "sync"), ("async", "async 2BW"), ("ef", "async + EF")):
            x, y, _ = _mean_curve(R, _tc.name(o, m))
            if x:
                ax.plot(x, y, marker="o", ms=3, label=lab)
        ax.set_title(LABEL[o])
        ax.set_ylabel("val loss")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    for ax in axes[-1]:
        ax.set_xlabel("step")
    made.append(_save(plt, fig, out / "table1_val_curves.png"))

    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.6))
    for o in ("muon", "adamw"):
        xs, ys, es = [], [], []
        for b in _tc.BETAS:
            v = _tc.beta_variant(o, b)
            pt = _mean_sd_point(diffs(R, _tc.name(o, "sync", beta=v),
                                      _tc.name(o, "async", beta=v)))
            if pt:
                xs.append(b)
                ys.append(pt[0])
                es.append(pt[1])
        if xs:
            ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=LABEL[o])
    ax.set_xlabel("momentum β (Muon) / β₁ (AdamW)")
    ax.set_ylabel("val-loss gap async − sync")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    made.append(_save(plt, fig, out / "table2_gap_vs_momentum.png"))

    if "4" in tier.table_order:
        fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.6))
        ref = _tc.deep_name(_tc.DEPTH_OPT, "sync")
        for sched, lab in (("2bw", "PipeDream-2BW"), ("pipedream", "PipeDream")):
            xs, ys = [], []
            for P in _tc.DEPTHS:
                pt = _mean_sd_point(diffs(R, ref, _tc.deep_name(_tc.DEPTH_OPT, sched, P)))
                if pt:
                    xs.append(P)
                    ys.append(pt[0])
            if xs:
                ax.plot(xs, ys, marker="o", label=lab)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(_tc.DEPTHS), [str(P) for P in _tc.DEPTHS])
        ax.set_xlabel("pipeline stages P (log₂ axis)")
        ax.set_ylabel("val-loss gap to sync")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        made.append(_save(plt, fig, out / "table4_depth.png"))

    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.6))
    for x, y, o in pts:
        ax.scatter([x], [y])
        ax.annotate(LABEL[o], (x, y), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("mean relative update drift ρ̄ (async run)")
    ax.set_ylabel("% of the gap EF recovers")
    ax.grid(alpha=0.3)
    made.append(_save(plt, fig, out / "table6_drift_vs_recovered.png"))
    return made


CAPTIONS = {
    "table1_val_curves": "The validation loss of every optimizer, synchronous, delayed (2BW) "
                         "and delayed with EF, seed means.",
    "table2_gap_vs_momentum": "The gap async − sync against the momentum for Muon and AdamW "
                              "(mean ± sd over seeds).",
    "table4_depth": "The gap to the synchronous run against the number of pipeline stages, "
                    "2BW and PipeDream (seed means).",
    "table6_drift_vs_recovered": "The share of the gap EF recovers against the async run's "
                                 "relative update drift, one point per optimizer.",
    "glance": "The validation loss of Muon and AdamW, synchronous, delayed and delayed with EF, "
              "seed means.",
    "efg_share_vs_beta": "The share of Muon's gap that EF and EF(γ*) recover against the "
                         "momentum β (the ratio of the mean gaps with Fieller's 95 % interval; "
                         "a β whose gap is within noise has no share).",
    "nag_depth": "The final validation loss of every cell of the delay-corrections table: bars "
                 "are seed means, dots single seeds, the dashed line the synchronous reference.",
    "gap_vs_lr": "The gap to sync of async and of async + EF against lr/lr* (log₂ axis; mean ± "
                 "sd over seeds 0 and 1), with T3's edge fractions as vertical lines.",
    "h3_gap_drift_vs_beta": "The gap async − sync at the re-tuned lr and at lr* (top) and T2's "
                            "drift of the async run (bottom), against the momentum β.",
    "h4_gap_vs_steps": "The gap to sync of async and of async + EF against the number of "
                       "training steps (seeds 0 and 1).",
}


def image(path: Path) -> str:
    """The Markdown of a figure in tables.md, its caption a sentence (:data:`CAPTIONS`)."""
    return f"![{CAPTIONS.get(path.stem, path.stem)}](figures/{path.name})"


def figure_nag(R, path: Path) -> Path | None:
    """The final val loss of every cell of table nag (bars: seed means; dots: seeds), one
    panel per optimizer, the synchronous reference as a dashed line."""
    scheds = ("2bw", "pipedream")
    cells = {o: [(lab, nag_cell(o, s, m)) for s in scheds for m, lab in NAG_MODES]
             for o in NAG_OPTIMIZERS}
    if not any(vals(R, c) for o in cells for _, c in cells[o]):
        return None
    plt = _plt()
    if plt is None:
        return None
    fig, axes = plt.subplots(len(NAG_OPTIMIZERS), 1, figsize=(WIDTH_IN, 7), squeeze=False)
    for ax, o in zip(axes[:, 0], NAG_OPTIMIZERS):
        lo = []
        for i, (_lab, c) in enumerate(cells[o]):
            v = [x for x in vals(R, c).values() if math.isfinite(x)]
            if v:
                ax.bar(i, statistics.fmean(v), color=f"C{i % 4}", alpha=0.6)
                ax.plot([i] * len(v), v, "k.", ms=5)
                lo += v
        sv = [x for x in vals(R, nag_sync(o)).values() if math.isfinite(x)]
        if sv:
            ax.axhline(statistics.fmean(sv), color="k", ls="--", lw=1, label="sync (P = 2)")
            ax.legend()
            lo += sv
        if not lo:
            ax.text(0.5, 0.5, "no results yet", ha="center", va="center",
                    transform=ax.transAxes)
        else:
            span = max(lo) - min(lo)
            ax.set_ylim(min(lo) - 0.3 * span - 1e-3, max(lo) + 0.15 * span + 1e-3)
        ax.set_xticks(range(len(cells[o])), [lab for lab, _ in cells[o]])
        for g, sched in enumerate(scheds):  # the schedule under its group of bars
            ax.text((g + 0.5) / len(scheds), -0.16, NAG_LABEL[sched], ha="center", va="top",
                    transform=ax.transAxes)
        ax.set_title(f"{LABEL[o]}, deep model, P = {_tc.NAG_P}")
        ax.set_ylabel("final val loss")
        ax.grid(alpha=0.3, axis="y")
    return _save(plt, fig, path)


def figure_gap_vs_lr(R, path: Path) -> Path | None:
    """H1: the gap (async − sync, EF − sync; seeds 0, 1, paired) against lr/lr* per optimizer,
    with T3's edge fractions drawn in; a 2 × 2 grid of panels."""
    plt = _plt()
    if plt is None:
        return None
    opts = _tc.H1_OPTIMIZERS
    fig, axes = plt.subplots(2, (len(opts) + 1) // 2, figsize=(WIDTH_IN, 6.4), squeeze=False)
    for ax, o in zip(axes.flat, opts):
        for m, lab, style in (("async", "async − sync", "-o"), ("ef", "async + EF − sync", "-s")):
            xs, ys, es = [], [], []
            for f in H1_FRACTIONS:
                pt = _mean_sd_point(diffs(R, h1_cell(o, "sync", f), h1_cell(o, m, f), H1_SEEDS))
                if pt:
                    xs.append(f)
                    ys.append(pt[0])
                    es.append(pt[1])
            if xs:
                ax.errorbar(xs, ys, yerr=es, fmt=style, ms=4, capsize=3, label=lab)
        b = run_beta(R, o)
        edge = t3_edge_fractions(b)
        if edge is not None:
            ax.axvline(edge[0], color="gray", ls="--", lw=1, label="T3 edge, no EF")
            ax.axvline(edge[1], color="gray", ls=":", lw=1, label="T3 edge, EF")
        ax.axhline(0.0, color="black", lw=0.5)
        ax.set_xscale("log", base=2)
        ax.set_xlim(min([*(edge or ()), *H1_FRACTIONS]) / 1.5, 1.5)
        ax.set_title(f"{LABEL[o]} (β = {b:g})")
        ax.set_xlabel("lr / lr*")
        ax.set_ylabel("gap to sync")
        ax.grid(alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=2)
        fig.tight_layout(rect=(0, 0.1, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def figure_h3(R, path: Path) -> Path | None:
    """H3, per optimizer (columns): the gap at the re-tuned lr beside Table 2's at lr* (top)
    and T2's drift δ̄ of the async run (bottom), against β; None before any h3 run finished."""
    if not any(c.endswith("-tuned") for c in R):
        return None
    plt = _plt()
    if plt is None:
        return None
    fig, axes = plt.subplots(2, 2, figsize=(WIDTH_IN, 6), sharex=True)
    for col, o in enumerate(("muon", "adamw")):
        for lab, tuned in (("lr re-tuned per β", True), ("lr* for every β", False)):
            xs, ys, es = [], [], []
            for b in _tc.BETAS:
                beta = b if tuned else _tc.beta_variant(o, b)
                s, a = (_tc.name(o, m, beta=beta, tuned=tuned) for m in ("sync", "async"))
                pt = _mean_sd_point(diffs(R, s, a))
                if pt:
                    xs.append(b)
                    ys.append(pt[0])
                    es.append(pt[1])
            if xs:
                axes[0][col].errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=lab)
        xs, ys, es = [], [], []
        for b in _tc.BETAS:
            pt = _mean_sd_point(spectral_drift(R, _tc.name(o, "async", beta=b, tuned=True)))
            if pt:
                xs.append(b)
                ys.append(pt[0])
                es.append(pt[1])
        if xs:
            axes[1][col].errorbar(xs, ys, yerr=es, marker="o", capsize=3, color="C2")
        axes[0][col].set_title(LABEL[o])
        axes[0][col].set_ylabel("gap async − sync")
        axes[1][col].set_ylabel("δ̄ of the async run")
        axes[1][col].set_xlabel("momentum β" if o == "muon" else "β₁")
        for ax in (axes[0][col], axes[1][col]):
            ax.grid(alpha=0.3)
        if axes[0][col].get_legend_handles_labels()[0]:
            axes[0][col].legend()
    return _save(plt, fig, path)


def _plot_series(path: Path, panels, xlabel: str, ylabel: str, logx: bool = False,
                 xticks=None) -> Path | None:
    """One row of panels; ``panels``: [(panel title, [(label, xs, means, errors)])], an error
    a half-width or a (below, above) pair; None without matplotlib or when no panel has a
    point."""
    if not any(xs for _, series in panels for _, xs, _, _ in series):
        return None
    plt = _plt()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(WIDTH_IN, 3.6), squeeze=False)
    for ax, (head, series) in zip(axes[0], panels):
        for lab, xs, ys, es in series:
            if xs:
                yerr = ([[e[0] for e in es], [e[1] for e in es]]
                        if es and isinstance(es[0], tuple) else es)
                ax.errorbar(xs, ys, yerr=yerr, marker="o", capsize=3, label=lab)
        if logx:
            ax.set_xscale("log", base=2)
        if xticks:
            ax.set_xticks(list(xticks), [f"{x:,}" for x in xticks])
        ax.set_title(head)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    return _save(plt, fig, path)


def figure_efg_beta(R, path: Path, tier) -> Path | None:
    """The share of Muon's gap that EF and EF(γ*) recover, against β: the ratio of means with
    Fieller's 95 % interval (``protocol.fieller_share``), as every share in the tables; a β
    whose gap is within noise has no share and no point."""
    series = []
    for m, lab in (("ef", "EF"), ("efg", "EF(γ*)")):
        xs, ys, es = [], [], []
        for b in _tc.BETAS:
            v = _tc.beta_variant("muon", b)
            cells = [vals(R, _tc.name("muon", x, beta=v)) for x in ("sync", "async", m)]
            seeds = set(cells[0]) & set(cells[1]) & set(cells[2])
            if not all(math.isfinite(c[k]) for c in cells for k in seeds):
                continue
            sh = protocol.fieller_share(*cells)
            if sh.share is not None and sh.lo is not None:
                xs.append(b)
                ys.append(sh.share)
                es.append((sh.share - sh.lo, sh.hi - sh.share))
        series.append((lab, xs, ys, es))
    return _plot_series(path, [(f"Muon ({tier.name} tier)", series)], "momentum β",
                        "% of the gap recovered")


def figure_h4(R, tier, path: Path) -> Path | None:
    """H4: the gap to sync of async and async + EF against the run length (seeds 0, 1)."""
    panels = []
    lengths = [n * tier.steps for n in _tc.H4_LENGTHS]
    for o in ("adamw", "muon"):
        series = []
        for m, lab in (("async", "async − sync"), ("ef", "async + EF − sync")):
            xs, ys, es = [], [], []
            for n in _tc.H4_LENGTHS:
                s, c = (_tc.h4_name(o, x, n, tier.steps) for x in ("sync", m))
                pt = _mean_sd_point(diffs(R, s, c, H4_SEEDS))
                if pt:
                    xs.append(n * tier.steps)
                    ys.append(pt[0])
                    es.append(pt[1])
            series.append((lab, xs, ys, es))
        panels.append((LABEL[o], series))
    return _plot_series(path, panels, "training steps (log₂ axis)", "gap to sync", logx=True,
                        xticks=lengths)


def glance_figure(R, path: Path) -> Path | None:
    """Validation loss of Muon and AdamW: synchronous, one-step delayed (2BW) and delayed +
    EF, seed means."""
    plt = _plt()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH_IN, 3.4), sharey=False)
    for ax, o in zip(axes, ("muon", "adamw")):
        for mode, lab, style in (("sync", "synchronous", "-"), ("async", "async (2BW)", "--"),
                                 ("ef", "async + EF", "-.")):
            steps, ys, n = _mean_curve(R, _tc.name(o, mode))
            if steps:
                ax.plot(steps, ys, style, marker="o", ms=3, label=f"{lab}, n={n}")
        ax.set_title(LABEL[o])
        ax.set_xlabel("step")
        ax.set_ylabel("val loss (seed mean)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    return _save(plt, fig, path)


__all__ = ["CAPTIONS", "DPI", "FONT_PT", "WIDTH_IN", "drift", "figure_efg_beta",
           "figure_gap_vs_lr", "figure_h3", "figure_h4", "figure_nag", "figures",
           "glance_figure"]
