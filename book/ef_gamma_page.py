r"""Generated content of the book page ``theory/ef_gamma.md``: EF(γ), the theory-tuned Error
Feedback :math:`x_{t+1} = x_t - (1+\gamma)u_t + \gamma u_{t-1}`.

Every number comes from :mod:`theory.stability` and :mod:`theory.ef_gamma_closed` (the
tables, the critical steps, the closed form and its certificate), from :mod:`asyncpp.delay`
(the plotted γ* curves, which ``verify/`` checks against the theory's closed form and its
numeric search), from :mod:`theory.nesterov` (the look-ahead against EF), or from the
stability-edge experiment's ``results.json``; nothing is typed in by hand.
"""

from __future__ import annotations

import numpy as np

BETAS = (0.0, 0.5, 0.9, 0.95, 0.98, 0.99)
TAUS = (1, 2, 3)


def table_rows(betas=BETAS, taus=TAUS) -> list[dict]:
    """One row per (τ, β): c* synchronous / none / EF / EF(τ) / EF(γ*), γ*, and the ratios."""
    from theory import stability as T3

    rows = []
    for tau in taus:
        for b in betas:
            cert = T3.certify_optimal_gamma(b, tau)  # (calls optimal_gamma itself)
            g, cg = cert["gamma_star"], cert["c_star"]
            rows.append({
                "tau": tau, "beta": b,
                "sync": T3.critical_step(b, 0),
                "none": T3.critical_step(b, tau, False),
                "ef": T3.critical_step(b, tau, True),
                "ef_tau": T3.critical_step(b, tau, True, gamma=float(tau)),
                "gamma_star": g, "ef_gamma_star": cg,
                "certified": bool(cert["certified"]),
            })
    return rows


def table_md(rows=None) -> str:
    """The book table: c* for none / EF / EF(τ) / EF(γ*) beside the synchronous 2(1+β)/(1−β)."""
    import asyncpp_book as ab

    rows = table_rows() if rows is None else rows
    steps = [[r["tau"], r["beta"], r["sync"], r["none"], r["ef"], r["ef_tau"]] for r in rows]
    best = [[r["tau"], r["beta"], r["gamma_star"], r["ef_gamma_star"],
             r["ef_gamma_star"] / r["ef"], "yes" if r["certified"] else "**no**"] for r in rows]
    return ("**The critical step $c^*$ per correction**\n\n"
            + ab.md_table(["τ", "β", "sync", "none", "EF (γ = 1)", "EF (γ = τ)"], steps, "rrrrrr")
            + "\n\n**EF(γ\\*): γ\\*, its critical step and its gain over EF**\n\n"
            + ab.md_table(["τ", "β", "γ*", "EF(γ*)", "EF(γ*) / EF", "certified"], best,
                          "rrrrrc"))


def limits_md(taus=(1, 2, 3, 4, 5)) -> str:
    """lim γ* and lim (1−β)c* as β → 1, beside the synchronous limit 4."""
    import asyncpp_book as ab

    from theory import stability as T3

    body = []
    for tau in taus:
        g, k = T3.beta_one_limit(tau)
        body.append([tau, g, k, 4.0 / k])
    return ab.md_table(["τ", "lim γ*", "lim (1−β)c*(γ*)", "sync / EF(γ*) as β → 1"], body,
                       "rrrr")


def _f(x, d=3) -> str:
    return f"{x:.{d}g}"


def columns_md() -> str:
    """The paragraph that reads the table by columns, its numbers computed."""
    from theory import stability as T3

    b_hi = 1 - 1e-6
    lim = {tau: T3.critical_step(b_hi, tau, True) for tau in (2, 3)}
    b4 = 0.9999
    ce = T3.critical_step(b4, 1, True)
    scaled = ce * (1 - b4) ** 0.5
    return (
        "Read it by columns. Without a correction, a delay caps the stable step at "
        "$\\eta h \\le 1$ whatever β. The paper's EF lifts it for τ = 1, like "
        "$1/\\sqrt{1-\\beta} - 1/2$ (steps SC13–SC14 of T3[τ=1, EF] bound the remainder by "
        f"$\\sqrt{{1-\\beta}}/8$; at β = {b4:g}, $c^*\\sqrt{{1-\\beta}}$ = {scaled:.4f}), "
        "but for τ ≥ 2 it stays bounded: "
        f"{lim[2]:.3f} for τ = 2 and {lim[3]:.3f} for τ = 3 at β = 1 − 10⁻⁶. The τ-scaled EF "
        "grows like $1/\\sqrt{1-\\beta}$. EF(γ*) grows like $K_\\tau/(1-\\beta)$, the "
        "synchronous method's rate, down by a constant factor that depends on τ only:")


