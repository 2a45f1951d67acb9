r"""The verdicts of the compute-optimal ladder's predictions L1–L10 (experiments/README.md,
"Compute-optimal ladder: predictions", committed before the first run), computed from the
result files by the rule of ``stats``.

Each prediction is split into its parts; a part states a direction ("AdamW's gap is above
zero", "EF(γ*) − EF is not above zero") and gets one of

- **holds** — the 95 % interval of the paired difference (over ≥ :data:`MIN_SEEDS` seeds)
  lies wholly on the predicted side of the margin;
- **does not hold** — it lies wholly on the other side;
- **within noise** — it contains the margin (a prediction of "no difference" can never
  "hold" under this rule: its best outcome is "within noise");
- **pending** — a cell is missing or has fewer seeds than the rule needs;
- **not established** — (the study protocol's readings, :func:`protocol_parts`) an
  equivalence test at its margin neither establishes nor refutes the part.

Each part carries the test that decided it (``Part.test``), printed beside its verdict.

A prediction is "holds" when every part holds, "does not hold" when a part does not, and
otherwise "within noise" (or "pending" while a part is). :func:`verdict_of` and
:func:`evidence_of` feed the markers ``pred/L…`` and ``predwhy/L…`` of
``report_markers.number``.
"""

from __future__ import annotations

import dataclasses
import math

import tomllib
from scipy import stats as st

from .. import stats as study_stats
from . import primary, protocol, stats
from . import tables_opt as to
from .paths import EXPERIMENTS
from .report_common import (
    LABEL,
    load_results,
    minus,
    no_share_reason,
    pair,
    seed_gaps,
    share,
    vals,
)
from .report_opt import token_slope
from .report_zero_gap import zero_gap_row
from .tiers import get_tier

PROTOCOL_V2 = EXPERIMENTS / "opt-180k" / "protocol-v2.toml"

MIN_SEEDS = 3  # every verdict cell; the token ladder runs 2 seeds (TOKEN_SEEDS)
TOKEN_SEEDS = 2
HOLDS, FAILS, NOISE, PENDING = "holds", "does not hold", "within noise", "pending"
WELCH = "difference: unpaired (Welch) 95 % interval"
POINT = "point comparison of seed 0's grid argmins: no interval"
OPEN = "not established"  # an equivalence test that neither establishes nor refutes
#: L1's margin, declared in the prediction before the runs ("Muon's gap is at most 0.04")
L1_MARGIN = 0.04


@dataclasses.dataclass(frozen=True)
class Part:
    """One directional statement and what the results say about it."""

    text: str
    verdict: str
    evidence: str
    test: str = "difference: paired 95 % interval"  # the test that decided ``verdict``


def _fmt(p: stats.Paired | None, digits: int = 3, signs: bool = True) -> str:
    """"+0.012 [+0.004, +0.020], 3/3 positive" (``signs``: the paired seeds' agreement)."""
    if p is None:
        return "not measured yet"
    if p.lo is None:
        return f"{p.mean:+.{digits}f} (n = {p.n})".replace("-", "−")
    tail = f", {p.signs}" if signs else ""
    return f"{p.mean:+.{digits}f} {p.interval(digits)}{tail}".replace("-", "−")


def directional(p: stats.Paired | None, sign: int, margin: float = 0.0,
                min_seeds: int = MIN_SEEDS) -> str:
    """The verdict of "the difference is above ``margin``" (``sign`` = +1) or "below
    ``margin``" (``sign`` = −1) from the interval of ``p``."""
    if p is None or p.n < min_seeds or p.lo is None:
        return PENDING
    lo, hi = p.lo - margin, p.hi - margin
    if sign * lo > 0 and sign * hi > 0:
        return HOLDS
    if sign * lo < 0 and sign * hi < 0:
        return FAILS
    return NOISE


def _gap(R, o: str, mode: str = "async", suffix: str = "") -> stats.Paired | None:
    return pair(R, f"{o}-{mode}{suffix}", f"{o}-sync{suffix}")


def _gaps(R, o: str, mode: str = "async", suffix: str = "") -> dict[int, float]:
    """seed → gap of ``o``'s mode against its synchronous cell (same suffix)."""
    return seed_gaps(R, f"{o}-sync{suffix}", f"{o}-{mode}{suffix}")


