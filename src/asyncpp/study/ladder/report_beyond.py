"""Tables beyond the paper: EF(γ*) (tables efg, efg-beta, efg-depth), the Nesterov delay
correction at depth (nag) and WPipe against 2BW (wpipe). Stage delays come from the schedule
registry (``tables_cells.stage_delays``), never typed."""

from __future__ import annotations

import json

from asyncpp.delay.ef_gamma import optimal_ef_gamma

from .report_common import (
    COMPARE_HEAD,
    HERE,
    LABEL,
    Val,
    compare_cells,
    grid,
    loss,
    minus,
    pair,
    section,
    share,
    share_diff,
    share_val,
    vals,
)
from .report_common import tc as _tc

NAG_OPTIMIZERS = ("muon", "adamw")
NAG_P = _tc.NAG_P
NAG_LABEL = {"2bw": "2BW", "pipedream": "PipeDream", "wpipe": "WPipe"}
NAG_MODES = (("none", "none"), ("ef", "EF"), ("efg", "EF(γ*)"), ("nag", "Nesterov"))
# β (momentum for Muon, β₁ otherwise) of each optimizer in these runs: optimizer.momentum /
# optimizer.beta1 of the configs (src/asyncpp/train/config.py: beta1 = 0.9, momentum = 0.95;
# Adan and SOAP get beta1 as their β₁ through train/components.py). The JSON's config wins.
RUN_BETA = {"muon": 0.95, "adamw": 0.9, "adan": 0.9, "soap": 0.9}


def run_beta(R, o: str) -> float:
    for r in R.get(_tc.name(o, "sync"), {}).values():
        opt = r.get("config", {}).get("optimizer", {})
        key = "momentum" if o == "muon" else "beta1"
        if opt.get(key) is not None:
            return float(opt[key])
    return RUN_BETA[o]


def share_diff_text(p, digits: int = 0) -> str:
    """EF(γ*)'s share minus EF's in percentage points, the difference of the two shares the
    table prints with Fieller's interval: "+9 pp [−3, +21], 3/3" (``protocol.ShareDiff``)."""
    return "—" if p is None else p.text(digits)


def _efg_tables(R, rows: list[tuple[list[str], str, str, str, str]], head: list[str]) -> str:
    """Losses, shares and the paired EF(γ*) − EF comparison of rows (labels, s, a, e, g)."""
    losses = grid([*head, "sync", "async", "async + EF", "async + EF(γ*)"],
                  [[*lab, loss(R, s), loss(R, a), loss(R, e), loss(R, g)]
                   for lab, s, a, e, g in rows])
    shares = grid([*head, "EF recovers", "EF(γ*) recovers",
                   "EF(γ*) − EF share [Fieller 95 %], seeds agreeing"],
                  [[*lab, share_val(R, s, a, e), share_val(R, s, a, g),
                    share_diff_text(share_diff(R, s, a, e, g))] for lab, s, a, e, g in rows])
    cmp = grid([*head, *COMPARE_HEAD], [[*lab, *compare_cells(R, g, e)]
                                        for lab, s, a, e, g in rows])
    return "\n\n".join([losses, shares, "EF(γ*) − EF, final val loss (negative: EF(γ*) lower):",
                        cmp])


def table_efg(R) -> str:
    """Table efg: EF(γ*) beside Table 1's sync, async and EF."""
    return _efg_tables(R, [([LABEL[o]], *(_tc.name(o, m) for m in ("sync", "async", "ef",
                                                                    "efg")))
                           for o in _tc.EFG_OPTIMIZERS], ["optimizer"])


def table_efg_beta(R) -> str:
    """Table efg-beta: Muon's β sweep with EF and EF(γ*) (β = 0.95 is Table 1's cells and the
    efg table's muon-efg; sync and async are Table 2's)."""
    rows = []
    for b in _tc.BETAS:
        v = _tc.beta_variant("muon", b)
        rows.append(([f"{b:g}", f"{2 * b / (2 - b) ** 2:.2f}"],
                     *(_tc.name("muon", m, beta=v) for m in ("sync", "async", "ef", "efg"))))
    return _efg_tables(R, rows, ["Muon momentum β", "γ* (τ = 1)"])