def tau1_beta0_md() -> str:
    """The τ = 1, β = 0 remark, its numbers computed."""
    from theory import stability as T3

    g, c = T3.optimal_gamma(0.0, 1)
    return (f"At β = 0 it gives γ* = {_f(g)}: without momentum the best EF for one step of "
            f"delay is none at all (c* = {_f(c)} against EF's "
            f"{_f(T3.critical_step(0.0, 1, True))}).")


def closed_form_md(betas=(0.9, 0.95, 0.99), taus=(1, 2, 3)) -> str:
    """γ* and c* from the closed form at a few β (the closing table)."""
    import asyncpp_book as ab

    from theory import ef_gamma_closed as EG

    body = []
    for tau in taus:
        for b in betas:
            g, c = EG.optimal_gamma_closed(b, tau)
            body.append([tau, b, f"{g:.4f}", f"{c:.4f}"])
    return ab.md_table(["τ", "β", "γ*", "c* = p*/(1−β)"], body, "rrrr")


def certificate_md(taus=None, betas=None) -> str:
    """The exact certificate of :func:`theory.ef_gamma_closed.certify` on its grid."""
    import asyncpp_book as ab
    import sympy as sp

    from theory import ef_gamma_closed as EG

    taus = EG.TAUS if taus is None else taus
    betas = EG.CERT_BETAS if betas is None else betas
    body = []
    for tau in taus:
        certs = [EG.certify(sp.Rational(b), tau) for b in betas]
        rel = max(c["p_hat"] / c["p_tilde"] - 1 for c in certs)
        body.append([tau, len(certs), sum(c["certified"] for c in certs), f"{rel:.1e}"])
    return (ab.md_table(["τ", "β certified", "of them passed", "largest p̂/p̃ − 1"], body,
                        "rrrr")
            + f"\n\nβ ∈ {{{', '.join(betas)}}} (exact rationals).")


def tau2_limits_md() -> str:
    """τ = 2 as β → 1, from the sympy closed form (exact) and the product (β = 1 − 10⁻⁷)."""
    import math

    from asyncpp.delay.ef_gamma import optimal_ef_critical_step, optimal_ef_gamma

    k2, g2 = (4 * math.sqrt(6) - 9) / 9, (9 + 4 * math.sqrt(6)) / 5
    b = 1 - 1e-7
    return (f"Numerically $K_2$ = {k2:.6f} and the limit of γ* is {g2:.6f}; the product's "
            f"closed form at β = 1 − 10⁻⁷ gives (1−β)c* = "
            f"{optimal_ef_critical_step(b, 2) * (1 - b):.6f} and γ* = "
            f"{optimal_ef_gamma(b, 2):.6f}.")


def nesterov_vs_ef_md(taus=(1, 2, 3)) -> str:
    """What holds between Nesterov's look-ahead and EF / EF(γ*) on a fine β grid."""
    from theory import stability as T3
    from theory.nesterov import comparison, critical_step_nesterov, fine_comparison
    from theory.stability import optimal_gamma

    fcs = {tau: fine_comparison(tau) for tau in taus}
    fc1 = fcs[taus[0]]
    ivs = "; ".join(f"τ = {t}: β ∈ ({fc['below_ef'][0][0]:.3f}, {fc['below_ef'][0][1]:.3f})"
                    for t, fc in fcs.items() if fc["below_ef"])
    gaps = "; ".join(f"τ = {t}: {100 * fc['gap_max_low']:.1f} % at β = {fc['gap_beta_low']:.2f}"
                     for t, fc in fcs.items())
    gaps_hi = "; ".join(f"τ = {t}: {100 * fc['gap_max']:.1f} % at β = {fc['gap_beta']:.3f}"
                        for t, fc in fcs.items())
    b7 = 0.7
    n = fc1["n"]
    g_open = ", ".join(f"{optimal_gamma(fc['below_ef'][0][0], t)[0]:.2f}"
                       for t, fc in fcs.items() if fc["below_ef"])
    coarse = comparison()
    above = sum(r["nesterov_gt_ef"] for r in coarse)
    return (
        ("On the table's β the look-ahead's critical step is above EF's, but not between them."
         if above == len(coarse) else
         f"On {above} of the table's {len(coarse)} (β, τ) the look-ahead's critical step is "
         "above EF's.")
        + f" On {n} equispaced β in [0, {fc1['beta_max']:g}] it is below the paper's EF "
        f"on one interval per delay ({ivs}). Each interval opens exactly where "
        "$\\kappa_\\tau(\\beta) = 1$, where the look-ahead *is* the paper's EF; there γ* is "
        f"{g_open} (τ = {', '.join(str(t) for t in fcs)}), so κ, once above 1, is farther from "
        "γ* than the paper's γ = 1. At τ = 1, "
        f"β = {b7:g}: {critical_step_nesterov(b7, 1):.3f} against EF's "
        f"{T3.critical_step(b7, 1, True):.3f}. Its shortfall from EF(γ*) for β ≤ "
        f"{fc1['split']:g} is at most {gaps}; up to β = {fc1['beta_max']:g} it is at most "
        f"{gaps_hi}. It is never above EF(γ*) "
        f"({sum(fc['above_ef_gamma_star'] for fc in fcs.values())} grid points out of "
        f"{n * len(fcs)}), and that holds by definition: γ* maximises the critical step "
        "over all γ, and κ is one γ. Unlike EF(γ*), the look-ahead needs no theory-tuned "
        "coefficient: κ follows from β and τ alone.")


