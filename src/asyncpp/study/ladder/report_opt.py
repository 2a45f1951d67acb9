r"""The report of the compute-optimal ladder (``tables_opt.py``): each section states the regime
it was measured in (parameters, tokens per parameter, epochs: from the results themselves),
tables that fit a 700-pixel column (one optimizer per table), and the two scaling figures —
the gap against training tokens (``opt-180k``) and against parameters (every ``opt-*`` tier
and the ``gpu`` rung where they have results).

Every comparison is paired by seed (``report_common.compare_cells``: mean ± sd of the
difference, its 95 % t-interval, how many seeds agree, and the verdict of ``stats.verdict``).
"""

from __future__ import annotations

import math
from pathlib import Path

from . import protocol, stats
from . import report_common as rc
from . import tables_opt as to
from .plotting import pyplot
from .report_common import LABEL, Val, compare_cells, grid, loss, section, vals
from .report_zero_gap import CHOICE_RULE, table_zero_gap
from .tiers import get_tier

MODE_LABEL = {"sync": "synchronous (1F1B)", "async": "2BW", "ef": "2BW + EF",
              "efg": "2BW + EF(γ*)", "nag": "2BW + Nesterov", "syncstart": "2BW, sync start",
              "cooldown": "2BW, sync cooldown"}
LADDER_TIERS = ("opt-180k", "opt-580k", "gpu")


def regime(R, cells=None) -> str:
    """"N parameters, k tokens/parameter, e epochs" of the finished runs (ranges if they
    differ); "—" without runs."""
    ps, tpp, ep = set(), set(), set()
    for cell, by_seed in R.items():
        if cells is not None and cell not in cells:
            continue
        for r in by_seed.values():
            f = r.get("final", {})
            if r.get("status") == "ok" and "tokens_per_param" in f:
                ps.add(f["params"])
                tpp.add(round(f["tokens_per_param"], 1))
                if f.get("epochs") is not None:
                    ep.add(round(f["epochs"], 3))

    def rng(xs, fmt):
        return "—" if not xs else (fmt(min(xs)) if len(xs) == 1 else
                                   f"{fmt(min(xs))}–{fmt(max(xs))}")

    if not ps:
        return "no finished runs yet"
    return (f"{rng(ps, lambda x: f'{x:,}')} parameters, {rng(tpp, lambda x: f'{x:g}')} "
            f"tokens/parameter, {rng(ep, lambda x: f'{x:g}')} epochs")


def _ratio(x: float) -> str:
    """A ×2-grid step as a reader reads it: "×1", "×4", "÷8"."""
    k = round(math.log2(x))
    return "×1" if k == 0 else f"×{2 ** k}" if k > 0 else f"÷{2 ** -k}"


def section_lr(R, tier):
    """The grids of ``tier`` at seed 0 and each pair's lr*. On a larger tier each row also
    gives the lr* of ``opt-180k`` its grid was centred on (the transfer rule) and how far the
    larger tier's own lr* moved from it, in ×2 steps."""
    larger = tier.name != to.SMALLEST
    rows, moved, same = [], [], 0
    for o, m in to._tuned(tier):
        try:
            g = to.lr_grid(tier, o, m)
        except ValueError:  # a larger tier's centre: the smaller tier's grid is unsettled
            rows.append([LABEL[o], MODE_LABEL[m], f"not yet: transfers from `{to.SMALLEST}`, "
                         "whose grid of this pair has not settled", "—"] + ["—"] * larger)
            continue
        cells = []
        for lr in g:
            v = vals(R, to.lr_cell_name(o, m, lr), (0,)).get(0)
            cells.append(f"{lr:g}: " + ("—" if v is None else "div." if not math.isfinite(v)
                                        else f"{v:.3f}"))
        ch = to.lr_choice(tier, o, m)
        pick = "—" if ch is None else f"{ch[0]:g}" + ("" if ch[1] else " (edge)")
        row = [LABEL[o], MODE_LABEL[m], ", ".join(cells), pick]
        if larger:
            centre = to._centre(tier, o, m)
            if ch is not None and ch[1]:
                r = _ratio(ch[0] / centre)
                row.append(f"{centre:g} ({r})")
                if r == "×1":
                    same += 1
                else:
                    moved.append(f"{LABEL[o]} {MODE_LABEL[m]} {r}")
            else:
                row.append(f"{centre:g}")
        rows.append(row)
    head = ["optimizer", "mode", "lr: val loss", "lr*"]
    lr_cells = {c for c in R if c.startswith("lr-")}  # the grids' own regime, nothing else's
    text = [f"Regime: {regime(R, lr_cells)}. Final val loss of seed 0 at each lr; the choice is "
            "the grid's minimum, \"(edge)\" while it still sits on an edge of a grid that may "
            "yet extend."]
    if larger:
        head.append(f"`{to.SMALLEST}`'s lr* (lr* / it)")
        settled = same + len(moved)
        text.append(
            f"Each grid is centred on the lr* of `{to.SMALLEST}` for the same pair (the "
            "transfer rule)" + (
                f". Of the {settled} settled pair{'s' * (settled != 1)}, {same} kept that lr*"
                + (f"; {len(moved)} moved: {', '.join(moved)}." if moved else ".")
                if settled else "; none has settled yet."))
    return section("opt-lr", ["", " ".join(text), "", grid(head, rows), ""]), []


