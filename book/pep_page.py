r"""Generated content of the book page ``theory/pep.md``: exact worst cases of delayed
EMA-momentum SGD over L-smooth functions (performance estimation), beside T3's quadratic edge.

Every number comes from ``theory/pep_delay_results.json``, written by
``python -m theory.pep_delay --write`` (:mod:`theory.pep_delay`; ``verify/test_pep_delay.py``
recomputes a sample of it), or from :mod:`theory.stability` directly; nothing is typed in.
"""

from __future__ import annotations

import json

import numpy as np

#: 7 in at matplotlib's 100 dpi: the 700-px text column, so font sizes are pixels × 100/72
WIDTH_IN = 7.0
FONT = 9.5
COLORS = {"synchronous": "k", "none": "C3", "EF": "C0", "EF(γ*)": "C2"}


def load() -> dict:
    """The committed results (``theory/pep_delay_results.json``)."""
    import asyncpp_book as ab

    path = ab.repo_root() / "theory" / "pep_delay_results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; regenerate it with "
                                "`python -m theory.pep_delay --write`")
    return json.loads(path.read_text(encoding="utf-8"))


def _style():
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": FONT, "legend.fontsize": FONT, "axes.titlesize": FONT,
                         "axes.labelsize": FONT, "xtick.labelsize": FONT,
                         "ytick.labelsize": FONT})


def curves_figure(res: dict):
    """ρ_K = W_K/W_0 against ηL: PEP (solid) and quadratics (dashed), one panel per τ, with
    T3's c* as a dotted vertical line per correction."""
    import matplotlib.pyplot as plt

    from theory import pep_delay as P

    _style()
    fig, axes = plt.subplots(1, 3, figsize=(WIDTH_IN, 3.1), sharey=True)
    w0 = P.initial_worst_case("convex")
    for cv in res["curves"].values():
        ax = axes[cv["tau"]]
        col = COLORS[cv["label"]]
        eta = np.array(cv["eta"])
        ax.plot(eta, np.array(cv["pep"]) / w0, "-", color=col, label=cv["label"])
        ax.plot(eta, np.array(cv["quad"]) / w0, "--", color=col, lw=1)
        ax.axvline(P.quadratic_edge(res["beta"], cv["tau"], cv["gamma"]), color=col, ls=":",
                   lw=1)
    for tau, ax in enumerate(axes):
        ax.axhline(1.0, color="0.5", lw=0.8)
        ax.set_yscale("log")
        ax.set_ylim(1e-2, 1e3)
        ax.set_title(f"τ = {tau}")
        ax.set_xlabel("ηL")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", frameon=False, handlelength=1.2)
    axes[0].set_ylabel(f"$W_{{{res['K_curves']}}}\\,/\\,W_0$")
    fig.tight_layout()
    return fig


def edges_rows(res: dict, beta: float) -> list[dict]:
    """One row per (τ, correction) at ``beta``: c*, and per K the quadratic and PEP edges."""
    rows: dict[tuple, dict] = {}
    for r in res["edges"]:
        if r["beta"] != beta:
            continue
        row = rows.setdefault((r["tau"], r["label"]), {
            "tau": r["tau"], "label": r["label"], "gamma": r["gamma"], "c_star": r["c_star"],
            "quad": {}, "pep": {}, "nc": {}})
        row["quad"][r["K"]] = r["quad_K"]
        row["pep"][r["K"]] = r["pep_convex"]
        if r["pep_nonconvex"] is not None:
            row["nc"][r["K"]] = r["pep_nonconvex"]
    return list(rows.values())


def edges_md(res: dict, beta: float) -> str:
    """The edges table at ``beta``: T3's c*, then quadratic / PEP convex edge at each K, then
    the PEP non-convex edges."""
    import asyncpp_book as ab

    rows = edges_rows(res, beta)
    ks = sorted({k for r in rows for k in r["pep"]})
    kn = sorted({k for r in rows for k in r["nc"]})
    steps = [[r["tau"], r["label"], r["gamma"], r["c_star"]] + [r["nc"][k] for k in kn]
             for r in rows]
    convex = [[r["tau"], r["label"]]
              + [f"{ab.fmt(r['quad'][k])} / **{ab.fmt(r['pep'][k])}**" for k in ks]
              for r in rows]
    return ("**T3's critical step and the non-convex edges**\n\n"
            + ab.md_table(["τ", "correction", "γ", "T3 c*"]
                          + [f"non-convex K = {k}" for k in kn], steps, "rlrr" + "r" * len(kn))
            + "\n\n**The convex edges: quadratics / the whole class** (bold)\n\n"
            + ab.md_table(["τ", "correction"] + [f"K = {k}" for k in ks], convex,
                          "rl" + "r" * len(ks)))


