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
        try:
            todo = sweep.plan([t], None, None, tier)
        except ValueError as e:  # h3 before h3-tune has finished: its cells are not known yet
            lines.append(f"| {t} | {sum(len(v) for c, v in R.items() if c.endswith('-tuned'))}"
                         " | — | — "
                         f"({str(e).split(';')[-1].strip()}) |")
            continue
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


# -- issue 20 (EF(γ*)) and issue 21 (why the gap) ------------------------------------------------
# Shares are computed as everywhere else (recovered(): the ratio of seed means over the seeds
# present in all three cells); the seeds' own shares follow in parentheses, so their spread can
# be read off. Cells not run show "—".
EFG_OPTIMIZERS = ("muon", "adamw", "soap")
# β (momentum for Muon, β₁ otherwise) of each optimizer in these runs: optimizer.momentum /
# optimizer.beta1 of the configs (src/asyncpp/train/config.py: beta1 = 0.9, momentum = 0.95;
# Adan and SOAP get beta1 as their β₁ through train/components.py). The JSON's config wins.
RUN_BETA = {"muon": 0.95, "adamw": 0.9, "adan": 0.9, "soap": 0.9}


def _seed_vals(R, cell: str, seeds=None) -> dict[int, float]:
    return vals(R, cell, None if seeds is None else set(seeds))


def _gap_seeds(R, base: str, other: str, seeds=None) -> list[float]:
    """Per-seed other − base over the seeds both have (restricted to ``seeds``)."""
    vb, vo = _seed_vals(R, base, seeds), _seed_vals(R, other, seeds)
    return [vo[s] - vb[s] for s in sorted(set(vb) & set(vo))]


def _share(R, s: str, a: str, c: str, seeds=None) -> tuple[float | None, list[float], int]:
    """(share in % on the seed means, the per-seed shares, n seeds) of the gap a − s that c
    recovers, over the seeds the three cells share (restricted to ``seeds``)."""
    vs, va, vc = (_seed_vals(R, x, seeds) for x in (s, a, c))
    common = sorted(set(vs) & set(va) & set(vc))
    if not common:
        return None, [], 0
    m = [statistics.fmean(v[k] for k in common) for v in (vs, va, vc)]
    if not all(math.isfinite(x) for x in m) or abs(m[1] - m[0]) < 1e-12:
        return None, [], len(common)
    per = [100.0 * (va[k] - vc[k]) / (va[k] - vs[k]) for k in common
           if abs(va[k] - vs[k]) >= 1e-12]
    return 100.0 * (m[1] - m[2]) / (m[1] - m[0]), per, len(common)


def _share_fmt(R, s: str, a: str, c: str, seeds=None) -> str:
    x, per, n = _share(R, s, a, c, seeds)
    if x is None:
        return "—"
    each = ", ".join(f"{p:.0f}" for p in per)
    return _minus(f"{x:.0f} % ({each}; n={n})")


def _share_diff_fmt(R, s: str, a: str, c1: str, c2: str, seeds=None) -> str:
    """Per-seed share of c2 minus share of c1 (percentage points), mean ± sd (n)."""
    s1, s2 = _seed_shares(R, s, a, c1, seeds), _seed_shares(R, s, a, c2, seeds)
    d = [s2[k] - s1[k] for k in sorted(set(s1) & set(s2))]
    if not d:
        return "—"
    m = statistics.fmean(d)
    sd = f" ± {statistics.stdev(d):.0f}" if len(d) > 1 else ""
    return _minus(f"{m:+.0f}{sd} pp (n={len(d)})")


def _seed_shares(R, s: str, a: str, c: str, seeds=None) -> dict[int, float]:
    vs, va, vc = (_seed_vals(R, x, seeds) for x in (s, a, c))
    out = {}
    for k in sorted(set(vs) & set(va) & set(vc)):
        if all(math.isfinite(v) for v in (vs[k], va[k], vc[k])) and abs(va[k] - vs[k]) >= 1e-12:
            out[k] = 100.0 * (va[k] - vc[k]) / (va[k] - vs[k])
    return out


def _loss(R, cell: str, seeds=None) -> str:
    return fmt(list(_seed_vals(R, cell, seeds).values()))


def _efg_row(R, head: str, s: str, a: str, e: str, g: str) -> str:
    return (f"| {head} | {_loss(R, s)} | {_loss(R, a)} | {_loss(R, e)} | {_loss(R, g)} | "
            f"{fmt(gap(R, s, a))} | {_share_fmt(R, s, a, e)} | {_share_fmt(R, s, a, g)} | "
            f"{_share_diff_fmt(R, s, a, e, g)} |")


_EFG_HEAD = ("sync | async (2BW, τ=1) | async + EF | async + EF(γ*) | gap async−sync | "
             "EF recovers (per seed; n) | EF(γ*) recovers (per seed; n) | "
             "EF(γ*) − EF share, per seed |")


def table_efg(R) -> str:
    """Issue 20, table ``efg``: EF(γ*) beside Table 1's sync, async and EF."""
    lines = ["| optimizer | " + _EFG_HEAD, "|" + " --- |" * 9]
    for o in EFG_OPTIMIZERS:
        lines.append(_efg_row(R, LABEL[o], *(f"{o}-{m}" for m in ("sync", "async", "ef", "efg"))))
    return "\n".join(lines)


def table_efg_beta(R) -> str:
    """Issue 20, table ``efg-beta``: Muon's β sweep with EF and EF(γ*) (β = 0.95
    is Table 1's cells and the efg table's muon-efg; sync and async are Table 2's)."""
    lines = ["| Muon momentum β | γ*(β, 1) | " + _EFG_HEAD, "|" + " --- |" * 10]
    for b in sweep.BETAS:
        suf = "" if b == sweep.DEFAULT_BETA["muon"] else f"-beta{b:g}"
        cells = [f"muon-{m}{suf}" for m in ("sync", "async", "ef", "efg")]
        lines.append(_efg_row(R, f"{b:g} | {2 * b / (2 - b) ** 2:.2f}", *cells))
    return "\n".join(lines)