def _claims_table(R, o: str, modes, min_seeds: int) -> str:
    s = rc.tc.name(o, "sync")
    rows = []
    for m in modes:
        c = rc.tc.name(o, m)
        if m == "sync":
            rows.append([MODE_LABEL[m], loss(R, c), "—", "—", "—", "—"])
        else:
            rows.append([MODE_LABEL[m], loss(R, c), *compare_cells(R, c, s, min_seeds=min_seeds)])
    return grid(["mode", "val loss", "gap to sync", "95 % interval", "seeds", "verdict"], rows)


def _share_line(R, o: str, min_seeds: int = 3) -> str:
    s, a = rc.tc.name(o, "sync"), rc.tc.name(o, "async")
    why = rc.no_share_reason(R, s, a, min_seeds)  # then no share, as the front page's "recif"
    parts = []
    for m in ("ef", "efg"):
        p = rc.pair(R, rc.tc.name(o, m), a)
        head = (f"{MODE_LABEL[m]}: no share (the gap is within noise, "
                f"{rc.interval_text(rc.pair(R, a, s))})" if why == "within noise" else
                f"{MODE_LABEL[m]}: no share yet ({why})" if why else
                f"{MODE_LABEL[m]} recovers {rc.share_val(R, s, a, rc.tc.name(o, m)).text} "
                "of the gap")
        parts.append(f"{head} (its difference to 2BW: {rc.interval_text(p)}, "
                     f"{rc.verdict_of_at_least(p, min_seeds)})")
    return "; ".join(parts) + "."


def _protocol_line(R, o: str) -> str:
    """The study protocol's reading of the shares (``protocol``), beside the old rule's line
    above it: Fieller's interval of each share and the test of "recovers at least half"."""
    s, a = rc.tc.name(o, "sync"), rc.tc.name(o, "async")
    parts = []
    for m in ("ef", "efg"):
        c = rc.tc.name(o, m)
        sh = protocol.fieller_share(vals(R, s), vals(R, a), vals(R, c))
        if sh.n < 2:
            continue
        if sh.lo is None:  # Fieller's interval is unbounded exactly when the gap is
            parts.append(f"{MODE_LABEL[m]}: no share, the gap is not established (Fieller's "
                         f"95 % interval unbounded, {sh.n} common seeds)")
            continue
        half = protocol.share_at_least(vals(R, s), vals(R, a), vals(R, c), 0.5)
        parts.append(
            f"{MODE_LABEL[m]} recovers {rc.minus(sh.text())} (Fieller's 95 % interval, "
            f"{sh.n} common seeds); at least half of the gap: (2BW − {MODE_LABEL[m][6:]}) − ½ "
            f"(2BW − sync) = {rc.minus(f'{half.mean:+.3f}')} {rc.interval_text(half)}, "
            f"{protocol.share_test_word(half)}")
    if not parts:
        return ""
    return "With the study protocol's tests: " + "; ".join(parts) + "."


