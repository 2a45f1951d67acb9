"""Numbers quoted in prose, computed from the result files.

A number in a verdict (experiments/README.md) is written as ``<!--n:KEY-->VALUE<!--/n-->``: the
comment is invisible on GitHub, the book replaces VALUE by :func:`number` (KEY) when it is
built, and tests/test_docs_numbers.py fails when a typed VALUE differs from it. Refresh the
typed values with ``python experiments/report.py --fill-readme``. A verdict word can be a
marker too (``verdict/A/B``), so the rule of ``stats.verdict`` decides it, not the writer.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from pathlib import Path

from asyncpp.data import load_data
from asyncpp.train.config import from_dict

from . import claims, ef_control_report, primary, protocol, protocol_v2_study, stats
from .ladder_verdicts import (
    L1_MARGIN,
    MIN_SEEDS,
    PREREGISTERED_SEEDS,
    combine,
    evidence_of,
    ladder_tiers,
    parts,
    post_hoc_margin,
    protocol_evidence_of,
    protocol_verdict_of,
    verdict_of,
)
from .report_beyond import gap_ratio
from .report_common import (
    LABEL,
    PAPER_360M,
    diffs,
    drift,
    load_results,
    min_seeds_of,
    minus,
    no_share_reason,
    no_share_text,
    pair,
    paper_share,
    seed_gaps,
    share,
    share_diff,
    share_val,
    spectral_drift,
    vals,
    verdict_of_at_least,
)
from .report_paper import pearson, ranks, table6, updates
from .report_why import frac, h2_best, h2_gap, h3_factor
from .report_zero_gap import choice_text, zero_gap_row
from .tables import plan
from .tables_cells import OPTIMIZERS
from .tiers import get_tier

NUMBER_RE = re.compile(r"<!--n:([^>]*?)-->(.*?)<!--/n-->", re.S)
_R_CACHE: dict[str, dict] = {}


def _results_of(tier: str) -> dict:
    if tier not in _R_CACHE:
        _R_CACHE[tier] = load_results(get_tier(tier).results)
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
      ``recfi/S/A/C`` the same, the share with Fieller's 95 % interval (``fieller``);
    - ``rec/S/A/C`` — the share of the gap A − S that C recovers, "NN %"; ``recnum/S/A/C``
      the same without the unit; ``recseed/k/S/A/C`` that share for seed k; ``recseeds/S/A/C``
      the seeds' shares, "NN, NN, NN" (seed order);
    - ``sharepd/S/A/C1/C2`` — C2's share of the gap A − S minus C1's in percentage points,
      the difference of the two ratio-of-means shares with Fieller's 95 % interval and the
      seeds agreeing; ``sharevd/S/A/C1/C2`` — its verdict (a larger share is better);
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
      in units of sync's seed sd, ``zerogapvd/O`` its verdict, ``zerogapseeds/O`` the seeds
      the choice compared the corrections on ("seeds 0–2, 5 corrections");
    - ``pred/L`` — the verdict of the compute-optimal ladder's prediction L ("L1" … "L10":
      holds, does not hold, within noise, pending; ``ladder_verdicts``), ``predwhy/L`` its
      parts with their evidence (the tier in the key is ignored: they read every ladder tier);
      ``pred3/L``, ``predwhy3/L`` the same on the pre-registered seeds 0–2 only;
      ``prednew/L``, ``prednewwhy/L`` (L1, L3, L6, L7, L9) the verdict and parts under the
      study protocol's tests (TOST at L1's declared margin; share ≥ 50 % with Fieller's
      interval; the slope over log₂ tokens; TOST at a post-hoc margin for L7 and L9);
      ``predtier/L`` the verdict of L's parts on the key's tier alone (L1, L5: one size);
      ``primary/P`` protocol v2's primary endpoint P on the tier's results, its estimate,
      interval, p and Holm-adjusted p (``primary.family``), ``primaryvd/P`` its verdict;
      ``margin/L1`` L1's declared equivalence margin, ``margin/post-hoc`` the post-hoc one of
      L7 and L9 ("±0.04");
    - ``recshare/S/A/C`` — the share with Fieller's 95 % interval even where the gap is not
      established ("41 % [interval unbounded]");
    - ``fieller/S/A/C`` — the share of the gap A − S that C recovers with Fieller's 95 %
      interval ("70 % [38, 82]"), or why there is none (the gap not established);
    - ``claim/C`` — the book intro's summary cell of the paper's claim C on the tier
      (``claims.cell_of``: the verdict with its difference or EF's share and interval, "not
      run" where the tier cannot test it);
    - ``papertab/O/I`` — row I of the book intro's table of Muon and AdamW beside the paper
      (``claims.paper_columns``), optimizer O's column;
    - ``paper/gap/O``, ``paper/rec/O`` — the paper's 360M gap and EF share (``PAPER_360M``);
      ``paper/gaprank/O`` where that gap ranks among the paper's ("smallest", …, "largest");
    - ``lrof/C`` — the optimizer lr cell C's results ran at;
    - ``efc/…``, ``efcv/…`` — the EF-without-delay control (``ef_control_report.marker``);
    - ``v2runs``, ``v2family``, ``v2sel``, ``v2lr/CELL``, ``v2/E``, ``v2vd/E``, ``v2share/E``,
      ``v2gapci/S/A``, ``v2recfi/S/A/E``, ``v2grid/CELL`` — protocol v2's
      own runs, its ``asyncpp-study`` report (``protocol_v2_study.marker``).
    """
    if key.split(":")[0].split("/")[1:2] in (["pred"], ["predwhy"], ["pred3"], ["predwhy3"],
                                             ["prednew"], ["prednewwhy"], ["predtier"]):
        return _number(key)  # prose with names in it ("opt-180k"): its numbers carry "−"
    return minus(_number(key))