def _paired_gaps(g2: dict, g1: dict) -> stats.Paired | None:
    """g2 − g1 over their common seeds (None without one)."""
    common = set(g1) & set(g2)
    return stats.paired({k: g2[k] for k in common}, {k: g1[k] for k in common}) \
        if common else None


def _gap_diff(R, o1: str, o2: str, mode: str = "async") -> stats.Paired | None:
    """(gap of o2) − (gap of o1), paired by seed."""
    return _paired_gaps(_gaps(R, o2, mode), _gaps(R, o1, mode))


def welch(a: list[float], b: list[float]) -> stats.Paired | None:
    """The unpaired difference mean(a) − mean(b) with its Welch 95 % t-interval (different
    models share no seed noise, so nothing pairs them); returned as a ``stats.Paired`` with
    n = min(len(a), len(b)) and no per-seed signs."""
    if len(a) < 2 or len(b) < 2:
        return None
    sa, sb = stats.summary(a), stats.summary(b)
    va, vb = sa.sd ** 2 / sa.n, sb.sd ** 2 / sb.n
    se = math.sqrt(va + vb)
    d = sa.mean - sb.mean
    if se == 0:
        return stats.Paired(d, 0.0, min(sa.n, sb.n), d, d, int(d > 0), int(d < 0), (), ())
    dof = (va + vb) ** 2 / (va ** 2 / (sa.n - 1) + vb ** 2 / (sb.n - 1))
    half = float(st.t.ppf(0.5 + stats.CONFIDENCE / 2, dof)) * se
    return stats.Paired(d, se, min(sa.n, sb.n), d - half, d + half, int(d > 0), int(d < 0),
                        (), ())


def _between(R, lo_o: str, mid_o: str, hi_o: str) -> Part:
    """mid's gap between lo's and hi's (each side directional), or within noise of lo's."""
    a, b = _gap_diff(R, lo_o, mid_o), _gap_diff(R, mid_o, hi_o)
    va, vb = directional(a, +1), directional(b, +1)
    v = PENDING if PENDING in (va, vb) else FAILS if FAILS in (va, vb) else \
        HOLDS if va == vb == HOLDS else NOISE
    return Part(f"{LABEL[mid_o]}'s gap between {LABEL[lo_o]}'s and {LABEL[hi_o]}'s", v,
                f"{LABEL[mid_o]} − {LABEL[lo_o]} {_fmt(a)}; {LABEL[hi_o]} − {LABEL[mid_o]} "
                f"{_fmt(b)}")


def _exceeds(R, o: str, than: str) -> Part:
    p = _gap_diff(R, than, o)
    return Part(f"{LABEL[o]}'s gap above {LABEL[than]}'s", directional(p, +1),
                f"{LABEL[o]} − {LABEL[than]} {_fmt(p)}")


def _vs(R, a: str, b: str, sign: int, text: str, margin: float = 0.0,
        min_seeds: int = MIN_SEEDS) -> Part:
    p = pair(R, a, b)
    test = "difference: paired 95 % interval" + (f" against {margin:g}" if margin else "")
    return Part(text, directional(p, sign, margin, min_seeds), _fmt(p), test)