def table_efg_depth(R) -> str:
    """Issue 20, table ``efg-depth`` (tiny tier, deep model, Muon): PipeDream (stage delays
    τ_s = P−1−s) uncorrected, with EF (γ = 1) and with per-stage EF(γ*(β, τ_s)), against 2BW
    (τ = 1 every stage) at the same P; share closed = (PipeDream − mode)/(PipeDream − 2BW)."""
    lines = [f"Reference (synchronous, P = 2, {LABEL[sweep.DEPTH_OPT]}): "
             f"{_loss(R, 'deep-sync')}", "",
             "| P | 2BW | PipeDream | PipeDream + EF | PipeDream + EF(γ*) | gap PipeDream − 2BW | "
             "EF closes (per seed; n) | EF(γ*) closes (per seed; n) | "
             "EF(γ*) − EF share, per seed |", "|" + " --- |" * 9]
    for P in (4, 8):
        b, p = f"deep-2bw-P{P}", f"deep-pipedream-P{P}"
        e, g = f"{p}-ef", f"{p}-efg"
        lines.append(f"| {P} | {_loss(R, b)} | {_loss(R, p)} | {_loss(R, e)} | {_loss(R, g)} | "
                     f"{fmt(gap(R, b, p))} | {_share_fmt(R, b, p, e)} | {_share_fmt(R, b, p, g)} "
                     f"| {_share_diff_fmt(R, b, p, e, g)} |")
    return "\n".join(lines)


# -- issue 23: the Nesterov delay correction at depth, WPipe against 2BW (tiny tier) ----------
NAG_OPTIMIZERS = ("muon", "adamw")
NAG_P = 4  # the deep model cut in 4 (tables nag and wpipe)
# schedule -> (label, stage delays at P = 4): 2BW's every stage 1, PipeDream's P − 1 − s,
# WPipe's first group 1 and its second 0 (benchmarks/bench_wpipe.py, ``delays``)
NAG_SCHEDULES = {"2bw": ("2BW", (1, 1, 1, 1)), "pipedream": ("PipeDream", (3, 2, 1, 0)),
                 "wpipe": ("WPipe", (1, 1, 0, 0))}
NAG_MODES = (("none", "none"), ("ef", "EF"), ("efg", "EF(γ*)"), ("nag", "Nesterov"))


def nag_sync(o: str) -> str:
    """The synchronous reference of the deep model (P = 2, 1F1B): Table 4's ``deep-sync`` for
    Muon, table nag's ``deep-<o>-sync`` otherwise."""
    return "deep-sync" if o == sweep.DEPTH_OPT else f"deep-{o}-sync"


def nag_cell(o: str, sched: str, corr: str = "none") -> str:
    """Cell of tables nag / wpipe (and Table 4 / efg-depth for Muon's reused cells)."""
    pre = "deep" if o == sweep.DEPTH_OPT else f"deep-{o}"
    return f"{pre}-{sched}-P{NAG_P}" + ("" if corr == "none" else f"-{corr}")


def _signed(xs: list[float], digits: int = 3) -> str:
    """Signed mean ± sd (n) of paired differences; '—' when empty."""
    if not xs:
        return "—"
    if any(not math.isfinite(x) for x in xs):
        return f"diverged ({sum(not math.isfinite(x) for x in xs)}/{len(xs)})"
    sd = f" ± {statistics.stdev(xs):.{digits}f}" if len(xs) > 1 else ""
    return _minus(f"{statistics.fmean(xs):+.{digits}f}{sd} (n={len(xs)})")


def _gap_ratio(R, s: str, a: str, b: str, seeds=None) -> tuple[float | None, list[float], int]:
    """(gap a − s over gap b − s on the seed means, the per-seed ratios, n) over the seeds the
    three cells share."""
    vs, va, vb = (_seed_vals(R, x, seeds) for x in (s, a, b))
    common = sorted(set(vs) & set(va) & set(vb))
    if not common:
        return None, [], 0
    m = [statistics.fmean(v[k] for k in common) for v in (vs, va, vb)]
    if not all(math.isfinite(x) for x in m) or abs(m[2] - m[0]) < 1e-12:
        return None, [], len(common)
    per = [(va[k] - vs[k]) / (vb[k] - vs[k]) for k in common if abs(vb[k] - vs[k]) >= 1e-12]
    return (m[1] - m[0]) / (m[2] - m[0]), per, len(common)


def _ratio_fmt(R, s: str, a: str, b: str, seeds=None) -> str:
    x, per, n = _gap_ratio(R, s, a, b, seeds)
    if x is None:
        return "—"
    return _minus(f"{x:.2f} ({', '.join(f'{p:.2f}' for p in per)}; n={n})")