@dataclasses.dataclass(frozen=True)
class Key:
    """One parsed marker key ``tier/kind/args[:digits]``: the tier's results on demand."""

    tier: str
    kind: str
    args: tuple[str, ...]
    digits: int | None

    @property
    def R(self) -> dict:
        return _results_of(self.tier)

    def d(self, default: int) -> int:
        """The key's digits, else ``default`` (a key's ``:0`` counts as "not given", as the
        markers have always read it)."""
        return self.digits or default


def _paper(k: Key) -> str:
    """The paper's 360M numbers (``PAPER_360M``), quoted beside ours."""
    s_, a_, _ = PAPER_360M[k.args[0]]
    if k.kind == "gap":
        return f"{a_ - s_:+.3f}"
    if k.kind == "rec":
        x = paper_share(k.args[0])
        return "—" if x is None else f"{x:.0f} %"
    if k.kind == "gaprank":  # "smallest", "second smallest", …, "largest"
        gaps = sorted(v[1] - v[0] for v in PAPER_360M.values())
        i = gaps.index(a_ - s_)
        if i == len(gaps) - 1:
            return "largest"
        return ("", "second ", "third ", "fourth ")[i] + "smallest"
    raise KeyError(f"unknown paper number {k.kind!r}")


def _pred(k: Key) -> str:
    """Every ladder tier's results (the key's tier is ignored)."""
    fn = evidence_of if "why" in k.kind else verdict_of
    return fn(k.args[0], seeds=PREREGISTERED_SEEDS if k.kind.endswith("3") else None)


def _prednew(k: Key) -> str:
    """The study protocol's reading of L1, L3, L6, L7 or L9
    (``ladder_verdicts.protocol_parts``)."""
    return (protocol_evidence_of if "why" in k.kind else protocol_verdict_of)(k.args[0])


def _predtier(k: Key) -> str:
    """The verdict of those of L's parts that name the key's tier (L1, L5: per size)."""
    mine = [p for p in parts(k.args[0], ladder_tiers()) if p.text.startswith(f"`{k.tier}`:")]
    if not mine:
        raise KeyError(f"prediction {k.args[0]} has no part of its own on {k.tier}")
    return combine(mine)


_CLAIMS_CACHE: dict[str, tuple] = {}


def _claim(k: Key) -> str:
    """The summary cell of one paper claim on the tier (its verdicts computed once a tier)."""
    if k.tier not in _CLAIMS_CACHE:
        _CLAIMS_CACHE[k.tier] = claims.verdicts(k.tier)
    if not any(c.key == k.args[0] for c in claims.CLAIMS):
        raise KeyError(f"no claim {k.args[0]!r} (claims.CLAIMS)")
    return claims.cell_of(_CLAIMS_CACHE[k.tier], k.args[0])


def _papertab(k: Key) -> str:
    """One cell of the intro's table beside the paper's 360M numbers."""
    opt, row = k.args
    cols = dict(claims.paper_columns(k.tier)[0])
    if opt not in cols:
        raise KeyError(f"{k.tier} has no {opt} column beside the paper's numbers")
    return cols[opt][int(row)]


