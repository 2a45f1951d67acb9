r"""The study protocol's tests where they change a ladder verdict, shown beside the old rule's:
the ladder's reading of ``asyncpp.study.stats`` (which computes every interval below).

Runs are paired by seed, and every comparison uses only the seeds common to all the cells it
reads. With :math:`S_k, A_k, C_k` the final validation losses of seed k of the synchronous,
the 2BW (one-step delay) and the corrected cell, :math:`N_k = A_k - C_k` (what the correction
recovers) and :math:`D_k = A_k - S_k` (the gap), over the n common seeds:

- :func:`fieller_share` — the share :math:`\rho = \bar N / \bar D` with Fieller's 95 %
  interval: the set of :math:`\rho` with
  :math:`(\bar N - \rho \bar D)^2 \le t^2 (v_{NN} - 2\rho v_{ND} + \rho^2 v_{DD})`,
  :math:`v_{XY} = \widehat{\mathrm{cov}}(X, Y)/n`, :math:`t = t_{0.975,\,n-1}`; the roots of
  :math:`a\rho^2 + b\rho + c = 0` with :math:`a = \bar D^2 - t^2 v_{DD}`,
  :math:`b = -2(\bar N \bar D - t^2 v_{ND})`, :math:`c = \bar N^2 - t^2 v_{NN}`. The interval
  is bounded only when :math:`a > 0`, i.e. when the gap itself is established
  (:math:`|\bar D| > t\sqrt{v_{DD}}`); otherwise it is unbounded and no share is stated.
- :func:`fieller_share_gain` — one correction's share minus another's on the same gap,
  :math:`\bar X/\bar D` with :math:`X_k = F_k - G_k`, Fieller's interval as above.
- :func:`share_change` — a share at one length minus the share at another (two gaps), the
  delta method's interval on the four means.
- :func:`share_at_least` — the test of "the correction recovers at least a share s": the
  paired t-interval of :math:`N_k - s D_k = (A_k - C_k) - s(A_k - S_k)`; established when it
  lies above zero, refuted when below, else not established.
- :func:`gap_slope` — the gap against :math:`\log_2` of the tokens per parameter, pooled over
  every length and seed: the least-squares slope :math:`\hat\beta` of :math:`D` on
  :math:`x = \log_2 k` (the change of the gap per doubling of the tokens) with its 95 %
  interval :math:`\hat\beta \pm t_{0.975,\,m-2}\,\hat\sigma / \sqrt{\sum (x_i - \bar x)^2}`
  over the m gaps, in place of a paired t on the two seeds of two lengths.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from scipy import stats as _st

from .. import stats as study_stats
from . import stats

STATED = "established"
REFUTED = "refuted"
OPEN = "not established"


@dataclasses.dataclass(frozen=True)
class Share:
    """The share recovered (in %) on the means of the n common seeds, with Fieller's 95 %
    interval (``lo``/``hi`` None: unbounded, the gap not established)."""

    share: float | None
    lo: float | None
    hi: float | None
    n: int

    def text(self) -> str:
        """``"70 % [38, 82]"``; "—" while the interval is unbounded (no share is stated)."""
        if self.share is None or self.lo is None:
            return "—"
        return f"{self.share:.0f} % [{self.lo:.0f}, {self.hi:.0f}]"


def fieller_share(sync: Mapping[int, float], delayed: Mapping[int, float],
                  corrected: Mapping[int, float]) -> Share:
    """:math:`\bar N/\bar D` in % with Fieller's 95 % interval
    (``asyncpp.study.stats.fieller_share``); None fields with fewer than 2 common seeds."""
    try:
        f = study_stats.fieller_share(delayed, corrected, sync)
    except study_stats.TooFewSeeds:
        return Share(None, None, None, len(study_stats.common(sync, delayed, corrected)))
    if not math.isfinite(f.estimate):
        return Share(None, None, None, f.n)
    ends = _bounded(f, delayed, sync)
    if ends is None:
        return Share(100 * f.estimate, None, None, f.n)
    return Share(100 * f.estimate, 100 * ends[0], 100 * ends[1], f.n)


def _bounded(f: study_stats.Interval, delayed: Mapping[int, float],
             sync: Mapping[int, float]) -> tuple[float, float] | None:
    """Fieller's ends of a ratio over the gap delayed − sync, or None when the gap itself is
    not established. Bounded exactly when the gap's interval excludes zero; an unbounded answer
    then is a discriminant rounded below zero (no spread in either difference), where the
    interval is the point itself."""
    if math.isfinite(f.lo) and math.isfinite(f.hi):
        return f.lo, f.hi
    gap = study_stats.paired_t(delayed, sync)
    if not (gap.lo > 0 or gap.hi < 0):
        return None
    return f.estimate, f.estimate


@dataclasses.dataclass(frozen=True)
class ShareDiff:
    """One correction's share of a gap minus another's, in percentage points, each a ratio of
    means (so the estimate is the difference of the shares the tables print), with its 95 %
    interval (``lo``/``hi`` None: unbounded, a gap not established); ``agree`` counts the seeds
    whose own share difference has the estimate's sign."""

    pp: float | None
    lo: float | None
    hi: float | None
    n: int
    agree: int = 0

    def text(self, digits: int = 0) -> str:
        """``"+9 pp [−3, +22], 3/3"``; ``"+9 pp (gap within noise), …"`` when unbounded."""
        if self.pp is None:
            return "—"
        head = f"{self.pp:+.{digits}f} pp"
        span = ("(gap within noise)" if self.lo is None
                else f"[{self.lo:+.{digits}f}, {self.hi:+.{digits}f}]")
        return f"{head} {span}, {self.agree}/{self.n}".replace("-", "−")

    def verdict(self) -> str:
        """"better" when the interval lies above zero (the second correction recovers more),
        "worse" below, else "within noise" ("too few seeds" under 2)."""
        if self.n < 2:
            return "too few seeds"
        if self.lo is None or not (self.lo > 0 or self.hi < 0):
            return "within noise"
        return "better" if self.lo > 0 else "worse"


