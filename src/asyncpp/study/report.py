"""A study's report from its result files: ``tables.md``, ``figures/`` and ``report.json``.

``report.json`` holds every number ``tables.md`` prints (cells, chosen learning rates, each
endpoint's test, estimate, interval, p, Holm-adjusted p and verdict), so that prose quoting a
study reads the JSON, never the code. Verdict rules, at α = 0.05 (``asyncpp.study.stats``):

- ``difference`` (a − b, margin m ≥ 0): "a > b" / "a < b" when the p-value of
  :math:`\\bar d = 0` is below α and the interval lies beyond ±m; else "not established".
  A one-sided endpoint (``alternative = "greater"`` or ``"less"``) takes the one-sided p and
  prints the 1 − 2α interval, whose end on the tested side is the one-sided bound, and only
  its own direction can be established;
- ``equivalence`` (margin m): "equivalent within ±m" when TOST's p < α; else
  "not established", with the reverse reading beside it (exploratory, unadjusted): "beyond
  ±m" when the 95 % interval lies wholly past the margin, else "inconclusive";
- ``share`` (s): "share ≥ s" when the interval of :math:`\\bar z` lies above 0; Fieller's
  interval of the share is printed beside it;
- ``slope``: "shrinks" / "grows" with log₂ x when the slope's interval excludes 0.

Primary endpoints are judged on Holm-adjusted p-values across the study's primaries (an
interval that excludes zero is not enough once p is adjusted); the others are labelled
exploratory and judged on their own p. Each test is run once, on the claims seeds declared
before the runs: an endpoint still missing one of its cells' declared results is "pending"
(its interim numbers shown, no verdict), and the primaries are judged together once all are
complete.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from . import runner
from .figures import draw_cells
from .spec import Endpoint, Study, StudyError
from .stats import (
    ALPHA,
    Interval,
    TooFewSeeds,
    beyond_margin,
    fieller_share,
    gap_slope,
    holm,
    paired_t,
    per_seed_slope,
    share_at_least,
    tost,
)


def cell_values(study: Study) -> dict[str, dict[int, dict]]:
    """``{cell: {seed: result record}}`` of the claims results on disk."""
    runs, _ = runner.claims_runs(study)
    out: dict[str, dict[int, dict]] = {c: {} for c in study.cells}
    for r in runs:
        if runner.done(r):
            out[r.cell][r.seed] = runner.read_result(r.result)
    return out


def _metric(recs: dict[int, dict]) -> dict[int, float]:
    return {k: v["value"] for k, v in recs.items()}


def slope_points(ep: Endpoint, cells: dict[str, dict[int, dict]]) -> dict[int, list]:
    """``{seed: [(log2 x, gap), ...]}`` of a slope endpoint: each pair's gap a − b on the seeds
    both cells have, at x = its tokens (or parameters)."""
    pts: dict[int, list] = {}
    for a, b in ep.pairs:
        for k in sorted(set(cells.get(a, {})) & set(cells.get(b, {}))):
            x = cells[a][k]["tokens" if ep.x == "tokens" else "params"]
            pts.setdefault(k, []).append((math.log2(x), cells[a][k]["value"]
                                          - cells[b][k]["value"]))
    return pts


def evaluate(ep: Endpoint, cells: dict[str, dict[int, dict]]) -> dict:
    """One endpoint's test on the results (no Holm yet): estimate, interval, p, and the
    verdict it would have on its own p."""
    v = {c: _metric(r) for c, r in cells.items()}
    row: dict = {"name": ep.name, "test": ep.test, "primary": ep.primary,
                 "prediction": ep.prediction, "margin": ep.margin, "what": _what(ep)}
    try:
        if ep.test == "difference":
            iv = _sided(paired_t(v[ep.a], v[ep.b], alpha=_alpha(ep)), ep.alternative)
            row.update(interval_level=1 - _alpha(ep), alternative=ep.alternative)
        elif ep.test == "equivalence":
            iv = tost(v[ep.a], v[ep.b], ep.margin)
            far = beyond_margin(v[ep.a], v[ep.b], ep.margin)
            row.update(interval_level=1 - 2 * ALPHA,
                       beyond={"lo": far.lo, "hi": far.hi, "p": far.p, "level": 1 - ALPHA})
        elif ep.test == "share":
            iv = _sided(share_at_least(v[ep.none], v[ep.corr], v[ep.sync], ep.s,
                                       alpha=_alpha(ep)), ep.alternative)
            sh = fieller_share(v[ep.none], v[ep.corr], v[ep.sync])
            row.update(interval_level=1 - _alpha(ep), s=ep.s, alternative=ep.alternative,
                       share={"estimate": sh.estimate, "lo": sh.lo, "hi": sh.hi,
                              "interval": "Fieller", "level": 1 - ALPHA})
        else:
            pts = slope_points(ep, cells)
            iv = _sided(per_seed_slope(pts, alpha=_alpha(ep)) if ep.per_seed else
                        gap_slope([q for k in sorted(pts) for q in pts[k]], alpha=_alpha(ep)),
                        ep.alternative)
            row.update(interval_level=1 - _alpha(ep), alternative=ep.alternative)
    except TooFewSeeds as e:
        row.update(estimate=None, lo=None, hi=None, p=None, n=0, seeds=[],
                   verdict=f"too few seeds: {e}")
        return row
    row.update(estimate=iv.estimate, lo=iv.lo, hi=iv.hi, p=iv.p, n=iv.n, seeds=list(iv.seeds))
    return row


def _what(ep: Endpoint) -> str:
    """The quantity ``ep`` tests, in the cells' names."""
    if ep.test in ("difference", "equivalence"):
        return f"{ep.a} − {ep.b}"
    if ep.test == "share":
        return f"({ep.none} − {ep.corr}) − {ep.s:g}·({ep.none} − {ep.sync})"
    return f"gap per doubling of {ep.x}" + (", fitted per seed" if ep.per_seed else "")