def _primary(k: Key) -> str:
    q = next(q for q in primary.family(k.R) if q.id == k.args[0])
    return q.verdict if k.kind == "primaryvd" else q.text()


def _margin(k: Key) -> str:
    """L1's declared margin or the post-hoc one (``ladder_verdicts.post_hoc_margin``)."""
    if k.args[0] == "L1":
        return f"±{L1_MARGIN:g}"
    if k.args[0] == "post-hoc":
        return f"±{post_hoc_margin():g}"
    raise KeyError(f"no margin {k.args[0]!r} (L1 or post-hoc)")


def _recshare(k: Key) -> str:
    """The share with Fieller's 95 % interval whatever the gap: "41 % [35, 54]", or
    "41 % [interval unbounded]" while the gap itself is not established (``share_val``)."""
    return share_val(k.R, *k.args).text


def _fieller(k: Key) -> str:
    """Share with Fieller's interval (``protocol.fieller_share``)."""
    sh = protocol.fieller_share(*(vals(k.R, c) for c in k.args))
    if sh.share is None:
        return "—"
    if sh.lo is None:
        return "— (gap not established)"
    return sh.text()


def _count(k: Key) -> str:
    return str(sum(len(v) for v in k.R.values()))


def _repro(k: Key) -> str:
    """experiments/<tier>/reproduction.json (reproduce.py --out)."""
    rows = json.loads((get_tier(k.tier).root / "reproduction.json").read_text())
    row = next(r for r in rows if Path(r["result"]).stem == k.args[0])
    x = row.get(k.args[1])
    if x is None:
        return "—"
    if k.args[1] in ("diff", "sensitivity"):
        return "0" if x == 0 else f"{x:+.{k.d(1)}e}"
    return f"{x:.{k.d(7)}f}"


def _cpuh(k: Key) -> str:
    """One thread per run: its wall time bounds its CPU time."""
    secs = sum(r["final"].get("wall_s", 0.0) for v in k.R.values() for r in v.values()
               if "reused_from" not in r and isinstance(r.get("final"), dict))
    return f"{secs / 3600:.{k.digits if k.digits is not None else 1}f}"


def _n(k: Key) -> str:
    return str(len(vals(k.R, k.args[0])))


def _loss(k: Key) -> str:
    return _mean_sd(list(vals(k.R, k.args[0]).values()), k.d(3), False, k.kind == "loss")


def _gap(k: Key) -> str:
    return _mean_sd(diffs(k.R, k.args[0], k.args[1]), k.d(3), True, k.kind == "gap")


def _paired(k: Key) -> str:
    """ci, gapci, signs, pd, verdict of the paired B − A."""
    p = pair(k.R, k.args[1], k.args[0])
    if p is None:
        return "—"
    if k.kind == "verdict":
        return stats.verdict(p, float(k.args[2]) if len(k.args) > 2 else 0.0)
    if k.kind == "signs":
        return p.signs
    if k.kind in ("ci", "gapci"):  # gapci: the mean gap before its interval
        head = f"{p.mean:+.{k.d(3)}f}" if k.kind == "gapci" else ""
        if p.lo is None:
            return f"{head} (n = {p.n})" if head else "—"
        return f"{head} {p.interval(k.d(3))}".lstrip()
    return p.fmt(k.d(3))


def _sharepd(k: Key) -> str:
    p = share_diff(k.R, *k.args)
    if p is None:
        return "—"
    return p.verdict() if k.kind == "sharevd" else p.text(k.d(0))


def _planned(k: Key) -> str:
    """done/T, planned/T: finished and planned runs of table T."""
    todo = plan([k.args[0]], None, None, get_tier(k.tier))
    if k.kind == "planned":
        return str(len(todo))
    return str(sum(s in k.R.get(c.name, {}) for c, s in todo))


def _regime(k: Key) -> str:
    return regime_text(k.R, k.args[0])


def _updates_of(k: Key) -> str:
    return updates(k.R, k.args[0])


def _dd(k: Key) -> str:
    g1, g2 = seed_gaps(k.R, k.args[0], k.args[1]), seed_gaps(k.R, k.args[2], k.args[3])
    if not set(g1) & set(g2):
        return "—"
    p = stats.paired(g2, g1)
    return stats.verdict(p) if k.kind == "ddvd" else p.fmt(k.d(3))