def _agree(per: list[float], est: float) -> int:
    return sum(1 for v in per if v * est > 0)


def fieller_share_gain(sync: Mapping[int, float], delayed: Mapping[int, float],
                       first: Mapping[int, float], second: Mapping[int, float]) -> ShareDiff:
    r"""share(second) − share(first) of the gap :math:`D_k = A_k - S_k` in points:
    :math:`\bar X/\bar D` with :math:`X_k = F_k - G_k` (first minus second corrected loss),
    Fieller's 95 % interval (``asyncpp.study.stats.fieller_ratio``), the same ratio of means
    as the two shares :func:`fieller_share` states, so the gain is their difference."""
    seeds = study_stats.common(sync, delayed, first, second)
    if len(seeds) < 2:
        return ShareDiff(None, None, None, len(seeds))
    x = {k: first[k] - second[k] for k in seeds}
    d = {k: delayed[k] - sync[k] for k in seeds}
    f = study_stats.fieller_ratio(x, d)
    if not math.isfinite(f.estimate):
        return ShareDiff(None, None, None, f.n)
    agree = _agree([x[k] / d[k] for k in seeds if d[k]], f.estimate)
    ends = _bounded(f, delayed, sync)
    if ends is None:
        return ShareDiff(100 * f.estimate, None, None, f.n, agree)
    return ShareDiff(100 * f.estimate, 100 * ends[0], 100 * ends[1], f.n, agree)