def table_efg_depth(R) -> str:
    """Table efg-depth (deep model, Muon): PipeDream (stage delays τ_s = P−1−s) uncorrected,
    with EF (γ = 1) and with per-stage EF(γ*(β, τ_s)), against 2BW (τ = 1 every stage) at the
    same P; share closed = (PipeDream − mode)/(PipeDream − 2BW)."""
    o, rows, shares, cmp = _tc.DEPTH_OPT, [], [], []
    for P in (4, 8):
        b, p = _tc.deep_name(o, "2bw", P), _tc.deep_name(o, "pipedream", P)
        e, g = _tc.deep_name(o, "pipedream", P, "ef"), _tc.deep_name(o, "pipedream", P, "efg")
        rows.append([P, loss(R, b), loss(R, p), loss(R, e), loss(R, g)])
        shares.append([P, share_val(R, b, p, e), share_val(R, b, p, g),
                       share_diff_text(share_diff(R, b, p, e, g))])
        cmp += [[P, "PipeDream − 2BW", *compare_cells(R, p, b)],
                [P, "EF − PipeDream", *compare_cells(R, e, p)],
                [P, "EF(γ*) − EF", *compare_cells(R, g, e)]]
    ref = _tc.deep_name(o, "sync")
    return "\n\n".join([
        f"Reference (synchronous, P = 2, {LABEL[o]}): {loss(R, ref)}",
        grid(["P", "2BW", "PipeDream", "PipeDream + EF", "PipeDream + EF(γ*)"], rows),
        grid(["P", "EF closes", "EF(γ*) closes",
              "EF(γ*) − EF share [Fieller 95 %], seeds agreeing"], shares),
        grid(["P", "comparison", *COMPARE_HEAD], cmp)])


def nag_sync(o: str) -> str:
    """The synchronous reference of the deep model (P = 2, 1F1B)."""
    return _tc.deep_name(o, "sync")


def nag_cell(o: str, sched: str, corr: str = "none") -> str:
    """Cell of tables nag / wpipe (and Table 4 / efg-depth for Muon's reused cells)."""
    return _tc.deep_name(o, sched, NAG_P, corr)


def _sched_label(sched: str) -> str:
    taus = _tc.stage_delays(sched, NAG_P)
    return f"{NAG_LABEL[sched]} (τ = {','.join(map(str, taus))})"


def table_nag(R) -> str:
    """Table nag (deep model, P = 4): the Nesterov delay correction against EF and EF(γ*) for
    Muon and AdamW under 2BW and PipeDream; share recovered = (none − mode)/(none − sync)
    against the synchronous reference of the same optimizer."""
    losses, shares, cmp = [], [], []
    for o in NAG_OPTIMIZERS:
        s = nag_sync(o)
        for sched in ("2bw", "pipedream"):
            c = {m: nag_cell(o, sched, m) for m, _ in NAG_MODES}
            lab = [LABEL[o], _sched_label(sched)]
            losses.append([*lab, *(loss(R, c[m]) for m, _ in NAG_MODES)])
            shares.append([*lab, *(share_val(R, s, c["none"], c[m]) for m, _ in NAG_MODES[1:])])
            cmp += [[*lab, "none − sync", *compare_cells(R, c["none"], s)],
                    [*lab, "Nesterov − EF(γ*)", *compare_cells(R, c["nag"], c["efg"])],
                    [*lab, "Nesterov − EF", *compare_cells(R, c["nag"], c["ef"])],
                    [*lab, "Nesterov − sync", *compare_cells(R, c["nag"], s)]]
    refs = "; ".join(f"{LABEL[o]} {loss(R, nag_sync(o))}" for o in NAG_OPTIMIZERS)
    return "\n\n".join([
        f"Synchronous references (P = 2): {refs}.",
        grid(["optimizer", "schedule", *(lab for _, lab in NAG_MODES)], losses),
        grid(["optimizer", "schedule", *(f"{lab} recovers" for _, lab in NAG_MODES[1:])],
             shares),
        grid(["optimizer", "schedule", "comparison", *COMPARE_HEAD], cmp)])


