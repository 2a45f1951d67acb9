"""The paper's tables (0–7) and the retired 135M runbook's, each as a table of losses (mean ± sd,
n in the header) and a table of paired comparisons (difference, 95 % interval, seeds agreeing,
verdict; ``report_common``)."""

from __future__ import annotations

import math
import statistics

from asyncpp.pipeline.registry import get_spec

from .report_common import (
    COMPARE_HEAD,
    LABEL,
    MIT_LABEL,
    PAPER_360M,
    Val,
    compare_cells,
    diff_val,
    diffs,
    drift,
    grid,
    loss,
    lr_of,
    minus,
    pair,
    paper_share,
    pct,
    section,
    share,
    share_val,
    summary_text,
    vals,
    values,
    verdict,
)
from .report_common import tc as _tc
from .tables import plan

OPTIMIZERS = _tc.OPTIMIZERS


def table_lr(R, tier) -> str:
    """Table 0: each optimizer's synchronous grid (seed 0) and the lr chosen."""
    k = max(len(g) for g in tier.lr_grid.values())
    rows = []
    for o in OPTIMIZERS:
        cells, scores = [], []
        for lr in tier.lr_grid[o]:
            v = list(vals(R, _tc.lr_name(o, lr)).values())
            cells.append(Val(f"{lr:g}: {summary_text(v)}", len(v) or None))
            if v:
                scores.append((v[0], lr))
        cells += [""] * (k - len(cells))
        best = f"{min(scores)[1]:g}" if len(scores) == len(tier.lr_grid[o]) else "—"
        rows.append([LABEL[o], *cells, best])
    return grid(["optimizer", *(f"lr #{i + 1}" for i in range(k)), "chosen"], rows)


def _comparisons(R, rows: list[tuple[list[str], str, str]], head: list[str], seeds=None) -> str:
    """One row per (labels, x, y): x − y paired by seed (``report_common.compare_cells``)."""
    return grid([*head, *COMPARE_HEAD],
                [[*labels, *compare_cells(R, x, y, seeds)] for labels, x, y in rows])


def table1(R) -> tuple[str, list[tuple[str, float]]]:
    """Table 1: losses and EF's share per optimizer, then async − sync and EF − async paired
    by seed; and the optimizers ordered by their mean gap (largest first)."""
    rows, cmp, order = [], [], []
    for o in OPTIMIZERS:
        s, a, e = (_tc.name(o, m) for m in ("sync", "async", "ef"))
        rows.append([LABEL[o], lr_of(R, s), loss(R, s), loss(R, a), loss(R, e),
                     share_val(R, s, a, e)])
        cmp += [([LABEL[o], "async − sync"], a, s), ([LABEL[o], "EF − sync"], e, s),
                ([LABEL[o], "EF − async"], e, a)]
        g = diffs(R, s, a)
        if g and all(math.isfinite(x) for x in g):
            order.append((o, statistics.fmean(g)))
    order.sort(key=lambda t: -t[1])
    text = grid(["optimizer", "lr", "sync", "async (2BW, τ = 1)", "async + EF",
                 "EF recovers (per seed)"], rows)
    text += "\n\n" + _comparisons(R, cmp, ["optimizer", "comparison"])
    return text, order


def table1_over_time(R) -> str:
    """Gap async − sync of the validation loss at every evaluation step (paired seeds, seed
    means): one row per evaluation, one column per optimizer."""
    steps, cols = None, []
    for o in OPTIMIZERS:
        rs, ra = R.get(_tc.name(o, "sync"), {}), R.get(_tc.name(o, "async"), {})
        common = [k for k in sorted(set(rs) & set(ra))
                  if rs[k].get("status") == "ok" and ra[k].get("status") == "ok"]
        if not common:
            continue
        steps = steps or rs[common[0]]["curves"]["val_step"]
        gaps = [statistics.fmean(ra[k]["curves"]["val_loss"][i] - rs[k]["curves"]["val_loss"][i]
                                 for k in common) for i in range(len(steps))]
        cols.append((o, len(common), gaps))
    if not cols:
        return "—"
    rows = [[st, *(Val(minus(f"{g[i]:+.3f}"), n) for _, n, g in cols)]
            for i, st in enumerate(steps)]
    return grid(["step", *(LABEL[o] for o, _, _ in cols)], rows)