def table_nag(R) -> str:
    """Issue 23, table ``nag`` (tiny tier, deep model, P = 4): the Nesterov delay correction
    against EF and EF(γ*) for Muon and AdamW under 2BW and PipeDream; share recovered =
    (none − mode)/(none − sync) against the synchronous reference of the same optimizer."""
    head = ["optimizer", "schedule (τ per stage)", "sync (P = 2)"]
    head += [lab for _, lab in NAG_MODES]
    head += ["gap none − sync"] + [f"{lab} recovers (per seed; n)" for _, lab in NAG_MODES[1:]]
    head += ["Nesterov − EF(γ*) (per seed, mean ± sd)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for o in NAG_OPTIMIZERS:
        s = nag_sync(o)
        for sched in ("2bw", "pipedream"):
            lab, taus = NAG_SCHEDULES[sched]
            c = {m: nag_cell(o, sched, m) for m, _ in NAG_MODES}
            row = [LABEL[o], f"{lab} ({','.join(map(str, taus))})", _loss(R, s)]
            row += [_loss(R, c[m]) for m, _ in NAG_MODES]
            row += [fmt(gap(R, s, c["none"]))]
            row += [_share_fmt(R, s, c["none"], c[m]) for m, _ in NAG_MODES[1:]]
            row += [_signed(gap(R, c["efg"], c["nag"]))]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def table_wpipe(R) -> str:
    """Issue 23, table ``wpipe`` (tiny tier, deep model, 4 partitions): WPipe with and without
    EF against 2BW (table nag's cells) and the synchronous reference; EF's share per schedule
    and the ratio of the gaps to sync, gap_WPipe / gap_2BW (seed means; per seed in
    parentheses)."""
    head = ["optimizer", "sync (P = 2)", "WPipe", "WPipe + EF", "2BW", "2BW + EF",
            "gap WPipe − sync", "gap 2BW − sync", "EF recovers, WPipe (per seed; n)",
            "EF recovers, 2BW (per seed; n)", "gap WPipe / gap 2BW (per seed; n)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for o in NAG_OPTIMIZERS:
        s = nag_sync(o)
        w, we = nag_cell(o, "wpipe"), nag_cell(o, "wpipe", "ef")
        b, be = nag_cell(o, "2bw"), nag_cell(o, "2bw", "ef")
        row = [LABEL[o], _loss(R, s), _loss(R, w), _loss(R, we), _loss(R, b), _loss(R, be),
               fmt(gap(R, s, w)), fmt(gap(R, s, b)), _share_fmt(R, s, w, we),
               _share_fmt(R, s, b, be), _ratio_fmt(R, s, w, b)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _stage_coefficients(b: float, taus) -> tuple[str, str]:
    """(κ per stage, γ* per stage) as text at momentum b; γ* from theory/stability.py ('?' when
    theory/ cannot be imported). Both are 0 at τ = 0 (an undelayed stage is not corrected)."""
    kappa = [sum(b ** k for k in range(1, t + 2)) if t else 0.0 for t in taus]
    try:
        if str(HERE.parent) not in sys.path:
            sys.path.insert(0, str(HERE.parent))
        from theory.stability import optimal_gamma
        gam = [optimal_gamma(b, t)[0] if t else 0.0 for t in taus]
        gtext = ", ".join(f"{g:.2f}" for g in gam)
    except ImportError:
        gtext = "?"
    return ", ".join(f"{k:.2f}" for k in kappa), gtext


def nag_caption(R) -> str:
    parts = []
    for o in NAG_OPTIMIZERS:
        b = _run_beta(R, o)
        for sched in ("2bw", "pipedream"):
            lab, taus = NAG_SCHEDULES[sched]
            k, g = _stage_coefficients(b, taus)
            parts.append(f"{LABEL[o]} (β = {b:g}), {lab}: κ = {k}; γ* = {g}")
    return ("The deep model cut in P = 4 stages (simulated), Muon and AdamW, against the "
            "synchronous reference of the same optimizer (P = 2, 1F1B; Muon's is Table 4's "
            "`deep-sync`; Muon's uncorrected cells are Table 4's and its PipeDream EF / EF(γ*) "
            "cells efg-depth's). Stage delays: 2BW τ = 1,1,1,1; PipeDream τ_s = P − 1 − s = "
            "3,2,1,0. Corrections (u(t) the optimizer's update applied at step t): **EF** "
            "x(t+1) = x(t) − 2u(t) + u(t−1); **EF(γ*)** x(t+1) = x(t) − (1+γ)u(t) + γu(t−1) "
            "with γ = γ*(β, τ_s) of T3 per stage (`--delay.ef_gamma auto`); **Nesterov** "
            "(`--delay.correction nesterov`) takes the gradient at the look-ahead θ = x + "
            "κ(x − x_prev), κ = β + … + β^(τ+1), which on the stored weights is EF(γ = κ) "
            "(`src/asyncpp/delay/nesterov.py`). β is the optimizer's momentum (Muon's momentum, "
            "AdamW's β₁); per stage, " + "; ".join(parts) + ". Shares recovered = (none − "
            "mode)/(none − sync) on the seed means over the seeds the three cells share (the "
            "seeds' own shares in parentheses); the last column is the paired val-loss "
            "difference Nesterov − EF(γ*), seed by seed (negative: Nesterov lower).")


def wpipe_caption() -> str:
    bench = HERE.parent / "benchmarks" / "results" / "wpipe.json"
    facts = ""
    try:
        d = json.loads(bench.read_text())
        rows = [r for r in d["rows"] if r["schedule"] == "wpipe" and r["partitions"] == NAG_P]
        if rows:
            mem = sorted({round(r["memory_vs_2bw"], 3) for r in rows})
            bub = sorted({round(r["bubble"], 4) for r in rows})
            ms = ", ".join(str(r["m"]) for r in rows)
            worst = max((r for r in d["rows"] if r["schedule"] == "wpipe"),
                        key=lambda r: r["bubble"])
            facts = (f" From `benchmarks/bench_wpipe.py` (`benchmarks/results/wpipe.json`), "
                     f"{NAG_P} partitions on {rows[0]['devices']} devices, m = {ms}: "
                     f"weight-version memory per device {'/'.join(f'{x:g}' for x in mem)} × "
                     f"2BW's on the same devices, steady-state bubble "
                     f"{'/'.join(f'{x:g}' for x in bub)}; the worst WPipe bubble in that "
                     f"benchmark is {worst['bubble']:.3f} ({worst['partitions']} partitions on "
                     f"{worst['devices']} devices, m = {worst['m']}).")
    except (OSError, ValueError, KeyError):
        pass
    if not facts:
        facts = " Bubble and weight memory: `benchmarks/bench_wpipe.py`."
    return ("The deep model cut in 4 partitions (simulated). Delays: WPipe τ = 1,1,0,0 (its "
            "first group of partitions waits one step, its second none), 2BW τ = 1,1,1,1 (table "
            "nag's cells); EF as in table nag (γ = 1; WPipe's undelayed partitions are not "
            "corrected). Gaps paired by seed; EF's share = (schedule − schedule + EF)/(schedule "
            "− sync) on the seed means; gap ratio = (WPipe − sync)/(2BW − sync) on the seed "
            "means over the seeds the three cells share (per-seed ratios in parentheses)."
            + facts)


def figure_nag(R, path: Path) -> Path | None:
    """Issue 23: the final val loss of every cell of table nag (bars: seed means; dots: seeds),
    one panel per optimizer, the synchronous reference as a dashed line."""
    cells = {o: [(f"{NAG_SCHEDULES[s][0]}\n{lab}", nag_cell(o, s, m))
                 for s in ("2bw", "pipedream") for m, lab in NAG_MODES] for o in NAG_OPTIMIZERS}
    if not any(_seed_vals(R, c) for o in cells for _, c in cells[o]):
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, len(NAG_OPTIMIZERS), figsize=(11, 4), squeeze=False)
    for ax, o in zip(axes[0], NAG_OPTIMIZERS):
        lo = []
        for i, (_lab, c) in enumerate(cells[o]):
            v = [x for x in _seed_vals(R, c).values() if math.isfinite(x)]
            if v:
                ax.bar(i, statistics.fmean(v), color=f"C{i % 4}", alpha=0.6)
                ax.plot([i] * len(v), v, "k.", ms=5)
                lo += v
        sv = [x for x in _seed_vals(R, nag_sync(o)).values() if math.isfinite(x)]
        if sv:
            ax.axhline(statistics.fmean(sv), color="k", ls="--", lw=1, label="sync (P = 2)")
            ax.legend(fontsize=8)
            lo += sv
        if not lo:
            ax.text(0.5, 0.5, "no results yet", ha="center", va="center",
                    transform=ax.transAxes)
        else:
            span = max(lo) - min(lo)
            ax.set_ylim(min(lo) - 0.3 * span - 1e-3, max(lo) + 0.15 * span + 1e-3)
        ax.set_xticks(range(len(cells[o])), [lab for lab, _ in cells[o]], fontsize=7)
        ax.set_title(f"{LABEL[o]}, deep model, P = {NAG_P} (table nag)")
        ax.set_ylabel("final val loss")
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def h1_cell(o: str, m: str, f: float) -> str:
    """The cell of optimizer o, mode m at lr = f × lr* (f = 1: Table 1's cell)."""
    return f"{o}-{m}" if f == 1 else f"{o}-{m}-lrx{f:g}"


H1_FRACTIONS = (*sweep.LR_FRACTIONS, 1.0)
H1_SEEDS = sweep.SEEDS["h1"]  # f = 1 (Table 1, 3 seeds) is read on these seeds as well


def table_h1(R) -> str:
    """Issue 21, H1: the gap and EF's share at lr*/8, lr*/4, lr*/2 and lr* (seeds 0 and 1 at
    every fraction, paired by seed)."""
    lines = ["| optimizer | lr / lr* | lr | sync | async | async + EF | gap async−sync | "
             "gap EF−sync | EF recovers (per seed; n) |", "|" + " --- |" * 9]
    for o in sweep.H1_OPTIMIZERS:
        for f in H1_FRACTIONS:
            s, a, e = (h1_cell(o, m, f) for m in ("sync", "async", "ef"))
            lines.append(f"| {LABEL[o]} | {_frac(f)} | {lr_of(R, s)} | "
                         f"{_loss(R, s, H1_SEEDS)} | {_loss(R, a, H1_SEEDS)} | "
                         f"{_loss(R, e, H1_SEEDS)} | {fmt(_gap_seeds(R, s, a, H1_SEEDS))} | "
                         f"{fmt(_gap_seeds(R, s, e, H1_SEEDS))} | "
                         f"{_share_fmt(R, s, a, e, H1_SEEDS)} |")
    return "\n".join(lines)


def _frac(f: float) -> str:
    return "1" if f == 1 else f"1/{round(1 / f)}"


def h2_best(R, o: str, m: str) -> tuple[float | None, int]:
    """H2's protocol: the fraction f of lr* (grid H1_FRACTIONS) with the lowest mean final val
    loss of mode m over seeds 0 and 1 (diverged = +inf); (None, 0) when no cell has run. The
    second value is how many fractions had a result."""
    scored = []
    for f in H1_FRACTIONS:
        v = list(_seed_vals(R, h1_cell(o, m, f), H1_SEEDS).values())
        if v:
            scored.append((statistics.fmean(v) if all(map(math.isfinite, v)) else math.inf, f))
    if not scored:
        return None, 0
    return min(scored)[1], len(scored)


def h2_gap(R, o: str, m: str) -> list[float]:
    """Per-seed gap of mode m at its own best lr against sync at its own best lr (H2)."""
    fs, _ = h2_best(R, o, "sync")
    fm, _ = h2_best(R, o, m)
    if fs is None or fm is None:
        return []
    return _gap_seeds(R, h1_cell(o, "sync", fs), h1_cell(o, m, fm), H1_SEEDS)


def table_h2(R) -> str:
    """Issue 21, H2: every mode at its own best lr (grid lr* × {1/8, 1/4, 1/2, 1}, lowest mean
    val loss over seeds 0 and 1), the gaps there next to the shared-lr gaps (at lr*)."""
    lines = ["| optimizer | best lr / lr*: sync | async | async + EF | gap async−sync at lr* | "
             "tuned gap async−sync | gap EF−sync at lr* | tuned gap EF−sync | "
             "EF recovers, tuned |", "|" + " --- |" * 9]
    for o in sweep.H1_OPTIMIZERS:
        best = {}
        for m in ("sync", "async", "ef"):
            f, k = h2_best(R, o, m)
            best[m] = "—" if f is None else (
                _frac(f) + ("" if k == len(H1_FRACTIONS) else f" ({k} of {len(H1_FRACTIONS)})"))
        s, a, e = (f"{o}-{m}" for m in ("sync", "async", "ef"))
        fs, fa, fe = (h2_best(R, o, m)[0] for m in ("sync", "async", "ef"))
        tuned_share = "—" if None in (fs, fa, fe) else _share_fmt(
            R, h1_cell(o, "sync", fs), h1_cell(o, "async", fa), h1_cell(o, "ef", fe), H1_SEEDS)
        lines.append(f"| {LABEL[o]} | {best['sync']} | {best['async']} | {best['ef']} | "
                     f"{fmt(_gap_seeds(R, s, a, H1_SEEDS))} | {fmt(h2_gap(R, o, 'async'))} | "
                     f"{fmt(_gap_seeds(R, s, e, H1_SEEDS))} | {fmt(h2_gap(R, o, 'ef'))} | "
                     f"{tuned_share} |")
    return "\n".join(lines)


H5_GRIDS = (("b98", "0.98, 0.92, 0.99 (reference)", (0.003, 0.01, 0.03)),
             ("alg1", "0.02, 0.08, 0.01 (Alg. 1 as torch β's)", (0.001, 0.003)))
H5_SEEDS = sweep.SEEDS["h5"]


def table_h5(R) -> str:
    """Issue 21, H5 (Adan): sync, async and async + EF at Adan's reference β's over an lr grid
    and at Alg. 1's β's read in the torch convention; Table 1's Adan (β₁ = 0.9, AdamW's
    default, lr* = 0.01) and H1's lower-lr cells for comparison (seeds 0 and 1, paired)."""
    lines = ["| Adan β₁, β₂, β₃ | lr | sync | async | async + EF | gap async−sync | "
             "EF recovers (per seed; n) |", "|" + " --- |" * 7]
    lr_star = sweep.load_lrs(sweep.get_tier("tiny").lrs_file)["adan"]
    rows = [("0.9, 0.92, 0.99 (Table 1, H1)", lr_star * f, h1_cell("adan", "sync", f),
             h1_cell("adan", "async", f), h1_cell("adan", "ef", f)) for f in H1_FRACTIONS]
    for tag, label, grid in H5_GRIDS:
        rows += [(label, lr, *(f"adan-{m}-{tag}-lr{lr:g}" for m in ("sync", "async", "ef")))
                 for lr in grid]
    for label, lr, s, a, e in rows:
        lines.append(f"| {label} | {lr:g} | {_loss(R, s, H5_SEEDS)} | "
                     f"{_loss(R, a, H5_SEEDS)} | {_loss(R, e, H5_SEEDS)} | "
                     f"{fmt(_gap_seeds(R, s, a, H5_SEEDS))} | "
                     f"{_share_fmt(R, s, a, e, H5_SEEDS)} |")
    return "\n".join(lines)


def t3_edge_fractions(b: float) -> tuple[float, float] | None:
    """T3 (theory/stability.py) at momentum β: the delayed stable step over the synchronous
    one, c*(β, τ=1)/c*(β, τ=0), without and with EF; None when theory/ cannot be imported.
    If lr* sat at the synchronous edge, these are the lr fractions at which the delayed run
    would reach its own edge."""
    try:
        if str(HERE.parent) not in sys.path:
            sys.path.insert(0, str(HERE.parent))
        from theory.stability import critical_step
    except ImportError:
        return None
    sync = critical_step(b, 0)
    return critical_step(b, 1, ef=False) / sync, critical_step(b, 1, ef=True) / sync


def _run_beta(R, o: str) -> float:
    for r in R.get(f"{o}-sync", {}).values():
        opt = r.get("config", {}).get("optimizer", {})
        key = "momentum" if o == "muon" else "beta1"
        if opt.get(key) is not None:
            return float(opt[key])
    return RUN_BETA[o]


def figure_gap_vs_lr(R, path: Path) -> Path | None:
    """The key figure of issue 21: gap (async − sync, EF − sync; seeds 0, 1, paired) against
    lr/lr* per optimizer, with T3's edge fractions drawn in."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, len(sweep.H1_OPTIMIZERS), figsize=(4 * len(sweep.H1_OPTIMIZERS),
                                                                   3.8), sharey=False)
    for ax, o in zip(axes, sweep.H1_OPTIMIZERS):
        for m, lab, style in (("async", "async − sync", "-o"), ("ef", "async + EF − sync", "-s")):
            xs, ys, es = [], [], []
            for f in H1_FRACTIONS:
                g = _gap_seeds(R, h1_cell(o, "sync", f), h1_cell(o, m, f), H1_SEEDS)
                if g and all(map(math.isfinite, g)):
                    xs.append(f)
                    ys.append(statistics.fmean(g))
                    es.append(statistics.stdev(g) if len(g) > 1 else 0.0)
            if xs:
                ax.errorbar(xs, ys, yerr=es, fmt=style, ms=4, capsize=3, label=lab)
        b = _run_beta(R, o)
        edge = t3_edge_fractions(b)
        if edge is not None:
            ax.axvline(edge[0], color="gray", ls="--", lw=1,
                       label=f"T3 edge, no EF: {edge[0]:.3f}")
            ax.axvline(edge[1], color="gray", ls=":", lw=1,
                       label=f"T3 edge, EF: {edge[1]:.3f}")
        ax.axhline(0.0, color="black", lw=0.5)
        ax.set_xscale("log", base=2)
        ax.set_xlim(min([*(edge or ()), *H1_FRACTIONS]) / 1.5, 1.5)
        ax.set_title(f"{LABEL[o]} (β = {b:g})")
        ax.set_xlabel("lr / lr*")
        ax.set_ylabel("val-loss gap to sync (seeds 0, 1)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle("gap to sync vs lr/lr* (tiny tier, table h1); vertical lines: T3's edge "
                 "fraction c*(β, τ=1)/c*(β, τ=0), assuming lr* at the synchronous edge",
                 fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def spectral_drift(R, cell: str) -> list[float]:
    """T2's drift δ̄ (``drift.spectral_mean``: mean over updates of max over matrices of
    ‖u_n/η_n − u_(n−1)/η_(n−1)‖₂) of the finished runs of ``cell`` that logged it."""
    return [r["drift"]["spectral_mean"] for r in R.get(cell, {}).values()
            if r.get("status") == "ok" and r.get("drift", {}).get("spectral_mean") is not None]


def _h3_factor(o: str, b: float, tier: sweep.Tier) -> float | None:
    try:
        return sweep.h3_choice(o, b, tier)
    except ValueError:  # h3-tune not finished for (o, b)
        return None


def table_h3(R, tier: sweep.Tier) -> str:
    """Issue 21, H3: per β, the synchronous lr re-tuned over lr* × {1/2, 1, 2} (seed 0, table
    h3-tune; sweep.h3_choice), then sync and async there (seeds 0, 1); T2's drift δ̄ of the
    async run beside the gap, and Table 2's gap at the shared lr*."""
    lines = ["| optimizer | β | sync val, seed 0, at lr* × ½ / 1 / 2 | chosen | sync | async | "
             "gap async−sync (tuned) | gap at lr* (Table 2) | δ̄ async (T2) | δ̄ sync |",
             "|" + " --- |" * 10]
    for o in ("muon", "adamw"):
        for b in sweep.BETAS:
            tune = []
            for f in sweep.H3_FACTORS:
                v = vals(R, f"{o}-sync-beta{b:g}-lrx{f:g}").get(0)
                tune.append("—" if v is None else ("diverged" if not math.isfinite(v)
                                                   else f"{v:.3f}"))
            f = _h3_factor(o, b, tier)
            s, a = f"{o}-sync-beta{b:g}-tuned", f"{o}-async-beta{b:g}-tuned"
            suf = "" if b == sweep.DEFAULT_BETA[o] else f"-beta{b:g}"
            sa, da, ds = gap(R, s, a), spectral_drift(R, a), spectral_drift(R, s)
            lines.append(f"| {LABEL[o]} | {b:g} | {' / '.join(tune)} | "
                         f"{'—' if f is None else f'× {f:g}'} | {_loss(R, s)} | {_loss(R, a)} | "
                         f"{fmt(sa)} | {fmt(gap(R, f'{o}-sync{suf}', f'{o}-async{suf}'))} | "
                         f"{fmt(da)} | {fmt(ds)} |")
    return "\n".join(lines)


def figure_h3(R, path: Path) -> Path | None:
    """H3, per optimizer (columns): the gap at the re-tuned lr beside Table 2's at lr* (top)
    and T2's drift δ̄ of the async run (bottom), against β; None before any h3 run finished."""
    if not any(c.endswith("-tuned") for c in R):
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    for col, o in enumerate(("muon", "adamw")):
        for lab, name in (("lr re-tuned per β (h3)", "{o}-{m}-beta{b:g}-tuned"),
                          ("lr* for every β (Table 2)", None)):
            xs, ys, es = [], [], []
            for b in sweep.BETAS:
                if name is None:
                    suf = "" if b == sweep.DEFAULT_BETA[o] else f"-beta{b:g}"
                    s, a = f"{o}-sync{suf}", f"{o}-async{suf}"
                else:
                    s, a = (name.format(o=o, m=m, b=b) for m in ("sync", "async"))
                pt = _mean_sd_point(gap(R, s, a))
                if pt:
                    xs.append(b)
                    ys.append(pt[0])
                    es.append(pt[1])
            if xs:
                axes[0][col].errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=lab)
        xs, ys, es = [], [], []
        for b in sweep.BETAS:
            pt = _mean_sd_point(spectral_drift(R, f"{o}-async-beta{b:g}-tuned"))
            if pt:
                xs.append(b)
                ys.append(pt[0])
                es.append(pt[1])
        if xs:
            axes[1][col].errorbar(xs, ys, yerr=es, marker="o", capsize=3, color="C2")
        axes[0][col].set_title(LABEL[o])
        axes[0][col].set_ylabel("val-loss gap async − sync")
        axes[1][col].set_ylabel("T2's drift δ̄ of the async run (h3)")
        axes[1][col].set_xlabel("momentum β" if o == "muon" else "β₁")
        for ax in (axes[0][col], axes[1][col]):
            ax.grid(alpha=0.3)
        if axes[0][col].get_legend_handles_labels()[0]:
            axes[0][col].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _plot_series(path: Path, panels, xlabel: str, ylabel: str, logx: bool = False,
                 title: str = "") -> Path | None:
    """One row of panels; ``panels``: [(panel title, [(label, xs, means, sds)])]; None without
    matplotlib or when no panel has a point."""
    if not any(xs for _, series in panels for _, xs, _, _ in series):
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for ax, (head, series) in zip(axes[0], panels):
        for lab, xs, ys, es in series:
            if xs:
                ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=lab)
        if logx:
            ax.set_xscale("log", base=2)
        ax.set_title(head)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _mean_sd_point(xs: list[float]) -> tuple[float, float] | None:
    if not xs or not all(map(math.isfinite, xs)):
        return None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def figure_efg_beta(R, path: Path, tier: sweep.Tier) -> Path | None:
    """Issue 20: the share of Muon's gap that EF and EF(γ*) recover, against β (per-seed
    shares, mean ± sd)."""
    series = []
    for m, lab in (("ef", "EF"), ("efg", "EF(γ*)")):
        xs, ys, es = [], [], []
        for b in sweep.BETAS:
            suf = "" if b == sweep.DEFAULT_BETA["muon"] else f"-beta{b:g}"
            pt = _mean_sd_point(list(_seed_shares(R, f"muon-sync{suf}", f"muon-async{suf}",
                                                  f"muon-{m}{suf}").values()))
            if pt:
                xs.append(b)
                ys.append(pt[0])
                es.append(pt[1])
        series.append((lab, xs, ys, es))
    return _plot_series(path, [(f"Muon ({tier.name} tier, table efg-beta)", series)],
                        "momentum β", "% of the async gap recovered (per seed)")