def _alpha(ep: Endpoint) -> float:
    """The two-sided interval's α: 2α for a one-sided test, whose 1 − 2α interval has the
    one-sided 1 − α bound at its end (the test's p < α exactly when that end excludes 0)."""
    return ALPHA if ep.alternative == "two-sided" else 2 * ALPHA


def _sided(iv: Interval, alternative: str) -> Interval:
    """``iv`` with its two-sided p replaced by the one-sided p of ``alternative``: with
    :math:`T` symmetric, :math:`p_> = p/2` when :math:`\bar d > 0` and :math:`1 - p/2`
    otherwise (``less`` mirrored)."""
    if alternative == "two-sided":
        return iv
    toward = iv.estimate > 0 if alternative == "greater" else iv.estimate < 0
    return dataclasses.replace(iv, p=iv.p / 2 if toward else 1 - iv.p / 2)


def _verdict(row: dict, ep: Endpoint, p: float) -> str:
    lo, hi, est = row["lo"], row["hi"], row["estimate"]
    sig = p < ALPHA
    if ep.test == "difference":
        if sig and lo > ep.margin and ep.alternative != "less":
            return f"{ep.a} > {ep.b}"
        if sig and hi < -ep.margin and ep.alternative != "greater":
            return f"{ep.a} < {ep.b}"
        return "not established"
    if ep.test == "equivalence":
        return f"equivalent within ±{ep.margin:g}" if sig else "not established"
    if ep.test == "share":
        return f"share ≥ {ep.s:g}" if sig and est > 0 else "not established"
    if sig and est < 0 and ep.alternative != "greater":
        return "shrinks"
    if sig and est > 0 and ep.alternative != "less":
        return "grows"
    return "not established"


def missing_seeds(study: Study, ep: Endpoint, cells: dict[str, dict[int, dict]]) -> int:
    """How many declared claims results the cells of ``ep`` still lack (0: complete)."""
    return sum(len(set(study.claims_of(c)) - set(cells.get(c, {}))) for c in ep.cells())


