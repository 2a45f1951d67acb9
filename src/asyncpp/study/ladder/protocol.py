r"""The study protocol's tests where they change a ladder verdict, shown beside the old rule's.

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

from scipy import stats as _st

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


def _common(*cells: Mapping[int, float]) -> list[int]:
    return sorted(set.intersection(*(set(c) for c in cells)))


def fieller_share(sync: Mapping[int, float], delayed: Mapping[int, float],
                  corrected: Mapping[int, float]) -> Share:
    """:math:`\\bar N/\\bar D` in % with Fieller's 95 % interval (module docstring)."""
    ks = _common(sync, delayed, corrected)
    n = len(ks)
    if n < 2:
        return Share(None, None, None, n)
    num = [delayed[k] - corrected[k] for k in ks]
    den = [delayed[k] - sync[k] for k in ks]
    nb, db = sum(num) / n, sum(den) / n
    if db == 0:
        return Share(None, None, None, n)

    def cov(x, xb, y, yb):
        return sum((a - xb) * (b - yb) for a, b in zip(x, y)) / (n - 1) / n

    vnn, vdd, vnd = cov(num, nb, num, nb), cov(den, db, den, db), cov(num, nb, den, db)
    t2 = stats.t_quantile(n) ** 2
    a = db * db - t2 * vdd
    b = -2 * (nb * db - t2 * vnd)
    c = nb * nb - t2 * vnn
    if a <= 0:
        return Share(100 * nb / db, None, None, n)
    # at ρ = N̄/D̄ the quadratic is −t²·var(N − ρD)/n ≤ 0, so with a > 0 its discriminant is
    # ≥ 0: a negative one is rounding (zero spread), and the interval is the point
    r = math.sqrt(max(b * b - 4 * a * c, 0.0))
    lo, hi = sorted(((-b - r) / (2 * a), (-b + r) / (2 * a)))
    return Share(100 * nb / db, 100 * lo, 100 * hi, n)


def share_at_least(sync: Mapping[int, float], delayed: Mapping[int, float],
                   corrected: Mapping[int, float], s: float) -> stats.Paired | None:
    """The paired difference :math:`(A_k - C_k) - s(A_k - S_k)` over the common seeds
    (module docstring); None with no common seed."""
    ks = _common(sync, delayed, corrected)
    if not ks:
        return None
    x = {k: (delayed[k] - corrected[k]) - s * (delayed[k] - sync[k]) for k in ks}
    return stats.paired(x, dict.fromkeys(ks, 0.0))


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
    """The slope of gap on :math:`\\log_2` (tokens per parameter) over ``points`` =
    [(tokens per parameter, gap of one seed), …] (module docstring); None with fewer than 3
    points or one length only."""
    if len(points) < 3 or len({k for k, _ in points}) < 2:
        return None
    m = len(points)
    xs = [math.log2(k) for k, _ in points]
    ys = [g for _, g in points]
    xb, yb = sum(xs) / m, sum(ys) / m
    sxx = sum((x - xb) ** 2 for x in xs)
    b = sum((x - xb) * (y - yb) for x, y in zip(xs, ys)) / sxx
    ssr = sum((y - yb - b * (x - xb)) ** 2 for x, y in zip(xs, ys))
    half = float(_st.t.ppf(0.5 + stats.CONFIDENCE / 2, m - 2)) * math.sqrt(ssr / (m - 2) / sxx)
    return Slope(b, b - half, b + half, m)