def summary(res: dict) -> dict:
    """The numbers the page's answers quote, computed from the results."""
    out = {}
    rows = edges_rows(res, res["beta"])
    kmax = max(rows[0]["pep"])
    sync = [r for r in rows if r["tau"] == 0][0]
    out["kmax"] = kmax
    out["sync_pep"] = sync["pep"][kmax]
    out["sync_quad"] = sync["quad"][kmax]
    out["sync_cstar"] = sync["c_star"]
    out["sync_share"] = sync["pep"][kmax] / sync["quad"][kmax]
    out["sync_nc"] = max(sync["nc"].items())[1]
    delayed = [r for r in rows if r["tau"] >= 1]
    ks = sorted(rows[0]["pep"])
    out["ks"] = ks
    out["n_delayed"] = len(delayed)
    # per K: how many delayed class edges are within 1 % of the quadratic edge at that K, and
    # the others with their numbers
    out["close"] = {k: [r for r in delayed if r["pep"][k] >= 0.99 * r["quad"][k]] for k in ks}
    out["apart"] = {k: [(r["tau"], r["label"], r["pep"][k], r["quad"][k], r["c_star"])
                        for r in delayed if r["pep"][k] < 0.99 * r["quad"][k]] for k in ks}
    out["close_gap"] = {k: max(1 - r["pep"][k] / r["quad"][k] for r in out["close"][k])
                        for k in ks}
    # the apart ones against min(quadratic edge at K, c*): the class does not share the
    # quadratics' finite-horizon overshoot past c*
    out["apart_vs_min"] = {k: [pep / min(q, c) for (_, _, pep, q, c) in out["apart"][k]]
                           for k in ks}
    # is every such difference one where the quadratic edge at that horizon lies above c*?
    out["apart_above_cstar"] = all(q > c for k in ks for (_, _, _, q, c) in out["apart"][k])
    out["sync_grows"] = all(sync["pep"][a] < sync["pep"][b] for a, b in zip(ks, ks[1:]))
    kn = sorted({k for r in delayed for k in r["nc"]})
    out["kn"] = kn
    out["nc_dev"] = {k: max(abs(r["nc"][k] / r["c_star"] - 1) for r in delayed) for k in kn}
    for tau in (1, 2):
        sc = res["gamma_scan"][f"tau{tau}"]
        g = np.array(sc["gamma"])
        pe, qe, cs = (np.array(sc[k]) for k in ("pep_edge", "quad_edge", "c_star"))
        pf = np.array(sc["pep_fixed"])
        out[f"scan{tau}"] = {
            "gamma_star": sc["gamma_star"],
            "g_pep_edge": float(g[int(np.argmax(pe))]), "pep_edge_max": float(pe.max()),
            "g_quad_edge": float(g[int(np.argmax(qe))]),
            "g_cstar": float(g[int(np.argmax(cs))]),
            "pep_edge_at_gstar": _interp(sc["gamma_star"], g, pe),
            "g_pep_fixed": float(g[int(np.argmin(pf))]), "eta_fixed": sc["eta_fixed"],
            "pep_fixed_min": float(pf.min()),
            "pep_fixed_at_gstar": _interp(sc["gamma_star"], g, pf),
            "step": float(g[1] - g[0]),
        }
    return out


def transient_md(res: dict, beta: float) -> str:
    """One sentence on the edges at a momentum whose transient outlasts the horizons."""
    rows = [r for r in res["edges"] if r["beta"] == beta]
    kmax = max(r["K"] for r in rows)
    last = [r for r in rows if r["K"] == kmax]
    share = [r["pep_convex"] / r["quad_K"] for r in last]
    early = max(max(r["quad_K"], r["pep_convex"]) for r in rows if r["K"] < kmax)
    return (f"Up to K = {kmax // 2} every edge here, quadratic or class, is at most "
            f"{early:.2f}, against c* from {min(r['c_star'] for r in rows):.2f} to "
            f"{max(r['c_star'] for r in rows):.0f}. At "
            f"K = {kmax} the class edges are {100 * min(share):.0f}–{100 * max(share):.0f} % of "
            f"the quadratic ones, below 90 % for {sum(v < 0.9 for v in share)} of the "
            f"{len(share)} methods: during the transient the worst case is mostly not a "
            f"quadratic.")


