r"""The statistics every verdict in ``experiments/`` uses, in one place.

Runs are paired by seed: seed k of cell A and seed k of cell B share the initialisation and
the data order, so a comparison is made on the per-seed differences
:math:`d_k = a_k - b_k` over the seeds both cells have.

- :func:`summary` — mean and sample standard deviation
  :math:`s = \sqrt{\tfrac{1}{n-1}\sum_k (x_k - \bar x)^2}` of one cell's seeds.
- :func:`paired` — the paired difference: :math:`\bar d`, :math:`s_d`, the 95 % t-interval
  :math:`\bar d \pm t_{0.975,\,n-1}\, s_d/\sqrt{n}` and the signs of the :math:`d_k`.
- :func:`verdict` — the rule of ``experiments/README.md``: a verdict word ("better", "worse")
  only when the interval excludes the pre-registered margin (zero unless stated); otherwise
  "within noise". With fewer than two paired seeds there is no interval and the verdict is
  "too few seeds".
- :func:`share` — the share of a gap a correction recovers,
  :math:`(\text{none} - \text{corr})/(\text{none} - \text{sync})`, per seed and on the means.

Nothing here reads files: callers pass ``{seed: value}`` mappings.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from scipy import stats as _st

CONFIDENCE = 0.95


@dataclasses.dataclass(frozen=True)
class Summary:
    """Mean ± sd over n seeds (sd is None for n < 2)."""

    mean: float
    sd: float | None
    n: int

    def fmt(self, digits: int = 3) -> str:
        """``"3.550 ± 0.222"`` (n goes in the table header, not the cell)."""
        if self.sd is None:
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {self.sd:.{digits}f}"


@dataclasses.dataclass(frozen=True)
class Paired:
    """The paired difference a − b over the seeds both have."""

    mean: float
    sd: float | None
    n: int
    lo: float | None  # 95 % t-interval (None for n < 2)
    hi: float | None
    positive: int  # seeds with d_k > 0
    negative: int  # seeds with d_k < 0
    seeds: tuple[int, ...]
    diffs: tuple[float, ...]

    @property
    def excludes_zero(self) -> bool:
        return self.lo is not None and (self.lo > 0 or self.hi < 0)

    def excludes(self, margin: float) -> bool:
        """True when the interval lies wholly beyond ``margin`` on the side of its mean
        (``margin`` ≥ 0; |interval| > margin)."""
        if self.lo is None:
            return False
        return self.lo > margin or self.hi < -margin

    @property
    def t(self) -> float | None:
        """The paired t statistic d̄ / (s_d/√n) (None for n < 2 or s_d = 0)."""
        if self.sd is None or self.sd == 0:
            return None
        return self.mean / (self.sd / math.sqrt(self.n))

    @property
    def signs(self) -> str:
        """``"3/3 negative"``-style: how many seeds go the way of the mean."""
        if self.mean < 0:
            return f"{self.negative}/{self.n} negative"
        if self.mean > 0:
            return f"{self.positive}/{self.n} positive"
        return f"0/{self.n} nonzero" if not (self.positive or self.negative) else \
            f"{self.positive}+/{self.negative}− of {self.n}"

    def interval(self, digits: int = 3) -> str:
        """``"[-0.178, +0.070]"``: the 95 % interval, each end at ``digits`` decimals, or to
        one significant digit when those would print a nonzero end as 0 (an interval that
        excludes zero never reads "[+0.000, …]")."""
        return f"[{endpoint(self.lo, digits)}, {endpoint(self.hi, digits)}]"

    def fmt(self, digits: int = 3) -> str:
        """``"−0.054 ± 0.050 [−0.178, +0.070], 2/3 negative"``."""
        if self.lo is None:
            return f"{self.mean:+.{digits}f} (n={self.n}, no interval)"
        return (f"{self.mean:+.{digits}f} ± {self.sd:.{digits}f} "
                f"{self.interval(digits)}, {self.signs}")


def endpoint(x: float, digits: int = 3) -> str:
    """``x`` signed at ``digits`` decimals; a nonzero ``x`` that would print as zero is given
    to one significant digit (``+4e-04``, not ``+0.000``): as wide as ``digits`` = 3 prints,
    narrower above it, and one or two characters wider below it."""
    if x != 0 and float(f"{x:.{digits}f}") == 0:
        return f"{x:+.0e}"
    return f"{x:+.{digits}f}"


def summary(values: Mapping[int, float] | list[float]) -> Summary:
    """Mean and sample sd of one cell's per-seed values."""
    xs = list(values.values()) if isinstance(values, Mapping) else list(values)
    if not xs:
        raise ValueError("summary of no values")
    n = len(xs)
    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else None
    return Summary(mean, sd, n)


def t_quantile(n: int) -> float:
    """t_{0.975, n−1}: the two-sided 95 % quantile with n − 1 degrees of freedom."""
    return float(_st.t.ppf(0.5 + CONFIDENCE / 2, n - 1))


def paired(a: Mapping[int, float], b: Mapping[int, float]) -> Paired:
    """The paired difference a − b over the seeds in both (each a ``{seed: value}``)."""
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        raise ValueError("paired comparison of cells that share no seed")
    d = tuple(a[k] - b[k] for k in seeds)
    s = summary(list(d))
    lo = hi = None
    if s.sd is not None:
        half = t_quantile(s.n) * s.sd / math.sqrt(s.n)
        lo, hi = s.mean - half, s.mean + half
    return Paired(s.mean, s.sd, s.n, lo, hi, sum(x > 0 for x in d), sum(x < 0 for x in d),
                  seeds, d)


def verdict(p: Paired, margin: float = 0.0, lower_is_better: bool = True) -> str:
    """"better" / "worse" when the interval of a − b excludes ±``margin``, else "within
    noise" ("too few seeds" with n < 2). With ``lower_is_better`` (losses) a negative
    difference means a is better."""
    if p.lo is None:
        return "too few seeds"
    if not p.excludes(margin):
        return "within noise"
    a_lower = p.hi < -margin
    return "better" if a_lower == lower_is_better else "worse"


def share(sync: Mapping[int, float], none: Mapping[int, float],
          corr: Mapping[int, float]) -> tuple[float | None, dict[int, float]]:
    """(share on the seed means, per-seed shares) of the gap none − sync that ``corr``
    recovers: (none − corr)/(none − sync), over the seeds all three share. A per-seed share
    whose gap is zero is left out; the share on the means is None when the mean gap is 0."""
    seeds = sorted(set(sync) & set(none) & set(corr))
    if not seeds:
        return None, {}
    per = {k: (none[k] - corr[k]) / (none[k] - sync[k]) for k in seeds
           if none[k] != sync[k]}
    ms, mn, mc = (sum(x[k] for k in seeds) / len(seeds) for x in (sync, none, corr))
    return ((mn - mc) / (mn - ms) if mn != ms else None), per


def in_sd_units(p: Paired, reference: Summary) -> float | None:
    """The paired mean difference in units of the reference cell's seed sd (the zero-gap
    table: how many seed-sds the best correction stays above synchronous)."""
    if reference.sd is None or reference.sd == 0:
        return None
    return p.mean / reference.sd


__all__ = ["CONFIDENCE", "Paired", "Summary", "endpoint", "in_sd_units", "paired", "share",
           "summary", "t_quantile", "verdict"]