def stability_edge_verdict_md() -> str:
    """The stability-edge verdict with its numbers read from ``results.json``."""
    import json

    import asyncpp_book as ab

    path = ab.repo_root() / "experiments" / "stability_edge" / "results.json"
    if not path.exists():
        return ab.not_yet("the stability-edge experiment",
                          "python experiments/stability_edge.py")
    res = json.loads(path.read_text())
    cells, pred = res["cells"], res["predictions"]

    def edge(o, b, m):
        c = cells.get(f"{o}/{b}/{m}")
        return None if not c or c.get("no_edge_below") else c["lr_edge"]

    def ratio(o, b, a, d):
        ea, ed = edge(o, b, a), edge(o, b, d)
        return None if ea is None or ed is None else ea / ed

    betas = sorted(pred, key=float)
    ef_async = [r for o in ("sgd", "adamw") for b in betas
                if (r := ratio(o, b, "ef", "async")) is not None]
    ef_async_t3 = [pred[b]["ratios"]["ef/async"] for b in betas]
    res_max = max(c["resolution"] for c in cells.values() if c.get("resolution"))
    hi = betas[-1]
    sgd_g = ratio("sgd", hi, "ef_gamma_star", "ef")
    ad_g = ratio("adamw", hi, "ef_gamma_star", "ef")
    t3_g = pred[hi]["ratios"]["ef_gamma_star/ef"]
    s_lo, s_hi = edge("sgd", betas[0], "sync"), edge("sgd", hi, "sync")
    t3_sync = pred[hi]["c_star"]["sync"] / pred[betas[0]]["c_star"]["sync"]
    muon = [c for k, c in cells.items() if k.startswith("muon/")]
    muon_none = muon and all(c.get("no_edge_below") for c in muon)
    muon_max = max((c["lr_edge"] for c in muon), default=float("nan"))
    out = [
        "Verdict: T3 holds qualitatively and fails quantitatively. For SGD-momentum (T3's "
        "model) and AdamW the order async < EF ≤ EF(γ*) < sync holds. But EF's gain over no "
        f"correction is {min(ef_async):.2g}–{max(ef_async):.2g}×, against T3's "
        f"{min(ef_async_t3):.2g}–{max(ef_async_t3):.2g}×."]
    if sgd_g is not None:
        out.append(f"For SGD-momentum at β = {hi}, EF(γ*)'s edge is {sgd_g:.2f}× EF's, within "
                   f"the bisection's resolution (a factor {res_max:.3g}), where T3 predicts "
                   f"{t3_g:.2f}×.")
    if s_lo and s_hi:
        out.append(f"The synchronous edge moves by a factor {s_hi / s_lo:.2f} from β = "
                   f"{betas[0]} to {hi}, where T3 says {t3_sync:.2f}.")
    out.append("So on this network under this criterion, the linear edge of the sharpest "
               "direction is not what ends training.")
    if ad_g is not None:
        out.append(f"AdamW at β = {hi}: EF(γ*)/EF = {ad_g:.2f}×, against T3's {t3_g:.2f}×.")
    if muon_none:
        out.append(f"Muon showed no divergence edge in any mode up to lr {muon_max:.3g}, so "
                   "the test does not apply to it.")
    return " ".join(out)