def gamma_follow_md(res: dict) -> str:
    """Where, in γ, the class edge at K = 8 leaves the quadratic edge at the same horizon."""
    parts = []
    for tau in (1, 2):
        sc = res["gamma_scan"][f"tau{tau}"]
        apart = [(g, pe, q, c) for g, pe, q, c in
                 zip(sc["gamma"], sc["pep_edge"], sc["quad_edge"], sc["c_star"])
                 if pe < 0.95 * q]
        close = len(sc["gamma"]) - len(apart)
        above = all(q > c for _, _, q, c in apart)
        text = (f"at τ = {tau} the class edge is within 5 % of the quadratic edge at {close} "
                f"of {len(sc['gamma'])} values of γ")
        if apart:
            text += (", and more than 5 % below it at γ = "
                     + ", ".join(f"{g:.2f}" for g, *_ in apart)
                     + (", where the quadratic edge lies above c*(γ)" if above else ""))
        parts.append(text)
    return "At horizon 8, " + "; ".join(parts) + "."


def gamma_caption_md(res: dict) -> str:
    """The figure's horizon, momentum and fixed steps."""
    from theory import pep_delay as P

    sc = res["gamma_scan"]
    return (f"The horizon is K = {sc['tau1']['K']} updates and the momentum β = {res['beta']}; "
            f"the fixed step is {P.FIXED_STEP_SHARE} c*(γ*): "
            + ", ".join(f"ηL = {sc[f'tau{t}']['eta_fixed']:.3f} for τ = {t}" for t in (1, 2))
            + ".")


def gamma_long_md(res: dict) -> str:
    """The coarse γ scan at the longer horizon: a table per τ and who wins."""
    import asyncpp_book as ab

    sc_all = res["gamma_scan_long"]
    body = []
    for key in sorted(sc_all):
        sc = sc_all[key]
        for g, c, q, pe in zip(sc["gamma"], sc["c_star"], sc["quad_edge"], sc["pep_edge"]):
            mark = " (γ*)" if g == sc["gamma_star"] else ""
            body.append([sc["tau"], f"{ab.fmt(g)}{mark}", c, q, pe])
    k = next(iter(sc_all.values()))["K"]
    return ab.md_table(["τ", "γ", "T3 c*(γ)", f"quadratics, K = {k}", f"class, K = {k}"],
                       body, "rlrrr")


def gamma_long_summary(res: dict) -> dict:
    """Per τ: the γ of the coarse grid with the largest class edge at the longer horizon."""
    out = {}
    for sc in res["gamma_scan_long"].values():
        i = int(np.argmax(sc["pep_edge"]))
        j = sc["gamma"].index(sc["gamma_star"])
        out[sc["tau"]] = {"best": sc["gamma"][i], "best_edge": sc["pep_edge"][i],
                          "gstar": sc["gamma_star"], "gstar_edge": sc["pep_edge"][j],
                          "K": sc["K"], "n": len(sc["gamma"])}
    return out