def share_change(later: tuple[Mapping[int, float], Mapping[int, float], Mapping[int, float]],
                 earlier: tuple[Mapping[int, float], Mapping[int, float],
                                Mapping[int, float]]) -> stats.Paired | None:
    r"""A correction's share at one length minus its share at another, in points, each share a
    ratio of means over the seeds all six cells have; ``later``/``earlier`` are (sync, delayed,
    corrected); None under 2 seeds or with a diverged run. The interval is the delta method's
    (``asyncpp.study.stats.share_difference``), returned as a ``stats.Paired`` so a verdict
    reads it as any paired difference; its signs count the seeds whose own share change goes
    the estimate's way."""
    (s1, a1, c1), (s2, a2, c2) = later, earlier
    seeds = study_stats.common(s1, a1, c1, s2, a2, c2)
    if len(seeds) < 2 or not all(math.isfinite(v[k]) for v in (s1, a1, c1, s2, a2, c2)
                                 for k in seeds):
        return None
    f = study_stats.share_difference((a1, c1, s1), (a2, c2, s2))
    if not math.isfinite(f.estimate):
        return None
    per = [100 * ((a1[k] - c1[k]) / (a1[k] - s1[k]) - (a2[k] - c2[k]) / (a2[k] - s2[k]))
           for k in seeds if a1[k] != s1[k] and a2[k] != s2[k]]
    t = float(_st.t.ppf(0.975, f.n - 1))
    se = (f.hi - f.estimate) / t if t else 0.0
    return stats.Paired(100 * f.estimate, 100 * se * math.sqrt(f.n), f.n, 100 * f.lo,
                        100 * f.hi, sum(1 for v in per if v > 0),
                        sum(1 for v in per if v < 0), seeds, tuple(per))


def share_at_least(sync: Mapping[int, float], delayed: Mapping[int, float],
                   corrected: Mapping[int, float], s: float) -> stats.Paired | None:
    """The paired difference :math:`(A_k - C_k) - s(A_k - S_k)` over the common seeds, as
    ``stats.Paired`` (its interval ``asyncpp.study.stats.share_at_least``'s); None with fewer
    than 2 common seeds."""
    try:
        z = study_stats.share_at_least(delayed, corrected, sync, s)
    except study_stats.TooFewSeeds:
        return None
    d = tuple((delayed[k] - corrected[k]) - s * (delayed[k] - sync[k]) for k in z.seeds)
    sd = math.sqrt(sum((x - z.estimate) ** 2 for x in d) / (z.n - 1))
    return stats.Paired(z.estimate, sd, z.n, z.lo, z.hi, sum(x > 0 for x in d),
                        sum(x < 0 for x in d), z.seeds, d)


def share_test_word(p: stats.Paired | None) -> str:
    """"established" (interval above zero), "refuted" (below), else "not established"."""
    if p is None or p.lo is None:
        return OPEN
    return STATED if p.lo > 0 else REFUTED if p.hi < 0 else OPEN


@dataclasses.dataclass(frozen=True)
class Slope:
    """Least-squares slope of the gap per doubling, its 95 % interval, over m gaps."""

    slope: float
    lo: float
    hi: float
    m: int

    @property
    def word(self) -> str:
        """"shrinks" (interval below zero), "grows" (above), else "within noise"."""
        return "shrinks" if self.hi < 0 else "grows" if self.lo > 0 else "within noise"

    def text(self) -> str:
        return (f"{self.slope:+.3f} [{stats.endpoint(self.lo)}, {stats.endpoint(self.hi)}] "
                f"per doubling over {self.m} gaps")


def gap_slope(points: list[tuple[float, float]]) -> Slope | None:
    r"""The slope of gap on :math:`\log_2` (tokens per parameter) over ``points`` =
    [(tokens per parameter, gap of one seed), …] (``asyncpp.study.stats.gap_slope`` on
    :math:`x = \log_2 k`); None with fewer than 3 points or one length only."""
    try:
        f = study_stats.gap_slope([(math.log2(k), g) for k, g in points])
    except study_stats.TooFewSeeds:
        return None
    return Slope(f.estimate, f.lo, f.hi, f.n)
