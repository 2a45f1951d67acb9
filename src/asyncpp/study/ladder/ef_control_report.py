"""The EF-without-delay control's report: the endpoints pre-registered in
``experiments/opt-180k/ef-control.md``, computed from the runs on disk.

Inputs: final validation losses L(cell, seed) of the control's runs
(``experiments/opt-180k/ef-control/``) and of the tier's claims cells ``<opt>-sync``,
``<opt>-async`` (2BW) and ``<opt>-ef`` (2BW + EF) (``experiments/opt-180k/results/``). Every
comparison is paired over the seeds both sides have (:func:`asyncpp.study.stats.common`).

- lr*: :math:`\\arg\\min_{lr} \\tfrac12 \\sum_{k \\in \\{100, 101\\}} L(\\mathrm{efnd}, lr, k)`
  over the grid as the lane widened it (``stats.select_lr``, rule ``mean``).
- Primary C1 (Muon), C2 (AdamW): equivalence of efnd and sync within ±0.05, TOST at α = 0.05
  (``stats.tost``: the 90 % interval inside (−0.05, 0.05)), Holm-adjusted over {C1, C2}
  (``stats.holm``); the 95 % interval of the difference is shown beside it.
- Exploratory (unadjusted): E1 = (2BW + EF) − efnd; E2 = efnd − sync at the synchronous cell's
  lr; E3 = EF's share of the delay gap, :math:`(N - E)/(N - S)`, and net of what EF does
  without a delay, :math:`((N - E) - (S - F))/(N - S)` (N = 2BW, E = 2BW + EF, S = sync,
  F = efnd), each with Fieller's 95 % interval (``stats.fieller_share``; the net share is the
  share of a corrected cell :math:`E' = E + S - F`).

``write(...)`` renders ``experiments/opt-180k/ef-control-report.md`` and the JSON of every
number in it (``ef-control-report.json``), which the front page's ``efc`` markers read.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from .. import stats
from . import ef_control
from .paths import EXPERIMENTS

TIER = "opt-180k"
MARGIN = 0.05
OPTIMIZERS = {"muon": "Muon", "adamw": "AdamW"}
PRIMARY = {"C1": "muon", "C2": "adamw"}
# endpoint → the prediction written before the runs (ef-control.md)
PREDICTIONS = {"C1": "holds", "C2": "holds, with the point estimate ≥ 0",
               "E1": "negative for Muon (2BW + EF below efnd)"}
REPORT = EXPERIMENTS / TIER / "ef-control-report.md"
NUMBERS = EXPERIMENTS / TIER / "ef-control-report.json"


def _losses(folder: Path, name: str) -> dict[int, float]:
    """``{seed: final val loss}`` of every finished run of ``name`` in ``folder``."""
    out = {}
    for p in sorted(folder.glob(f"{name}-seed*.json")):
        seed = p.name[len(name) + len("-seed"):-len(".json")]
        if not seed.isdigit():
            continue  # another cell whose name starts with this one's
        rec = json.loads(p.read_text())
        v = rec.get("final", {}).get("val_loss")
        if rec.get("status", "ok") == "ok" and v is not None:
            out[int(seed)] = v if math.isfinite(v) else math.inf
    return out


def _iv(iv: stats.Interval) -> dict:
    return {"estimate": iv.estimate, "lo": iv.lo, "hi": iv.hi, "p": iv.p, "n": iv.n,
            "seeds": list(iv.seeds)}


def compute(control: Path | None = None, tier_results: Path | None = None) -> dict:
    """Every number of the report, from the results on disk (see the module docstring)."""
    control = control or EXPERIMENTS / TIER / "ef-control"
    tier_results = tier_results or EXPERIMENTS / TIER / "results"
    out: dict = {"margin": MARGIN, "selection": {}, "primary": {}, "exploratory": {}}
    cells: dict[str, dict[str, dict[int, float]]] = {}
    for opt in OPTIMIZERS:
        grid = {}
        for p in sorted(control.glob(f"{ef_control.selection_name(opt, 0)[:-1]}*-seed*.json")):
            lr = float(p.name.split("-lr", 1)[1].split("-seed", 1)[0])
            grid[lr] = _losses(control, ef_control.selection_name(opt, lr))
        choice = stats.select_lr(grid, "mean") if len(grid) >= 2 else None
        out["selection"][opt] = {
            "grid": {f"{lr:g}": grid[lr] for lr in sorted(grid)},
            "means": {f"{lr:g}": m for lr, m in sorted(choice.means.items())} if choice else {},
            "lr": choice.lr if choice else None,
            "sync_lr": ef_control.SYNC_LR[opt]}
        cells[opt] = {m: _losses(tier_results, f"{opt}-{m}") for m in ("sync", "async", "ef")}
        cells[opt]["efnd"] = _losses(control, f"{opt}-efnd")
        cells[opt]["efnd-lrsync"] = _losses(control, f"{opt}-efnd-lrsync")
    raw_p = {}
    for cid, opt in PRIMARY.items():
        c = cells[opt]
        try:
            eq, diff = stats.tost(c["efnd"], c["sync"], MARGIN), stats.paired_t(c["efnd"],
                                                                                c["sync"])
        except stats.TooFewSeeds as e:
            out["primary"][cid] = {"optimizer": opt, "missing": str(e)}
            continue
        out["primary"][cid] = {"optimizer": opt, "endpoint": "efnd − sync",
                               "tost": _iv(eq), "difference": _iv(diff)}
        raw_p[cid] = eq.p
    # the family is the two declared endpoints: one not yet measured counts as p = 1, so an
    # interim look never adjusts over fewer endpoints than were declared
    family = {cid: raw_p.get(cid, 1.0) for cid in PRIMARY}
    for cid, p_holm in stats.holm(family).items():
        if cid not in raw_p:
            continue
        e = out["primary"][cid]
        e["p_holm"] = p_holm
        e["equivalent"] = p_holm < stats.ALPHA
        e["verdict"] = (f"equivalent within ±{MARGIN:g} (TOST, Holm)" if e["equivalent"]
                        else "equivalence not established (TOST, Holm)")
        e["different"] = e["difference"]["hi"] < 0 or e["difference"]["lo"] > 0
    for opt in OPTIMIZERS:
        c = cells[opt]
        ex = {}
        for key, (a, b) in {"E1": ("ef", "efnd"), "E2": ("efnd-lrsync", "sync")}.items():
            try:
                ex[key] = _iv(stats.paired_t(c[a], c[b]))
            except stats.TooFewSeeds as e:
                ex[key] = {"missing": str(e)}
        net_corr = {k: c["ef"][k] + c["sync"][k] - c["efnd"][k]
                    for k in stats.common(c["ef"], c["sync"], c["efnd"])}
        for key, corr in {"E3_share": c["ef"], "E3_net_share": net_corr}.items():
            try:
                ex[key] = _iv(stats.fieller_share(c["async"], corr, c["sync"]))
            except stats.TooFewSeeds as e:
                ex[key] = {"missing": str(e)}
        out["exploratory"][opt] = ex
    muon_e2 = out["primary"].get("C1", {}).get("difference", {}).get("estimate")
    out["shares_confounded"] = muon_e2 is not None and muon_e2 <= -0.04
    return out


def _f(x: float, d: int = 3) -> str:
    if x == math.inf:
        return "+∞"
    if x == -math.inf:
        return "−∞"
    return f"{x:+.{d}f}".replace("-", "−")


def ci_text(e: dict, d: int = 3) -> str:
    if "missing" in e:
        return "— (not yet run)"
    return f"{_f(e['estimate'], d)} [{_f(e['lo'], d)}, {_f(e['hi'], d)}]"


def _pct(e: dict) -> str:
    if "missing" in e:
        return "—"
    if not (math.isfinite(e["lo"]) and math.isfinite(e["hi"])):
        return (f"{100 * e['estimate']:.0f} % (interval unbounded: the gap is not established)"
                .replace("-", "−"))
    return (f"{100 * e['estimate']:.0f} % [{100 * e['lo']:.0f}, {100 * e['hi']:.0f}]"
            .replace("-", "−"))


def render(n: dict) -> str:
    """The report's markdown from :func:`compute`'s numbers."""
    md = ["# EF without a delay: the control's report (`opt-180k`)", "",
          "Generated by `python experiments/ef_control.py --report` from the runs in "
          "`experiments/opt-180k/ef-control/` and the tier's claims cells; the protocol and "
          "predictions are `ef-control.md`, committed before the runs. Final validation loss; "
          "every difference is paired over the seeds both sides have.", "",
          "## Learning rate (selection seeds 100 and 101, mean rule)", "",
          "| optimizer | lr: mean loss | lr* | synchronous cell's lr |",
          "| --- | --- | --- | --- |"]
    for opt, name in OPTIMIZERS.items():
        s = n["selection"][opt]
        grid = ", ".join(f"{lr}: {m:.3f}" for lr, m in s["means"].items()) or "—"
        md.append(f"| {name} | {grid} | {s['lr'] if s['lr'] is not None else '—'} | "
                  f"{s['sync_lr']} |")
    md += ["", f"## Primary endpoints (TOST within ±{n['margin']:g}, Holm over C1 and C2)", "",
           "| id | optimizer | efnd − sync, 95 % interval | 90 % interval (TOST) | TOST p | "
           "Holm p | verdict | prediction → outcome |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for cid, e in n["primary"].items():
        name = OPTIMIZERS[e["optimizer"]]
        if "missing" in e:
            md.append(f"| {cid} | {name} | — | — | — | — | not yet measured | "
                      f"{PREDICTIONS[cid]} |")
            continue
        held = "holds" if e["equivalent"] and (
            cid != "C2" or e["tost"]["estimate"] >= 0) else "fails"
        verdict = e["verdict"] + ("; different from zero (95 % interval excludes 0)"
                                  if e["different"] else "")
        md.append(f"| {cid} | {name} | {ci_text(e['difference'])} | "
                  f"[{_f(e['tost']['lo'])}, {_f(e['tost']['hi'])}] | {e['tost']['p']:.3g} | "
                  f"{e['p_holm']:.3g} | {verdict} | {PREDICTIONS[cid]} → **{held}** |")
    md += ["", "## Exploratory (unadjusted 95 % intervals)", "",
           "| optimizer | E1: (2BW + EF) − efnd | E2: efnd − sync at the sync lr | "
           "E3: EF's share of the delay gap | E3: net of EF without a delay |",
           "| --- | --- | --- | --- | --- |"]
    for opt, name in OPTIMIZERS.items():
        x = n["exploratory"][opt]
        md.append(f"| {name} | {ci_text(x['E1'])} | {ci_text(x['E2'])} | {_pct(x['E3_share'])} | "
                  f"{_pct(x['E3_net_share'])} |")
    md += [""]
    if n["shares_confounded"]:
        md += ["**As pre-registered:** efnd − sync ≤ −0.04 for Muon, so the shares of the gap "
               "that EF \"recovers\" cannot be read as a correction of the delay alone: EF's "
               "extrapolation lowers the loss of synchronous Muon training too.", ""]
    return "\n".join(md)


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write(control: Path | None = None, tier_results: Path | None = None,
          out_md: Path = REPORT, out_json: Path = NUMBERS) -> dict:
    """Write the report and its numbers; return the numbers."""
    n = compute(control, tier_results)
    _atomic(out_md, render(n))
    _atomic(out_json, json.dumps(n, indent=1, sort_keys=True) + "\n")
    return n


def marker(kind: str, args: tuple[str, ...], numbers: Path = NUMBERS) -> str:
    """A front-page number from the committed ``ef-control-report.json``: ``efc/C1`` (the 95 %
    interval of efnd − sync), ``efcv/C1`` (its TOST verdict after Holm), ``efc/E1/muon`` (an
    exploratory interval; ``E3_share``/``E3_net_share`` in per cent), ``efc/lr/muon`` (lr*)."""
    n = json.loads(numbers.read_text())
    if args[0] == "lr":
        return f"{n['selection'][args[1]]['lr']:g}"
    if args[0] in PRIMARY:
        e = n["primary"][args[0]]
        if "missing" in e:
            return "not yet measured"
        if kind == "efcv":
            return (f"{e['verdict'].split(' (')[0]} (TOST ±{n['margin']:g}, p after Holm "
                    f"{e['p_holm']:.3g})")
        return ci_text(e["difference"])
    e = n["exploratory"][args[1]][args[0]]
    return _pct(e) if args[0].startswith("E3") else ci_text(e)


def main(argv=None) -> int:
    """``python experiments/ef_control.py --report``: write the report, print its path."""
    write()
    print(REPORT)
    return 0