def table_flatness(R) -> str:
    """How flat the synchronous validation curve is at the end: the drop over the last fifth
    of the steps and over the last evaluation interval, next to the drop over the whole run."""
    rows = []
    for o in OPTIMIZERS:
        recs = [r for r in R.get(_tc.name(o, "sync"), {}).values() if r.get("status") == "ok"
                and len(r["curves"]["val_step"]) >= 3]
        if not recs:
            continue
        steps = recs[0]["curves"]["val_step"]
        i80 = min(range(len(steps)), key=lambda i: abs(steps[i] - 0.8 * steps[-1]))
        v80 = [r["curves"]["val_loss"][i80] for r in recs]
        fin = [r["curves"]["val_loss"][-1] for r in recs]
        last = [r["curves"]["val_loss"][-2] - r["curves"]["val_loss"][-1] for r in recs]
        run = [r["curves"]["val_loss"][0] - r["curves"]["val_loss"][-1] for r in recs]
        long = vals(R, _tc.name(o, "sync", long=True)).get(0)
        short = vals(R, _tc.name(o, "sync")).get(0)
        twice = "—" if long is None or short is None else minus(
            f"{long:.3f} ({long - short:+.3f} vs {short:.3f})")
        rows.append([LABEL[o], values(v80), values(fin), values([a - b for a, b in zip(v80, fin)]),
                     values(last), Val(f"{summary_text(run)} (from step {steps[0]})", len(run)),
                     twice])
    if not rows:
        return "—"
    first = grid(["optimizer", "val loss at 80 % of steps", "final", "drop over the last 20 %"],
                 [r[:4] for r in rows])
    second = grid(["optimizer", "drop over the last interval", "drop over the run",
                   "2× steps, seed 0 (change)"], [[r[0], *r[4:]] for r in rows])
    return first + "\n\n" + second


def table_paper() -> str:
    rows = []
    for o, (s, a, e) in PAPER_360M.items():
        rec = pct(paper_share(o))
        rows.append([LABEL[o], s, a, e if e is not None else "—", minus(f"{a - s:+.3f}"), rec])
    return grid(["optimizer", "sync", "async", "async + EF", "gap", "EF recovers"], rows)


def table2(R) -> str:
    """Table 2: sync and async per β, then async − sync paired by seed."""
    rows, cmp = [], []
    for o in ("muon", "adamw"):
        for b in _tc.BETAS:
            v = _tc.beta_variant(o, b)
            s, a = _tc.name(o, "sync", beta=v), _tc.name(o, "async", beta=v)
            head = [f"{LABEL[o]} ({'momentum' if o == 'muon' else 'β₁'})", f"{b:g}"]
            rows.append([*head, loss(R, s), loss(R, a)])
            cmp.append((head, a, s))
    return (grid(["optimizer", "β", "sync", "async"], rows) + "\n\nasync − sync:\n\n"
            + _comparisons(R, cmp, ["optimizer", "β"]))


def table3(R, tier) -> str:
    """Table 3: each mitigation's loss and share of the gap, then mitigation − async."""
    rows, cmp = [], []
    for o in ("adamw", "muon"):
        s, a = _tc.name(o, "sync"), _tc.name(o, "async")
        rows.append([LABEL[o], "sync (reference)", loss(R, s), "0", "—"])
        for k in ("async", *tier.mitigations):
            c = _tc.name(o, k)
            rec = "0 % (by definition)" if k == "async" else share_val(R, s, a, c)
            rows.append([LABEL[o], MIT_LABEL[k], loss(R, c), diff_val(R, s, c), rec])
            if k != "async":
                cmp.append(([LABEL[o], MIT_LABEL[k]], c, a))
    return (grid(["optimizer", "variant", "val loss", "gap to sync",
                  "share recovered"],
                 rows) + "\n\nEach mitigation against the uncorrected async run "
            "(mitigation − async; negative: the mitigation lowers the loss):\n\n"
            + _comparisons(R, cmp, ["optimizer", "variant"]))


