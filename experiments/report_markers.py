"""Numbers quoted in prose, computed from the result files.

A number in a verdict (experiments/README.md) is written as ``<!--n:KEY-->VALUE<!--/n-->``: the
comment is invisible on GitHub, the book replaces VALUE by :func:`number` (KEY) when it is
built, and tests/test_docs_numbers.py fails when a typed VALUE differs from it. Refresh the
typed values with ``python experiments/report.py --fill-readme``. A verdict word can be a
marker too (``verdict/A/B``), so the rule of ``stats.verdict`` decides it, not the writer.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import stats
import sweep
from ladder_verdicts import MIN_SEEDS
from report_common import (
    LABEL,
    PAPER_360M,
    diffs,
    drift,
    minus,
    pair,
    paper_share,
    seed_gaps,
    share,
    spectral_drift,
    vals,
)

NUMBER_RE = re.compile(r"<!--n:([^>]*?)-->(.*?)<!--/n-->", re.S)
_R_CACHE: dict[str, dict] = {}


def _results_of(tier: str) -> dict:
    if tier not in _R_CACHE:
        from report_common import load_results

        _R_CACHE[tier] = load_results(sweep.get_tier(tier).results)
    return _R_CACHE[tier]


def _mean_sd(xs: list[float], digits: int, signed: bool, sd: bool = True) -> str:
    if not xs:
        return "—"
    if any(not math.isfinite(x) for x in xs):
        return "diverged"
    s = stats.summary(xs)
    head = f"{s.mean:+.{digits}f}" if signed else f"{s.mean:.{digits}f}"
    if not sd or s.sd is None:
        return head
    return f"{head} ± {s.sd:.{digits}f}"


def _train_windows(config: dict) -> int | None:
    """Training windows of a record's data (records written before the data's provenance:
    the data are loaded again, from the tokenizer cache)."""
    from asyncpp.data import load_data
    from asyncpp.train.config import from_dict

    try:
        cfg = from_dict(config)
        return load_data(cfg.data, cfg.model_config().vocab_size).train.num_windows
    except (ValueError, OSError):
        return None


def regime_text(R, cell: str) -> str:
    """"4.0M parameters, 0.26 tokens/parameter, 1.0 epoch" of ``cell``'s first finished run:
    parameters as asyncpp-train counts them, tokens = steps × batch × sequence, epochs =
    windows read / training windows."""
    rec = next((r for r in R.get(cell, {}).values() if r.get("status") == "ok"), None)
    if rec is None:
        return "—"
    f = rec["final"]
    n = f["params"]
    tpp = f.get("tokens_per_param", f["tokens"] / n)
    epochs = f.get("epochs")
    if epochs is None:
        c = rec["config"]
        w = _train_windows(c)
        epochs = None if not w else c["train"]["steps"] * c["train"]["batch_size"] / w
    size = f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"
    ep = "—" if epochs is None else f"{epochs:.2g}"
    return f"{size} parameters, {tpp:.2g} tokens/parameter, {ep} epoch" + (
        "" if ep == "1" else "s")


def number(key: str) -> str:
    """The current value of a number quoted in prose, from the result files only.

    ``KEY`` is ``tier/kind/args`` with an optional ``:digits``; cells are result-cell names:

    - ``count`` — number of result files of the tier; ``n/C`` — seeds of cell C;
    - ``repro/R/F`` — field F (``recorded``, ``rerun``, ``diff``, ``sensitivity``) of result R
      in the tier's ``reproduction.json`` (``reproduce.py --probe --out``);
    - ``cpuh`` — the lane-hours its runs took: the sum of their wall times (one thread each,
      so an upper bound on their CPU time on a shared machine; reused results not counted);
    - ``loss/C``, ``lossmean/C`` — final validation loss of C, mean ± std (or the mean);
    - ``gap/A/B``, ``gapmean/A/B`` — paired gap B − A, signed;
    - ``ci/A/B`` — the 95 % t-interval of the paired B − A, "[lo, hi]"; ``signs/A/B`` — how
      many seeds go the way of the mean, "3/3 negative"; ``pd/A/B`` — all of it, "+0.012 ±
      0.005 [+0.000, +0.024], 3/3 positive"; ``verdict/A/B`` — ``stats.verdict`` of B
      against A (lower loss is better): "better", "worse", "within noise";
    - ``gapseed/k/A/B`` — the gap of seed k; ``lossseed/k/C`` — the loss of seed k;
      ``diffseed/k/A/B`` — A − B in seed k, unsigned; ``gapat/STEP/A/B`` — the seed-mean gap of
      the validation curves at evaluation step STEP;
    - ``gapci/A/B`` — the paired gap B − A with its 95 % interval, "+0.274 [−0.074, +0.622]";
      ``recif/S/A/C`` — the share ``rec`` when the interval of the gap A − S excludes zero,
      else "— (gap within noise)", or "— (too few seeds)" with one paired seed (a share of an
      unestablished gap is unbounded);
    - ``rec/S/A/C`` — the share of the gap A − S that C recovers, "NN %"; ``recnum/S/A/C``
      the same without the unit; ``recseed/k/S/A/C`` that share for seed k; ``recseeds/S/A/C``
      the seeds' shares, "NN, NN, NN" (seed order);
    - ``sharepd/S/A/C1/C2`` — the paired per-seed share of C2 minus that of C1, percentage
      points with the 95 % interval and signs; ``sharevd/S/A/C1/C2`` — its verdict (a larger
      share is better);
    - ``dd/S1/A1/S2/A2`` — the paired change of a gap, (A2 − S2) − (A1 − S1) seed by seed,
      with its interval and signs; ``ddvd/S1/A1/S2/A2`` its verdict ("better": the second gap
      is smaller);
    - ``done/T``, ``planned/T`` — finished and planned runs of table T of the tier;
    - ``regime/C`` — the regime of cell C's runs, "4.0M parameters, 0.26 tokens/parameter,
      1 epochs" (:func:`regime_text`);
    - ``updates/C`` — updates × sequences per update of cell C's runs ("400 × 8");
    - ``gapratio/S/A/B`` — the gap A − S over the gap B − S on the seed means (default 2 digits);
    - ``drift/C``, ``driftmean/C`` — mean relative update drift ρ̄ (default 2 digits);
    - ``pearson``, ``spearman`` — drift against share recovered over the optimizers (Table 6);
    - ``flatdrop/C`` — validation-loss drop over the last 20 % of the steps, mean ± std;
    - ``sdrift/C``, ``sdriftmean/C`` — T2's drift δ̄ (``drift.spectral_mean``), default 3 digits;
    - ``h2f/O/M`` — H2's best lr fraction of mode M of optimizer O ("1/4"); ``h2gap/O/M`` —
      the gap of M at its best lr against sync at its best lr, mean ± std;
    - ``h3f/O/B`` — H3's lr factor for optimizer O at β = B, "× 0.5";
    - ``zerogap/O`` — the zero-gap table's best correction of optimizer O ("EF(γ*)"),
      ``zerogappd/O`` its paired gap to sync with interval and signs, ``zerogapsd/O`` that gap
      in units of sync's seed sd, ``zerogapvd/O`` its verdict;
    - ``pred/L`` — the verdict of the compute-optimal ladder's prediction L ("L1" … "L10":
      holds, does not hold, within noise, pending; ``ladder_verdicts``), ``predwhy/L`` its
      parts with their evidence (the tier in the key is ignored: they read every ladder tier);
      ``pred3/L``, ``predwhy3/L`` the same on the pre-registered seeds 0–2 only;
    - ``paper/gap/O``, ``paper/rec/O`` — the paper's 360M gap and EF share (``PAPER_360M``);
      ``paper/gaprank/O`` where that gap ranks among the paper's ("smallest", …, "largest").
    """
    if key.split(":")[0].split("/")[1:2] in (["pred"], ["predwhy"], ["pred3"], ["predwhy3"]):
        return _number(key)  # prose with names in it ("opt-180k"): its numbers carry "−"
    return minus(_number(key))


def _number(key: str) -> str:
    body, _, dig = key.partition(":")
    tier, kind, *args = body.split("/")
    if tier == "paper":  # the paper's 360M numbers (PAPER_360M), quoted beside ours
        s_, a_, e_ = PAPER_360M[args[0]]
        if kind == "gap":
            return f"{a_ - s_:+.3f}"
        if kind == "rec":
            x = paper_share(args[0])
            return "—" if x is None else f"{x:.0f} %"
        if kind == "gaprank":  # "smallest", "second smallest", …, "largest"
            gaps = sorted(v[1] - v[0] for v in PAPER_360M.values())
            k = gaps.index(a_ - s_)
            if k == len(gaps) - 1:
                return "largest"
            return ("", "second ", "third ", "fourth ")[k] + "smallest"
        raise KeyError(f"unknown paper number {key!r}")
    if kind in ("pred", "predwhy", "pred3", "predwhy3"):  # every ladder tier's results
        from ladder_verdicts import PREREGISTERED_SEEDS, evidence_of, verdict_of

        fn = verdict_of if kind.startswith("pred") and "why" not in kind else evidence_of
        return fn(args[0], seeds=PREREGISTERED_SEEDS if kind.endswith("3") else None)
    R = _results_of(tier)
    d = int(dig) if dig else None
    if kind == "count":
        return str(sum(len(v) for v in R.values()))
    if kind == "repro":  # experiments/<tier>/reproduction.json (reproduce.py --out)
        import json

        rows = json.loads((sweep.get_tier(tier).root / "reproduction.json").read_text())
        row = next(r for r in rows if Path(r["result"]).stem == args[0])
        x = row.get(args[1])
        if x is None:
            return "—"
        if args[1] in ("diff", "sensitivity"):
            return "0" if x == 0 else f"{x:+.{d or 1}e}"
        return f"{x:.{d or 7}f}"
    if kind == "cpuh":  # one thread per run: its wall time bounds its CPU time
        secs = sum(r["final"].get("wall_s", 0.0) for v in R.values() for r in v.values()
                   if "reused_from" not in r and isinstance(r.get("final"), dict))
        return f"{secs / 3600:.{d if d is not None else 1}f}"
    if kind == "n":
        return str(len(vals(R, args[0])))
    if kind in ("loss", "lossmean"):
        return _mean_sd(list(vals(R, args[0]).values()), d or 3, False, kind == "loss")
    if kind in ("gap", "gapmean"):
        return _mean_sd(diffs(R, args[0], args[1]), d or 3, True, kind == "gap")
    if kind in ("ci", "gapci", "signs", "pd", "verdict"):
        p = pair(R, args[1], args[0])
        if p is None:
            return "—"
        if kind == "verdict":
            margin = float(args[2]) if len(args) > 2 else 0.0
            return stats.verdict(p, margin)
        if kind == "signs":
            return p.signs
        if kind in ("ci", "gapci"):  # gapci: the mean gap before its interval
            head = f"{p.mean:+.{d or 3}f}" if kind == "gapci" else ""
            if p.lo is None:
                return f"{head} (n = {p.n})" if head else "—"
            return f"{head} {p.interval(d or 3)}".lstrip()
        return p.fmt(d or 3)
    if kind in ("sharepd", "sharevd"):
        from report_common import share_diff

        p = share_diff(R, *args)
        if p is None:
            return "—"
        if kind == "sharevd":
            return stats.verdict(p, lower_is_better=False)
        return p.fmt(d or 0).replace(" [", " pp [", 1) if p.lo is not None else p.fmt(d or 0)
    if kind in ("done", "planned"):
        todo = sweep.plan([args[0]], None, None, sweep.get_tier(tier))
        if kind == "planned":
            return str(len(todo))
        return str(sum(s in R.get(c.name, {}) for c, s in todo))
    if kind == "regime":
        return regime_text(R, args[0])
    if kind == "updates":
        from report_paper import _updates

        return _updates(R, args[0])
    if kind in ("dd", "ddvd"):
        g1, g2 = seed_gaps(R, args[0], args[1]), seed_gaps(R, args[2], args[3])
        if not set(g1) & set(g2):
            return "—"
        p = stats.paired(g2, g1)
        return stats.verdict(p) if kind == "ddvd" else p.fmt(d or 3)
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
    if kind == "recif":  # a share only of a gap the interval establishes
        from report_common import min_seeds_of, no_share_reason, no_share_text

        instead = no_share_text(no_share_reason(R, args[0], args[1], min_seeds_of(tier)))
        if instead:
            return instead
        x, _ = share(R, *args)
        return "—" if x is None else f"{x:.{d or 0}f} %"
    if kind in ("rec", "recnum"):
        x, _ = share(R, *args)
        if x is None:
            return "—"
        return f"{x:.{d or 0}f}" + (" %" if kind == "rec" else "")
    if kind == "recseed":
        x = share(R, *args[1:])[1].get(int(args[0]))
        return "—" if x is None else f"{x:.{d or 0}f}"
    if kind == "recseeds":
        per = share(R, *args)[1]
        return ", ".join(f"{x:.{d or 0}f}" for x in per.values()) or "—"
    if kind == "gapratio":
        from report_beyond import gap_ratio

        x = gap_ratio(R, *args)[0]
        return "—" if x is None else f"{x:.{d or 2}f}"
    if kind in ("drift", "driftmean"):
        return _mean_sd(drift(R, args[0]), d or 2, False, kind == "drift")
    if kind in ("pearson", "spearman"):
        from report_paper import pearson, ranks, table6

        pts = table6(R)[1]
        xs, ys = [q[0] for q in pts], [q[1] for q in pts]
        if kind == "spearman":
            xs, ys = ranks(xs), ranks(ys)
        return f"{pearson(xs, ys):+.{d or 2}f}"
    if kind in ("sdrift", "sdriftmean"):
        return _mean_sd(spectral_drift(R, args[0]), d or 3, False, kind == "sdrift")
    if kind == "h2f":
        from report_why import frac, h2_best

        f, _ = h2_best(R, args[0], args[1])
        return "—" if f is None else frac(f)
    if kind == "h2gap":
        from report_why import h2_gap

        return _mean_sd(h2_gap(R, args[0], args[1]), d or 3, True, True)
    if kind == "h3f":
        from report_why import h3_factor

        f = h3_factor(args[0], float(args[1]), sweep.get_tier(tier))
        return "—" if f is None else f"× {f:g}"
    if kind in ("zerogap", "zerogapsd", "zerogappd", "zerogapvd"):
        from report_zero_gap import zero_gap_row

        row = zero_gap_row(R, args[0])
        if row is None:
            return "—"
        if kind == "zerogap":
            return row.label
        if kind == "zerogappd":
            return row.paired.fmt(d or 3)
        if kind == "zerogapvd":
            from report_common import min_seeds_of, verdict_of_at_least

            return verdict_of_at_least(row.paired, min_seeds_of(tier))
        return "—" if row.in_sd is None else f"{row.in_sd:+.{d or 1}f}"
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
# The front page's rows: (tier, cell suffix, what the run is), the compute-optimal ladder
# first; the short-training tiers keep their rows under that name, with their regime.
GLANCE_RUNS = (("opt-180k", "", "compute-optimal"), ("opt-580k", "", "compute-optimal"),
               ("tiny", "-steps1200", "short training"), ("tiny", "", "short training"),
               ("small", "", "short training"))


def glance_table(runs=GLANCE_RUNS) -> str:
    """The front page's table: per run and optimizer, the regime (parameters, tokens per
    parameter, epochs), the 2BW gap to synchronous training and EF's share of it, then the
    paper's 360M numbers. Cells are marked numbers (see :func:`number`), so the table can be
    pasted into Markdown that the tests check."""
    def m(key):
        return f"<!--n:{key}-->{number(key)}<!--/n-->"
    lines = ["| run | regime | optimizer | gap 2BW − sync [95 % interval] | EF recovers |",
             "| --- | --- | --- | --- | --- |"]
    for tier, suffix, what in runs:
        R = _results_of(tier)
        # a ladder row needs the seeds its verdicts need (the front page promises "at least
        # three seeds"); a short-training row, the two an interval needs
        need = MIN_SEEDS if tier.startswith("opt-") else 2
        opts = [o for o in GLANCE_OPTIMIZERS
                if len(set(R.get(f"{o}-sync{suffix}", ())) & set(R.get(f"{o}-async{suffix}", ())))
                >= need]
        if not opts:  # the tier's claims have not run yet: say how far it is
            lines.append(f"| `{tier}`, {what} | running: {m(f'{tier}/count')} runs finished, "
                         f"no claim at {need} seeds yet | — | — | — |")
            continue
        for k, o in enumerate(opts):
            s_, a_, e_ = (f"{o}-{x}{suffix}" for x in ("sync", "async", "ef"))
            head = (f"`{tier}`, {what}", m(f"{tier}/regime/{s_}")) if k == 0 else ("", "")
            lines.append(f"| {head[0]} | {head[1]} | {LABEL[o]} | "
                         f"{m(f'{tier}/gapci/{s_}/{a_}')} | {m(f'{tier}/recif/{s_}/{a_}/{e_}')} |")
    for k, o in enumerate(GLANCE_OPTIMIZERS):
        head = ("the paper, 360M", "360M parameters, 20 tokens/parameter, < 1 epoch") \
            if k == 0 else ("", "")
        lines.append(f"| {head[0]} | {head[1]} | {LABEL[o]} | {m(f'paper/gap/{o}')} | "
                     f"{m(f'paper/rec/{o}')} |")
    return "\n".join(lines)