def parts(key: str, tiers: dict) -> list[Part]:
    """The parts of prediction ``key`` ("L1" … "L10"); ``tiers`` maps "opt-180k" (and
    "opt-580k" where it has results) to its results ``R``."""
    small = tiers["opt-180k"]
    if key == "L1":
        out = []
        for t, R in tiers.items():
            out += [Part(f"`{t}`: " + q.text, q.verdict, q.evidence) for q in (
                _vs(R, "adamw-async", "adamw-sync", +1, "AdamW's 2BW gap above zero"),
                _exceeds(R, "adamw", "muon"), _between(R, "muon", "soap", "adamw"),
                _vs(R, "muon-async", "muon-sync", -1, f"Muon's gap below {L1_MARGIN:g}",
                L1_MARGIN))]
        return out
    if key == "L2":
        return [_exceeds(small, "mars", "muon"), _exceeds(small, "lion", "muon"),
                _between(small, "muon", "adan", "adamw")]
    if key == "L3":
        out = []
        for o in ("adamw", "muon"):
            p = pair(small, f"{o}-async", f"{o}-ef")  # async − EF: above zero = EF helps
            x, _ = share(small, f"{o}-sync", f"{o}-async", f"{o}-ef")
            v = directional(p, +1)
            gap = _gap(small, o)
            if o == "muon" and directional(gap, +1) == NOISE:
                # no measurable gap, no share (the prediction's own rule): the share of a gap
                # whose interval holds zero is a ratio of noise, so it is not printed
                v = NOISE
                said = f"the gap itself is within noise ({_fmt(gap)}): no share"
            else:
                if v == HOLDS and (x is None or x < 50):
                    v = FAILS
                said = "share on the seed means " + ("—" if x is None else f"{x:.0f} %")
            out.append(Part(f"EF recovers ≥ 50 % of {LABEL[o]}'s gap", v,
                            f"2BW − EF {_fmt(p)}; {said}",
                            "difference: paired 95 % interval, and the share on the seed "
                            "means (no interval)"))
        return out
    if key == "L4":
        return [_vs(small, f"{o}-efg", f"{o}-ef", -1,
                    f"{LABEL[o]}: EF(γ*) below EF" if o == "adamw"
                    else f"{LABEL[o]}: EF(γ*) not above EF (no difference predicted)")
                for o in ("adamw", "muon", "soap")]
    if key == "L5":
        out = []
        for t, R in tiers.items():
            for o, sign in (("muon", 0), ("adamw", +1)):
                z = zero_gap_row(R, o)
                p = None if z is None else z.paired
                v = directional(p, +1) if sign else (
                    PENDING if directional(p, +1) == PENDING else
                    NOISE if directional(p, +1) == NOISE else FAILS)
                out.append(Part(f"`{t}`: {LABEL[o]}'s best correction "
                                + ("above synchronous" if sign else "within noise of "
                                   "synchronous"), v,
                                ("" if z is None else f"{z.label}: ") + _fmt(p)))
        return out
    if key == "L6":
        out = []
        for o in ("muon", "adamw"):
            p = _paired_gaps(_gaps(small, o, suffix="-tpp80"), _gaps(small, o))
            out.append(Part(f"{LABEL[o]}'s gap at 80 tokens/parameter not above its gap at 20",
                            _no_growth(p), f"gap(80) − gap(20) {_fmt(p)}"))
        # the prediction's last part: EF's share of AdamW's gap does not fall; each share
        # the ratio of means (async − EF)/(async − sync) in %, as every share on the pages,
        # over the seeds both lengths share, with the delta method's interval
        cells = ("adamw-sync", "adamw-async", "adamw-ef")
        p = protocol.share_change(tuple(vals(small, f"{c}-tpp80") for c in cells),
                                  tuple(vals(small, c) for c in cells))
        v = directional(p, +1, min_seeds=TOKEN_SEEDS)
        said = f"share(80) − share(20) {_fmt(p, digits=0)} points"
        # L3's rule: a share of a gap whose interval holds zero is a ratio of noise
        noisy = [(k, x) for k, x in ((20, ""), (80, "-tpp80")) if no_share_reason(
            small, f"adamw-sync{x}", f"adamw-async{x}", TOKEN_SEEDS) == "within noise"]
        if v != PENDING and noisy:
            k, x = noisy[-1]
            v = NOISE
            said = (f"the gap at {k} is within noise ({_fmt(_gap(small, 'adamw', suffix=x))}):"
                    f" no share; EF − 2BW at {k} "
                    f"{_fmt(pair(small, f'adamw-ef{x}', f'adamw-async{x}'))}")
        out.append(Part("EF's share of AdamW's gap at 80 tokens/parameter not below its share "
                        "at 20", v, said,
                        "difference: the two ratio-of-means shares, delta-method 95 % interval"))
        return out
    if key == "L7":
        if "opt-580k" not in tiers:
            return [Part("the gap does not grow from 180k to 580k parameters", PENDING,
                         "`opt-580k` not run yet")]
        big = tiers["opt-580k"]
        out = []
        for o in ("muon", "adamw", "soap"):
            p = welch(list(_gaps(big, o).values()), list(_gaps(small, o).values()))
            out.append(Part(f"{LABEL[o]}'s gap at 580k not above its gap at 180k",
                            _no_growth(p),
                            f"gap(580k) − gap(180k), unpaired {_fmt(p, signs=False)}", WELCH))
        return out
    if key == "L8":
        return [
            _vs(small, "adamw-pipedream-P4", "adamw-async-P4", +1,
                "AdamW: PipeDream at P = 4 above 2BW at P = 4"),
            _vs(small, "adamw-pipedream-P4-equal", "adamw-async-P4", +1,
                "AdamW: PipeDream's equal-updates control above 2BW"),
            *[_null(small, f"muon-{c}", "muon-async-P4", f"Muon: {what} within noise of 2BW")
              for c, what in (("pipedream-P4", "PipeDream"),
                              ("pipedream-P4-equal", "the equal-updates control"))]]
    if key == "L9":
        return [_vs(small, "adamw-syncstart", "adamw-ef", +1,
                    "AdamW: synchronous start above EF"),
                _vs(small, "adamw-cooldown", "adamw-ef", +1,
                    "AdamW: synchronous cooldown above EF"),
                _null(small, "muon-nag", "muon-ef", "Muon: Nesterov within noise of EF")]
    if key == "L10":
        return [_lr_part(t, o, m) for t in tiers for o in ("muon", "adamw", "soap")
                for m in ("async", "ef", "efg")] + [
            _lr_part("opt-180k", o, m) for o in ("adan", "lion", "mars")
            for m in ("async", "ef")]
    raise KeyError(f"unknown prediction {key!r}")