def gap_ratio(R, s: str, a: str, b: str, seeds=None) -> tuple[float | None, list[float], int]:
    """(gap a − s over gap b − s on the seed means, the per-seed ratios, n) over the seeds the
    three cells share."""
    vs, va, vb = (vals(R, x, seeds) for x in (s, a, b))
    common = sorted(set(vs) & set(va) & set(vb))
    if not common:
        return None, [], 0
    m = [sum(v[k] for k in common) / len(common) for v in (vs, va, vb)]
    if not all(map(lambda x: x < float("inf"), m)) or abs(m[2] - m[0]) < 1e-12:
        return None, [], len(common)
    per = [(va[k] - vs[k]) / (vb[k] - vs[k]) for k in common if abs(vb[k] - vs[k]) >= 1e-12]
    return (m[1] - m[0]) / (m[2] - m[0]), per, len(common)


def _ratio_val(R, s: str, a: str, b: str) -> Val:
    x, per, n = gap_ratio(R, s, a, b)
    if x is None:
        return Val("—")
    return Val(minus(f"{x:.2f} ({', '.join(f'{p:.2f}' for p in per)})"), n)


def table_wpipe(R) -> str:
    """Table wpipe (deep model, 4 partitions): WPipe with and without EF against 2BW (table
    nag's cells) and the synchronous reference; EF's share per schedule and the ratio of the
    gaps to sync, gap_WPipe / gap_2BW (seed means; per seed in parentheses)."""
    losses, shares, cmp = [], [], []
    for o in NAG_OPTIMIZERS:
        s = nag_sync(o)
        w, we = nag_cell(o, "wpipe"), nag_cell(o, "wpipe", "ef")
        b, be = nag_cell(o, "2bw"), nag_cell(o, "2bw", "ef")
        losses.append([LABEL[o], loss(R, s), loss(R, w), loss(R, we), loss(R, b), loss(R, be)])
        shares.append([LABEL[o], share_val(R, s, w, we), share_val(R, s, b, be),
                       _ratio_val(R, s, w, b)])
        cmp += [[LABEL[o], "WPipe − sync", *compare_cells(R, w, s)],
                [LABEL[o], "2BW − sync", *compare_cells(R, b, s)],
                [LABEL[o], "WPipe − 2BW", *compare_cells(R, w, b)]]
    return "\n\n".join([
        grid(["optimizer", "sync (P = 2)", "WPipe", "WPipe + EF", "2BW", "2BW + EF"], losses),
        grid(["optimizer", "EF recovers, WPipe", "EF recovers, 2BW", "gap WPipe / gap 2BW"],
             shares),
        grid(["optimizer", "comparison", *COMPARE_HEAD], cmp)])


def _stage_coefficients(b: float, taus) -> tuple[str, str]:
    """(κ per stage, γ* per stage) as text at momentum b; γ* of the product
    (``asyncpp.delay.ef_gamma.optimal_ef_gamma``, which verify/ checks against
    theory/stability.py). Both are 0 at τ = 0 (an undelayed stage is not corrected)."""
    kappa = [sum(b ** k for k in range(1, t + 2)) if t else 0.0 for t in taus]
    gam = [optimal_ef_gamma(b, t) if t else 0.0 for t in taus]
    gtext = ", ".join(f"{g:.2f}" for g in gam)
    return ", ".join(f"{k:.2f}" for k in kappa), gtext