def updates(R, cell: str) -> str:
    """Updates × sequences per update of a cell's runs, from their configs and the schedule
    registry (PipeDream makes one update per microbatch)."""
    for r in R.get(cell, {}).values():
        cfg = r.get("config", {})
        try:
            steps, batch = cfg["train"]["steps"], cfg["train"]["batch_size"]
            m, sched = cfg["pipeline"]["microbatches"], cfg["pipeline"]["schedule"]
        except KeyError:
            return "—"
        k = get_spec(sched).updates_per_step(m)
        return f"{steps * k} × {batch // k}"
    return "—"


def table4(R) -> str:
    """Table 4: 2BW and PipeDream at P = 2…16 on the deep model, each against the synchronous
    reference; the updates column shows PipeDream's update count (one per microbatch)."""
    ref = _tc.deep_name(_tc.DEPTH_OPT, "sync")
    rows, cmp = [], []
    for P in _tc.DEPTHS:
        b, p = (_tc.deep_name(_tc.DEPTH_OPT, s, P) for s in ("2bw", "pipedream"))
        rows.append([P, loss(R, b), loss(R, p), updates(R, p), P - 1])
        cmp += [([P, "2BW"], b, ref), ([P, "PipeDream"], p, ref)]
    return "\n".join([
        f"Reference (synchronous, {LABEL[_tc.DEPTH_OPT]}, updates × sequences "
        f"{updates(R, ref)}): {loss(R, ref)}. 2BW delays every stage by one step; PipeDream "
        "delays stage s (of P) by P − 1 − s steps and makes one update per microbatch (its "
        "updates column: updates × sequences per update).", "",
        grid(["P", "2BW", "PipeDream", "PipeDream updates", "max delay"], rows), "",
        "Each schedule against the synchronous reference (schedule − sync):", "",
        _comparisons(R, cmp, ["P", "schedule"])])


def table5(R, tier) -> str:
    o = _tc.BATCH_OPT
    rows, cmp = [], []
    for b in _tc.BATCHES:
        v = None if b == _tc.BASE_BATCH else b
        s, a = _tc.name(o, "sync", batch=v), _tc.name(o, "async", batch=v)
        rows.append([b, b * tier.seq_len, loss(R, s), loss(R, a)])
        cmp.append(([b], a, s))
    return (grid(["batch (sequences)", "tokens/step", "sync", "async"], rows)
            + "\n\nasync − sync:\n\n" + _comparisons(R, cmp, ["batch"]))


def table7(R) -> str:
    rows, cmp = [], []
    for o in ("adamw", "muon"):
        for lr in (None, _tc.LOWER_LR[o]):
            s, a, e = (_tc.name(o, m, lr=lr) for m in ("sync", "async", "ef"))
            lab = lr_of(R, s) if lr is None else f"{lr:g}"
            rows.append([LABEL[o], lab, loss(R, s), loss(R, a), loss(R, e),
                         share_val(R, s, a, e)])
            cmp += [([LABEL[o], lab, "async − sync"], a, s), ([LABEL[o], lab, "EF − sync"], e, s)]
    return (grid(["optimizer", "lr", "sync", "async", "async + EF", "EF recovers"], rows)
            + "\n\n" + _comparisons(R, cmp, ["optimizer", "lr", "comparison"]))


LMO_METHODS = {"muon": "spectral-norm ball", "lion": "ℓ∞ ball (sign)"}