def _seed_pair(k: Key) -> tuple[float | None, float | None]:
    seed = int(k.args[0])
    return vals(k.R, k.args[1]).get(seed), vals(k.R, k.args[2]).get(seed)


def _gapseed(k: Key) -> str:
    a, b = _seed_pair(k)
    return "—" if a is None or b is None else f"{b - a:+.{k.d(3)}f}"


def _diffseed(k: Key) -> str:
    a, b = _seed_pair(k)
    return "—" if a is None or b is None else f"{a - b:.{k.d(3)}f}"


def _lossseed(k: Key) -> str:
    v = vals(k.R, k.args[1]).get(int(k.args[0]))
    return "—" if v is None else f"{v:.{k.d(3)}f}"


def _gapat(k: Key) -> str:
    step, a, b = int(k.args[0]), k.args[1], k.args[2]
    ra, rb = k.R.get(a, {}), k.R.get(b, {})
    gaps = []
    for s in sorted(set(ra) & set(rb)):
        ca, cb = ra[s]["curves"], rb[s]["curves"]
        if step in ca["val_step"] and step in cb["val_step"]:
            gaps.append(cb["val_loss"][cb["val_step"].index(step)]
                        - ca["val_loss"][ca["val_step"].index(step)])
    return _mean_sd(gaps, k.d(2), True, False)


def _recif(k: Key) -> str:
    """A share only of a gap the interval establishes (``recfi``: with Fieller's interval,
    the ratio of the mean differences over the seeds common to the three cells)."""
    instead = no_share_text(no_share_reason(k.R, k.args[0], k.args[1], min_seeds_of(k.tier)))
    if instead:
        return instead
    if k.kind == "recfi":
        return _fieller(k)
    x, _ = share(k.R, *k.args)
    return "—" if x is None else f"{x:.{k.d(0)}f} %"


def _rec(k: Key) -> str:
    x, _ = share(k.R, *k.args)
    if x is None:
        return "—"
    return f"{x:.{k.d(0)}f}" + (" %" if k.kind == "rec" else "")


def _recseed(k: Key) -> str:
    x = share(k.R, *k.args[1:])[1].get(int(k.args[0]))
    return "—" if x is None else f"{x:.{k.d(0)}f}"


def _recseeds(k: Key) -> str:
    per = share(k.R, *k.args)[1]
    return ", ".join(f"{x:.{k.d(0)}f}" for x in per.values()) or "—"


def _gapratio(k: Key) -> str:
    x = gap_ratio(k.R, *k.args)[0]
    return "—" if x is None else f"{x:.{k.d(2)}f}"


def _drift(k: Key) -> str:
    return _mean_sd(drift(k.R, k.args[0]), k.d(2), False, k.kind == "drift")


def _correlation(k: Key) -> str:
    """pearson, spearman: drift against share recovered over the optimizers (Table 6)."""
    pts = table6(k.R)[1]
    xs, ys = [q[0] for q in pts], [q[1] for q in pts]
    if k.kind == "spearman":
        xs, ys = ranks(xs), ranks(ys)
    return f"{pearson(xs, ys):+.{k.d(2)}f}"


def _sdrift(k: Key) -> str:
    return _mean_sd(spectral_drift(k.R, k.args[0]), k.d(3), False, k.kind == "sdrift")


def _h2f(k: Key) -> str:
    f, _ = h2_best(k.R, k.args[0], k.args[1])
    return "—" if f is None else frac(f)


def _h2gap(k: Key) -> str:
    return _mean_sd(h2_gap(k.R, k.args[0], k.args[1]), k.d(3), True, True)


def _h3f(k: Key) -> str:
    f = h3_factor(k.args[0], float(k.args[1]), get_tier(k.tier))
    return "—" if f is None else f"× {f:g}"


def _zerogap(k: Key) -> str:
    row = zero_gap_row(k.R, k.args[0])
    if row is None:
        return "—"
    if k.kind == "zerogap":
        return row.label
    if k.kind == "zerogappd":
        return row.paired.fmt(k.d(3))
    if k.kind == "zerogapvd":
        return verdict_of_at_least(row.paired, min_seeds_of(k.tier))
    if k.kind == "zerogapseeds":
        return choice_text(row)
    return "—" if row.in_sd is None else f"{row.in_sd:+.{k.d(1)}f}"