def nag_caption(R) -> str:
    parts = []
    for o in NAG_OPTIMIZERS:
        b = run_beta(R, o)
        for sched in ("2bw", "pipedream"):
            k, g = _stage_coefficients(b, _tc.stage_delays(sched, NAG_P))
            parts.append(f"{LABEL[o]} (β = {b:g}), {NAG_LABEL[sched]}: κ = {k}; γ* = {g}")
    d2, dp = (",".join(map(str, _tc.stage_delays(s, NAG_P))) for s in ("2bw", "pipedream"))
    return (f"The deep model cut in P = {NAG_P} stages (simulated), Muon and AdamW, against the "
            "synchronous reference of the same optimizer (P = 2, 1F1B; Muon's is Table 4's "
            "`deep-sync`; Muon's uncorrected cells are Table 4's and its PipeDream EF and "
            f"EF(γ*) cells are efg-depth's). Stage delays: 2BW τ = {d2}; PipeDream "
            f"$\\tau_s = P - 1 - s$ = {dp}. Corrections, with $u_t$ the update applied at "
            "step $t$: EF "
            "$x_{t+1} = x_t - 2u_t + u_{t-1}$; EF(γ*) $x_{t+1} = x_t - (1+\\gamma)u_t + "
            "\\gamma u_{t-1}$ with $\\gamma = \\gamma^*(\\beta, \\tau_s)$ of T3 per stage "
            "(`--delay.ef_gamma auto`); Nesterov (`--delay.correction nesterov`) takes the "
            "gradient at the look-ahead $\\theta = x + \\kappa(x - x_\\text{prev})$ with "
            "$\\kappa = \\beta + \\dots + \\beta^{\\tau+1}$, which on the stored weights is "
            "EF with $\\gamma = \\kappa$ (`src/asyncpp/delay/nesterov.py`). β is the "
            "optimizer's momentum (Muon's momentum, AdamW's β₁); per stage, " + "; ".join(parts)
            + ". The share a correction recovers is "
            "$(L_\\text{none} - L_\\text{corrected})/(L_\\text{none} - L_\\text{sync})$ on the "
            "seed means over the "
            "seeds the three cells share, with the seeds' own shares in parentheses.")


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
    dw, d2 = (",".join(map(str, _tc.stage_delays(s, NAG_P))) for s in ("wpipe", "2bw"))
    return (f"The deep model cut in {NAG_P} partitions (simulated). Delays: WPipe τ = {dw} (its "
            f"first group of partitions waits one step, its second none), 2BW τ = {d2} (table "
            "nag's cells); EF as in table nag (γ = 1; WPipe's undelayed partitions are not "
            "corrected). EF's share is (schedule − schedule + EF)/(schedule − sync) on the seed "
            "means, and the gap ratio is (WPipe − sync)/(2BW − sync) on the seed means over "
            "the seeds the three cells share (per-seed ratios in parentheses)." + facts)


# -- the sections of tables.md (registered in sections.SECTIONS) -----------------------------------
def section_efg(R, tier):
    return section("efg", [
        "", "EF(γ*) is `--delay.ef_gamma auto` (γ*(β, τ) of T3). The share recovered is (async "
        "− mode)/(async − sync) on the seed means over the seeds all three cells have, with "
        "the seeds' own shares in parentheses; EF(γ*)'s share minus EF's is paired by seed "
        "(percentage points).", "", table_efg(R), ""]), []


def section_efg_depth(R, tier):
    return section("efg-depth", [
        "", "The deep model with Muon; PipeDream's stage s waits τ_s = P − 1 − s steps, 2BW's "
        "every stage 1. The share closed is (PipeDream − mode)/(PipeDream − 2BW) on the seed "
        "means (the seeds' own in parentheses); it has no meaning where PipeDream is not worse "
        "than 2BW (a gap near zero or negative).", "", table_efg_depth(R), ""]), []


def section_wpipe(R, tier):
    return section("wpipe", ["", wpipe_caption(), "", table_wpipe(R), ""]), []


__all__ = ["gap_ratio", "nag_caption", "nag_cell", "nag_sync", "pair", "run_beta", "share",
           "table_efg", "table_efg_beta", "table_efg_depth", "table_nag", "table_wpipe",
           "wpipe_caption"]