def section_claims(R, tier):
    cells = {rc.tc.name(o, m) for o in to.MAIN_OPTIMIZERS for m in ("sync", "async", "ef", "efg")}
    k = rc.min_seeds_of(tier.name)
    body = ["", f"Regime: {regime(R, cells)}. "
            "Each mode at its own tuned lr (table above). Gaps are mode − synchronous, "
            "paired by seed.", ""]
    for o in to.MAIN_OPTIMIZERS:
        body += [f"**{LABEL[o]}**", "", _claims_table(R, o, ("sync", "async", "ef", "efg"), k),
                 "", _share_line(R, o, k), ""]
        new = _protocol_line(R, o)
        body += [new, ""] if new else []
    body += ["**The zero-gap table**: per optimizer, the best 2BW correction against "
             "synchronous training. " + CHOICE_RULE, "", table_zero_gap(R, k), ""]
    return section("opt-claims", body), []


def section_more(R, tier):
    body = ["", f"Regime: {regime(R, {c.name for c in to._opt_more(tier)})}.", ""]
    for o in to.MORE_OPTIMIZERS:
        body += [f"**{LABEL[o]}**", "", _claims_table(R, o, ("sync", "async", "ef"),
                                                             rc.min_seeds_of(tier.name)), ""]
    for o in ("muon", "adamw"):
        rows = [[MODE_LABEL[m], loss(R, rc.tc.name(o, m)),
                 *compare_cells(R, rc.tc.name(o, m), rc.tc.name(o, "ef"))]
                for m in ("nag", "syncstart", "cooldown")]
        body += [f"**{LABEL[o]}: mitigations against EF** (difference = mitigation − EF)", "",
                 grid(["mitigation", "val loss", "difference", "95 % interval", "seeds",
                       "verdict"], rows), ""]
        rows = [[name, loss(R, c), *compare_cells(R, c, f"{o}-async-P4")]
                for name, c in (("PipeDream, P = 4", f"{o}-pipedream-P4"),
                                ("PipeDream, P = 4, equal updates", f"{o}-pipedream-P4-equal"))]
        rows.insert(0, ["2BW, P = 4", loss(R, f"{o}-async-P4"), "—", "—", "—", "—"])
        body += [f"**{LABEL[o]}: PipeDream at P = 4 against 2BW at P = 4** (PipeDream makes "
                 "one update per microbatch: twice the updates of half the tokens; the "
                 "equal-updates control makes as many, as large, as 2BW)", "",
                 grid(["schedule", "val loss", "difference", "95 % interval", "seeds",
                       "verdict"], rows), ""]
    return section("opt-more", body), []


def token_gaps(R, o: str, m: str) -> list[tuple[int, stats.Paired | None]]:
    """(tokens/parameter, paired gap of mode m − sync) along the token ladder (20 =
    ``opt-claims``' cells)."""
    out = []
    for k in sorted((*to.TOKEN_LADDER, 20)):
        suffix = "" if k == 20 else f"-tpp{k}"
        out.append((k, rc.pair(R, f"{o}-{m}{suffix}", f"{o}-sync{suffix}")))
    return out


def section_tokens(R, tier):
    rows = []
    for o in ("muon", "adamw"):
        for k, p in token_gaps(R, o, "async"):
            suffix = "" if k == 20 else f"-tpp{k}"
            s, a, c = (f"{o}-{m}{suffix}" for m in ("sync", "async", "ef"))
            # the rule of the claims tables: no share of a gap whose interval holds zero
            instead = rc.no_share_text(rc.no_share_reason(R, s, a))
            sh = Val(instead) if instead else rc.share_val(R, s, a, c)
            rows.append([LABEL[o], k, Val("—") if p is None else Val(rc.minus(
                f"{p.mean:+.3f}"), p.n), rc.interval_text(p), rc.verdict(p), sh])
    figs = [f for f in (figure_tokens(R, tier.figures / "gap_vs_tokens.png"),
                        figure_params(tier.figures / "gap_vs_params.png")) if f]
    cells = {c.name for c in to._opt_tokens(tier)} | {
        rc.tc.name(o, m) for o in ("muon", "adamw") for m in ("sync", "async", "ef")}
    body = ["", f"Regime: {regime(R, cells)} (the same model; each length its own lr schedule, at "
            "the 20-tokens lr).", "",
            grid(["optimizer", "tokens/param", "2BW gap", "95 % interval", "verdict",
                  "EF recovers"], rows), ""]
    slopes = [f"{LABEL[o]} {rc.minus(sl.text())}: {sl.word}" for o in ("muon", "adamw")
              if (sl := token_slope(R, o)) is not None]
    if slopes:
        body += ["With the study protocol's test, the 2BW gap regressed on log₂ of the tokens "
                 "per parameter, pooled over every length and seed (slope, 95 % interval): "
                 + "; ".join(slopes) + ".", ""]
    for f in figs:
        body += [f"![{CAPTIONS[f.stem]}](figures/{f.name})", ""]
    return section("opt-tokens", body), figs