H4_SEEDS = sweep.SEEDS["h4"]  # the base length (Table 1, 3 seeds) is read on these seeds too


def table_h4(R, tier: sweep.Tier) -> str:
    """Issue 21, H4: the gap and EF's share at 1×, 2× and 4× the steps (lr schedule stretched;
    seeds 0 and 1 at every length, paired by seed)."""
    lines = ["| optimizer | steps | sync | async | async + EF | gap async−sync | gap EF−sync | "
             "EF recovers (per seed; n) |", "|" + " --- |" * 8]
    for o in ("adamw", "muon"):
        for n in (1, 2, 4):
            st = n * tier.steps
            s, a, e = (f"{o}-{m}" if n == 1 else f"{o}-{m}-steps{st}"
                       for m in ("sync", "async", "ef"))
            lines.append(f"| {LABEL[o]} | {st} | {_loss(R, s, H4_SEEDS)} | "
                         f"{_loss(R, a, H4_SEEDS)} | {_loss(R, e, H4_SEEDS)} | "
                         f"{fmt(_gap_seeds(R, s, a, H4_SEEDS))} | "
                         f"{fmt(_gap_seeds(R, s, e, H4_SEEDS))} | "
                         f"{_share_fmt(R, s, a, e, H4_SEEDS)} |")
    return "\n".join(lines)