def table6(R) -> tuple[str, list[tuple[float, float, str]]]:
    """Table 6: the relative drift ρ̄ of the async and async + EF runs beside EF's measured
    effect (a Frobenius ratio, not T2's spectral drift: it does not test T2)."""
    rows, pts = [], []
    for o in OPTIMIZERS:
        s, a, e = (_tc.name(o, m) for m in ("sync", "async", "ef"))
        da, de = drift(R, a), drift(R, e)
        rec, _ = share(R, s, a, e)
        rows.append([LABEL[o], values(da, 3), values(de, 3), share_val(R, s, a, e),
                     verdict(pair(R, e, a)), LMO_METHODS.get(o, "no")])
        if da and rec is not None:
            pts.append((statistics.fmean(da), rec, o))
    lines = [grid(["optimizer", "ρ̄ async", "ρ̄ async + EF", "EF recovers", "EF − async",
                   "LMO (T2)"], rows)]
    if len(pts) >= 3:
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        lines += ["", minus(f"Pearson correlation of drift and % recovered over {len(pts)} "
                            f"optimizers: {pearson(xs, ys):+.2f}; Spearman: "
                            f"{pearson(ranks(xs), ranks(ys)):+.2f}.")]
    return "\n".join(lines), pts


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    for k, i in enumerate(order):
        r[i] = float(k)
    return r


def pearson(xs, ys) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    return sxy / (sx * sy) if sx and sy else float("nan")


def table_gpu(R) -> str:
    """The retired GPU runbook's cells (smollm-135m), when their results exist."""
    rows, cmp = [], []
    for o in ("muon", "adamw"):
        s, a, e = (_tc.gpu135_name(o, m) for m in ("sync", "async", "ef"))
        tok = next((f"{r['final'].get('tokens', 0):,}" for r in R.get(s, {}).values()), "—")
        rows.append([LABEL[o], loss(R, s), loss(R, a), loss(R, e), share_val(R, s, a, e), tok])
        cmp.append(([LABEL[o]], a, s))
    return (grid(["optimizer", "sync", "async (2BW)", "async + EF", "EF recovers",
                  "tokens/run"], rows) + "\n\n" + _comparisons(R, cmp, ["optimizer"]))


def _tokens_scale(overrides: dict, tier) -> float:
    """A cell's training tokens relative to the tier's base run (steps x batch)."""
    steps = float(overrides.get("train.steps", tier.steps))
    batch = float(overrides.get("train.batch_size", _tc.BASE_BATCH))
    return steps / tier.steps * batch / _tc.BASE_BATCH


def progress(R, tier) -> str:
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
            todo = plan([t], None, None, tier)
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


# -- the sections of tables.md (registered in sections.SECTIONS) -----------------------------------
def section_lr(R, tier):
    return section("lr", ["", table_lr(R, tier), ""]), []


def section_1(R, tier):
    t1, order = table1(R)
    ordering = minus(", ".join(f"{LABEL[o]} {g:+.3f}" for o, g in order)) or "—"
    return section("1", [
        "", t1, "", f"Gap ordering (largest first): {ordering}.", "",
        "Gap async − sync over training (validation loss at each evaluation, seed means):", "",
        table1_over_time(R), "",
        "How flat the synchronous validation loss is at the end (the drop over the last fifth "
        "of the run, next to the drop over the whole run):", "", table_flatness(R), "",
        "The paper (360M, FineWeb-Edu):", "", table_paper(), ""]), []


def section_2(R, tier):
    return section("2", ["", table2(R), ""]), []


def section_3(R, tier):
    return section("3", ["", table3(R, tier), ""]), []


def section_4(R, tier):
    return section("4", [
        "", "PipeDream makes one optimizer update per microbatch (the schedule registry's "
        "`updates_per_step`), so its cells make more updates, each on fewer sequences, than "
        "the synchronous and 2BW cells (column *updates × sequences*): its comparisons with "
        "them mix the delay with the update count.", "", table4(R), ""]), []


def section_5(R, tier):
    return section("5", ["", table5(R, tier), ""]), []


def section_6(R, tier):
    return section("6", ["", table6(R)[0], ""]), []


def section_7(R, tier):
    return section("7", ["", table7(R), ""]), []


def section_gpu135(R, tier):
    if not any(c.startswith("gpu135-") for c in R):
        return [], []
    return section("gpu135", ["", table_gpu(R), ""]), []