# -- the study protocol's reading, beside the old rule's (L3 and L6) ------------------------------
def _share_test_part(R, o: str, s: float = 0.5) -> Part:
    """"EF recovers ≥ s of the gap" as the study protocol tests it (``protocol``): the
    paired interval of (2BW − EF) − s(2BW − sync) — holds above zero, does not hold below —
    reported with the share's Fieller interval; no share while that interval is unbounded
    (the gap itself not established)."""
    text = f"EF recovers ≥ {100 * s:.0f} % of {LABEL[o]}'s gap"
    test = (f"share ≥ {s:g} test: paired 95 % interval of (2BW − EF) − {s:g}·(2BW − sync), "
            "share with Fieller's 95 % interval")
    cells = [vals(R, f"{o}-{m}") for m in ("sync", "async", "ef")]
    sh = protocol.fieller_share(*cells)
    if sh.n < MIN_SEEDS:
        return Part(text, PENDING, f"{sh.n} common seeds", test)
    if sh.lo is None:
        return Part(text, NOISE, f"no share: the gap is not established (Fieller's interval "
                                 f"unbounded, {sh.n} seeds)", test)
    p = protocol.share_at_least(*cells, s)
    word = protocol.share_test_word(p)
    v = HOLDS if word == protocol.STATED else FAILS if word == protocol.REFUTED else NOISE
    return Part(text, v, f"share {minus(sh.text())} (Fieller); (2BW − EF) − {s:g}·(2BW − sync) "
                         f"{_fmt(p)}", test)


def _slope_part(R, o: str) -> Part:
    """"The gap does not grow with training tokens" as the study protocol tests it: the slope
    of the gap on log₂ tokens per parameter over every length and seed — holds when its
    interval lies below zero (the gap shrinks), does not hold above, else within noise."""
    text = f"{LABEL[o]}'s gap does not grow with training tokens"
    test = "slope of the gap over log₂ tokens, every length and seed pooled: 95 % interval"
    sl = token_slope(R, o)
    if sl is None:
        return Part(text, PENDING, "fewer than two lengths", test)
    v = HOLDS if sl.hi < 0 else FAILS if sl.lo > 0 else NOISE
    return Part(text, v, minus(sl.text()), test)


def post_hoc_margin() -> float:
    """The equivalence margin of the parts that declared none (L7, L9): protocol v2's margin
    of Muon's gap (``experiments/opt-180k/protocol-v2.toml``, ``margins.muon_equivalence``),
    fixed after these runs had been seen — so every verdict that uses it is exploratory."""
    return float(tomllib.loads(PROTOCOL_V2.read_text())["margins"]["muon_equivalence"])


def margin_label(margin: float, declared: bool) -> str:
    """How a part's margin came to be, said beside its verdict."""
    if declared:
        return f"margin ±{margin:g} declared before the runs"
    return (f"post-hoc margin ±{margin:g}, protocol v2's, fixed after the runs: "
            "exploratory")


def _equivalence_word(tested: study_stats.Interval, lo95: float, hi95: float,
                      margin: float, upper_only: bool = False) -> str:
    """holds: the equivalence test rejects (p < α: the 90 % interval inside the margin);
    does not hold: the 95 % interval lies wholly beyond +margin (or, two-sided, below
    −margin); else not established."""
    if tested.p < study_stats.ALPHA:
        return HOLDS
    if lo95 > margin or (not upper_only and hi95 < -margin):
        return FAILS
    return OPEN