def figure():
    """Left: c*(β) for τ = 1, 2, 3 (none, EF, EF(τ), EF(γ*)) and the synchronous step.
    Middle: γ*(β). Right: c*(γ) at β = 0.9, with γ = 1, τ and γ* marked."""
    import matplotlib.pyplot as plt

    from asyncpp.delay import optimal_ef_gamma
    from theory import stability as T3

    betas = np.linspace(0.0, 0.99, 24)
    fig, axes = plt.subplots(1, 3, figsize=(7, 3.6))
    ax = axes[0]
    ax.plot(betas, [T3.critical_step(b, 0) for b in betas], "k-", label="synchronous")
    colors = {1: "C0", 2: "C1", 3: "C2"}
    gstar = {}
    for tau in TAUS:
        col = colors[tau]
        gstar[tau] = [optimal_ef_gamma(float(b), tau) for b in betas]
        ax.plot(betas, [T3.critical_step(b, tau, False) for b in betas], ":", color=col)
        ax.plot(betas, [T3.critical_step(b, tau, True) for b in betas], "--", color=col)
        ax.plot(betas, [T3.critical_step(b, tau, True, gamma=g)
                        for b, g in zip(betas, gstar[tau])], "-", color=col,
                label=f"τ = {tau}")
    ax.set_yscale("log")
    ax.set_xlabel("momentum β")
    ax.set_ylabel("c* = η*h")
    ax.set_title("critical step")
    ax.legend(fontsize=9)
    ax = axes[1]
    for tau in TAUS:
        ax.plot(betas, gstar[tau], "-", color=colors[tau], label=f"τ = {tau}")
        ax.axhline(T3.beta_one_limit(tau)[0], color=colors[tau], lw=0.6, ls=":")
    ax.plot(betas, 2 * betas / (2 - betas) ** 2, "k--", lw=0.8, label="2β/(2−β)²")
    ax.set_xlabel("momentum β")
    ax.set_ylabel("γ*")
    ax.set_title("optimal γ*")
    ax.legend(fontsize=9)
    ax = axes[2]
    b = 0.9
    gammas = np.linspace(0.0, 6.0, 121)
    for tau in TAUS:
        cs = [T3.critical_step(b, tau, True, gamma=g) for g in gammas]
        ax.plot(gammas, cs, "-", color=colors[tau], label=f"τ = {tau}")
        g, c = T3.optimal_gamma(b, tau)
        ax.plot([g], [c], "o", color=colors[tau])
        ax.plot([1.0], [T3.critical_step(b, tau, True)], "s", color=colors[tau], mfc="none")
    ax.set_xlabel("γ")
    ax.set_ylabel("c*(0.9, τ, γ)")
    ax.set_title("β = 0.9")
    ax.legend(fontsize=9)
    for a in axes:
        a.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def stability_edge_md() -> str:
    """The stability-edge experiment's tables (``experiments/stability_edge/results.json``,
    formatted by ``experiments/stability_edge.py --report``), or a note that it has not run."""
    import importlib.util
    import json

    import asyncpp_book as ab

    root = ab.repo_root()
    path = root / "experiments" / "stability_edge" / "results.json"
    if not path.exists():
        return ab.not_yet("the stability-edge experiment",
                          "python experiments/stability_edge.py")
    spec = importlib.util.spec_from_file_location(
        "stability_edge", root / "experiments" / "stability_edge.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    results = json.loads(path.read_text())
    cells, preds = results.get("cells", {}), results.get("predictions", {})
    keys = sorted({tuple(k.split("/")[:2]) for k in cells})
    names = {"sync": "sync", "async": "async", "ef": "EF", "ef_gamma_star": "EF(γ\\*)"}
    edges = []
    for name, b in keys:
        row = [cells.get(f"{name}/{b}/{m}") for m in mod.MODES]
        edges.append([name, b] + [
            "—" if not c else f"≥ {c['lr_edge']:.3g}" if c.get("no_edge_below")
            else f"{c['lr_edge']:.3g}" for c in row]
            + [str(sum(c["runs"] for c in row if c)),
               "yes" if all(c["monotone"] for c in row if c) else "**no**"])
    out = ["**The largest stable lr per mode** (≥: no edge below the search's ceiling)",
           ab.md_table(["optimizer", "β"] + [names[m] for m in mod.MODES]
                       + ["runs", "monotone"], edges, "lr" + "r" * len(mod.MODES) + "rc")]
    betas = sorted({b for _, b in keys}, key=float)
    for opt in sorted({n for n, _ in keys}):
        body = []
        for a, d in mod.RATIOS:
            row = [f"{names[a]} / {names[d]}"]
            for b in betas:
                ca, cd = cells.get(f"{opt}/{b}/{a}"), cells.get(f"{opt}/{b}/{d}")
                row.append("—" if not (ca and cd) else "no edge"
                           if ca.get("no_edge_below") or cd.get("no_edge_below")
                           else f"{ca['lr_edge'] / cd['lr_edge']:.3g}")
                pred = preds.get(b, {}).get("ratios", {}).get(f"{a}/{d}", float("nan"))
                row.append(f"{pred:.3g}")
            body.append(row)
        head = ["ratio"] + [h for b in betas for h in (f"β = {b}", "T3")]
        out += [f"**{opt}: measured ratios of the edges, T3's beside them**",
                ab.md_table(head, body, "l" + "r" * (2 * len(betas)))]
    return "\n\n".join(out)


__all__ = ["BETAS", "TAUS", "certificate_md", "closed_form_md", "columns_md", "figure",
           "limits_md", "nesterov_vs_ef_md", "stability_edge_md", "stability_edge_verdict_md",
           "table_md", "table_rows", "tau1_beta0_md", "tau2_limits_md"]