def judge(study: Study, cells: dict[str, dict[int, dict]]) -> list[dict]:
    """Every endpoint's row with its final verdict (Holm across primaries).

    A test is run once, on the seeds declared before the runs: an endpoint whose cells lack
    any declared claims seed is *pending* — its interim estimate, interval and p are shown, no
    verdict. The primaries form one Holm family, so no primary is judged until every primary
    is complete (a pending primary's p could reorder the family and change every adjusted p).
    """
    rows = [evaluate(ep, cells) for ep in study.endpoints]
    todo = {ep.name: missing_seeds(study, ep, cells) for ep in study.endpoints}
    family_done = all(todo[ep.name] == 0 for ep in study.endpoints if ep.primary)
    prim = {r["name"]: r["p"] for r in rows if r["primary"] and r["p"] is not None}
    adj = holm(prim) if prim and family_done else {}
    waiting = [ep.name for ep in study.endpoints if ep.primary and todo[ep.name]]
    # the family is every declared primary, whether or not its p is known yet
    n_primary = sum(ep.primary for ep in study.endpoints)
    for ep, r in zip(study.endpoints, rows):
        r["missing"] = todo[ep.name]
        if r["p"] is None:
            r["p_holm"] = None
            r["label"] = "primary" if ep.primary else "exploratory"
            if todo[ep.name]:
                r["verdict"] = f"pending ({todo[ep.name]} declared run(s) missing)"
            continue
        r["p_holm"] = adj.get(ep.name) if ep.primary else None
        r["label"] = f"primary (Holm over {n_primary})" if ep.primary else "exploratory"
        if todo[ep.name]:
            r["verdict"] = f"pending ({todo[ep.name]} declared run(s) missing)"
        elif ep.primary and not family_done:
            r["verdict"] = f"pending (the primary family waits for {', '.join(waiting)})"
        else:
            r["verdict"] = _verdict(r, ep, r["p_holm"] if ep.primary else r["p"])
            if ep.test == "equivalence" and r["verdict"] == "not established":
                r["reading"] = reverse_reading(r)
    return rows


def reverse_reading(row: dict) -> str:
    """An equivalence that was not established, read the other way (exploratory, its own
    unadjusted p): "beyond +m" when the 95 % interval lies wholly past the margin on the
    mean's side (``stats.beyond_margin``), else "inconclusive" (neither within nor beyond)."""
    far, m = row["beyond"], row["margin"]
    if far["p"] < ALPHA:
        side = f"+{m:g}" if row["estimate"] > 0 else f"−{m:g}"
        return (f"beyond {side}: {round(100 * far['level'])} % [{_f(far['lo'])}, "
                f"{_f(far['hi'])}], p = {p_text(far['p'])}")
    return f"inconclusive: neither within nor beyond ±{m:g} (p beyond = {p_text(far['p'])})"