def _interval90(x: study_stats.Interval, digits: int = 3) -> str:
    return minus(f"{x.estimate:+.{digits}f}, 90 % interval [{stats.endpoint(x.lo, digits)}, "
                 f"{stats.endpoint(x.hi, digits)}]")


def _tost_part(R, a: str, b: str, text: str, margin: float, declared: bool) -> Part:
    """"a − b is 0 within ±margin" by TOST (paired, on the common seeds)."""
    test = f"equivalence: TOST within ±{margin:g}, the 90 % interval inside it"
    va, vb = vals(R, a), vals(R, b)
    if len(study_stats.common(va, vb)) < MIN_SEEDS:
        return Part(text, PENDING, f"{len(study_stats.common(va, vb))} common seeds", test)
    t = study_stats.tost(va, vb, margin)
    d = study_stats.paired_t(va, vb)
    return Part(text, _equivalence_word(t, d.lo, d.hi, margin),
                f"{_interval90(t)}, TOST p = {t.p:.3f} ({t.n} seeds; "
                f"{margin_label(margin, declared)})", test)


def _size_part(tiers: dict, o: str, margin: float) -> Part:
    """"o's gap does not grow from 180k to 580k" as "gap(580k) − gap(180k) < +margin" (the
    upper one-sided test of TOST, unpaired: Welch), with the post-hoc margin."""
    text = f"{LABEL[o]}'s gap at 580k not above its gap at 180k by more than {margin:g}"
    test = (f"non-inferiority: TOST's upper test, the unpaired (Welch) 90 % interval's upper "
            f"end below +{margin:g}")
    if "opt-580k" not in tiers:
        return Part(text, PENDING, "`opt-580k` not run yet", test)
    g5, g1 = list(_gaps(tiers["opt-580k"], o).values()), list(_gaps(tiers["opt-180k"],
                                                                     o).values())
    w = welch(g5, g1)
    if w is None or min(len(g5), len(g1)) < MIN_SEEDS:
        return Part(text, PENDING, f"{min(len(g5), len(g1))} seeds", test)
    t = study_stats.welch_at_most(g5, g1, margin)
    return Part(text, _equivalence_word(t, w.lo, w.hi, margin, upper_only=True),
                f"gap(580k) − gap(180k) {_interval90(t)}, one-sided p = {t.p:.3f} "
                f"({margin_label(margin, False)})", test)


def protocol_parts(key: str, tiers: dict) -> list[Part]:
    """The parts of L1, L3, L6, L7 and L9 under the study protocol's tests, beside
    :func:`parts` (the old rule): L1's Muon part by TOST at its declared margin; L3's share by
    the share ≥ 50 % test with Fieller's interval; L6's two gap parts by the slope over every
    length (its share part is the old rule's); L7 by TOST's upper test of the size change and
    L9's Nesterov part by TOST, both at the post-hoc margin (:func:`post_hoc_margin`). The
    other parts keep the old rule (directional statements, which a difference test decides)."""
    small = tiers["opt-180k"]
    if key == "L1":
        old = {f"`{t}`: Muon's gap below {L1_MARGIN:g}": t for t in tiers}
        return [_tost_part(tiers[old[p.text]], "muon-async", "muon-sync",
                           f"`{old[p.text]}`: Muon's 2BW gap is 0", L1_MARGIN, True)
                if p.text in old else p for p in parts("L1", tiers)]
    if key == "L3":
        return [_share_test_part(small, o) for o in ("adamw", "muon")]
    if key == "L6":
        return [_slope_part(small, o) for o in ("muon", "adamw")] + parts("L6", tiers)[2:]
    if key == "L7":
        return [_size_part(tiers, o, post_hoc_margin()) for o in ("muon", "adamw", "soap")]
    if key == "L9":
        return parts("L9", tiers)[:2] + [_tost_part(
            small, "muon-nag", "muon-ef", "Muon: Nesterov − EF is 0", post_hoc_margin(),
            False)]
    raise KeyError(f"no study-protocol reading of prediction {key!r} (L1, L3, L6, L7 and L9 "
                   "have one)")