def _flatdrop(k: Key) -> str:
    recs = [r for r in k.R.get(k.args[0], {}).values() if r.get("status") == "ok"]
    drops = []
    for r in recs:
        steps, vl = r["curves"]["val_step"], r["curves"]["val_loss"]
        i80 = min(range(len(steps)), key=lambda i: abs(steps[i] - 0.8 * steps[-1]))
        drops.append(vl[i80] - vl[-1])
    return _mean_sd(drops, k.d(3), False, True)


def _lrof(k: Key) -> str:
    """The optimizer lr CELL's results ran at ("0.16"; several, comma-separated, if its seeds
    differ)."""
    lrs = sorted({r["config"]["optimizer"]["lr"] for r in k.R.get(k.args[0], {}).values()
                  if r.get("config")})
    return ", ".join(f"{x:g}" for x in lrs) or "—"


# kind → its function (the kinds are documented in :func:`number`)
KINDS: dict[str, Callable[[Key], str]] = {
    "count": _count, "repro": _repro, "cpuh": _cpuh, "n": _n,
    "loss": _loss, "lossmean": _loss, "gap": _gap, "gapmean": _gap,
    **dict.fromkeys(("ci", "gapci", "signs", "pd", "verdict"), _paired),
    "sharepd": _sharepd, "sharevd": _sharepd, "done": _planned, "planned": _planned,
    "regime": _regime, "updates": _updates_of, "dd": _dd, "ddvd": _dd,
    "gapseed": _gapseed, "lossseed": _lossseed, "diffseed": _diffseed, "gapat": _gapat,
    "recif": _recif, "recfi": _recif, "rec": _rec, "recnum": _rec, "recseed": _recseed,
    "recseeds": _recseeds,
    "gapratio": _gapratio, "drift": _drift, "driftmean": _drift,
    "pearson": _correlation, "spearman": _correlation, "sdrift": _sdrift, "sdriftmean": _sdrift,
    "h2f": _h2f, "h2gap": _h2gap, "h3f": _h3f,
    **dict.fromkeys(("zerogap", "zerogapsd", "zerogappd", "zerogapvd", "zerogapseeds"), _zerogap),
    "flatdrop": _flatdrop, "lrof": _lrof,
    **dict.fromkeys(("pred", "predwhy", "pred3", "predwhy3"), _pred),
    "prednew": _prednew, "prednewwhy": _prednew, "predtier": _predtier, "fieller": _fieller,
    "margin": _margin, "primary": _primary, "primaryvd": _primary, "recshare": _recshare,
    "claim": _claim, "papertab": _papertab,
    **dict.fromkeys(("efc", "efcv"), lambda k: ef_control_report.marker(k.kind, k.args)),
    **dict.fromkeys(("v2runs", "v2family", "v2sel", "v2lr", "v2", "v2vd", "v2share",
                     "v2gapci", "v2recfi", "v2grid"),
                    lambda k: protocol_v2_study.marker(k.kind, k.args)),
}


def parse_key(key: str) -> Key:
    body, _, dig = key.partition(":")
    tier, kind, *args = body.split("/")
    return Key(tier, kind, tuple(args), int(dig) if dig else None)


def _number(key: str) -> str:
    k = parse_key(key)
    if k.tier == "paper":
        return _paper(k)
    if k.kind not in KINDS:
        raise KeyError(f"unknown number kind {k.kind!r} in {key!r}")
    return KINDS[k.kind](k)


def fill_numbers(text: str, keep_markers: bool = False,
                 values: dict[str, str] | None = None) -> str:
    """``text`` with every ``<!--n:KEY-->VALUE<!--/n-->`` replaced by ``values[KEY]`` (a
    record :func:`numbers_of` wrote), else by the current :func:`number` (markers kept around
    it when ``keep_markers``)."""
    def repl(m):
        value = values[m.group(1)] if values is not None else number(m.group(1))
        return f"<!--n:{m.group(1)}-->{value}<!--/n-->" if keep_markers else value
    return NUMBER_RE.sub(repl, text)


def numbers_of(*texts: str) -> dict[str, str]:
    """``{KEY: number(KEY)}`` for every marked number of ``texts``, keys sorted: the record
    the marked pages are filled from (``experiments/numbers.json``)."""
    keys = sorted({m.group(1) for t in texts for m in NUMBER_RE.finditer(t)})
    return {k: number(k) for k in keys}


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