def gamma_answer_md(res: dict) -> str:
    """The answer to "is γ* still the best γ over the class?", from both γ scans."""
    gl = gamma_long_summary(res)
    sm = summary(res)
    k = next(iter(gl.values()))["K"]
    best = []
    for tau, v in sorted(gl.items()):
        if v["best"] == v["gstar"]:
            best.append(f"at γ* itself for τ = {tau} ({v['gstar_edge']:.3f})")
        else:
            best.append(f"at γ = {v['best']:.3g} for τ = {tau} ({v['best_edge']:.3f}, "
                        f"{100 * (v['best_edge'] / v['gstar_edge'] - 1):.0f} % above its value "
                        f"{v['gstar_edge']:.3f} at γ* = {v['gstar']:.3f})")
    over = []
    for sc in res["gamma_scan_long"].values():
        over += [pe > c for pe, c in zip(sc["pep_edge"], sc["c_star"])]
    att = [f"{100 * v['gstar_edge'] / c:.0f} % of c*(γ*) for τ = {tau}"
           for tau, v in sorted(gl.items())
           for c in [res["gamma_scan_long"][f"tau{tau}"]["c_star"][
               res["gamma_scan_long"][f"tau{tau}"]["gamma"].index(v["gstar"])]]]
    fixed = "; ".join(
        f"for τ = {tau} (ηL = {sm[f'scan{tau}']['eta_fixed']:.3f}) smallest at "
        f"γ = {sm[f'scan{tau}']['g_pep_fixed']:.2f}, against γ* = "
        f"{sm[f'scan{tau}']['gamma_star']:.3f}" for tau in (1, 2))
    return (
        f"**Is γ* still the best γ over the class?** Not at the horizons a PEP reaches. At "
        f"K = {k} the class edge is largest " + "; ".join(best) + ". But "
        f"{sum(over)} of these {len(over)} class edges exceed T3's c*(γ): at {k} steps a step "
        f"just past the asymptotic edge has not yet grown, so the ranking is the transient's. "
        f"What holds at every horizon is a bound. The class edge never exceeds the quadratic "
        f"edge at the same horizon, and at long horizons that is at most c*(γ) ≤ c*(γ*). So no "
        f"γ can take the class edge beyond γ*'s quadratic edge. Whether γ* reaches it on the "
        f"class "
        f"is open at these horizons: at K = {k} its class edge is "
        + ", ".join(att) + f". At a fixed step and K = {res['K_curves']}, the class's worst "
        "case is " + fixed + " (on the grid above).")


def _interp(x, xs, ys) -> float:
    return float(np.interp(x, xs, ys))


def gamma_figure(res: dict):
    """Left: the edges against γ at K (PEP over the class, quadratics at the same K, T3's
    c*). Right: the PEP worst case at a fixed step 0.9 c*(γ*) against γ."""
    import matplotlib.pyplot as plt

    _style()
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH_IN, 3.1))
    cols = {1: "C0", 2: "C1"}
    for tau in (1, 2):
        sc = res["gamma_scan"][f"tau{tau}"]
        g, col = sc["gamma"], cols[tau]
        ax = axes[0]
        ax.plot(g, sc["pep_edge"], "-", color=col, label=f"τ = {tau}: class")
        ax.plot(g, sc["quad_edge"], "--", color=col, lw=1, label=f"τ = {tau}: quadratics")
        ax.plot(g, sc["c_star"], ":", color=col, lw=1)
        ax.axvline(sc["gamma_star"], color=col, lw=0.8, alpha=0.6)
        ax = axes[1]
        ax.plot(g, np.array(sc["pep_fixed"]) / 0.5, "-", color=col,
                label=f"τ = {tau}, ηL = {sc['eta_fixed']:.2f}")
        ax.plot(g, np.array(sc["quad_fixed"]) / 0.5, "--", color=col, lw=1)
        ax.axvline(sc["gamma_star"], color=col, lw=0.8, alpha=0.6)
    k = res["gamma_scan"]["tau1"]["K"]
    axes[0].set_xlabel("γ")
    axes[0].set_ylabel(f"edge at K = {k}")
    axes[0].legend(frameon=False, loc="upper right")
    axes[1].set_xlabel("γ")
    axes[1].set_ylabel(f"$W_{{{k}}}\\,/\\,W_0$")
    axes[1].set_yscale("log")
    axes[1].legend(frameon=False, loc="upper left")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def method_md(res: dict) -> str:
    """The search's constants and the generating run's versions and timings."""
    from theory import pep_delay as P

    t = res["timings_s"]
    secs = {K: np.median([r["seconds"] for r in res["edges"] if r["K"] == K])
            for K in sorted({r["K"] for r in res["edges"]})}
    return (f"An edge is a geometric scan of ηL from {P.EDGE_FLOOR} (at most "
            f"{P.EDGE_CEILING}), then bisection to {res['tol']}; the non-convex margin is "
            f"δ = {res['nonconvex_margin']}. The committed run used PEPit {res['pepit']} and "
            f"cvxpy {res['cvxpy']} ({res['solver']}) and took "
            + ", ".join(f"{k.replace('_', ' ')} {v:.0f} s" for k, v in t.items())
            + "; one edge took a median of "
            + ", ".join(f"{v:.0f} s at K = {k}" for k, v in secs.items())
            + " (convex and, where listed, non-convex together).")


__all__ = ["curves_figure", "edges_md", "edges_rows", "gamma_figure", "gamma_follow_md",
           "gamma_answer_md", "gamma_caption_md", "gamma_long_md",
           "gamma_long_summary", "load", "method_md", "summary", "transient_md"]