def token_slope(R, o: str) -> protocol.Slope | None:
    """The 2BW gap of ``o`` against log₂ tokens per parameter, every seed of every length of
    the token ladder (``protocol.gap_slope``)."""
    pts = []
    for k in sorted((*to.TOKEN_LADDER, 20)):
        suffix = "" if k == 20 else f"-tpp{k}"
        s, a = vals(R, f"{o}-sync{suffix}"), vals(R, f"{o}-async{suffix}")
        pts += [(k, a[seed] - s[seed]) for seed in sorted(set(s) & set(a))]
    return protocol.gap_slope(pts)


CAPTIONS = {
    "gap_vs_tokens": "The 2BW gap to synchronous training (mean over seeds, bars: 95 % "
                     "interval) against tokens per parameter, for Muon and AdamW.",
    "gap_vs_params": "The 2BW gap to synchronous training at 20 tokens per parameter against "
                     "the number of parameters, for Muon, AdamW and SOAP.",
}


def _tick(x: float) -> str:
    """20 → "20", 180512 → "181k", 1.26e6 → "1.26M"."""
    if x >= 1e6:
        return f"{x / 1e6:.3g}M"
    if x >= 1e4:
        return f"{x / 1e3:.0f}k"
    return f"{x:g}"


def _plot(points: dict[str, list[tuple[float, stats.Paired]]], xlabel: str, path: Path,
          logx: bool = True) -> Path | None:
    plt = pyplot()
    if plt is None or not any(points.values()):
        return None
    # 7 in wide at 100 dpi: shown at the 700-px column width the fonts keep their size
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
    for label, pts in points.items():
        if not pts:
            continue
        xs = [x for x, _ in pts]
        ys = [p.mean for _, p in pts]
        err = [[p.mean - p.lo if p.lo is not None else 0 for _, p in pts],
               [p.hi - p.mean if p.hi is not None else 0 for _, p in pts]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label)
    ax.axhline(0, color="0.5", lw=0.8)
    if logx:
        ax.set_xscale("log")
        # ticks at the measured points, written plainly ("20", "180k"): the log locator's
        # "2×10¹" hides which lengths and sizes were run
        xs = sorted({x for pts in points.values() for x, _ in pts})
        ax.set_xticks(xs, [_tick(x) for x in xs])
        ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_xlabel(xlabel, fontsize=11)
    ax.set_ylabel("val loss, 2BW − sync", fontsize=11)
    ax.tick_params(labelsize=10)
    ax.legend(fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Comment": "min_font_pt=10"})
    plt.close(fig)
    return path


def figure_tokens(R, path: Path) -> Path | None:
    pts = {LABEL[o]: [(k, p) for k, p in token_gaps(R, o, "async") if p is not None]
           for o in ("muon", "adamw")}
    return _plot(pts, "tokens per parameter", path)


def figure_params(path: Path) -> Path | None:
    pts: dict[str, list] = {LABEL[o]: [] for o in to.MAIN_OPTIMIZERS}
    for t in LADDER_TIERS:
        try:
            tier = get_tier(t)
        except ValueError:
            continue
        R = rc.load_results(tier.results)
        for o in to.MAIN_OPTIMIZERS:
            p = rc.pair(R, rc.tc.name(o, "async"), rc.tc.name(o, "sync"))
            recs = list(R.get(rc.tc.name(o, "sync"), {}).values())
            if p is None or not recs:
                continue
            pts[LABEL[o]].append((recs[0]["final"]["params"], p))
    return _plot({k: sorted(v, key=lambda t: t[0]) for k, v in pts.items()}, "parameters",
                 path)


__all__ = ["CAPTIONS", "regime", "section_claims", "section_lr", "section_more",
           "section_tokens", "token_gaps"]
