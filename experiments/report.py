r"""Every table (Markdown, ``tables.md``) and figure (PNG, ``figures/``) of the CPU-scale
reproduction, from the results JSON only (``<tier>/results/<cell>-seed<k>.json``, see
sweep.py).

Definitions (per seed s, paired: the same seed means the same initialisation and data order):

.. math::
    \text{gap}_s = L^\text{async}_s - L^\text{sync}_s, \qquad
    \text{recovered} = 100\,\frac{\bar L^\text{async} - \bar L^\text{corr}}
                                 {\bar L^\text{async} - \bar L^\text{sync}}\ \%,

with :math:`L` the final validation loss and bars the mean over the seeds present in all the
cells compared. Values are mean ± sample standard deviation over seeds (n shown). Drift:
:math:`\bar\rho = \text{mean}_t \|u^{(t)} - u^{(t-1)}\| / \|u^{(t)}\|` of the async run (the
quantity of theorem T2, ``theory/error_feedback.py``).

Usage: ``python experiments/report.py [--tier tiny|small|gpu] [--results DIR] [--out DIR]``;
every tier writes ``experiments/<tier>/tables.md`` and ``experiments/<tier>/figures/`` from
``experiments/<tier>/results/`` (a :class:`sweep.Tier`, passed explicitly to every table that
depends on the tier).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import sweep  # noqa: E402  (cell names and grids; imports no torch)

PAPER_360M = {  # the paper's 360M results, final val loss (sync, async, async+EF)
    "muon": (2.578, 2.590, 2.583),
    "adamw": (2.612, 2.890, 2.640),
    "soap": (2.581, 2.608, 2.590),
    "adan": (2.641, 2.651, None),
}
LABEL = {"adamw": "AdamW", "muon": "Muon", "soap": "SOAP", "adan": "Adan", "lion": "Lion",
         "mars": "MARS"}
MIT_LABEL = {"async": "async (no mitigation)", "syncstart": "sync start (10 %)",
             "cooldown": "sync cooldown (10 %)", "taylor": "Taylor (λ = 0.1)",
             "ef": "EF", "efcooldown": "EF + sync cooldown"}


def load_results(results: Path) -> dict[str, dict[int, dict]]:
    """cell → seed → record (all statuses)."""
    out: dict[str, dict[int, dict]] = {}
    for f in sorted(results.glob("*.json")):
        try:
            r = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if "cell" in r and "seed" in r:
            out.setdefault(r["cell"], {})[int(r["seed"])] = r
    return out


def _val(rec: dict) -> float:
    v = rec.get("final", {}).get("val_loss")
    return v if (rec.get("status") == "ok" and v is not None) else math.inf


def vals(R, cell: str, seeds=None) -> dict[int, float]:
    """seed → final val loss (inf if diverged) of ``cell``."""
    got = R.get(cell, {})
    return {s: _val(r) for s, r in got.items() if seeds is None or s in seeds}


def fmt(xs: list[float], digits: int = 3) -> str:
    """mean ± std (n); '—' when empty; 'diverged' when any run diverged."""
    if not xs:
        return "—"
    if any(not math.isfinite(x) for x in xs):
        return f"diverged ({sum(not math.isfinite(x) for x in xs)}/{len(xs)})"
    m = statistics.fmean(xs)
    if len(xs) == 1:
        return f"{m:.{digits}f} (n=1)"
    return f"{m:.{digits}f} ± {statistics.stdev(xs):.{digits}f} (n={len(xs)})"


def paired(R, a: str, b: str) -> tuple[list[float], list[float]]:
    """Values of cells a and b over the seeds both have."""
    va, vb = vals(R, a), vals(R, b)
    common = sorted(set(va) & set(vb))
    return [va[s] for s in common], [vb[s] for s in common]


def gap(R, base: str, other: str) -> list[float]:
    """Per-seed other − base (paired)."""
    x, y = paired(R, base, other)
    return [b - a for a, b in zip(x, y)]


def recovered(R, sync: str, asyn: str, corr: str) -> float | None:
    """% of the async gap that ``corr`` recovers, over seeds present in all three cells."""
    vs, va, vc = vals(R, sync), vals(R, asyn), vals(R, corr)
    common = sorted(set(vs) & set(va) & set(vc))
    if not common:
        return None
    s, a, c = (statistics.fmean(v[k] for k in common) for v in (vs, va, vc))
    if not all(math.isfinite(x) for x in (s, a, c)) or abs(a - s) < 1e-12:
        return None
    return 100.0 * (a - c) / (a - s)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f} %"


def drift(R, cell: str) -> list[float]:
    return [r["drift"]["mean"] for r in R.get(cell, {}).values()
            if r.get("status") == "ok" and r.get("drift", {}).get("mean") is not None]


def lr_of(R, cell: str) -> str:
    for r in R.get(cell, {}).values():
        return f"{r['config']['optimizer']['lr']:g}"
    return "—"


# -- tables ------------------------------------------------------------------------------------
def table_lr(R, tier: sweep.Tier) -> str:
    k = max(len(g) for g in tier.lr_grid.values())
    lines = ["| optimizer | " + " | ".join(f"lr #{i + 1}" for i in range(k)) + " | chosen |",
             "| --- " * (k + 2) + "|"]
    for o in sweep.OPTIMIZERS:
        cells, scores = [], []
        for lr in tier.lr_grid[o]:
            v = list(vals(R, f"lr-{o}-{lr:g}").values())
            cells.append(f"{lr:g}: {fmt(v)}")
            if v:
                scores.append((v[0], lr))
        cells += [""] * (k - len(cells))
        best = f"{min(scores)[1]:g}" if len(scores) == len(tier.lr_grid[o]) else "—"
        lines.append(f"| {LABEL[o]} | " + " | ".join(cells) + f" | {best} |")
    return "\n".join(lines)


def table1(R) -> tuple[str, list[tuple[str, float]]]:
    lines = ["| optimizer | lr | sync | async (2BW, τ=1) | async + EF | gap async−sync | "
             "gap EF−sync | EF recovers |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    order = []
    for o in sweep.OPTIMIZERS:
        s, a, e = f"{o}-sync", f"{o}-async", f"{o}-ef"
        g = gap(R, s, a)
        lines.append(f"| {LABEL[o]} | {lr_of(R, s)} | {fmt(list(vals(R, s).values()))} | "
                     f"{fmt(list(vals(R, a).values()))} | {fmt(list(vals(R, e).values()))} | "
                     f"{fmt(g)} | {fmt(gap(R, s, e))} | {_pct(recovered(R, s, a, e))} |")
        if g and all(math.isfinite(x) for x in g):
            order.append((o, statistics.fmean(g)))
    order.sort(key=lambda t: -t[1])
    return "\n".join(lines), order


def table1_over_time(R) -> str:
    """Gap async − sync of the validation loss at every evaluation step (paired seeds)."""
    steps = None
    rows = []
    for o in sweep.OPTIMIZERS:
        rs, ra = R.get(f"{o}-sync", {}), R.get(f"{o}-async", {})
        common = [k for k in sorted(set(rs) & set(ra))
                  if rs[k].get("status") == "ok" and ra[k].get("status") == "ok"]
        if not common:
            continue
        steps = steps or rs[common[0]]["curves"]["val_step"]
        gaps = [statistics.fmean(ra[k]["curves"]["val_loss"][i] - rs[k]["curves"]["val_loss"][i]
                                 for k in common) for i in range(len(steps))]
        rows.append(f"| {LABEL[o]} (n={len(common)}) | " + " | ".join(f"{g:+.3f}" for g in gaps)
                    + " |")
    if not rows:
        return "—"
    head = "| optimizer | " + " | ".join(f"step {s}" for s in steps) + " |"
    return "\n".join([head, "| --- " * (len(steps) + 1) + "|", *rows])


def table_flatness(R) -> str:
    """How flat the synchronous validation curve is at the end: the drop over the last fifth
    of the steps and over the last evaluation interval, next to the drop over the whole run."""
    lines = ["| optimizer | runs | val loss at 80 % of steps | final | drop over the last 20 % | "
             "drop over the last interval | drop over the run | 2× steps (seed 0) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    any_row = False
    for o in sweep.OPTIMIZERS:
        recs = [r for r in R.get(f"{o}-sync", {}).values() if r.get("status") == "ok"
                and len(r["curves"]["val_step"]) >= 3]
        if not recs:
            continue
        any_row = True
        steps = recs[0]["curves"]["val_step"]
        i80 = min(range(len(steps)), key=lambda i: abs(steps[i] - 0.8 * steps[-1]))
        v80 = [r["curves"]["val_loss"][i80] for r in recs]
        fin = [r["curves"]["val_loss"][-1] for r in recs]
        last = [r["curves"]["val_loss"][-2] - r["curves"]["val_loss"][-1] for r in recs]
        run = [r["curves"]["val_loss"][0] - r["curves"]["val_loss"][-1] for r in recs]
        long = vals(R, f"{o}-sync-long").get(0)
        short = vals(R, f"{o}-sync").get(0)
        twice = "—" if long is None or short is None else (
            f"{long:.3f} ({long - short:+.3f} vs {short:.3f})")
        lines.append(f"| {LABEL[o]} | {len(recs)} | {fmt(v80)} | {fmt(fin)} | "
                     f"{fmt([a - b for a, b in zip(v80, fin)])} | {fmt(last)} | "
                     f"{fmt(run)} (from step {steps[0]}) | {twice} |")
    return "\n".join(lines) if any_row else "—"


def table_gpu(R) -> str:
    """The GPU runbook's cells (smollm-135m), when their results exist."""
    lines = ["| optimizer | sync | async (2BW) | async + EF | gap | EF recovers | tokens/run |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for o in ("muon", "adamw"):
        s, a, e = (f"gpu135-{o}-{m}" for m in ("sync", "async", "ef"))
        tok = next((f"{r['final'].get('tokens', 0):,}" for r in R.get(s, {}).values()), "—")
        lines.append(f"| {LABEL[o]} | {fmt(list(vals(R, s).values()))} | "
                     f"{fmt(list(vals(R, a).values()))} | {fmt(list(vals(R, e).values()))} | "
                     f"{fmt(gap(R, s, a))} | {_pct(recovered(R, s, a, e))} | {tok} |")
    return "\n".join(lines)


def table_paper() -> str:
    lines = ["| optimizer | sync | async | async + EF | gap | EF recovers |",
             "| --- | --- | --- | --- | --- | --- |"]
    for o, (s, a, e) in PAPER_360M.items():
        rec = f"{100 * (a - e) / (a - s):.0f} %" if e is not None else "—"
        lines.append(f"| {LABEL[o]} | {s} | {a} | {e if e is not None else '—'} | "
                     f"{a - s:+.3f} | {rec} |")
    return "\n".join(lines)


def _sync_async(R, s: str, a: str) -> str:
    """``sync | async | gap`` cells of a table row (cells ``s`` and ``a``, gap paired by seed)."""
    return (f"{fmt(list(vals(R, s).values()))} | {fmt(list(vals(R, a).values()))} | "
            f"{fmt(gap(R, s, a))} |")


def table2(R) -> str:
    lines = ["| optimizer | β | sync | async | gap async−sync |", "| --- | --- | --- | --- | --- |"]
    for o in ("muon", "adamw"):
        for b in sweep.BETAS:
            suf = "" if b == sweep.DEFAULT_BETA[o] else f"-beta{b:g}"
            s, a = f"{o}-sync{suf}", f"{o}-async{suf}"
            lines.append(f"| {LABEL[o]} ({'momentum' if o == 'muon' else 'β₁'}) | {b:g} | "
                         + _sync_async(R, s, a))
    return "\n".join(lines)


def table3(R, tier: sweep.Tier) -> str:
    lines = ["| optimizer | variant | val loss | gap to sync | share of the gap recovered |",
             "| --- | --- | --- | --- | --- |"]
    for o in ("adamw", "muon"):
        s = f"{o}-sync"
        lines.append(f"| {LABEL[o]} | sync (reference) | {fmt(list(vals(R, s).values()))} "
                     "| 0 | — |")
        for k in ("async", *tier.mitigations):
            c = f"{o}-{k}"
            rec = "0 % (by definition)" if k == "async" else _pct(
                recovered(R, s, f"{o}-async", c))
            lines.append(f"| {LABEL[o]} | {MIT_LABEL[k]} | {fmt(list(vals(R, c).values()))} | "
                         f"{fmt(gap(R, s, c))} | {rec} |")
    return "\n".join(lines)


def table4(R) -> str:
    lines = [f"Reference (synchronous, {LABEL[sweep.DEPTH_OPT]}): "
             f"{fmt(list(vals(R, 'deep-sync').values()))}", "",
             "| P | 2BW (τ=1 every stage) | gap | PipeDream (τ_s = P−1−s) | gap | max delay |",
             "| --- | --- | --- | --- | --- | --- |"]
    for P in sweep.DEPTHS:
        b, p = f"deep-2bw-P{P}", f"deep-pipedream-P{P}"
        lines.append(f"| {P} | {fmt(list(vals(R, b).values()))} | {fmt(gap(R, 'deep-sync', b))} "
                     f"| {fmt(list(vals(R, p).values()))} | {fmt(gap(R, 'deep-sync', p))} "
                     f"| {P - 1} |")
    return "\n".join(lines)


def table5(R, tier: sweep.Tier) -> str:
    o = sweep.BATCH_OPT
    lines = ["| batch (sequences) | tokens/step | sync | async | gap async−sync |",
             "| --- | --- | --- | --- | --- |"]
    seq = tier.seq_len
    for b in sweep.BATCHES:
        suf = "" if b == sweep.BASE_BATCH else f"-bs{b}"
        s, a = f"{o}-sync{suf}", f"{o}-async{suf}"
        lines.append(f"| {b} | {b * seq} | " + _sync_async(R, s, a))
    return "\n".join(lines)


def table7(R) -> str:
    lines = ["| optimizer | lr | sync | async | async + EF | gap async−sync | EF recovers |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lower = {"adamw": 0.003, "muon": 0.01}
    for o in ("adamw", "muon"):
        for suf, lr in (("", None), (f"-lr{lower[o]:g}", lower[o])):
            s, a, e = f"{o}-sync{suf}", f"{o}-async{suf}", f"{o}-ef{suf}"
            lab = lr_of(R, s) if lr is None else f"{lr:g}"
            lines.append(f"| {LABEL[o]} | {lab} | {fmt(list(vals(R, s).values()))} | "
                         f"{fmt(list(vals(R, a).values()))} | {fmt(list(vals(R, e).values()))} "
                         f"| {fmt(gap(R, s, a))} | {_pct(recovered(R, s, a, e))} |")
    return "\n".join(lines)


LMO_METHODS = {"muon": "spectral-norm ball", "lion": "ℓ∞ ball (sign)"}


def table6(R) -> tuple[str, list[tuple[float, float, str]]]:
    lines = ["| optimizer | drift ρ̄ (async) | drift ρ̄ (async+EF) | gap async−sync | "
             "EF recovers | T2 applies (LMO method) | T2: EF helps at the virtual point "
             "(ρ̄ < 1) | T2: EF helps at the iterate (ρ̄ < 1/2, exact LMO) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    pts = []
    for o in sweep.OPTIMIZERS:
        s, a, e = f"{o}-sync", f"{o}-async", f"{o}-ef"
        da, de = drift(R, a), drift(R, e)
        rec = recovered(R, s, a, e)
        m = statistics.fmean(da) if da else None
        v1 = "—" if m is None else ("yes" if m < 1 else "no")
        v2 = "—" if m is None else ("yes" if m < 0.5 else "no")
        lines.append(f"| {LABEL[o]} | {fmt(da)} | {fmt(de)} | {fmt(gap(R, s, a))} | "
                     f"{_pct(rec)} | {LMO_METHODS.get(o, 'no')} | {v1} | {v2} |")
        if da and rec is not None:
            pts.append((statistics.fmean(da), rec, o))
    if len(pts) >= 3:
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        lines += ["", f"Pearson correlation of drift and % recovered over {len(pts)} "
                  f"optimizers: {_pearson(xs, ys):+.2f}; Spearman: "
                  f"{_pearson(_ranks(xs), _ranks(ys)):+.2f}."]
    return "\n".join(lines), pts


def _ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    for k, i in enumerate(order):
        r[i] = float(k)
    return r


def _pearson(xs, ys) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    return sxy / (sx * sy) if sx and sy else float("nan")


def _tokens_scale(overrides: dict, tier: sweep.Tier) -> float:
    """A cell's training tokens relative to the tier's base run (steps x batch)."""
    steps = float(overrides.get("train.steps", tier.steps))
    batch = float(overrides.get("train.batch_size", sweep.BASE_BATCH))
    return steps / tier.steps * batch / sweep.BASE_BATCH


def progress(R, tier: sweep.Tier) -> str:
    """Finished vs planned runs per table, and the run time still to spend: each run to do
    costs the median wall time per base-length run of its optimizer so far (scaled by its
    tokens; the median over all optimizers where none has finished)."""
    per_opt: dict[str, list[float]] = {}
    walls = []
    for recs in R.values():
        for r in recs.values():
            w = r.get("final", {}).get("wall_s")
            if not w or r.get("reused_from"):
                continue
            walls.append(w)
            cfg = r.get("overrides", {})
            per_opt.setdefault(cfg.get("optimizer.name", "?"), []).append(
                w / _tokens_scale(cfg, tier))
    med_all = statistics.median(w for ws in per_opt.values() for w in ws) if per_opt else None
    lines = ["| table | finished runs | planned runs | run time to do |",
             "| --- | --- | --- | --- |"]
    total_left = 0.0
    for t in tier.table_order:
        todo = sweep.plan([t], None, None, tier)
        left = [c for c, s in todo if s not in R.get(c.name, {})]
        est = sum(statistics.median(per_opt.get(c.opt) or [med_all or 0.0])
                  * _tokens_scale(c.overrides, tier) for c in left) if med_all else 0.0
        total_left += est
        lines.append(f"| {t} | {len(todo) - len(left)} | {len(todo)} | "
                     f"{est / 3600:.1f} h |")
    if walls:
        lines += ["", f"Wall time per run: median {statistics.median(walls):.1f} s, "
                  f"min {min(walls):.1f} s, max {max(walls):.1f} s over {len(walls)} trained "
                  f"runs (total {sum(walls) / 60:.1f} min). Still to do: ≈ "
                  f"{total_left / 3600:.1f} h of run time (two runs side by side on two cores "
                  f"share it, ≈ {total_left / 7200:.1f} h of wall clock; an upper estimate: a "
                  "planned cell identical to a finished run is reused, not trained)."]
    return "\n".join(lines)


# -- figures -------------------------------------------------------------------------------------
def figures(R, out: Path, pts, tier: sweep.Tier) -> list[Path]:
    """PNG figures of ``tier``'s tables into ``out``; returns the paths written (none without
    matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out.mkdir(parents=True, exist_ok=True)
    made = []

    def mean_curve(cell):
        recs = [r for r in R.get(cell, {}).values() if r.get("status") == "ok"]
        if not recs:
            return None, None
        steps = recs[0]["curves"]["val_step"]
        ys = [r["curves"]["val_loss"] for r in recs if r["curves"]["val_step"] == steps]
        return steps, [statistics.fmean(c) for c in zip(*ys)]

    fig, axes = plt.subplots(2, 3, figsize=(12, 7), sharex=True)
    for ax, o in zip(axes.flat, sweep.OPTIMIZERS):
        for m, lab in (("sync", "sync"), ("async", "async 2BW"), ("ef", "async + EF")):
            x, y = mean_curve(f"{o}-{m}")
            if x:
                ax.plot(x, y, marker="o", ms=3, label=lab)
        ax.set_title(LABEL[o])
        ax.set_xlabel("step")
        ax.set_ylabel("val loss (seed mean)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    made.append(out / "table1_val_curves.png")
    fig.savefig(made[-1], dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 4))
    for o in ("muon", "adamw"):
        xs, ys, es = [], [], []
        for b in sweep.BETAS:
            suf = "" if b == sweep.DEFAULT_BETA[o] else f"-beta{b:g}"
            g = gap(R, f"{o}-sync{suf}", f"{o}-async{suf}")
            if g and all(math.isfinite(v) for v in g):
                xs.append(b)
                ys.append(statistics.fmean(g))
                es.append(statistics.stdev(g) if len(g) > 1 else 0.0)
        if xs:
            ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=LABEL[o])
    ax.set_xlabel("momentum β (Muon) / β₁ (AdamW)")
    ax.set_ylabel("val-loss gap async − sync")
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    made.append(out / "table2_gap_vs_momentum.png")
    fig.savefig(made[-1], dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 4))
    for sched, lab in ((("2bw", "PipeDream-2BW"), ("pipedream", "PipeDream"))
                       if "4" in tier.table_order else ()):
        xs, ys = [], []
        for P in sweep.DEPTHS:
            g = gap(R, "deep-sync", f"deep-{sched}-P{P}")
            if g and all(math.isfinite(v) for v in g):
                xs.append(P)
                ys.append(statistics.fmean(g))
        if xs:
            ax.plot(xs, ys, marker="o", label=lab)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("pipeline stages P")
    ax.set_ylabel("val-loss gap to sync")
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    if "4" in tier.table_order:
        made.append(out / "table4_depth.png")
        fig.savefig(made[-1], dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 4))
    for x, y, o in pts:
        ax.scatter([x], [y])
        ax.annotate(LABEL[o], (x, y), textcoords="offset points", xytext=(4, 4))
    ax.axvline(1.0, ls="--", c="gray", lw=0.8)
    ax.set_xlabel("mean relative update drift ρ̄ (async run)")
    ax.set_ylabel("% of the gap EF recovers")
    fig.tight_layout()
    made.append(out / "table6_drift_vs_recovered.png")
    fig.savefig(made[-1], dpi=90)
    plt.close(fig)
    return made


# -- numbers quoted in prose ---------------------------------------------------------------------
# A number in a verdict (experiments/README.md) is written as <!--n:KEY-->VALUE<!--/n-->: the
# comment is invisible on GitHub, the book replaces VALUE by number(KEY) when it is built, and
# tests/test_docs_numbers.py fails when a typed VALUE differs from number(KEY). Refresh the
# typed values with `python experiments/report.py --fill-readme`.
NUMBER_RE = re.compile(r"<!--n:([^>]*?)-->(.*?)<!--/n-->", re.S)
_R_CACHE: dict[str, dict] = {}


def _results_of(tier: str) -> dict:
    if tier not in _R_CACHE:
        _R_CACHE[tier] = load_results(sweep.get_tier(tier).results)
    return _R_CACHE[tier]


def _mean_sd(xs: list[float], digits: int, signed: bool, sd: bool = True) -> str:
    if not xs:
        return "—"
    if any(not math.isfinite(x) for x in xs):
        return "diverged"
    m = statistics.fmean(xs)
    head = f"{m:+.{digits}f}" if signed else f"{m:.{digits}f}"
    if not sd or len(xs) < 2:
        return head
    return f"{head} ± {statistics.stdev(xs):.{digits}f}"


def _recovered_seed(R, seed: int, s: str, a: str, c: str) -> float | None:
    v = [vals(R, x).get(seed) for x in (s, a, c)]
    if any(x is None or not math.isfinite(x) for x in v) or abs(v[1] - v[0]) < 1e-12:
        return None
    return 100.0 * (v[1] - v[2]) / (v[1] - v[0])


def _minus(text: str) -> str:
    """Typographic minus, and no negative zero ("−0 %" reads as a loss)."""
    if re.fullmatch(r"-0(\.0+)?( %)?", text):
        text = text[1:]
    return text.replace("-", "−")


def number(key: str) -> str:
    """The current value of a number quoted in prose, from the result files only.

    ``KEY`` is ``tier/kind/args`` with an optional ``:digits``; cells are result-cell names:

    - ``count`` — number of result files of the tier; ``n/C`` — seeds of cell C;
    - ``loss/C``, ``lossmean/C`` — final validation loss of C, mean ± std (or the mean);
    - ``gap/A/B``, ``gapmean/A/B`` — paired gap B − A, signed;
    - ``gapseed/k/A/B`` — the gap of seed k; ``lossseed/k/C`` — the loss of seed k;
      ``diffseed/k/A/B`` — A − B in seed k, unsigned; ``gapat/STEP/A/B`` — the seed-mean gap of the
      validation curves at evaluation step STEP;
    - ``rec/S/A/C`` — the share of the gap A − S that C recovers, "NN %"; ``recnum/S/A/C``
      the same without the unit; ``recseed/k/S/A/C`` that share for seed k;
    - ``drift/C``, ``driftmean/C`` — mean relative update drift ρ̄ (default 2 digits);
    - ``pearson``, ``spearman`` — drift against share recovered over the optimizers (Table 6);
    - ``flatdrop/C`` — validation-loss drop over the last 20 % of the steps, mean ± std;
    - ``paper/gap/O``, ``paper/rec/O`` — the paper's 360M gap and EF share (``PAPER_360M``).
    """
    return _minus(_number(key))


def _number(key: str) -> str:
    body, _, dig = key.partition(":")
    tier, kind, *args = body.split("/")
    if tier == "paper":  # the paper's 360M numbers (PAPER_360M), quoted beside ours
        s_, a_, e_ = PAPER_360M[args[0]]
        if kind == "gap":
            return f"{a_ - s_:+.3f}"
        if kind == "rec":
            return "—" if e_ is None else f"{100 * (a_ - e_) / (a_ - s_):.0f} %"
        raise KeyError(f"unknown paper number {key!r}")
    R = _results_of(tier)
    d = int(dig) if dig else None
    if kind == "count":
        return str(sum(len(v) for v in R.values()))
    if kind == "n":
        return str(len(vals(R, args[0])))
    if kind in ("loss", "lossmean"):
        return _mean_sd(list(vals(R, args[0]).values()), d or 3, False, kind == "loss")
    if kind in ("gap", "gapmean"):
        return _mean_sd(gap(R, args[0], args[1]), d or 3, True, kind == "gap")
    if kind == "gapseed":
        a, b = vals(R, args[1]).get(int(args[0])), vals(R, args[2]).get(int(args[0]))
        return "—" if a is None or b is None else f"{b - a:+.{d or 3}f}"
    if kind == "lossseed":
        v = vals(R, args[1]).get(int(args[0]))
        return "—" if v is None else f"{v:.{d or 3}f}"
    if kind == "diffseed":
        a, b = vals(R, args[1]).get(int(args[0])), vals(R, args[2]).get(int(args[0]))
        return "—" if a is None or b is None else f"{a - b:.{d or 3}f}"
    if kind == "gapat":
        step, a, b = int(args[0]), args[1], args[2]
        ra, rb = R.get(a, {}), R.get(b, {})
        gaps = []
        for k in sorted(set(ra) & set(rb)):
            ca, cb = ra[k]["curves"], rb[k]["curves"]
            if step in ca["val_step"] and step in cb["val_step"]:
                gaps.append(cb["val_loss"][cb["val_step"].index(step)]
                            - ca["val_loss"][ca["val_step"].index(step)])
        return _mean_sd(gaps, d or 2, True, False)
    if kind in ("rec", "recnum"):
        x = recovered(R, *args)
        if x is None:
            return "—"
        return f"{x:.{d or 0}f}" + (" %" if kind == "rec" else "")
    if kind == "recseed":
        x = _recovered_seed(R, int(args[0]), *args[1:])
        return "—" if x is None else f"{x:.{d or 0}f}"
    if kind in ("drift", "driftmean"):
        return _mean_sd(drift(R, args[0]), d or 2, False, kind == "drift")
    if kind in ("pearson", "spearman"):
        pts = table6(R)[1]
        xs, ys = [q[0] for q in pts], [q[1] for q in pts]
        if kind == "spearman":
            xs, ys = _ranks(xs), _ranks(ys)
        return f"{_pearson(xs, ys):+.{d or 2}f}"
    if kind == "flatdrop":
        recs = [r for r in R.get(args[0], {}).values() if r.get("status") == "ok"]
        drops = []
        for r in recs:
            steps, vl = r["curves"]["val_step"], r["curves"]["val_loss"]
            i80 = min(range(len(steps)), key=lambda i: abs(steps[i] - 0.8 * steps[-1]))
            drops.append(vl[i80] - vl[-1])
        return _mean_sd(drops, d or 3, False, True)
    raise KeyError(f"unknown number kind {kind!r} in {key!r}")


def fill_numbers(text: str, keep_markers: bool = False) -> str:
    """``text`` with every ``<!--n:KEY-->VALUE<!--/n-->`` replaced by the current
    :func:`number` (markers kept around it when ``keep_markers``)."""
    def repl(m):
        value = number(m.group(1))
        return f"<!--n:{m.group(1)}-->{value}<!--/n-->" if keep_markers else value
    return NUMBER_RE.sub(repl, text)


def stale_numbers(text: str) -> list[tuple[str, str, str]]:
    """``(key, typed, current)`` for every marked number whose typed value is not current."""
    out = []
    for m in NUMBER_RE.finditer(text):
        current = number(m.group(1))
        if m.group(2) != current:
            out.append((m.group(1), m.group(2), current))
    return out


# -- results at a glance (README and the book's first page) --------------------------------------
GLANCE_OPTIMIZERS = ("muon", "adamw", "soap")


def glance_table(tier: str = "small", verdicts: str = "") -> str:
    """Five lines: per optimizer, our gap async − sync and EF's share of it next to the
    paper's (360M). Cells are marked numbers (see :func:`number`), so the table can be pasted
    into Markdown that the tests check; ``verdicts`` is a link target for the last column."""
    def m(key):
        return f"<!--n:{key}-->{number(key)}<!--/n-->"
    lines = [f"| optimizer | gap async − sync (ours, `{tier}`) | gap (paper, 360M) | "
             "EF recovers (ours) | EF recovers (paper) |",
             "| --- | --- | --- | --- | --- |"]
    for o in GLANCE_OPTIMIZERS:
        s_, a_, e_ = f"{o}-sync", f"{o}-async", f"{o}-ef"
        lines.append(f"| {LABEL[o]} | {m(f'{tier}/gap/{s_}/{a_}')} | {m(f'paper/gap/{o}')} | "
                     f"{m(f'{tier}/rec/{s_}/{a_}/{e_}')} | {m(f'paper/rec/{o}')} |")
    return "\n".join(lines)


def glance_figure(R, path: Path) -> Path | None:
    """Validation loss of Muon and AdamW: synchronous, one-step delayed (2BW) and delayed +
    EF, seed means; ``None`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=False)
    for ax, o in zip(axes, ("muon", "adamw")):
        for mode, lab, style in (("sync", "synchronous", "-"),
                                 ("async", "async (2BW, τ = 1)", "--"),
                                 ("ef", "async + EF", "-.")):
            recs = [r for r in R.get(f"{o}-{mode}", {}).values() if r.get("status") == "ok"]
            if not recs:
                continue
            steps = recs[0]["curves"]["val_step"]
            ys = [r["curves"]["val_loss"] for r in recs if r["curves"]["val_step"] == steps]
            ax.plot(steps, [statistics.fmean(c) for c in zip(*ys)], style, marker="o", ms=3,
                    label=f"{lab} (n={len(ys)})")
        ax.set_title(LABEL[o])
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss (seed mean)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("the `small` tier: 4.0M parameters, 500 steps × 2,048 tokens, 3 seeds "
                 "(experiments/README.md)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def table_gpu_tier(R) -> str:
    """The gpu tier's Table 1: sync / async / async + EF / async + EF(γ*) per optimizer."""
    lines = ["| optimizer | sync | async (2BW) | async + EF | async + EF(γ*) | gap async−sync "
             "| EF recovers | EF(γ*) recovers |", "|" + " --- |" * 8]
    for o in sweep.GPU_OPTIMIZERS:
        s, a, e, g = (f"{o}-{m}" for m in sweep.GPU_MODES)
        lines.append(f"| {LABEL[o]} | " + " | ".join(fmt(list(vals(R, c).values()))
                                                     for c in (s, a, e, g))
                     + f" | {fmt(gap(R, s, a))} | {_pct(recovered(R, s, a, e))} | "
                     f"{_pct(recovered(R, s, a, g))} |")
    return "\n".join(lines)


def table_gpu_speed(R) -> str:
    """Per gpu-tier cell: runs, tokens per run and per parameter, steady tokens/s, MFU, first
    step (compile) and wall time, medians over seeds."""
    lines = ["| cell | runs | tokens/run | tokens/param | steady tokens/s | MFU | first step | "
             "wall |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for o in sweep.GPU_OPTIMIZERS:
        for m in sweep.GPU_MODES:
            recs = [r for r in R.get(f"{o}-{m}", {}).values() if r.get("status") == "ok"]
            if not recs:
                continue

            def med(k, recs=recs):
                xs = [r["final"][k] for r in recs if r["final"].get(k) is not None]
                return statistics.median(xs) if xs else None
            f = recs[0]["final"]
            tps, mfu, first = med("steady_tokens_per_s"), med("mfu"), med("first_step_s")
            lines.append(
                f"| {o}-{m} | {len(recs)} | {f.get('tokens', 0):,} | "
                f"{f.get('tokens', 0) / f['params']:.1f} | "
                f"{'—' if tps is None else f'{tps:,.0f}'} | "
                f"{'—' if mfu is None else f'{100 * mfu:.1f} %'} | "
                f"{'—' if first is None else f'{first:.1f} s'} | {med('wall_s'):.0f} s |"
                if f.get("params") else f"| {o}-{m} | {len(recs)} | — | — | — | — | — | — |")
    return "\n".join(lines)


def build_gpu_report(tier: sweep.Tier) -> Path:
    """``tier.tables`` of the gpu tier (experiments/gpu/run.sh)."""
    R = load_results(tier.results)
    manifest = HERE / "gpu" / "corpus-manifest.json"
    corpus = "—"
    if manifest.is_file():
        m = json.loads(manifest.read_text())
        import hashlib

        h = hashlib.sha256("".join(x["sha256"] for x in m["shards"]).encode()).hexdigest()
        corpus = (f"`{m['corpus']}/{m['builder']}/{h[:12]}` "
                  f"({m['totals']['train_tokens']:,} training tokens)")
    md = ["# Tables of the GPU tier", "",
          "Generated by `python experiments/report.py --tier gpu` from "
          "`experiments/gpu/results/*.json` only (written by `experiments/gpu/run.sh`). Corpus "
          f"{corpus}; no run sees a token twice. Final validation loss, mean ± std over seeds "
          "(n); gaps paired by seed.", "",
          "## GPU tier — Table 1 at about 20 tokens per parameter", "", table_gpu_tier(R), "",
          "## Speed (one H200 shared by the runbook's workers)", "", table_gpu_speed(R), ""]
    tier.root.mkdir(parents=True, exist_ok=True)
    tier.tables.write_text("\n".join(md))
    return tier.tables


def build_report(tier: sweep.Tier) -> Path:
    """Write ``tier.tables`` and ``tier.figures/*.png`` from ``tier.results`` (the tables of
    ``tier``); returns the tables.md written."""
    if tier.name == "gpu":
        return build_gpu_report(tier)
    R = load_results(tier.results)
    t1, order = table1(R)
    t6, pts = table6(R)
    ordering = ", ".join(f"{LABEL[o]} {g:+.3f}" for o, g in order) or "—"
    md = [
        f"# Tables of the {tier.title}", "",
        f"Generated by `python experiments/report.py --tier {tier.name}` from "
        f"`experiments/{tier.name}/results/*.json` only. "
        "Final validation loss, mean ± std over seeds (n); gaps are paired by seed; "
        "\"EF recovers\" = (async − corrected)/(async − sync) on the means over the seeds "
        "present in all three cells.", "",
        "## Progress", "", progress(R, tier), "",
        "## Table 0 — synchronous learning-rate sweep (seed 0)", "", table_lr(R, tier), "",
        "## Table 1 — optimizers × {sync, async, async + EF}", "", t1, "",
        f"Gap ordering (largest first): {ordering}.", "",
        "Gap async − sync over training (validation loss at each evaluation):", "",
        table1_over_time(R), "",
        "How flat the synchronous validation loss is at the end (the issue asks for runs long "
        "enough that it has flattened):", "", table_flatness(R), "",
        "The paper (360M, FineWeb-Edu):", "", table_paper(), "",
        "## Table 2 — momentum", "", table2(R), "",
        "## Table 3 — mitigations", "", table3(R, tier), "",
    ]
    if "4" in tier.table_order:
        md += ["## Table 4 — depth: PipeDream vs PipeDream-2BW", "", table4(R), ""]
    md += ["## Table 5 — batch size (AdamW, same steps and lr)", "", table5(R, tier), "",
           "## Table 6 — theory meets practice: update drift vs EF", "", t6, ""]
    if "7" in tier.table_order:
        md += ["## Table 7 — not in the paper: the gap at a lower learning rate", "",
               table7(R), ""]
    if any(c.startswith("gpu135-") for c in R):
        md += ["## GPU runbook — smollm-135m on one H200 (experiments/gpu/run_135m.sh)", "",
               table_gpu(R), ""]
    tier.root.mkdir(parents=True, exist_ok=True)
    made = figures(R, tier.figures, pts, tier)
    if tier.name == "small":
        glance = glance_figure(R, tier.figures / "glance.png")
        made += [glance] if glance else []
    if made:
        md += ["## Figures", ""] + [f"![{p.stem}](figures/{p.name})" for p in made] + [""]
    tier.tables.write_text("\n".join(md))
    return tier.tables


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="tables.md and figures/ from the results JSON")
    ap.add_argument("--tier", default="tiny", choices=sorted(sweep.TIERS))
    ap.add_argument("--results", default=None, help="default: the tier's results folder")
    ap.add_argument("--out", default=None, help="folder of tables.md and figures/ (default: "
                    "the tier's, experiments/<tier>/)")
    ap.add_argument("--fill-readme", action="store_true",
                    help="rewrite the marked numbers of experiments/README.md to their current "
                    "values (see number()) and exit")
    args = ap.parse_args(argv)
    if args.fill_readme:
        readme = HERE / "README.md"
        text = readme.read_text(encoding="utf-8")
        stale = stale_numbers(text)
        readme.write_text(fill_numbers(text, keep_markers=True), encoding="utf-8")
        for key, old, new in stale:
            print(f"{key}: {old} -> {new}")
        print(f"{len(stale)} number(s) updated in {readme}")
        return 0
    tier = sweep.get_tier(args.tier).at(results=args.results, root=args.out)
    print(build_report(tier))
    return 0


if __name__ == "__main__":
    sys.exit(main())