def figure_h4(R, tier: sweep.Tier, path: Path) -> Path | None:
    """H4: the gap to sync of async and async + EF against the run length (seeds 0, 1)."""
    panels = []
    for o in ("adamw", "muon"):
        series = []
        for m, lab in (("async", "async − sync"), ("ef", "async + EF − sync")):
            xs, ys, es = [], [], []
            for n in (1, 2, 4):
                st = n * tier.steps
                s, c = (f"{o}-{x}" if n == 1 else f"{o}-{x}-steps{st}" for x in ("sync", m))
                pt = _mean_sd_point(_gap_seeds(R, s, c, H4_SEEDS))
                if pt:
                    xs.append(st)
                    ys.append(pt[0])
                    es.append(pt[1])
            series.append((lab, xs, ys, es))
        panels.append((LABEL[o], series))
    return _plot_series(path, panels, "training steps (lr schedule stretched)",
                        "val-loss gap to sync (seeds 0, 1)", logx=True)


def issue21_sections(R, tier: sweep.Tier) -> tuple[list[str], list[Path]]:
    """The tables.md sections (and figures written into ``tier.figures``) of issue 20's EF(γ*)
    tables and issue 21's H1–H4 tables that ``tier`` runs."""
    md: list[str] = []
    made: list[Path] = []
    order = tier.table_order
    if "efg" in order:
        md += ["## EF(γ*) — the gap (issue 20, table efg)", "",
               "EF(γ*) is `--delay.ef_gamma auto` (γ*(β, τ) of T3). Share recovered = (async − "
               "mode)/(async − sync) on the seed means over the seeds all three cells have; the "
               "seeds' own shares in parentheses; the last column is EF(γ*)'s share minus EF's, "
               "seed by seed (percentage points, mean ± sd).", "", table_efg(R), ""]
    if "efg-beta" in order:
        md += ["## EF(γ*) — Muon's momentum sweep (issue 20, table efg-beta)", "",
               "Sync and async are Table 2's cells; β = 0.95 is Table 1's and the efg table's.",
               "", table_efg_beta(R), ""]
        fig = figure_efg_beta(R, tier.figures / "efg_share_vs_beta.png", tier)
        if fig:
            made.append(fig)
            md += ["![efg_share_vs_beta](figures/efg_share_vs_beta.png)", ""]
    if "efg-depth" in order:
        md += ["## EF(γ*) at depth (issue 20, table efg-depth)", "",
               "The deep model with Muon; PipeDream's stage s waits τ_s = P − 1 − s steps, 2BW's "
               "every stage 1. Share closed = (PipeDream − mode)/(PipeDream − 2BW), on the seed "
               "means (the seeds' own in parentheses); it has no meaning where PipeDream is not "
               "worse than 2BW (a gap near zero or negative).", "", table_efg_depth(R), ""]
    if "nag" in order:
        md += ["## Delay corrections at depth (issue 23, table nag)", "", nag_caption(R), "",
               table_nag(R), ""]
        fig = figure_nag(R, tier.figures / "nag_depth.png")
        if fig:
            made.append(fig)
            md += ["![nag_depth](figures/nag_depth.png)", "",
                   "*Figure `nag_depth.png`:* final val loss of each cell of table nag (bars: "
                   "seed means; dots: seeds); dashed: the synchronous reference.", ""]
    if "wpipe" in order:
        md += ["## WPipe against 2BW (issue 23, table wpipe)", "", wpipe_caption(), "",
               table_wpipe(R), ""]
    if "h1" in order:
        fig = figure_gap_vs_lr(R, tier.figures / "gap_vs_lr.png")
        made += [fig] if fig else []
        edges = []
        for o in sweep.H1_OPTIMIZERS:
            b = _run_beta(R, o)
            e = t3_edge_fractions(b)
            if e is not None:
                edges.append(f"{LABEL[o]} (β = {b:g}): {e[0]:.4f} without EF, "
                             f"{e[1]:.4f} with EF")
        md += ["## H1 — the gap versus the learning rate (issue 21, table h1)", "",
               "Every mode at lr* × {1/8, 1/4, 1/2, 1} (lr* of `configs/lrs.toml`; Muon's AdamW "
               "side scaled with it). lr* × 1 is Table 1's cells, read on seeds 0 and 1 like "
               "the others; gaps paired by seed.", "", table_h1(R), "",
               "![gap_vs_lr](figures/gap_vs_lr.png)", "",
               "*Figure `gap_vs_lr.png`:* the gap to sync of async and of async + EF against "
               "lr/lr* (log₂ axis; mean ± sd over seeds 0, 1). Vertical lines: T3's edge "
               "fractions c*(β, τ=1)/c*(β, τ=0) (theory/stability.py; dashed without EF, "
               "dotted with EF) at each optimizer's β — the lr fraction at which the delayed "
               "run would reach its stability edge *if lr* sat at the synchronous edge* (an "
               "assumption, not a measurement; T3 is the heavy-ball quadratic model). "
               + ("Fractions: " + "; ".join(edges) + "." if edges else ""), "",
               "## H2 — every mode at its own learning rate (issue 21, table h1)", "",
               "Protocol (experiments/README.md, *Why the gap*): each mode's lr is the grid "
               "value lr* × {1/8, 1/4, 1/2, 1} with the lowest mean val loss over seeds 0 and 1; "
               "\"(k of 4)\" marks a choice made on an unfinished grid. Tuned gap: the mode at "
               "its best lr minus sync at its best lr, paired by seed.", "", table_h2(R), ""]
    if "h3" in order:
        fig = figure_h3(R, tier.figures / "h3_gap_drift_vs_beta.png")
        md += ["## H3 — momentum at a re-tuned learning rate (issue 21, tables h3-tune, h3)", "",
               "Per β the synchronous lr is re-tuned over lr* × {1/2, 1, 2} on seed 0 (lowest "
               "final val loss, `sweep.h3_choice`); sync and async then run there (seeds 0, 1). "
               "δ̄: T2's drift in its own norm (`drift.spectral_mean` of each result), mean ± "
               "sd over seeds.", "", table_h3(R, tier), ""]
        if fig:
            made.append(fig)
            md += ["![h3_gap_drift_vs_beta](figures/h3_gap_drift_vs_beta.png)", ""]
    if "h4" in order:
        md += ["## H4 — training length (issue 21, table h4)", "",
               "The same cells at 2× and 4× the steps (the lr schedule stretched with them); the "
               "base length is Table 1's cells, read on seeds 0 and 1 like the others.", "",
               table_h4(R, tier), ""]
        fig = figure_h4(R, tier, tier.figures / "h4_gap_vs_steps.png")
        if fig:
            made.append(fig)
            md += ["![h4_gap_vs_steps](figures/h4_gap_vs_steps.png)", ""]
    if "h5" in order:
        md += ["## H5 — Adan's β's and lr (issue 21, table h5)", "",
               "Every Table 1 Adan run used β₁ = 0.9 (AdamW's default, passed to Adan); the "
               "reference implementation's is 0.98. The paper's Alg. 1 writes (0.02, 0.08, 0.01) "
               "for the torch-convention (0.98, 0.92, 0.99); read in the torch convention they "
               "make Adan nearly signSGD. Seeds 0 and 1, gaps paired by seed.", "",
               table_h5(R), ""]
    return md, made


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
      the same without the unit; ``recseed/k/S/A/C`` that share for seed k; ``recseeds/S/A/C``
      the seeds' shares, "NN, NN, NN" (seed order; e.g. table nag's Nesterov and EF(γ*) shares:
      ``tiny/rec/deep-sync/deep-2bw-P4/deep-2bw-P4-nag``);
    - ``gapratio/S/A/B`` — the gap A − S over the gap B − S on the seed means (default 2 digits;
      table wpipe's gap_WPipe / gap_2BW: ``tiny/gapratio/deep-sync/deep-wpipe-P4/deep-2bw-P4``);
    - ``drift/C``, ``driftmean/C`` — mean relative update drift ρ̄ (default 2 digits);
    - ``pearson``, ``spearman`` — drift against share recovered over the optimizers (Table 6);
    - ``flatdrop/C`` — validation-loss drop over the last 20 % of the steps, mean ± std;
    - ``sdrift/C``, ``sdriftmean/C`` — T2's drift δ̄ (``drift.spectral_mean``), default 3 digits;
    - ``h2f/O/M`` — H2's best lr fraction of mode M of optimizer O ("1/4"); ``h2gap/O/M`` —
      the gap of M at its best lr against sync at its best lr, mean ± std;
    - ``h3f/O/B`` — H3's lr factor for optimizer O at β = B (``sweep.h3_choice``), "× 0.5";
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
    if kind == "recseeds":
        per = _seed_shares(R, *args)
        return ", ".join(f"{x:.{d or 0}f}" for x in per.values()) or "—"
    if kind == "gapratio":
        x = _gap_ratio(R, *args)[0]
        return "—" if x is None else f"{x:.{d or 2}f}"
    if kind in ("drift", "driftmean"):
        return _mean_sd(drift(R, args[0]), d or 2, False, kind == "drift")
    if kind in ("pearson", "spearman"):
        pts = table6(R)[1]
        xs, ys = [q[0] for q in pts], [q[1] for q in pts]
        if kind == "spearman":
            xs, ys = _ranks(xs), _ranks(ys)
        return f"{_pearson(xs, ys):+.{d or 2}f}"
    if kind in ("sdrift", "sdriftmean"):
        return _mean_sd(spectral_drift(R, args[0]), d or 3, False, kind == "sdrift")
    if kind == "h2f":
        f, _ = h2_best(R, args[0], args[1])
        return "—" if f is None else _frac(f)
    if kind == "h2gap":
        return _mean_sd(h2_gap(R, args[0], args[1]), d or 3, True, True)
    if kind == "h3f":
        f = _h3_factor(args[0], float(args[1]), sweep.get_tier(tier))
        return "—" if f is None else f"× {f:g}"
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
    more, _ = issue21_sections(R, tier)
    md += more
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