def _f(x, digits=3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞" if x > 0 else "−∞"
    return f"{x:+.{digits}f}".replace("-", "−")


def share_text(x) -> str:
    """A share in percent, as the project's pages print it: "69", "−∞" when unbounded."""
    if isinstance(x, float) and math.isinf(x):
        return "∞" if x > 0 else "−∞"
    return "–" if x is None else f"{100 * x:.0f}".replace("-", "−")


def share_interval_text(estimate, lo, hi) -> str:
    """A share with its interval as every page prints it: "69 % [62, 75]"."""
    return f"{share_text(estimate)} % [{share_text(lo)}, {share_text(hi)}]"


def p_text(x) -> str:
    """A p-value as the report prints it (3 decimals, or 1.2e-04 below 0.001; – for none)."""
    return "–" if x is None else (f"{x:.3f}" if x >= 0.001 else f"{x:.1e}")


def tables(study: Study, cells: dict, lrs: dict, rows: list[dict],
           figures: list[Path]) -> str:
    """``tables.md`` of the study (every number is also in report.json)."""
    md = [f"# Study `{study.name}`", ""]
    if study.prediction:
        md += [f"Prediction: {study.prediction}", ""]
    own = "".join(f"; {c}: seeds {list(k)}" for c, k in study.cell_seeds.items())
    md += [f"Metric: `{study.metric}`, claims seeds {list(study.claims_seeds)}{own}"
           + (f", lr chosen on selection seeds {list(study.selection_seeds)} "
              f"({study.lr_rule} rule)" if study.tunes_lr else "") + ".", "",
           "## Cells", "", "| cell | n | mean | sd | lr | tokens/param |",
           "|---|---|---|---|---|---|"]
    for c in study.cells:
        recs = cells[c]
        xs = [r["value"] for r in recs.values()]
        n = len(xs)
        mean = sum(xs) / n if n else None
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else None
        lr = lrs.get(c, {}).get("lr")
        tpp = next(iter(recs.values()))["tokens_per_param"] if recs else None
        md.append(f"| {c} | {n} | {'–' if mean is None else f'{mean:.4f}'} | "
                  f"{'–' if sd is None else f'{sd:.4f}'} | {'–' if lr is None else f'{lr:g}'} | "
                  f"{'–' if tpp is None else f'{tpp:.2f}'} |")
    md += ["", "## Endpoints", "",
           "Verdicts at α = 0.05; primary endpoints on Holm-adjusted p across the primaries.",
           "", "| endpoint | test | estimate | interval | p | p (Holm) | verdict | label |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        test = r["test"] + (f" (±{r['margin']:g})" if r["test"] == "equivalence" else "")
        if r.get("alternative", "two-sided") != "two-sided":
            test += f", one-sided (H1: {'>' if r['alternative'] == 'greater' else '<'} 0)"
        lvl = r.get("interval_level")
        iv = (f"[{_f(r['lo'])}, {_f(r['hi'])}] ({lvl:.0%})" if r["lo"] is not None else "–")
        md.append(f"| {r['name']}: {r.get('what', '')} | {test} | {_f(r['estimate'])} | {iv} | "
                  f"{p_text(r['p'])} | {p_text(r['p_holm'])} | {r['verdict']} | {r['label']} |")
    reverse = [r for r in rows if "reading" in r]
    if reverse:
        md += ["", "Equivalence not established, read the other way (exploratory, not "
               "adjusted; `stats.beyond_margin`):", ""]
        md += [f"- {r['name']}: {r['reading']}" for r in reverse]
    shares = [r for r in rows if "share" in r]
    if shares:
        md += ["", "Shares with Fieller's 95 % interval:", ""]
        for r in shares:
            s = r["share"]
            md.append(f"- {r['name']}: {share_interval_text(s['estimate'], s['lo'], s['hi'])}")
    if lrs:
        md += ["", "## Learning rates", "", "| cell | lr | rule | mean loss per grid lr |",
               "|---|---|---|---|"]
        for c, ch in lrs.items():
            grid = ", ".join(f"{k}: {v:.4f}" for k, v in ch["means"].items())
            rule = ch["rule"] + (f"; {ch['note']}" if ch["note"] else "")
            md.append(f"| {c} | {ch['lr']:g} | {rule} | {grid} |")
    if figures:
        md += ["", "## Figures", ""] + [f"![{p.stem}](figures/{p.name})" for p in figures]
    return "\n".join(md) + "\n"


def write_report(study: Study) -> list[Path]:
    """Write ``tables.md``, ``figures/`` and ``report.json`` under ``study.root``; returns
    the files written. Mid-sweep it reports what is on disk (the learning rates chosen so far,
    every endpoint pending); :class:`StudyError` when no result at all is on disk."""
    cells = cell_values(study)
    selected = any(runner.done(r) for r in runner.selection_runs(study))
    if not any(cells.values()) and not selected:
        raise StudyError(f"{study.path}: no results under {study.root / 'results'} or "
                         f"{study.root / 'selection'}; run `asyncpp-study run {study.path}` "
                         f"first")
    lrs = runner.chosen_lrs(study) if study.tunes_lr else {}
    rows = judge(study, cells)
    figs = draw_cells(study, {c: _metric(r) for c, r in cells.items()},
                      study.root / "figures")
    root = study.root
    runner.write_text(root / "tables.md", tables(study, cells, lrs, rows, figs))
    doc = {"study": study.name, "file": str(study.path), "metric": study.metric,
           "prediction": study.prediction, "alpha": ALPHA,
           "claims_seeds": list(study.claims_seeds),
           "cell_seeds": {c: list(k) for c, k in study.cell_seeds.items()},
           "selection_seeds": list(study.selection_seeds),
           "cells": {c: {"values": {str(k): v["value"] for k, v in recs.items()},
                         "lr": lrs.get(c, {}).get("lr")} for c, recs in cells.items()},
           "lr_selection": lrs, "endpoints": rows,
           "figures": [str(p.relative_to(root)) for p in figs]}
    runner.write_json(root / "report.json", _finite(doc))
    return [root / "tables.md", root / "report.json", *figs]


def _finite(x):
    """JSON has no infinity: an unbounded interval end is written as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


__all__ = ["cell_values", "evaluate", "judge", "p_text", "reverse_reading", "share_interval_text",
           "share_text",
           "tables", "write_report"]