def _glance_v2_rows(m) -> list[str]:
    """The glance table's rows of protocol v2's own runs at ``opt-180k`` (the same model and
    corpus; learning rates chosen on its selection seeds, its claims seeds), for each
    optimizer whose three 20-token cells have run."""
    rows = []
    for o in ("muon", "adamw"):
        c = [f"{o}-{x}" for x in ("sync", "2bw", "ef")]
        if protocol_v2_study.marker("v2gapci", tuple(c[:2])).startswith("no "):
            continue
        head = ("`opt-180k`, protocol v2 (lr chosen on other seeds, 14 seeds)",
                m(f"opt-180k/regime/{o}-sync")) if not rows else ("", "")
        gap, share = m("opt-180k/v2gapci/" + "/".join(c[:2])), m("opt-180k/v2recfi/" + "/".join(c))
        rows.append(f"| {head[0]} | {head[1]} | {LABEL[o]} | {gap} | {share} |")
    return rows


def glance_table(runs=GLANCE_RUNS) -> str:
    """The front page's table: per run and optimizer, the regime (parameters, tokens per
    parameter, epochs), the 2BW gap to synchronous training and EF's share of it, then the
    paper's 360M numbers. Cells are marked numbers (see :func:`number`), so the table can be
    pasted into Markdown that the tests check."""
    def m(key):
        return f"<!--n:{key}-->{number(key)}<!--/n-->"
    lines = ["| run | regime | optimizer | gap 2BW − sync [95 % interval] | "
             "EF recovers [95 % interval] |",
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
                         f"{m(f'{tier}/gapci/{s_}/{a_}')} | {m(f'{tier}/recfi/{s_}/{a_}/{e_}')} |")
        if tier == "opt-180k" and not suffix:
            lines += _glance_v2_rows(m)
    for k, o in enumerate(GLANCE_OPTIMIZERS):
        head = ("the paper, 360M", "360M parameters, 20 tokens/parameter, < 1 epoch") \
            if k == 0 else ("", "")
        lines.append(f"| {head[0]} | {head[1]} | {LABEL[o]} | {m(f'paper/gap/{o}')} | "
                     f"{m(f'paper/rec/{o}')} |")
    return "\n".join(lines)



def marked_table(tiers: tuple[str, ...] = ("tiny", "small")) -> str:
    """The zero-gap table of ``tiers`` as marked numbers (``report_markers``), one row per
    (tier, optimizer) with a row, so the table can stand in Markdown that the tests check
    (experiments/README.md)."""
    def m(key):
        return f"<!--n:{key}-->{number(key)}<!--/n-->"
    # the correction and the seeds it was chosen on share a cell: seven columns did not fit
    # the book's 688 px column
    lines = ["| tier | optimizer | best 2BW correction (chosen on) | gap to sync, 95 % "
             "interval, seeds | in sync's sd | verdict (difference) |",
             "|" + " --- |" * 6]
    for t in tiers:
        R = load_results(get_tier(t).results)
        for o in OPTIMIZERS:
            if zero_gap_row(R, o) is None:
                continue
            lines.append(f"| `{t}` | {LABEL[o]} | {m(f'{t}/zerogap/{o}')} "
                         f"({m(f'{t}/zerogapseeds/{o}')}) | {m(f'{t}/zerogappd/{o}')} | "
                         f"{m(f'{t}/zerogapsd/{o}')} | "
                         f"{m(f'{t}/zerogapvd/{o}')} |")
    return "\n".join(lines)


def marked_primary_table(tier: str = "opt-180k") -> str:
    """Protocol v2's primary endpoints on ``tier``'s results as marked numbers: the
    declaration (from protocol-v2.toml), the ladder part it reads, the test's numbers with the
    Holm-adjusted p, and the verdict on that p."""
    def m(key):
        return f"<!--n:{key}-->{number(key)}<!--/n-->"
    # the ladder part is named by its prediction only (L1, L3, L6): its text is in the
    # prediction's line above, and the full text made the table wider than the book's column
    lines = ["| endpoint | what | declared test | ladder part | estimate, interval, p, Holm p "
             "| verdict (Holm) |", "|" + " --- |" * 6]
    for e in primary.protocol()["endpoint"]:
        part = primary.PARTS.get(e["id"])
        where = part[0] if part else "none"
        i = e["id"]
        lines.append(f"| {i} | {primary.typeset(e['what'])} | {e['test']} | {where} | "
                     f"{m(f'{tier}/primary/{i}')} | {m(f'{tier}/primaryvd/{i}')} |")
    return "\n".join(lines)
