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
    lo, hi = f.lo, f.hi
    if not (math.isfinite(lo) and math.isfinite(hi)):
        # bounded exactly when the gap's own interval excludes zero; an unbounded answer
        # then is a discriminant rounded below zero (no spread in either difference), where
        # the interval is the point N̄/D̄ itself
        gap = study_stats.paired_t(delayed, sync)
        if not (gap.lo > 0 or gap.hi < 0):
            return Share(100 * f.estimate, None, None, f.n)
        lo = hi = f.estimate
    return Share(100 * f.estimate, 100 * lo, 100 * hi, f.n)


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