#: the predictions with a reading under the study protocol (``prednew``), and whether that
#: reading rests on a margin fixed after the runs (exploratory)
PROTOCOL_KEYS = ("L1", "L3", "L6", "L7", "L9")
POST_HOC = ("L7", "L9")


def protocol_verdict_of(key: str, tiers: dict | None = None) -> str:
    tiers = tiers if tiers is not None else ladder_tiers()
    return combine(protocol_parts(key, tiers))


def protocol_evidence_of(key: str, tiers: dict | None = None) -> str:
    """Every part under the study protocol's tests, "text: verdict (evidence)"; a part that
    is one of protocol v2's primary endpoints also carries that endpoint's declared test and
    Holm-adjusted p (``primary.tag_of``); the others are exploratory."""
    tiers = tiers if tiers is not None else ladder_tiers()
    fam = primary.family(tiers["opt-180k"])
    return "; ".join(f"{p.text} (*{p.test}*): **{p.verdict}** "
                     f"({p.evidence}{primary.tag_of(key, p.text, fam)})"
                     for p in protocol_parts(key, tiers))


def _no_growth(p: stats.Paired | None) -> str:
    """"Does not grow": holds only if it shrinks (interval below zero), does not hold if it
    grows (above zero), else within noise; 2 seeds suffice (the token ladder's)."""
    return directional(p, -1, min_seeds=TOKEN_SEEDS)


def _null(R, a: str, b: str, text: str) -> Part:
    """A "no difference" prediction: within noise (its best outcome) or does not hold."""
    p = pair(R, a, b)
    d = directional(p, +1)
    return Part(text, PENDING if d == PENDING else NOISE if d == NOISE else FAILS, _fmt(p))


def _lr_part(tier: str, o: str, m: str) -> Part:
    t = get_tier(tier)
    a, s = to.settled_lr(t, o, m), to.settled_lr(t, o, "sync")
    text = f"`{tier}`: {LABEL[o]}'s {m} lr* not above its sync lr*"
    if a is None or s is None:
        return Part(text, PENDING, "grid not settled", POINT)
    # seed 0's grid argmin: a choice, not a seed average, so no interval applies
    return Part(text, HOLDS if a <= s else FAILS, f"{a:g} vs {s:g}", POINT)


def combine(ps: list[Part]) -> str:
    """does not hold if a part does; pending while one is; holds if all do; else not
    established when an equivalence part is, within noise otherwise."""
    vs = [p.verdict for p in ps]
    if FAILS in vs:
        return FAILS
    if PENDING in vs:
        return PENDING
    if all(v == HOLDS for v in vs):
        return HOLDS
    return OPEN if OPEN in vs else NOISE


def ladder_tiers() -> dict:
    """The ladder's results by tier: "opt-180k" always, "opt-580k" where it has results."""
    out = {}
    for t in ("opt-180k", "opt-580k"):
        R = load_results(get_tier(t).results)
        if R or t == "opt-180k":
            out[t] = R
    return out


PREREGISTERED_SEEDS = (0, 1, 2)  # the seeds the predictions were written for


def restrict(tiers: dict, seeds) -> dict:
    """``tiers`` with every cell's results restricted to ``seeds`` (the pre-registered three,
    beside the verdicts on every seed run since)."""
    return {t: {c: {k: r for k, r in v.items() if k in seeds} for c, v in R.items()}
            for t, R in tiers.items()}


def verdict_of(key: str, tiers: dict | None = None, seeds=None) -> str:
    tiers = tiers if tiers is not None else ladder_tiers()
    return combine(parts(key, tiers if seeds is None else restrict(tiers, seeds)))


def evidence_of(key: str, tiers: dict | None = None, seeds=None) -> str:
    """Every part: "text (*test*): **verdict** (evidence)", joined by "; "."""
    tiers = tiers if tiers is not None else ladder_tiers()
    return "; ".join(f"{p.text} (*{p.test}*): **{p.verdict}** ({p.evidence})" for p in parts(
        key, tiers if seeds is None else restrict(tiers, seeds)))


PREDICTIONS = tuple(f"L{i}" for i in range(1, 11))

__all__ = ["OPEN", "POST_HOC", "PREDICTIONS", "PROTOCOL_KEYS", "Part", "combine", "directional",
           "evidence_of", "ladder_tiers", "parts", "post_hoc_margin", "protocol_evidence_of",
           "protocol_parts", "protocol_verdict_of", "verdict_of", "welch"]
