r"""Generated content of the book page ``theory/ef_gamma.md``: EF(γ), the theory-tuned Error
Feedback :math:`x_{t+1} = x_t - (1+\gamma)u_t + \gamma u_{t-1}`.

Every number comes from :mod:`theory.stability` (the table and the critical steps) or from
:mod:`asyncpp.delay` (the plotted γ* curves for τ ≥ 2, which ``verify/`` checks against the
theory's certified maximiser); nothing is typed in by hand.
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
    header = ["τ", "β", "sync 2(1+β)/(1−β)", "none", "EF (γ=1)", "EF(γ=τ)", "γ*",
              "EF(γ*)", "EF(γ*)/EF", "certified"]
    body = [[r["tau"], r["beta"], r["sync"], r["none"], r["ef"], r["ef_tau"],
             r["gamma_star"], r["ef_gamma_star"], r["ef_gamma_star"] / r["ef"],
             "yes" if r["certified"] else "**no**"] for r in rows]
    return ab.md_table(header, body, "rr" + "r" * 7 + "c")


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


def figure():
    """Left: c*(β) for τ = 1, 2, 3 (none, EF, EF(τ), EF(γ*)) and the synchronous step.
    Middle: γ*(β). Right: c*(γ) at β = 0.9, with γ = 1, τ and γ* marked."""
    import matplotlib.pyplot as plt

    from asyncpp.delay import optimal_ef_gamma
    from theory import stability as T3

    betas = np.linspace(0.0, 0.99, 24)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8))
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
                label=f"τ = {tau}: EF(γ*) — / EF - - / none ⋯")
    ax.set_yscale("log")
    ax.set_xlabel("momentum β")
    ax.set_ylabel("critical step c* = η*h")
    ax.set_title("critical step")
    ax.legend(fontsize=7)
    ax = axes[1]
    for tau in TAUS:
        ax.plot(betas, gstar[tau], "-", color=colors[tau], label=f"τ = {tau}")
        ax.axhline(T3.beta_one_limit(tau)[0], color=colors[tau], lw=0.6, ls=":")
    ax.plot(betas, 2 * betas / (2 - betas) ** 2, "k--", lw=0.8, label="2β/(2−β)² (τ = 1)")
    ax.set_xlabel("momentum β")
    ax.set_ylabel("γ*")
    ax.set_title("optimal EF coefficient (dotted: β → 1)")
    ax.legend(fontsize=7)
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
    ax.set_title("β = 0.9: ● γ*, □ the paper's EF")
    ax.legend(fontsize=7)
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
    return mod.report(json.loads(path.read_text()))


__all__ = ["BETAS", "TAUS", "figure", "limits_md", "stability_edge_md", "table_md",
           "table_rows"]
